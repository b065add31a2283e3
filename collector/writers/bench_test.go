package writers

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
)

// BenchmarkCollect measures a collection on this machine's /proc and reports the cost per
// process read: "steady" is every collection after the first (one file per process, and
// stat, comm and cgroup for the writers), "baseline" a first collection (io and stat of every
// process). The extra sleepers show how the cost grows with the number of processes.
//
//	go test -run '^$' -bench Collect -benchtime 200x ./collector/writers/
func BenchmarkCollect(b *testing.B) {
	for _, extra := range []int{0, 1000} {
		b.Run(fmt.Sprintf("extra=%d", extra), func(b *testing.B) {
			startSleepers(b, extra)
			b.Run("steady", func(b *testing.B) {
				c := New("/proc", "/sys", Options{})
				if _, err := c.Collect(context.Background()); err != nil {
					b.Fatal(err)
				}
				read := 0
				b.ResetTimer()
				for range b.N {
					w, err := c.Collect(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					read += w.Read + w.Unreadable
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(read), "ns/process")
				b.ReportMetric(float64(read)/float64(b.N), "processes")
			})
			b.Run("baseline", func(b *testing.B) {
				read := 0
				for range b.N {
					w, err := New("/proc", "/sys", Options{}).Collect(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					read += w.Read + w.Unreadable
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(read), "ns/process")
			})
		})
	}
}

// startSleepers starts n sleeping processes for the benchmark and ends them, by pid, after it.
func startSleepers(b *testing.B, n int) {
	b.Helper()
	cmds := make([]*exec.Cmd, 0, n)
	b.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for range n {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			b.Fatalf("start sleeper: %v", err)
		}
		cmds = append(cmds, c)
	}
}
