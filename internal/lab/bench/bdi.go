package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// bdiKnobNames are the per-device write-back limits (/sys/class/bdi/<MAJ:MIN>/, Linux 6.2+)
// a scenario may change, in the order they are written: max_bytes is stored by the kernel as
// max_ratio (a share of the global dirty limit at the time of writing), so it is written last
// and never restored itself; restoring max_ratio restores it.
func bdiKnobNames() []string { return []string{"strict_limit", "max_ratio", "max_bytes"} }

// bdiKnobs remembers one device's per-device limits as found and puts them back, as vmKnobs
// does for vm.dirty_*.
type bdiKnobs struct {
	dir string // <sysfs>/class/bdi/<MAJ:MIN>

	mu      sync.Mutex
	orig    map[string]int64 // strict_limit and max_ratio
	changed bool
}

// readBDIKnobs reads the limits of the device holding path's file system.
func readBDIKnobs(sysfs, path string) (*bdiKnobs, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("find the device of %s: %w", path, err)
	}
	k := &bdiKnobs{
		dir:  filepath.Join(sysfs, "class", "bdi", fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))),
		orig: map[string]int64{},
	}
	for _, n := range []string{"strict_limit", "max_ratio"} {
		v, err := k.read(n)
		if err != nil {
			return nil, err
		}
		k.orig[n] = v
	}
	return k, nil
}

// Device is the bdi's name, MAJ:MIN.
func (k *bdiKnobs) Device() string { return filepath.Base(k.dir) }

func (k *bdiKnobs) read(name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(k.dir, name))
	if err != nil {
		return 0, fmt.Errorf("read bdi %s %s: %w", k.Device(), name, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read bdi %s %s: %w", k.Device(), name, err)
	}
	return v, nil
}

func (k *bdiKnobs) write(name string, v int64) error {
	if !slices.Contains(bdiKnobNames(), name) {
		return fmt.Errorf("bdi %s is not a knob the suite may change", name)
	}
	if err := os.WriteFile(filepath.Join(k.dir, name), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
		return fmt.Errorf("write bdi %s %s=%d: %w", k.Device(), name, v, err)
	}
	return nil
}

// set restores the original limits and then writes the given ones; an empty map leaves the
// originals.
func (k *bdiKnobs) set(knobs map[string]string) error {
	if err := k.restore(); err != nil {
		return err
	}
	if len(knobs) == 0 {
		return nil
	}
	for n := range knobs {
		if !slices.Contains(bdiKnobNames(), n) {
			return fmt.Errorf("bdi %s is not a knob the suite may change", n)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.changed = true
	for _, n := range bdiKnobNames() {
		s, ok := knobs[n]
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bdi %s=%q: %w", n, s, err)
		}
		if err := k.write(n, v); err != nil {
			return err
		}
	}
	return nil
}

// restore puts strict_limit and max_ratio back (which undoes max_bytes too) and checks that
// they read as found. It does nothing when nothing was changed.
func (k *bdiKnobs) restore() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.changed {
		return nil
	}
	errs := []error{k.write("strict_limit", k.orig["strict_limit"]), k.write("max_ratio", k.orig["max_ratio"])}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore the per-device write-back limits: %w", err)
	}
	for n, want := range k.orig {
		got, err := k.read(n)
		if err != nil {
			return fmt.Errorf("restore the per-device write-back limits: %w", err)
		}
		if got != want {
			return fmt.Errorf("restore the per-device write-back limits: bdi %s %s is %d, was %d", k.Device(), n, got, want)
		}
	}
	k.changed = false
	return nil
}
