package simdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// Timing bounds are generous on purpose: the machines that run these tests are small and busy.
// Lower bounds are what the disk guarantees; upper bounds only catch gross errors, such as a
// sync charged twice.

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) & 4095
	return b[off : off+n]
}

// timeFdatasyncs writes 8 kB and times an fdatasync, n times, in a file on the mount.
func timeFdatasyncs(t *testing.T, path string, n int) []time.Duration {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 8192)
	var out []time.Duration
	for i := range n {
		if _, err := f.WriteAt(buf, int64(i)*8192); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func TestFdatasyncPaysLatency(t *testing.T) {
	tests := []struct {
		name            string
		latency, jitter time.Duration
	}{
		{name: "fixed", latency: 4 * time.Millisecond},
		{name: "jitter", latency: 2 * time.Millisecond, jitter: 4 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := MountForTest(t, Options{Latency: tt.latency, Jitter: tt.jitter, Seed: 1})
			got := timeFdatasyncs(t, filepath.Join(d.Mountpoint(), "f"), 25)
			lo, hi := tt.latency, 2*(tt.latency+tt.jitter)+5*time.Millisecond
			if m := median(got); m < lo || m > hi {
				t.Errorf("median fdatasync %v, want within [%v, %v]", m, lo, hi)
			}
			if m := slices.Min(got); m < tt.latency {
				t.Errorf("fastest fdatasync %v, want at least the latency %v", m, tt.latency)
			}
			t.Logf("fdatasync median %v min %v max %v", median(got), slices.Min(got), slices.Max(got))
			if s := d.Stats(); s.Syncs != 25 || s.Writes < 25 || s.BytesWritten != 25*8192 {
				t.Errorf("stats %+v, want 25 syncs, 25 writes and %d bytes", s, 25*8192)
			}
		})
	}
}

func TestSyncWritePaysLatencyOnce(t *testing.T) {
	const latency = 20 * time.Millisecond
	d := MountForTest(t, Options{Latency: latency})
	tests := []struct {
		name  string
		flags int
		size  int
		paid  bool // pays the sync latency
	}{
		{name: "O_DSYNC 8kB", flags: unix.O_DSYNC, size: 8192, paid: true},
		{name: "O_SYNC 8kB", flags: unix.O_SYNC, size: 8192, paid: true},
		{name: "O_DIRECT|O_DSYNC 8kB", flags: unix.O_DIRECT | unix.O_DSYNC, size: 8192, paid: true},
		// More than FUSE's 128 kB max_write: several write requests, still one write(2) and
		// one sync on the device.
		{name: "O_DSYNC 512kB", flags: unix.O_DSYNC, size: 512 << 10, paid: true},
		{name: "buffered 8kB", flags: 0, size: 8192, paid: false},
		{name: "O_DIRECT 8kB", flags: unix.O_DIRECT, size: 8192, paid: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.OpenFile(filepath.Join(d.Mountpoint(), "wal"), os.O_WRONLY|os.O_CREATE|tt.flags, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			before := d.Stats()
			buf := alignedBuf(tt.size)
			var got []time.Duration
			for i := range 8 {
				start := time.Now()
				if _, err := f.WriteAt(buf, int64(i*tt.size)); err != nil {
					t.Fatal(err)
				}
				got = append(got, time.Since(start))
			}
			m := median(got)
			t.Logf("write median %v", m)
			after := d.Stats()
			if tt.paid {
				if m < latency || m >= 2*latency {
					t.Errorf("median write %v, want one sync latency: within [%v, %v)", m, latency, 2*latency)
				}
				if after.SyncWrites-before.SyncWrites < 8 || after.Syncs-before.Syncs != 8 {
					t.Errorf("stats went from %+v to %+v, want 8 syncs and at least 8 sync writes", before, after)
				}
			} else if m >= latency/2 {
				t.Errorf("median write %v, want far below the sync latency %v", m, latency)
			}
		})
	}
}

func TestDirectoryFsyncPaysLatency(t *testing.T) {
	const latency = 10 * time.Millisecond
	d := MountForTest(t, Options{Latency: latency})
	dir, err := os.Open(d.Mountpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	start := time.Now()
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < latency {
		t.Errorf("directory fsync took %v, want at least %v", got, latency)
	}
}

func TestTmpfilePaysLatency(t *testing.T) {
	const latency = 10 * time.Millisecond
	d := MountForTest(t, Options{Latency: latency})
	fd, err := unix.Open(d.Mountpoint(), unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) {
		t.Skipf("no O_TMPFILE on FUSE here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Pwrite(fd, make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < latency {
		t.Errorf("fdatasync of an O_TMPFILE file took %v, want at least %v", got, latency)
	}
}

func TestBandwidthLimit(t *testing.T) {
	const (
		bandwidth = 16e6 // bytes per second
		perWriter = 2e6
		writers   = 2
	)
	d := MountForTest(t, Options{BandwidthBytesPerSec: bandwidth})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(d.Mountpoint(), "w"+string(rune('0'+i))))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			chunk := make([]byte, 128<<10)
			for written := 0; written < perWriter; written += len(chunk) {
				if _, err := f.Write(chunk); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	// The two writers share one device: together they cannot beat its bandwidth.
	want := time.Duration(float64(d.Stats().BytesWritten) / bandwidth * float64(time.Second))
	t.Logf("%d bytes in %v (device minimum %v)", d.Stats().BytesWritten, elapsed, want)
	if d.Stats().BytesWritten < writers*perWriter {
		t.Errorf("wrote %d bytes, want at least %d", d.Stats().BytesWritten, int64(writers*perWriter))
	}
	if elapsed < want {
		t.Errorf("writing took %v, want at least %v at %d B/s", elapsed, want, int64(bandwidth))
	}
}

func TestSetLatencyWhileMounted(t *testing.T) {
	d := MountForTest(t, Options{})
	path := filepath.Join(d.Mountpoint(), "f")
	if m := median(timeFdatasyncs(t, path, 10)); m > 7*time.Millisecond {
		t.Errorf("median fdatasync %v with no latency, want well under 7ms", m)
	}
	const latency = 15 * time.Millisecond
	d.SetLatency(latency)
	if m := median(timeFdatasyncs(t, path, 10)); m < latency || m > 2*latency {
		t.Errorf("median fdatasync %v after SetLatency(%v), want within [%v, %v]", m, latency, latency, 2*latency)
	}
	d.SetBandwidth(4e6)
	start := time.Now()
	if err := os.WriteFile(filepath.Join(d.Mountpoint(), "g"), make([]byte, 1e6), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 250*time.Millisecond {
		t.Errorf("1 MB at 4 MB/s took %v, want at least 250ms", got)
	}
}

// writeSync writes data to the mount at off in name and fsyncs it.
func writeSync(t *testing.T, d *Disk, name string, data []byte, off int64) time.Duration {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(d.Mountpoint(), name), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// checkContent checks a file's contents both through the mount (which must not serve what the
// kernel cached before a power cut) and in the source directory.
func checkContent(t *testing.T, d *Disk, name string, want []byte) {
	t.Helper()
	for _, dir := range []string{d.Mountpoint(), d.Source()} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("read %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s in %s: %d bytes, want %d; first difference at byte %d", name, dir, len(got), len(want), i)
		}
	}
}

func checkGone(t *testing.T, d *Disk, name string) {
	t.Helper()
	for _, dir := range []string{d.Mountpoint(), d.Source()} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in %s after the power cut: %v, want it gone", name, dir, err)
		}
	}
}

func TestVolatileCachePowerCut(t *testing.T) {
	// A long latency, so that "acknowledged at once" holds even on a busy machine.
	const latency = time.Second
	d := MountForTest(t, Options{Latency: latency, VolatileCache: true})
	a := bytes.Repeat([]byte("A"), 100_000)
	b := bytes.Repeat([]byte("B"), 30_000)

	// Persisted: A, then flushed.
	if took := writeSync(t, d, "wal", a, 0); took >= latency/2 {
		t.Errorf("fsync with a volatile cache took %v, want an immediate acknowledgement", took)
	}
	writeSync(t, d, "trunc", a, 0)
	writeSync(t, d, "kept", a, 0)
	writeSync(t, d, "rewritten", a, 0)
	writeSync(t, d, "moved", a, 0)
	d.FlushCache()

	// Not persisted: acknowledged syncs that the cache never wrote out.
	writeSync(t, d, "wal", b, 20_000)  // overwrite in the middle
	writeSync(t, d, "wal", b, 100_000) // and append
	if err := os.Truncate(filepath.Join(d.Mountpoint(), "trunc"), 1000); err != nil {
		t.Fatal(err)
	}
	writeSync(t, d, "trunc", b, 5000) // a hole, then data past the truncation
	writeSync(t, d, "new", b, 0)
	if err := os.Mkdir(filepath.Join(d.Mountpoint(), "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSync(t, d, "dir/nested", b, 0)
	// O_TRUNC, then new contents.
	if err := os.WriteFile(filepath.Join(d.Mountpoint(), "rewritten"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Renames are not modelled: the data goes back to A under the new name.
	writeSync(t, d, "moved", b, 0)
	if err := os.Rename(filepath.Join(d.Mountpoint(), "moved"), filepath.Join(d.Mountpoint(), "moved-since")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(d.Mountpoint(), "wal"), os.O_WRONLY|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= latency/2 {
		t.Errorf("O_DSYNC write with a volatile cache took %v, want an immediate acknowledgement", took)
	}
	f.Close()

	// Read once through the mount so that the kernel caches the lost data.
	if _, err := os.ReadFile(filepath.Join(d.Mountpoint(), "wal")); err != nil {
		t.Fatal(err)
	}
	if err := d.PowerCut(); err != nil {
		t.Fatalf("power cut: %v", err)
	}
	checkContent(t, d, "wal", a)
	checkContent(t, d, "trunc", a)
	checkContent(t, d, "kept", a)
	checkContent(t, d, "rewritten", a)
	checkContent(t, d, "moved-since", a)
	checkGone(t, d, "new")
	checkGone(t, d, "dir/nested")

	s := d.Stats()
	if s.CacheFlushes != 1 || s.PowerCuts != 1 {
		t.Errorf("stats %+v, want 1 cache flush and 1 power cut", s)
	}

	// The disk goes on after the power cut, and what is flushed then survives the next one.
	writeSync(t, d, "wal", b, 0)
	d.FlushCache()
	if err := d.PowerCut(); err != nil {
		t.Fatalf("second power cut: %v", err)
	}
	checkContent(t, d, "wal", append(slices.Clone(b), a[len(b):]...))
}

func TestVolatileCacheFlushInterval(t *testing.T) {
	d := MountForTest(t, Options{VolatileCache: true, FlushInterval: 20 * time.Millisecond})
	data := []byte("flushed by the drive on its own")
	writeSync(t, d, "f", data, 0)
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().CacheFlushes < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.PowerCut(); err != nil {
		t.Fatal(err)
	}
	checkContent(t, d, "f", data)
}

func TestHonestPowerCutLosesNothingSynced(t *testing.T) {
	d := MountForTest(t, Options{Latency: time.Millisecond})
	data := bytes.Repeat([]byte("synced "), 10_000)
	writeSync(t, d, "f", data, 0)
	if err := d.PowerCut(); err != nil {
		t.Fatal(err)
	}
	checkContent(t, d, "f", data)
}

func TestCloseUnmountsBusyDisk(t *testing.T) {
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	for _, p := range []string{src, mnt} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Mount(context.Background(), src, mnt, Options{Latency: time.Millisecond}, zaptest.NewLogger(t))
	if errors.Is(err, ErrNoFUSE) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "busy"))
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("close a busy disk: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+mnt+" ") {
		t.Errorf("%s still mounted after Close", mnt)
	}
	f.Close()
}

func TestMountErrors(t *testing.T) {
	t.Run("no /dev/fuse", func(t *testing.T) {
		err := checkFUSE(filepath.Join(t.TempDir(), "fuse"), 0)
		if !errors.Is(err, ErrNoFUSE) || !strings.HasPrefix(err.Error(), "the simulated disk needs FUSE: ") {
			t.Errorf("got %v, want an ErrNoFUSE that says so", err)
		}
	})
	t.Run("not root", func(t *testing.T) {
		if _, err := os.Stat("/dev/fuse"); err != nil {
			t.Skip(err)
		}
		if os.Geteuid() != 0 {
			t.Skip("opening /dev/fuse may need root")
		}
		if err := checkFUSE("/dev/fuse", 1000); !errors.Is(err, ErrNoFUSE) {
			t.Errorf("got %v, want ErrNoFUSE", err)
		}
	})
	dir := t.TempDir()
	tests := []struct {
		name       string
		src, mnt   string
		opts       Options
		wantNoFUSE bool
	}{
		{name: "negative latency", src: dir, mnt: dir, opts: Options{Latency: -time.Millisecond}},
		{name: "flush interval without volatile cache", src: dir, mnt: dir, opts: Options{FlushInterval: time.Second}},
		{name: "missing source", src: filepath.Join(dir, "nope"), mnt: dir},
		{name: "missing mount point", src: dir, mnt: filepath.Join(dir, "nope")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Mount(context.Background(), tt.src, tt.mnt, tt.opts, zaptest.NewLogger(t))
			if err == nil {
				d.Close()
				t.Fatal("mounted, want an error")
			}
			if errors.Is(err, ErrNoFUSE) && tt.opts.validate() == nil {
				t.Skip(err) // no FUSE here: the path checks come after it
			}
			t.Logf("error: %v", err)
		})
	}
}

// TestVolatileCacheRandomOps checks the power cut against a model: random writes, truncations,
// syncs and flushes on a few files, then a power cut must leave exactly what the last flush saw.
func TestVolatileCacheRandomOps(t *testing.T) {
	d := MountForTest(t, Options{VolatileCache: true})
	rng := rand.New(rand.NewPCG(3, 4))
	const files = 4
	current := make([][]byte, files)   // what a reader sees now
	persisted := make([][]byte, files) // what the last flush saw; nil: no file
	handles := make([]*os.File, files)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(d.Mountpoint(), fmt.Sprint("f", i)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		handles[i] = f
		current[i] = []byte{}
	}
	for range 400 {
		i := rng.IntN(files)
		f := handles[i]
		switch op := rng.IntN(10); {
		case op < 6: // write somewhere in or past the file, up to 3 undo blocks long
			off := rng.IntN(len(current[i]) + undoBlock)
			data := make([]byte, 1+rng.IntN(3*undoBlock))
			for j := range data {
				data[j] = byte('a' + rng.IntN(26))
			}
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + len(data); end > len(current[i]) {
				current[i] = append(current[i], make([]byte, end-len(current[i]))...)
			}
			copy(current[i][off:], data)
		case op < 7:
			size := rng.IntN(len(current[i]) + undoBlock)
			if err := f.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size <= len(current[i]) {
				current[i] = current[i][:size]
			} else {
				current[i] = append(current[i], make([]byte, size-len(current[i]))...)
			}
		case op < 9:
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		default:
			d.FlushCache()
			for j := range files {
				persisted[j] = slices.Clone(current[j])
			}
		}
	}
	if err := d.PowerCut(); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		name := fmt.Sprint("f", i)
		if persisted[i] == nil {
			checkGone(t, d, name)
			continue
		}
		checkContent(t, d, name, persisted[i])
	}
}

// TestQueueModelOption checks that Options.Queue reaches the mounted disk's device and that
// SetQueueModel changes it, refusing an unknown model.
func TestQueueModelOption(t *testing.T) {
	d := MountForTest(t, Options{Latency: time.Millisecond, BandwidthBytesPerSec: 1e6, Queue: QueuePriority})
	if got := d.QueueModel(); got != QueuePriority {
		t.Errorf("QueueModel() = %q after mounting with priority", got)
	}
	if err := d.SetQueueModel("ncq"); err == nil {
		t.Error("SetQueueModel(ncq) succeeded")
	}
	if got := d.QueueModel(); got != QueuePriority {
		t.Errorf("QueueModel() = %q after a refused change, want priority", got)
	}
	if err := d.SetQueueModel(""); err != nil || d.QueueModel() != QueueSerial {
		t.Errorf("SetQueueModel(\"\") = %v, model %q; want serial", err, d.QueueModel())
	}
}
