package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// memoryLimit is the unit's MemoryMax (deploy/systemd).
const memoryLimit = "256M"

// memoryCgroup makes a cgroup v1 memory group limited to memoryLimit and removes it when the
// test ends (after the processes in it, which the test's later cleanups stop first).
func memoryCgroup(t *testing.T) string {
	t.Helper()
	const root = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
		t.Skipf("needs root and the cgroup v1 memory controller at %s", root)
	}
	dir, err := os.MkdirTemp(root, "pgwal-test-")
	if err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The kernel refuses to remove a group while a process is in it; its last one may take a
		// moment to be reaped.
		for i := 0; ; i++ {
			err := syscall.Rmdir(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if i == 100 {
				t.Errorf("remove cgroup %s: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(memoryLimit), 0o644); err != nil && f == "memory.limit_in_bytes" {
			t.Fatalf("limit %s: %v", dir, err)
		}
	}
	return dir
}

// inCgroup runs bin with args inside the cgroup: a shell puts itself in it and execs the binary.
func inCgroup(cg, bin string, args ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg, bin}, args...)...)
}

// peakMemory is the cgroup's peak usage, for the log.
func peakMemory(cg string) string {
	b, _ := os.ReadFile(filepath.Join(cg, "memory.max_usage_in_bytes"))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return fmt.Sprintf("%d MB", n>>20)
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// inEffect is a change the large journal ends with: made on the cluster, to be rolled back.
type inEffect struct{ setting, to string }

// writeLargeJournal writes size bytes of journal: years of ended changes (failed, rolled back
// and rejected, abandoned), each with evidence and figures as the daemon records them, and
// then the changes in effect, whose old values are the cluster's.
func writeLargeJournal(t *testing.T, path string, size int64, olds map[string]apply.Value, changes []inEffect) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	put := func(r apply.Record) {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	var ev []rules.Evidence
	var figs []apply.Figure
	for i := range 8 {
		ev = append(ev, rules.Evidence{Name: fmt.Sprintf("wal_write_wait_seconds_per_mb_%d", i), Value: 0.25 * float64(i), Unit: "seconds_per_mb"})
		figs = append(figs, apply.Figure{Name: fmt.Sprintf("figure_%d", i), Value: 0.5, Unit: "ratio", Samples: 100, Enough: true, Judged: i < 2})
	}
	settings := []string{"wal_sync_method", "checkpoint_completion_target", "max_wal_size", "checkpoint_flush_after", "bgwriter_flush_after"}
	start := time.Now().Add(-2 * 365 * 24 * time.Hour)
	id := 0
	var written int64
	for t0 := start; written < size; t0 = t0.Add(10 * time.Minute) {
		id++
		s := settings[id%len(settings)]
		before := &apply.Figures{From: t0.Add(-5 * time.Minute), To: t0, Figures: figs}
		put(apply.Record{ID: id, Time: t0, Kind: apply.KindIntent, Origin: apply.OriginDaemon, Setting: s, Action: rules.ActionReload,
			Old: &apply.Value{Value: "1", Source: "default", Context: "sighup"}, New: "2", Rule: "some-rule",
			Summary: strings.Repeat("a finding's summary, as long as they get. ", 4), Evidence: ev, Before: before,
			Predicted: &rules.Predicted{Name: "wal_write_wait_seconds_per_mb", Current: 0.8, Value: 0.2, Unit: "seconds_per_mb", Basis: "test"}})
		end := t0.Add(6 * time.Minute)
		until := end.Add(7 * 24 * time.Hour)
		switch id % 3 {
		case 0:
			put(apply.Record{ID: id, Time: end, Kind: apply.KindOutcome, Origin: apply.OriginDaemon, Outcome: apply.Failed, Setting: s, New: "2", Reason: "pg_reload_conf() returned false"})
		case 1:
			put(apply.Record{ID: id, Time: end, Kind: apply.KindOutcome, Origin: apply.OriginDaemon, Outcome: apply.RolledBack, Setting: s, New: "2",
				Reason: "worse", Before: before, After: before, Live: &apply.Value{Value: "1", Source: "default", Context: "sighup"}})
			put(apply.Record{ID: id, Time: end, Kind: apply.KindOutcome, Origin: apply.OriginDaemon, Outcome: apply.Rejected, Setting: s, New: "2", Reason: "worse", Until: &until})
		default:
			put(apply.Record{ID: id, Time: end, Kind: apply.KindOutcome, Origin: apply.OriginDaemon, Outcome: apply.Abandoned, Setting: s, New: "2", Reason: "someone else changed it", Until: &until})
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if written, err = f.Seek(0, io.SeekCurrent); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range changes {
		id++
		old := olds[c.setting]
		now := time.Now().Add(-time.Hour)
		put(apply.Record{ID: id, Time: now, Kind: apply.KindIntent, Origin: apply.OriginApply, Setting: c.setting, Action: rules.ActionReload, Old: &old, New: c.to})
		put(apply.Record{ID: id, Time: now, Kind: apply.KindOutcome, Origin: apply.OriginApply, Outcome: apply.Applied, Setting: c.setting, New: c.to})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLargeJournalUnderMemoryLimit is issue 24's fifth row: a 100 MB journal, the unit's 256 MB
// memory limit. `rollback --all` rolls back the changes in effect and exits 0, and a
// `run --apply=dry-run` daemon goes through its cycles and stops cleanly, both inside a
// memory cgroup limited to 256 MB (the old code read the whole journal at once and died).
func TestLargeJournalUnderMemoryLimit(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	cg := memoryCgroup(t)
	bin := buildBinary(t)
	ctx := context.Background()
	changes := []inEffect{{"checkpoint_completion_target", "0.7"}, {"max_wal_size", "2GB"}, {"checkpoint_flush_after", "512kB"}}
	olds := map[string]apply.Value{}
	pg := apply.NewPostgres(c.DSN(), apply.PostgresOptions{ConfirmTimeout: 10 * time.Second})
	defer pg.Close(ctx)
	for _, ch := range changes {
		old, err := pg.Read(ctx, ch.setting)
		if err != nil {
			t.Fatal(err)
		}
		olds[ch.setting] = old
		if _, err := pg.Set(ctx, ch.setting, ch.to); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	rollbackJournal, runJournal := filepath.Join(dir, "rollback", "apply.journal"), filepath.Join(dir, "run", "apply.journal")
	for _, j := range []string{rollbackJournal, runJournal} {
		if err := os.Mkdir(filepath.Dir(j), 0o700); err != nil {
			t.Fatal(err)
		}
		writeLargeJournal(t, j, 100<<20, olds, changes)
	}

	t.Run("rollback --all", func(t *testing.T) {
		cmd := inCgroup(cg, bin, "rollback", "--journal", rollbackJournal, "--all", "--dsn", c.DSN())
		out, err := cmd.CombinedOutput()
		t.Logf("rollback --all (peak %s of %s): %v\n%s", peakMemory(cg), memoryLimit, err, lastLines(string(out), 8))
		if err != nil {
			t.Fatalf("rollback --all of a 100 MB journal under a %s memory limit: %v", memoryLimit, err)
		}
		for _, ch := range changes {
			if v, _, _ := lab.ReadSetting(t, c, ch.setting); v != olds[ch.setting].Value {
				t.Errorf("after rollback %s = %s, want %s", ch.setting, v, olds[ch.setting].Value)
			}
		}
	})
	t.Run("run --apply=dry-run", func(t *testing.T) { runUnderLimit(t, cg, bin, c.DSN(), runJournal) })
}

// runUnderLimit runs the daemon in dry-run mode over journal inside the cgroup: it must go
// through its cycles, reading the journal, and stop cleanly.
func runUnderLimit(t *testing.T, cg, bin, dsn, journal string) {
	// The peak is the group's since it was made: start the daemon's afresh.
	if err := os.WriteFile(filepath.Join(cg, "memory.max_usage_in_bytes"), []byte("0"), 0o644); err != nil {
		t.Logf("reset the peak: %v", err)
	}
	addr := freeAddr(t)
	cmd := inCgroup(cg, bin, "run", "--dsn", dsn, "--interval", "1s", "--probe.dir=", "--web.listen-address", addr,
		"--apply=dry-run", "--apply.journal", journal, "--log.level", "warn")
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// A cycle has read the journal when the apply status names its last change; two more
	// snapshots later the daemon is still there.
	seen := 0
	for deadline := time.Now().Add(2 * time.Minute); seen < 3; time.Sleep(time.Second) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("run --apply=dry-run with a 100 MB journal under a %s memory limit died: %v (peak %s)\n%s", memoryLimit, err, peakMemory(cg), lastLines(stderr.String(), 8))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apply status never showed the journal's changes\n%s", lastLines(stderr.String(), 8))
		}
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "pgwal_advisor_apply_last_change_timestamp_seconds ") {
				seen++
			}
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("run after SIGTERM: %v\n%s", err, lastLines(stderr.String(), 8))
	}
	exited <- nil
	t.Logf("run --apply=dry-run: peak %s of %s", peakMemory(cg), memoryLimit)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
