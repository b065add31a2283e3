package simdisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMountLoopExt4(t *testing.T) {
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the loop-device stack needs %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("the loop-device stack needs loop devices: %v", err)
	}
	d := MountForTest(t, Options{Latency: 2 * time.Millisecond, BandwidthBytesPerSec: 200e6})
	mnt := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := MountLoopExt4(ctx, d.Mountpoint(), 64<<20, mnt)
	if err != nil && strings.Contains(err.Error(), "losetup") {
		t.Skipf("losetup does not work here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			l.Close()
		}
	})
	t.Logf("%s on %s, direct I/O %v", l.Device, l.File, l.DirectIO)
	if !l.DirectIO {
		t.Errorf("loop device %s does not use direct I/O: the backing file's pages would be cached twice", l.Device)
	}

	// A synced write on ext4 reaches the simulated disk as a sync: the journal commit flushes
	// the loop device, which fsyncs its backing file.
	before := d.Stats()
	f, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	after := d.Stats()
	if after.Syncs <= before.Syncs || after.BytesWritten-before.BytesWritten < 1<<20 {
		t.Errorf("stats went from %+v to %+v: want the ext4 write and sync to reach the simulated disk", before, after)
	}

	device, file := l.Device, l.File
	closed = true
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), device) {
		t.Errorf("%s still mounted after Close", device)
	}
	if out, _ := exec.Command("losetup", "--all").Output(); strings.Contains(string(out), filepath.Base(file)) {
		t.Errorf("loop device still attached after Close: %s", out)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("backing file %s after Close: %v, want it removed", file, err)
	}
}
