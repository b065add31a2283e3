package simdisk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// MountForTest mounts a simulated disk over a fresh source directory for a test and unmounts it
// when the test ends, whether it passed or not. It skips the test when FUSE cannot be mounted
// here, except in CI (CI=true), where that is a broken set-up and fails the test.
func MountForTest(t testing.TB, opts Options) *Disk {
	t.Helper()
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	for _, p := range []string{src, mnt} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Mount(ctx, src, mnt, opts, zaptest.NewLogger(t))
	if errors.Is(err, ErrNoFUSE) {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("mount simulated disk: %v", err)
	}
	// Registered after t.TempDir, so it runs before the directories are removed.
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("unmount simulated disk: %v", err)
		}
	})
	return d
}
