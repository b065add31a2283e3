package apply

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// procfsCopy copies testdata/procfs into a temporary directory the test may write.
func procfsCopy(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("testdata", "procfs")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(root, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readKnobFile(t *testing.T, root, knob string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "sys", "vm", knob))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestKernelSetRestoreTestdata(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		existing string // the sysctl.d file before, "" for none
		knob     string
	}{
		{"no file", "", KnobDirtyBackgroundBytes},
		{"file with other settings", "# mine\nvm.swappiness = 10\nvm.dirty_bytes = 536870912\n", KnobDirtyBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := procfsCopy(t)
			dir := t.TempDir()
			file := filepath.Join(dir, "90-pgwal-advisor.conf")
			if tc.existing != "" {
				if err := os.WriteFile(file, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			k := NewKernel(root, file, zaptest.NewLogger(t))
			if err := k.Writable(ctx, tc.knob); err != nil {
				t.Fatalf("writable: %v", err)
			}
			old, err := k.Read(ctx, tc.knob)
			if err != nil {
				t.Fatal(err)
			}
			twin := strings.TrimPrefix(twinOf(tc.knob), "vm.")
			oldTwin := readKnobFile(t, root, twin)
			if old.Value != "0" || old.TwinValue != oldTwin || old.Twin != twinOf(tc.knob) {
				t.Fatalf("old = %+v, want 0 with the twin %s=%s", old, twin, oldTwin)
			}
			live, err := k.Set(ctx, tc.knob, "268435456")
			if err != nil {
				t.Fatal(err)
			}
			// Plain files do not couple the pair: the twin reads as it was, every time.
			if live.Value != "268435456" || live.TwinValue != oldTwin {
				t.Errorf("after Set: %+v, want 268435456 and the twin unchanged in a testdata tree", live)
			}
			if got := readKnobFile(t, root, strings.TrimPrefix(tc.knob, "vm.")); got != "268435456" {
				t.Errorf("knob file = %s", got)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.knob+" = 268435456") || strings.Count(string(b), tc.knob) != 1 {
				t.Errorf("sysctl file after Set:\n%s", b)
			}
			if tc.existing != "" && !strings.Contains(string(b), "vm.swappiness = 10") {
				t.Errorf("the file's other settings were lost:\n%s", b)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the sysctl.d directory holds %d entries, want the file alone (no temporary files)", len(entries))
			}

			restored, err := k.Restore(ctx, tc.knob, old)
			if err != nil {
				t.Fatal(err)
			}
			if restored.Value != "0" || restored.TwinValue != oldTwin {
				t.Errorf("after Restore: %+v", restored)
			}
			b, err = os.ReadFile(file)
			switch {
			case tc.existing == "" && !os.IsNotExist(err):
				t.Errorf("the file written for the change is still there after the rollback: %s", b)
			case tc.existing != "" && string(b) != tc.existing:
				t.Errorf("sysctl file after Restore:\n%q\nwant as before:\n%q", b, tc.existing)
			}
		})
	}
}

// TestKernelRestoreBytesPair: when a bytes knob was in force (its ratio 0), rollback writes
// the bytes value back and leaves the ratio at 0.
func TestKernelRestoreBytesPair(t *testing.T) {
	ctx := context.Background()
	root := procfsCopy(t)
	os.WriteFile(filepath.Join(root, "sys/vm/dirty_background_bytes"), []byte("33554432\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sys/vm/dirty_background_ratio"), []byte("0\n"), 0o644)
	k := NewKernel(root, filepath.Join(t.TempDir(), "90.conf"), nil)
	old, err := k.Read(ctx, KnobDirtyBackgroundBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, KnobDirtyBackgroundBytes, "67108864"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Restore(ctx, KnobDirtyBackgroundBytes, old); err != nil {
		t.Fatal(err)
	}
	if b, r := readKnobFile(t, root, "dirty_background_bytes"), readKnobFile(t, root, "dirty_background_ratio"); b != "33554432" || r != "0" {
		t.Errorf("after Restore: bytes %s ratio %s, want 33554432 and 0", b, r)
	}
}

func TestKernelReadOnly(t *testing.T) {
	root := procfsCopy(t)
	k := NewKernel(root, filepath.Join(t.TempDir(), "90.conf"), nil)
	k.writeCheck = func(string) error { return &os.PathError{Op: "open", Path: "x", Err: syscall.EROFS} }
	err := k.Writable(context.Background(), KnobDirtyBytes)
	if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "stay advice") {
		t.Errorf("Writable on a read-only /proc/sys = %v, want it to say so", err)
	}
	k = NewKernel(root, filepath.Join(t.TempDir(), "no-such-dir", "90.conf"), nil)
	if err := k.Writable(context.Background(), KnobDirtyBytes); err == nil || !strings.Contains(err.Error(), "--apply.sysctl-file") {
		t.Errorf("Writable without the sysctl.d directory = %v", err)
	}
	if _, err := k.Set(context.Background(), KnobDirtyBytes, "-5"); err == nil {
		t.Errorf("Set accepted a negative value")
	}
}

// TestKernelRealProc writes the host's vm.dirty_background_bytes and rolls it back. It runs
// only as root with a writable /proc/sys, and restores the original values even when it fails.
func TestKernelRealProc(t *testing.T) {
	const vm = "/proc/sys/vm/"
	if os.Geteuid() != 0 {
		t.Skip("writing /proc/sys/vm needs root")
	}
	if err := openForWrite(vm + "dirty_background_bytes"); err != nil {
		t.Skipf("/proc/sys/vm is not writable here: %v", err)
	}
	lab.LockHostVMForTest(t)
	read := func(name string) int64 {
		b, err := os.ReadFile(vm + name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	origBytes, origRatio := read("dirty_background_bytes"), read("dirty_background_ratio")
	t.Cleanup(func() {
		// Ratio first (it zeroes the bytes knob), then a non-zero bytes value (kernel doc admin-guide/sysctl/vm).
		if origBytes == 0 {
			if err := os.WriteFile(vm+"dirty_background_ratio", []byte(strconv.FormatInt(origRatio, 10)), 0o644); err != nil {
				t.Errorf("restore dirty_background_ratio=%d BY HAND: %v", origRatio, err)
			}
		} else if err := os.WriteFile(vm+"dirty_background_bytes", []byte(strconv.FormatInt(origBytes, 10)), 0o644); err != nil {
			t.Errorf("restore dirty_background_bytes=%d BY HAND: %v", origBytes, err)
		}
		if b, r := read("dirty_background_bytes"), read("dirty_background_ratio"); b != origBytes || r != origRatio {
			t.Errorf("vm.dirty_background_bytes/ratio are %d/%d, were %d/%d: restore them BY HAND", b, r, origBytes, origRatio)
		}
	})

	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	k := NewKernel("/proc", file, zaptest.NewLogger(t))
	old, err := k.Read(ctx, KnobDirtyBackgroundBytes)
	if err != nil {
		t.Fatal(err)
	}
	target := int64(48 << 20)
	if origBytes == target {
		target = 40 << 20
	}
	live, err := k.Set(ctx, KnobDirtyBackgroundBytes, strconv.FormatInt(target, 10))
	if err != nil {
		t.Fatal(err)
	}
	if read("dirty_background_bytes") != target || live.Value != strconv.FormatInt(target, 10) {
		t.Errorf("dirty_background_bytes = %d, want %d", read("dirty_background_bytes"), target)
	}
	// The kernel zeroes the ratio twin when the bytes knob is written.
	if r := read("dirty_background_ratio"); r != 0 || live.TwinValue != "0" {
		t.Errorf("dirty_background_ratio = %d (read back %s) after writing the bytes knob, want 0", r, live.TwinValue)
	}
	if _, err := k.Restore(ctx, KnobDirtyBackgroundBytes, old); err != nil {
		t.Fatal(err)
	}
	if b, r := read("dirty_background_bytes"), read("dirty_background_ratio"); b != origBytes || r != origRatio {
		t.Errorf("after Restore: %d/%d, want %d/%d", b, r, origBytes, origRatio)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the sysctl.d file is still there after the rollback")
	}
}
