package apply

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// KnobDirtyThresholds is the kernel's two dirty thresholds changed as one setting: the
// background one (vm.dirty_background_bytes or vm.dirty_background_ratio) and the one writers
// are throttled at (vm.dirty_bytes or vm.dirty_ratio). Its value is "BACKGROUND/DIRTY", each a
// percentage ("10%") when the ratio is in force or a byte count when the bytes knob is.
//
// Four files hold two values: writing a knob zeroes its twin (kernel doc
// admin-guide/sysctl/vm), and the kernel halves a background threshold that is not below the
// other one (mm/page-writeback.c, domain_dirty_limits). Changed one knob at a time, a host
// would sit half-changed between two steps of the apply mode, and a rollback of one would not
// give back the other; as one setting, one journal record holds all four and one write puts
// them back.
const KnobDirtyThresholds = collector.KnobDirtyThresholds

// dirtyKnobs are the four files, in the order the pair's sides name them.
const (
	knobBgRatio = "vm.dirty_background_ratio"
	knobRatio   = "vm.dirty_ratio"
)

// dirtySide is one threshold: a percentage of dirtyable memory or a byte count.
type dirtySide struct {
	ratio bool
	n     int64
}

func (s dirtySide) String() string {
	if s.ratio {
		return strconv.FormatInt(s.n, 10) + "%"
	}
	return strconv.FormatInt(s.n, 10)
}

// dirtyPair is the pair's value: the background threshold and the dirty one.
type dirtyPair struct{ bg, dirty dirtySide }

func (p dirtyPair) String() string { return p.bg.String() + "/" + p.dirty.String() }

// knobs returns the knob each side is written through.
func (p dirtyPair) knobs() (bg, dirty string) {
	bg, dirty = KnobDirtyBackgroundBytes, KnobDirtyBytes
	if p.bg.ratio {
		bg = knobBgRatio
	}
	if p.dirty.ratio {
		dirty = knobRatio
	}
	return bg, dirty
}

// Bounds of a side. A ratio of 0 would start write-back on every page (background) or throttle
// every writer (dirty); the byte floors are the bytes knobs' (specs).
const (
	dirtyBgBytesMin    = 4 << 20
	dirtyBytesMin      = 8 << 20
	dirtyBytesMax      = 1 << 40
	dirtyPairBounds    = "BACKGROUND/DIRTY, each a ratio 1%..100% or bytes (background 4MB..1TB, dirty 8MB..1TB)"
	dirtyPairValueHint = "want BACKGROUND/DIRTY such as 10%/20% (the ratios) or 67108864/536870912 (bytes)"
)

// parseDirtyPair reads "BACKGROUND/DIRTY" and checks each side's bounds. It does not compare
// the sides: a pair of a ratio and a byte count can only be compared against the host's memory.
func parseDirtyPair(s string) (dirtyPair, error) {
	s = strings.TrimSpace(s)
	b, d, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(d, "/") {
		return dirtyPair{}, fmt.Errorf("%s=%q: %s", KnobDirtyThresholds, s, dirtyPairValueHint)
	}
	var p dirtyPair
	var err error
	if p.bg, err = parseDirtySide(b, dirtyBgBytesMin); err != nil {
		return dirtyPair{}, fmt.Errorf("%s=%q: the background threshold: %w", KnobDirtyThresholds, s, err)
	}
	if p.dirty, err = parseDirtySide(d, dirtyBytesMin); err != nil {
		return dirtyPair{}, fmt.Errorf("%s=%q: the dirty threshold: %w", KnobDirtyThresholds, s, err)
	}
	return p, nil
}

func parseDirtySide(s string, minBytes int64) (dirtySide, error) {
	s = strings.TrimSpace(s)
	num, ratio := strings.CutSuffix(s, "%")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num == "" || num[0] == '+' || num[0] == '-' {
		return dirtySide{}, fmt.Errorf("%q is not a percentage (10%%) or a byte count", s)
	}
	switch {
	case ratio && (n < 1 || n > 100):
		return dirtySide{}, fmt.Errorf("the ratio %d%% is outside 1%%..100%%", n)
	case !ratio && (n < minBytes || n > dirtyBytesMax):
		return dirtySide{}, fmt.Errorf("%d bytes is outside %s..%s", n, collector.FormatMemory(minBytes), collector.FormatMemory(dirtyBytesMax))
	}
	return dirtySide{ratio: ratio, n: n}, nil
}

// checkNewPair is what a new value must be besides its sides' bounds: both ratios or both byte
// counts, the background one below the other, so that it means what it says (the kernel would
// halve it otherwise). A restore writes what was live, which may mix them.
func checkNewPair(p dirtyPair) error {
	if p.bg.ratio != p.dirty.ratio {
		return fmt.Errorf("%s=%s mixes a ratio and a byte count: a new value gives both as ratios or both as bytes", KnobDirtyThresholds, p)
	}
	if p.bg.n >= p.dirty.n {
		return fmt.Errorf("%s=%s: the background threshold is not below the dirty one, and the kernel would halve it", KnobDirtyThresholds, p)
	}
	return nil
}

// pairFromKnobs builds the pair from the four files' values: of each twin the non-zero one is
// in force. Both zero is a kernel state no write of ours makes (and one the kernel's own
// handlers refuse to reach), so it is an error, not a value to restore.
func pairFromKnobs(bgBytes, bgRatio, dirtyBytes, dirtyRatio int64) (dirtyPair, error) {
	side := func(what string, bytes, ratio int64) (dirtySide, error) {
		switch {
		case bytes > 0:
			return dirtySide{n: bytes}, nil
		case ratio > 0:
			return dirtySide{ratio: true, n: ratio}, nil
		}
		return dirtySide{}, fmt.Errorf("%s: both its bytes knob and its ratio read %d and %d", what, bytes, ratio)
	}
	bg, err := side("the background threshold", bgBytes, bgRatio)
	if err != nil {
		return dirtyPair{}, err
	}
	dirty, err := side("the dirty threshold", dirtyBytes, dirtyRatio)
	if err != nil {
		return dirtyPair{}, err
	}
	return dirtyPair{bg: bg, dirty: dirty}, nil
}

// dirtyPairKeys are the sysctl keys the pair's record may hold lines of.
func dirtyPairKeys() []string {
	return []string{KnobDirtyBackgroundBytes, knobBgRatio, KnobDirtyBytes, knobRatio}
}

// checkPairSysctlLine checks one recorded line of the sysctl.d file: a key of the pair and a
// value its knob accepts within the pair's bounds.
func checkPairSysctlLine(key, value string) error {
	if !slices.Contains(dirtyPairKeys(), key) {
		return fmt.Errorf("the record holds a sysctl.d line for %q, which is not one of %s", key, strings.Join(dirtyPairKeys(), ", "))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return fmt.Errorf("the recorded sysctl.d line %s = %q is not a number", key, value)
	}
	var bad bool
	switch key {
	case knobBgRatio, knobRatio:
		bad = n < 1 || n > 100
	case KnobDirtyBackgroundBytes:
		bad = n < dirtyBgBytesMin || n > dirtyBytesMax
	case KnobDirtyBytes:
		bad = n < dirtyBytesMin || n > dirtyBytesMax
	}
	if bad {
		return fmt.Errorf("the recorded sysctl.d line %s = %d is outside %s", key, n, dirtyPairBounds)
	}
	return nil
}
