package apply

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Kernel knobs the apply mode may change (collector.SettingTable lists them).
const (
	KnobDirtyBackgroundBytes = collector.KnobDirtyBackgroundBytes
	KnobDirtyBytes           = collector.KnobDirtyBytes
)

// twinOf is a bytes knob's ratio twin: writing either zeroes the other (kernel docs,
// admin-guide/sysctl/vm: "only one of them may be specified at a time").
func twinOf(knob string) string {
	switch knob {
	case KnobDirtyBackgroundBytes:
		return "vm.dirty_background_ratio"
	case KnobDirtyBytes:
		return "vm.dirty_ratio"
	}
	return ""
}

// Kernel changes vm.dirty_*_bytes the way an operator would: writes <procfs>/sys/vm/<knob>,
// reads it back with its ratio twin, and persists the value in a sysctl.d file written
// atomically (a temporary file in the same directory, fsync, rename, fsync of the directory),
// so that it survives a reboot.
//
// Writing /proc/sys/vm needs uid 0: the kernel checks the uid against the file's mode and no
// capability substitutes (deploy/systemd/apply.conf). In a container /proc/sys is usually
// mounted read-only; Writable says so.
//
// The read-back makes a testdata procfs tree behave predictably: there the twin keeps its value
// (nothing couples plain files), and Restore writes each knob of the pair that differs.
type Kernel struct {
	procfs     string
	sysctlFile string
	logger     *zap.Logger

	mu sync.Mutex
	// writeCheck returns an error when path may not be written; tests replace it to act as a
	// read-only /proc/sys.
	writeCheck func(path string) error
	// write writes a knob; tests replace it to make a testdata tree couple twins as the kernel
	// does (writing one zeroes the other).
	write func(knob string, n int64) error
}

// NewKernel returns an actuator over procfs (normally /proc) that persists in sysctlFile
// (DefaultSysctlFile when empty).
func NewKernel(procfs, sysctlFile string, logger *zap.Logger) *Kernel {
	if procfs == "" {
		procfs = "/proc"
	}
	if sysctlFile == "" {
		sysctlFile = DefaultSysctlFile
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	k := &Kernel{procfs: procfs, sysctlFile: sysctlFile, logger: logger.With(zap.String("actuator", "kernel")), writeCheck: openForWrite}
	k.write = k.writeKnob
	return k
}

// SysctlFile is the configured sysctl.d file; the guard accepts a journal's recorded one only
// beside it.
func (k *Kernel) SysctlFile() string { return k.sysctlFile }

// Owns reports whether name is a knob this actuator changes: a bytes knob, or the pair of
// thresholds (KnobDirtyThresholds).
func (k *Kernel) Owns(name string) bool { return twinOf(name) != "" || name == KnobDirtyThresholds }

func (k *Kernel) path(knob string) string {
	return filepath.Join(k.procfs, "sys", filepath.FromSlash(strings.ReplaceAll(knob, ".", "/")))
}

// openForWrite opens path for writing and closes it without writing: that checks what a
// write would (the uid, a read-only mount) and changes nothing.
func openForWrite(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// Read returns the knob's value, its ratio twin's, and what the sysctl.d file holds for it.
func (k *Kernel) Read(_ context.Context, name string) (Value, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if name == KnobDirtyThresholds {
		v, _, err := k.readPair(k.sysctlFile)
		return v, err
	}
	return k.read(name, k.sysctlFile)
}

func (k *Kernel) read(name, sysctlFile string) (Value, error) {
	if !k.Owns(name) {
		return Value{}, fmt.Errorf("the kernel actuator does not change %s", name)
	}
	v, err := k.readKnob(name)
	if err != nil {
		return Value{}, err
	}
	twin := twinOf(name)
	tv, err := k.readKnob(twin)
	if err != nil {
		return Value{}, err
	}
	lines, err := readSysctlFile(sysctlFile)
	if err != nil {
		return Value{}, err
	}
	val := Value{Value: strconv.FormatInt(v, 10), Twin: twin, TwinValue: strconv.FormatInt(tv, 10), SysctlFile: sysctlFile}
	if p, ok := lines.get(name); ok {
		val.Persisted = &p
	}
	return val, nil
}

func (k *Kernel) readKnob(knob string) (int64, error) {
	path := k.path(knob)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w (is --path.procfs the host's procfs?)", knob, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

func (k *Kernel) writeKnob(knob string, n int64) error {
	path := k.path(knob)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", knob, writeHint(err))
	}
	_, err = f.WriteString(strconv.FormatInt(n, 10) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s = %d: %w", knob, n, writeHint(err))
	}
	return nil
}

// writeHint adds what to do to a failed write under /proc/sys.
func writeHint(err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("/proc/sys is read-only here (a container?): kernel settings stay advice; run the apply mode on the host: %w", err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("writing /proc/sys/vm needs uid 0 (the kernel checks the uid; no capability substitutes): see deploy/systemd/apply.conf: %w", err)
	}
	return err
}

// Writable returns nil when the four vm.dirty_* files and the sysctl.d file's directory may be
// written, and otherwise why not. It checks all four whichever is asked: one knob written
// without the others would leave the kernel half-changed.
func (k *Kernel) Writable(_ context.Context, name string) error {
	if !k.Owns(name) {
		return fmt.Errorf("the kernel actuator does not change %s", name)
	}
	for _, knob := range dirtyPairKeys() {
		if err := k.writeCheck(k.path(knob)); err != nil {
			return fmt.Errorf("cannot write %s: %w", knob, writeHint(err))
		}
	}
	dir := filepath.Dir(k.sysctlFile)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("cannot persist kernel settings in %s: directory %s: %w (create it, or set --apply.sysctl-file)", k.sysctlFile, dir, err)
	}
	return nil
}

// Set writes the knob, confirms it by reading it back, and persists it in the sysctl.d file.
// On failure the old values (knob, twin and file) are restored before Set returns its error.
func (k *Kernel) Set(_ context.Context, name, value string) (Value, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if name == KnobDirtyThresholds {
		return k.setPair(value)
	}
	n, err := parseKnob(value)
	if err != nil {
		return Value{}, err
	}
	if n <= 0 {
		return Value{}, fmt.Errorf("%s = %d: the apply mode writes only positive byte counts", name, n)
	}
	old, err := k.read(name, k.sysctlFile)
	if err != nil {
		return Value{}, err
	}
	fail := func(err error) (Value, error) {
		if _, uerr := k.restore(name, old); uerr != nil {
			return Value{}, fmt.Errorf("%w; undoing it failed too, restore %s=%s and %s=%s by hand: %w", err, name, old.Value, old.Twin, old.TwinValue, uerr)
		}
		return Value{}, fmt.Errorf("%w (the old values were restored)", err)
	}
	if err := k.writeKnob(name, n); err != nil {
		return fail(err)
	}
	live, err := k.read(name, k.sysctlFile)
	if err != nil {
		return fail(err)
	}
	if live.Value != strconv.FormatInt(n, 10) {
		return fail(fmt.Errorf("%s reads %s after writing %d", name, live.Value, n))
	}
	persisted := strconv.FormatInt(n, 10)
	if err := updateSysctlFile(k.sysctlFile, name, &persisted); err != nil {
		return fail(err)
	}
	live.Persisted = &persisted
	k.logger.Info("kernel setting changed", zap.String("setting", name), zap.String("old", old.Value),
		zap.String("new", live.Value), zap.String(old.Twin, old.TwinValue+" -> "+live.TwinValue), zap.String("sysctl_file", k.sysctlFile))
	return live, nil
}

// Restore puts back the knob, its ratio twin and the sysctl.d file as old recorded them.
func (k *Kernel) Restore(_ context.Context, name string, old Value) (Value, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if name == KnobDirtyThresholds {
		return k.restorePair(old)
	}
	return k.restore(name, old)
}

// restore writes the pair back so that it reads as old recorded it. The ratio goes first and
// the bytes value after it, if that was non-zero (kernel doc admin-guide/sysctl/vm, dirty_bytes): writing the ratio zeroes the bytes
// knob, writing a bytes value zeroes the ratio, so on a kernel one write usually restores both.
// Where the read-back still differs (a testdata tree, whose files nothing couples), each
// differing knob is written as recorded.
func (k *Kernel) restore(name string, old Value) (Value, error) {
	file := old.SysctlFile
	if file == "" {
		file = k.sysctlFile
	}
	twin := twinOf(name)
	if old.Twin != "" && old.Twin != twin {
		return Value{}, fmt.Errorf("restore %s: the journal names its twin %s, want %s", name, old.Twin, twin)
	}
	wantBytes, err := parseKnob(old.Value)
	if err != nil {
		return Value{}, fmt.Errorf("restore %s: %w", name, err)
	}
	wantRatio, err := parseKnob(old.TwinValue)
	if err != nil {
		return Value{}, fmt.Errorf("restore %s: the old %s: %w", name, twin, err)
	}
	if wantBytes == 0 || wantRatio != 0 {
		if err := k.writeKnob(twin, wantRatio); err != nil {
			return Value{}, err
		}
	}
	if wantBytes != 0 {
		if err := k.writeKnob(name, wantBytes); err != nil {
			return Value{}, err
		}
	}
	for _, kv := range []struct {
		knob string
		want int64
	}{{name, wantBytes}, {twin, wantRatio}} {
		got, err := k.readKnob(kv.knob)
		if err != nil {
			return Value{}, err
		}
		if got != kv.want {
			if err := k.writeKnob(kv.knob, kv.want); err != nil {
				return Value{}, err
			}
		}
	}
	if err := updateSysctlFile(file, name, old.Persisted); err != nil {
		return Value{}, err
	}
	live, err := k.read(name, file)
	if err != nil {
		return Value{}, err
	}
	if live.Value != strconv.FormatInt(wantBytes, 10) || live.TwinValue != strconv.FormatInt(wantRatio, 10) {
		return live, fmt.Errorf("restore %s: wrote %s=%d and %s=%d but they read %s and %s", name, name, wantBytes, twin, wantRatio, live.Value, live.TwinValue)
	}
	k.logger.Info("kernel setting restored", zap.String("setting", name), zap.String("value", live.Value), zap.String(twin, live.TwinValue))
	return live, nil
}

// sysctlLines is a sysctl.d file's lines, kept as written so that an edit touches one line.
type sysctlLines []string

const sysctlHeader = "# Written by pgwal-advisor's apply mode (docs/apply.md): the kernel settings it applied.\n" +
	"# `pgwal-advisor rollback` restores the previous values and edits this file.\n"

func readSysctlFile(path string) (sysctlLines, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var lines sysctlLines
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// key returns the setting a line sets, if it sets one (sysctl.d(5): "key = value", comments
// start with # or ;, a leading - ignores errors).
func sysctlKey(line string) (string, string, bool) {
	t := strings.TrimSpace(line)
	if t == "" || t[0] == '#' || t[0] == ';' {
		return "", "", false
	}
	k, v, ok := strings.Cut(t, "=")
	if !ok {
		return "", "", false
	}
	k = strings.ReplaceAll(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(k), "-")), "/", ".")
	return k, strings.TrimSpace(v), true
}

func (l sysctlLines) get(key string) (string, bool) {
	val, found := "", false
	for _, line := range l {
		if k, v, ok := sysctlKey(line); ok && k == key {
			val, found = v, true // the last one wins, as sysctl applies them in order
		}
	}
	return val, found
}

// updateSysctlFile sets key to *value in the file, or removes it when value is nil, writing the
// file atomically; a file left with no setting is removed.
func updateSysctlFile(path, key string, value *string) error {
	return updateSysctlKeys(path, map[string]*string{key: value})
}

// updateSysctlKeys sets each key to its value, or removes it where the value is nil, in one
// atomic write of the file; a file left with no setting is removed.
func updateSysctlKeys(path string, values map[string]*string) error {
	lines, err := readSysctlFile(path)
	if err != nil {
		return err
	}
	var out []string
	replaced, settings := map[string]bool{}, 0
	for _, line := range lines {
		k, _, ok := sysctlKey(line)
		if value, mine := values[k]; ok && mine {
			if value == nil || replaced[k] {
				continue
			}
			line, replaced[k] = k+" = "+*value, true
		}
		if ok {
			settings++
		}
		out = append(out, line)
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		if value := values[key]; value != nil && !replaced[key] {
			out = append(out, key+" = "+*value)
			settings++
		}
	}
	dir := filepath.Dir(path)
	if settings == 0 && onlyHeader(out) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return syncDir(dir)
	}
	content := strings.Join(out, "\n") + "\n"
	if len(lines) == 0 {
		content = sysctlHeader + content
	}
	// An existing file keeps its mode: one the operator made 0640 stays 0640.
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	return writeAtomic(path, []byte(content), mode)
}

// onlyHeader reports whether lines hold nothing but blank lines and the header the advisor
// writes: only such a file is the advisor's to remove. Anyone else's comment keeps it.
func onlyHeader(lines []string) bool {
	header := strings.Split(strings.TrimSuffix(sysctlHeader, "\n"), "\n")
	for _, l := range lines {
		if strings.TrimSpace(l) != "" && !slices.Contains(header, l) {
			return false
		}
	}
	return true
}

// writeAtomic replaces path with data: a reader (or a crash) sees the old file or the new one,
// never a part of either.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w (the directory must exist and be writable)", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	done = true
	return syncDir(dir)
}
