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
// when the test ends, whether it passed or not. Both lie in a directory that other users can
// traverse, so a throwaway cluster's server can keep its WAL on the disk. It skips the test
// under -short (the fast tier mounts nothing) and when FUSE cannot be mounted here, except in
// CI (CI=true), where that is a broken set-up and fails the test.
func MountForTest(t testing.TB, opts Options) *Disk {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a FUSE simulated disk: skipped under -short")
	}
	// Not t.TempDir(): it is private to the user running the test. lab.SharedTempDir does the
	// same, but simdisk stays free of the cluster package and its driver.
	dir, err := os.MkdirTemp("", "simdisk-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
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
	// Registered after the directory's removal, so it runs before it.
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("unmount simulated disk: %v", err)
		}
	})
	return d
}
