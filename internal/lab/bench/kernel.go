package bench

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// dirtyKnobs are the /proc/sys/vm knobs the suite may change (seed 003's and the neighbour
// scenario's grids, the advisor's sysctl findings). Each *_bytes knob has a *_ratio twin:
// writing one zeroes the other. The two *_centisecs knobs stand alone.
func dirtyKnobs() []string {
	return []string{"dirty_background_ratio", "dirty_ratio", "dirty_background_bytes", "dirty_bytes",
		"dirty_expire_centisecs", "dirty_writeback_centisecs"}
}

// vmKnobs remembers the kernel's dirty-page settings as the suite found them and puts them back.
type vmKnobs struct {
	dir string // <procfs>/sys/vm
	// writeFile writes a knob; tests replace it to emulate the kernel zeroing a knob's twin.
	writeFile func(path string, data []byte) error

	mu      sync.Mutex
	orig    map[string]int64
	changed bool
	// unlock releases the host's /proc/sys/vm lock (lab.LockHostVM), held on the real /proc
	// from the first change to the restore, so that tests on the real /proc in other test
	// binaries neither see the suite's values nor leave theirs in its way; nil when not held.
	unlock func()
}

// hostVM reports whether the knobs are the host's own.
func (k *vmKnobs) hostVM() bool { return filepath.Clean(k.dir) == "/proc/sys/vm" }

func readVMKnobs(procfs string) (*vmKnobs, error) {
	k := &vmKnobs{
		dir:       filepath.Join(procfs, "sys", "vm"),
		writeFile: func(p string, b []byte) error { return os.WriteFile(p, b, 0o644) },
		orig:      map[string]int64{},
	}
	if k.hostVM() {
		// The originals are read while no one else changes them.
		unlock, err := lab.LockHostVM()
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	for _, n := range dirtyKnobs() {
		v, err := k.read(n)
		if err != nil {
			return nil, err
		}
		k.orig[n] = v
	}
	return k, nil
}

func (k *vmKnobs) read(name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(k.dir, name))
	if err != nil {
		return 0, fmt.Errorf("read vm.%s: %w", name, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read vm.%s: %w", name, err)
	}
	return v, nil
}

func (k *vmKnobs) write(name string, v int64) error {
	if !slices.Contains(dirtyKnobs(), name) {
		return fmt.Errorf("vm.%s is not a knob the suite may change", name)
	}
	if err := k.writeFile(filepath.Join(k.dir, name), []byte(strconv.FormatInt(v, 10))); err != nil {
		return fmt.Errorf("write vm.%s=%d: %w", name, v, err)
	}
	return nil
}

// set restores the original knobs and then writes the given ones ("dirty_bytes" before
// "dirty_background_bytes", so that the background threshold is never set above a limit still
// in force); an empty map leaves the originals.
func (k *vmKnobs) set(knobs map[string]string) error {
	if err := k.restore(); err != nil {
		return err
	}
	if len(knobs) == 0 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.hostVM() && k.unlock == nil {
		unlock, err := lab.LockHostVM()
		if err != nil {
			return err
		}
		k.unlock = unlock
	}
	k.changed = true
	names := slices.Sorted(maps.Keys(knobs))
	slices.SortStableFunc(names, func(a, b string) int { return knobOrder(a) - knobOrder(b) })
	for _, n := range names {
		v, err := strconv.ParseInt(knobs[n], 10, 64)
		if err != nil {
			return fmt.Errorf("vm.%s=%q: %w", n, knobs[n], err)
		}
		if err := k.write(n, v); err != nil {
			return err
		}
	}
	return nil
}

func knobOrder(name string) int {
	switch name {
	case "dirty_ratio", "dirty_bytes":
		return 0
	}
	return 1
}

// pairKnobs spells a vm.dirty_thresholds value ("10%/20%", "67108864/536870912") as the knobs
// that put it in force, as the suite's configurations name them.
func pairKnobs(v string) (map[string]string, error) {
	bg, dirty, ok := strings.Cut(v, "/")
	if !ok {
		return nil, fmt.Errorf("vm.dirty_thresholds=%q: want BACKGROUND/DIRTY", v)
	}
	out := map[string]string{}
	for _, side := range []struct{ name, v string }{{"dirty_background", bg}, {"dirty", dirty}} {
		n, ratio := strings.CutSuffix(strings.TrimSpace(side.v), "%")
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return nil, fmt.Errorf("vm.dirty_thresholds=%q: %q is not a number", v, side.v)
		}
		if ratio {
			out[side.name+"_ratio"] = n
		} else {
			out[side.name+"_bytes"] = n
		}
	}
	return out, nil
}

// dirtyFour reads the four threshold knobs: background bytes, background ratio, bytes, ratio.
func (k *vmKnobs) dirtyFour() (string, error) {
	var out []string
	for _, n := range []string{"dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"} {
		v, err := k.read(n)
		if err != nil {
			return "", err
		}
		out = append(out, strconv.FormatInt(v, 10))
	}
	return strings.Join(out, " "), nil
}

// noteChanged records that someone else (the advisor's applier) wrote the knobs.
func (k *vmKnobs) noteChanged() {
	k.mu.Lock()
	k.changed = true
	k.mu.Unlock()
}

// restore puts the original knobs back: the ratios first, then the bytes values that were not
// zero (writing a bytes knob zeroes its ratio twin, so this order leaves exactly the original
// pair in force). It does nothing when no knob was changed.
func (k *vmKnobs) restore() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.changed {
		return nil
	}
	var errs []error
	for _, n := range []string{"dirty_background_ratio", "dirty_ratio"} {
		if k.orig[n] > 0 {
			errs = append(errs, k.write(n, k.orig[n]))
		}
	}
	for _, n := range []string{"dirty_bytes", "dirty_background_bytes"} {
		if k.orig[n] > 0 {
			errs = append(errs, k.write(n, k.orig[n]))
		}
	}
	for _, n := range []string{"dirty_expire_centisecs", "dirty_writeback_centisecs"} {
		errs = append(errs, k.write(n, k.orig[n]))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore the kernel's dirty-page settings: %w", err)
	}
	for n, want := range k.orig {
		got, err := k.read(n)
		if err != nil {
			return fmt.Errorf("restore the kernel's dirty-page settings: %w", err)
		}
		if got != want {
			return fmt.Errorf("restore the kernel's dirty-page settings: vm.%s is %d, was %d", n, got, want)
		}
	}
	k.changed = false
	if k.unlock != nil {
		k.unlock()
		k.unlock = nil
	}
	return nil
}
