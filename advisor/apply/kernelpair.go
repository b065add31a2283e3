package apply

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// readPair returns the pair as it is in force, with what the sysctl.d file holds for each of
// its four keys.
func (k *Kernel) readPair(sysctlFile string) (Value, dirtyPair, error) {
	var n [4]int64
	for i, knob := range dirtyPairKeys() {
		v, err := k.readKnob(knob)
		if err != nil {
			return Value{}, dirtyPair{}, err
		}
		n[i] = v
	}
	p, err := pairFromKnobs(n[0], n[1], n[2], n[3])
	if err != nil {
		return Value{}, dirtyPair{}, fmt.Errorf("read %s: %w", KnobDirtyThresholds, err)
	}
	lines, err := readSysctlFile(sysctlFile)
	if err != nil {
		return Value{}, dirtyPair{}, err
	}
	val := Value{Value: p.String(), SysctlFile: sysctlFile}
	for _, key := range dirtyPairKeys() {
		if v, ok := lines.get(key); ok {
			if val.Sysctl == nil {
				val.Sysctl = map[string]string{}
			}
			val.Sysctl[key] = v
		}
	}
	return val, p, nil
}

// writePair writes p's two sides, each through the knob that puts it in force (the kernel
// zeroes the twin). The order keeps the background threshold below the dirty one between the
// two writes: the dirty side first when it rises, the background side first when it falls.
// cur is the pair in force; nil when it could not be read, and then the dirty side goes first.
func (k *Kernel) writePair(cur *dirtyPair, p dirtyPair) error {
	bgKnob, dirtyKnob := p.knobs()
	steps := []struct {
		knob string
		n    int64
	}{{bgKnob, p.bg.n}, {dirtyKnob, p.dirty.n}}
	if cur == nil || k.rises(cur.dirty, p.dirty) {
		steps[0], steps[1] = steps[1], steps[0]
	}
	for _, s := range steps {
		if err := k.write(s.knob, s.n); err != nil {
			return err
		}
	}
	return nil
}

// rises reports whether the dirty threshold goes up from cur to next. A ratio is of the
// kernel's dirtyable memory, estimated as free plus file pages (mm/page-writeback.c,
// global_dirtyable_memory, less its reserves); where that cannot be read, a ratio counts as
// above any byte count, which is what restoring the kernel's ratios after lowered bytes is.
func (k *Kernel) rises(cur, next dirtySide) bool {
	if cur.ratio == next.ratio {
		return next.n >= cur.n
	}
	mem := k.dirtyableBytes()
	if mem <= 0 {
		return next.ratio
	}
	bytes := func(s dirtySide) float64 {
		if s.ratio {
			return float64(s.n) / 100 * float64(mem)
		}
		return float64(s.n)
	}
	return bytes(next) >= bytes(cur)
}

// dirtyableBytes estimates the memory the ratios are of from <procfs>/vmstat; 0 when unknown.
func (k *Kernel) dirtyableBytes() int64 {
	f, err := os.Open(filepath.Join(k.procfs, "vmstat"))
	if err != nil {
		return 0
	}
	defer f.Close()
	var pages int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "nr_free_pages", "nr_inactive_file", "nr_active_file":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return 0
			}
			pages += n
		}
	}
	return pages * int64(os.Getpagesize())
}

// pairLines is what the sysctl.d file holds for a pair: the knob in force of each side, and
// no line for its twin (a twin's line after it would undo it at boot).
func pairLines(p dirtyPair) map[string]*string {
	bgKnob, dirtyKnob := p.knobs()
	bg, dirty := strconv.FormatInt(p.bg.n, 10), strconv.FormatInt(p.dirty.n, 10)
	return map[string]*string{bgKnob: &bg, twinKnob(bgKnob): nil, dirtyKnob: &dirty, twinKnob(dirtyKnob): nil}
}

// twinKnob is a knob's twin, bytes for ratio and ratio for bytes.
func twinKnob(knob string) string {
	switch knob {
	case knobBgRatio:
		return KnobDirtyBackgroundBytes
	case knobRatio:
		return KnobDirtyBytes
	}
	return twinOf(knob)
}

// setPair changes the pair to value: both writes, the read-back and the sysctl.d file, or on
// any failure the old pair and file put back before it returns.
func (k *Kernel) setPair(value string) (Value, error) {
	p, err := parseDirtyPair(value)
	if err != nil {
		return Value{}, err
	}
	if err := checkNewPair(p); err != nil {
		return Value{}, err
	}
	old, cur, err := k.readPair(k.sysctlFile)
	if err != nil {
		return Value{}, err
	}
	fail := func(err error) (Value, error) {
		if _, uerr := k.restorePair(old); uerr != nil {
			return Value{}, fmt.Errorf("%w; undoing it failed too, restore %s=%s by hand (docs/apply.md): %w", err, KnobDirtyThresholds, old.Value, uerr)
		}
		return Value{}, fmt.Errorf("%w (the old values were restored)", err)
	}
	if err := k.writePair(&cur, p); err != nil {
		return fail(err)
	}
	if _, got, err := k.readPair(k.sysctlFile); err != nil {
		return fail(err)
	} else if got != p {
		return fail(fmt.Errorf("%s reads %s after writing %s", KnobDirtyThresholds, got, p))
	}
	if err := updateSysctlKeys(k.sysctlFile, pairLines(p)); err != nil {
		return fail(err)
	}
	live, _, err := k.readPair(k.sysctlFile)
	if err != nil {
		return fail(err)
	}
	k.logger.Info("kernel setting changed", zap.String("setting", KnobDirtyThresholds), zap.String("old", old.Value),
		zap.String("new", live.Value), zap.String("sysctl_file", k.sysctlFile))
	return live, nil
}

// restorePair puts back the pair and the sysctl.d file's four lines as old recorded them.
func (k *Kernel) restorePair(old Value) (Value, error) {
	file := old.SysctlFile
	if file == "" {
		file = k.sysctlFile
	}
	p, err := parseDirtyPair(old.Value)
	if err != nil {
		return Value{}, fmt.Errorf("restore %w", err)
	}
	// A pair that cannot be read (both of a side zero, which no write of ours leaves) is
	// written over, dirty side first.
	var cur *dirtyPair
	if _, live, err := k.readPair(file); err == nil {
		cur = &live
	}
	if err := k.writePair(cur, p); err != nil {
		return Value{}, err
	}
	lines := map[string]*string{}
	for _, key := range dirtyPairKeys() {
		lines[key] = nil
		if v, ok := old.Sysctl[key]; ok {
			lines[key] = &v
		}
	}
	if err := updateSysctlKeys(file, lines); err != nil {
		return Value{}, err
	}
	live, got, err := k.readPair(file)
	if err != nil {
		return Value{}, err
	}
	if got != p || !maps.Equal(live.Sysctl, old.Sysctl) {
		return live, fmt.Errorf("restore %s: wrote %s and the sysctl.d lines %v, but they read %s and %v", KnobDirtyThresholds, p, old.Sysctl, got, live.Sysctl)
	}
	k.logger.Info("kernel setting restored", zap.String("setting", KnobDirtyThresholds), zap.String("value", live.Value))
	return live, nil
}

// pairMidWrite reports whether live is vm.dirty_thresholds caught between the two writes of the
// change from old to next: one side old's and the other next's. Only a crash of the advisor
// mid-change leaves that (writePair writes one side, then the other), so crash recovery and
// rollback take it for the advisor's own and put old back, never "someone else changed it".
func pairMidWrite(setting string, live, old Value, next string) bool {
	if setting != KnobDirtyThresholds {
		return false
	}
	l, err1 := parseDirtyPair(live.Value)
	o, err2 := parseDirtyPair(old.Value)
	n, err3 := parseDirtyPair(next)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	return l == dirtyPair{bg: o.bg, dirty: n.dirty} || l == dirtyPair{bg: n.bg, dirty: o.dirty}
}

// unpersisted reports whether a kernel change whose new value is live lacks the sysctl.d lines
// that Set writes after the kernel's files: a crash between the two left the change in force
// until the next boot only. PostgreSQL settings have no such second step.
func unpersisted(setting string, live Value, next string) bool {
	switch {
	case setting == KnobDirtyThresholds:
		p, err := parseDirtyPair(next)
		if err != nil {
			return false
		}
		for key, want := range pairLines(p) {
			got, ok := live.Sysctl[key]
			if want == nil && ok || want != nil && (!ok || got != *want) {
				return true
			}
		}
		return false
	case strings.HasPrefix(setting, "vm."):
		return live.Persisted == nil || !sameValue(setting, *live.Persisted, next)
	}
	return false
}
