package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// hostVMLockPath is the lock that serializes every writer of the host's /proc/sys/vm dirty
// knobs among the test binaries `make test` runs at once (the bench's scenarios, the apply and
// rollback tests on the real /proc): one writer's values would otherwise land in the middle of
// another's, and each would restore what the other left. /run/lock is a tmpfs, gone at boot.
var hostVMLockPath = filepath.Join("/run/lock", "pgwal-advisor-test-vm.lock")

// LockHostVM waits for the host's /proc/sys/vm lock and returns the function that releases it.
func LockHostVM() (func(), error) {
	path := hostVMLockPath
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		path = filepath.Join(os.TempDir(), filepath.Base(path))
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the host vm lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the host vm knobs: %w", err)
	}
	return func() { f.Close() }, nil
}

// LockHostVMForTest holds the host's /proc/sys/vm lock for the rest of the test. Call it before
// anything that restores the knobs registers its cleanup: cleanups run last first, so the lock
// is released after the host's values are back.
func LockHostVMForTest(t testing.TB) {
	t.Helper()
	unlock, err := LockHostVM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}
