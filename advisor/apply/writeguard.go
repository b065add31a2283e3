package apply

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// ErrRefused marks a write the guard refused: nothing was written for it.
var ErrRefused = errors.New("refused by the apply guard")

// refusal is the guard's answer: which setting, why, and (for the journal) which record.
type refusal struct {
	setting string
	reason  string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%s: %s (nothing was written)", r.setting, r.reason)
}

func (r *refusal) Unwrap() error { return ErrRefused }

func refuse(setting, format string, args ...any) error {
	return &refusal{setting: setting, reason: fmt.Sprintf(format, args...)}
}

// actuatorFor is the one place an actuator is looked up: the first that owns setting, wrapped
// so that its writes pass checkWrite. Every path that writes (apply, the daemon's changes and
// its rollbacks after verification, crash recovery, `rollback`) gets its actuator here.
func actuatorFor(acts []Actuator, setting string) Actuator {
	for _, a := range acts {
		if a != nil && a.Owns(setting) {
			return guarded{a}
		}
	}
	return nil
}

// guarded is an actuator whose Set and Restore first ask checkWrite.
type guarded struct{ Actuator }

func (g guarded) Set(ctx context.Context, setting, value string) (Value, error) {
	if err := checkWrite(ctx, g.Actuator, setting, value, nil); err != nil {
		return Value{}, err
	}
	return g.Actuator.Set(ctx, setting, value)
}

func (g guarded) Restore(ctx context.Context, setting string, old Value) (Value, error) {
	if err := checkWrite(ctx, g.Actuator, setting, old.Value, &old); err != nil {
		return Value{}, err
	}
	return g.Actuator.Restore(ctx, setting, old)
}

// SegmentBytes passes wal_segment_size through for the guard of max_wal_size.
func (g guarded) SegmentBytes(ctx context.Context) (int64, error) {
	if ss, ok := g.Actuator.(segmentSizer); ok {
		return ss.SegmentBytes(ctx)
	}
	return 0, nil
}

// serverBounder is an actuator that knows the bounds the server itself reports for a setting
// (pg_settings.min_val and max_val), in the units numeric reads a value in.
type serverBounder interface {
	ServerBounds(ctx context.Context, setting string) (lo, hi float64, ok bool, err error)
}

// sysctlTarget is an actuator that persists in a sysctl.d file: the configured one.
type sysctlTarget interface {
	SysctlFile() string
}

// refuseSetting is the part of the guard that looks at the name alone; reconcile and rollback
// ask it before they even read a record's setting.
func refuseSetting(setting string) error {
	if slices.Contains(neverApplied(), setting) {
		return refuse(setting, "never changed by the apply mode on any path, whatever a journal says: it trades durability for speed (or back)")
	}
	if _, ok := specFor(setting); !ok {
		return refuse(setting, "not a setting the apply mode knows how to bound and verify")
	}
	return nil
}

// checkWrite is the guard every write passes: value is what is to be written (the new value,
// or the recorded old one), old the whole record of a restore (nil for a change). It returns
// a refusal (errors.Is ErrRefused) or another error when the facts could not be read.
func checkWrite(ctx context.Context, a Actuator, setting, value string, old *Value) error {
	if err := refuseSetting(setting); err != nil {
		return err
	}
	sp, _ := specFor(setting)
	switch sp.kind {
	case kindKernelBytes:
		if old != nil && len(old.Sysctl) > 0 {
			return refuse(setting, "the record carries the lines of %s (sysctl), which a record of %s never holds", KnobDirtyThresholds, setting)
		}
		return checkKernelWrite(a, sp, value, old)
	case kindKernelPair:
		return checkPairWrite(a, value, old)
	}
	if old != nil && (old.SysctlFile != "" || old.Twin != "" || old.TwinValue != "" || old.Persisted != nil || len(old.Sysctl) > 0) {
		// A PostgreSQL setting's record has no kernel fields: one that has them is not ours.
		return refuse(setting, "the record carries kernel fields (sysctl_file, twin, persisted, sysctl) for a PostgreSQL setting")
	}
	values := []string{value}
	if old != nil && old.AutoConf != nil {
		values = append(values, *old.AutoConf)
	}
	if old != nil && old.DCS != nil {
		values = append(values, *old.DCS)
	}
	if old != nil && old.Route != "" && old.Route != RoutePatroni {
		return refuse(setting, "the record names the route %q, which the apply mode does not have", old.Route)
	}
	var live *Value
	if sp.kind == kindEnum || sp.kind == kindBool || sp.kind == kindEnumOrBool {
		v, err := a.Read(ctx, setting)
		if err != nil {
			return fmt.Errorf("guard %s: %w", setting, err)
		}
		live = &v
	}
	lo, hi, haveServer := 0.0, 0.0, false
	if sb, ok := a.(serverBounder); ok {
		var err error
		if lo, hi, haveServer, err = sb.ServerBounds(ctx, setting); err != nil {
			return fmt.Errorf("guard %s: %w", setting, err)
		}
	}
	for i, v := range values {
		v = strings.TrimSpace(v)
		if strings.ContainsAny(v, "\\\x00\n") {
			return refuse(setting, "value %q holds a backslash, NUL or newline", v)
		}
		if why := checkValue(sp, v, i == 0, live); why != "" {
			return refuse(setting, "%s", why)
		}
		if n, isNum, err := numeric(sp, v); isNum && err == nil && haveServer && (n < lo || n > hi) {
			return refuse(setting, "%s=%s is outside the bounds the server reports (pg_settings min_val..max_val)", setting, v)
		}
	}
	return nil
}

// checkValue checks one value of a PostgreSQL setting: the apply mode's documented bounds (the
// running value; postgresql.auto.conf may hold a server-side spelling such as wal_buffers=-1,
// which the server's own bounds check), a syncing wal_sync_method, an accepted enum value.
func checkValue(sp spec, v string, running bool, live *Value) string {
	if v == "" {
		return "the value is empty"
	}
	switch sp.kind {
	case kindBool:
		if _, ok := parseBool(v); !ok {
			return fmt.Sprintf("%s=%q is not a boolean", sp.name, v)
		}
	case kindEnumOrBool:
		if live != nil && len(live.EnumVals) > 0 {
			if !slices.Contains(live.EnumVals, v) {
				return fmt.Sprintf("the server does not accept %s=%s (it accepts %s)", sp.name, v, strings.Join(live.EnumVals, ", "))
			}
		} else if _, ok := parseBool(v); !ok {
			return fmt.Sprintf("%s=%q: the server lists no values for it (PostgreSQL 14's boolean), and this is not a boolean", sp.name, v)
		}
	case kindEnum:
		if sp.name == collector.WALSyncMethod && !slices.Contains(probes.DurableMethods(), v) {
			return fmt.Sprintf("wal_sync_method=%s is not one of the syncing methods (%s)", v, strings.Join(probes.DurableMethods(), ", "))
		}
		if live == nil || len(live.EnumVals) == 0 {
			return fmt.Sprintf("the values the server accepts for %s are unknown (pg_settings.enumvals)", sp.name)
		}
		if !slices.Contains(live.EnumVals, v) {
			return fmt.Sprintf("the server does not accept %s=%s (it accepts %s)", sp.name, v, strings.Join(live.EnumVals, ", "))
		}
	default:
		n, _, err := numeric(sp, v)
		if err != nil {
			return fmt.Sprintf("%s=%q: %v", sp.name, v, err)
		}
		if running && (n < sp.min || (sp.max > 0 && n > sp.max)) {
			return fmt.Sprintf("%s=%s is outside the bounds the apply mode accepts (%s)", sp.name, v, sp.bounds)
		}
	}
	return ""
}

// sysctlName is the project's own sysctl.d file name: NN-pgwal-advisor[...].conf.
var sysctlName = regexp.MustCompile(`^[0-9]{2}-pgwal-advisor[A-Za-z0-9_.-]*\.conf$`)

// checkKernelWrite checks a kernel write: the bytes value 0 (the ratio in force) or within the
// spec's bounds, the ratio twin 0..100, not both zero, and a recorded sysctl.d file that is a
// regular file directly in the configured sysctl.d directory, named as this project names it.
func checkKernelWrite(a Actuator, sp spec, value string, old *Value) error {
	n, err := parseKnob(value)
	if err != nil {
		return refuse(sp.name, "%v", err)
	}
	if old == nil && n <= 0 {
		return refuse(sp.name, "%s=%d: only positive byte counts are written", sp.name, n)
	}
	if n != 0 && (float64(n) < sp.min || float64(n) > sp.max) {
		return refuse(sp.name, "%s=%d is outside the bounds the apply mode accepts (%s)", sp.name, n, sp.bounds)
	}
	if old == nil {
		return nil
	}
	if old.Twin != "" && old.Twin != twinOf(sp.name) {
		return refuse(sp.name, "the journal names its twin %s, want %s", old.Twin, twinOf(sp.name))
	}
	ratio, err := parseKnob(old.TwinValue)
	if err != nil || ratio < 0 || ratio > 100 {
		return refuse(sp.name, "the recorded %s=%q is not a percentage 0..100", twinOf(sp.name), old.TwinValue)
	}
	if n == 0 && ratio == 0 {
		return refuse(sp.name, "the record would set both %s and %s to 0", sp.name, twinOf(sp.name))
	}
	if old.Persisted != nil {
		p, err := parseKnob(*old.Persisted)
		if err != nil || p < 0 || (p != 0 && (float64(p) < sp.min || float64(p) > sp.max)) {
			return refuse(sp.name, "the recorded sysctl.d value %q is not a byte count within %s", *old.Persisted, sp.bounds)
		}
	}
	if old.SysctlFile == "" {
		return nil
	}
	st, ok := a.(sysctlTarget)
	if !ok {
		return refuse(sp.name, "the actuator has no configured sysctl.d file to check the recorded one %q against", old.SysctlFile)
	}
	return checkSysctlPath(sp.name, old.SysctlFile, st.SysctlFile())
}

// checkPairWrite checks a write of vm.dirty_thresholds: each side within its bounds; a new
// value both ratios or both bytes with the background below the dirty one; a record with no
// other kind's fields, sysctl.d lines only of the pair's four keys and within bounds, and a
// sysctl.d file the advisor's own.
func checkPairWrite(a Actuator, value string, old *Value) error {
	const name = KnobDirtyThresholds
	if strings.ContainsAny(value, "\\\x00\n") {
		return refuse(name, "value %q holds a backslash, NUL or newline", value)
	}
	p, err := parseDirtyPair(value)
	if err != nil {
		return refuse(name, "%v", err)
	}
	if old == nil {
		if err := checkNewPair(p); err != nil {
			return refuse(name, "%v", err)
		}
		return nil
	}
	if old.Twin != "" || old.TwinValue != "" || old.Persisted != nil || old.AutoConf != nil {
		return refuse(name, "the record carries fields of another kind of setting (twin, persisted, auto_conf)")
	}
	for key, v := range old.Sysctl {
		if strings.ContainsAny(key+v, "\\\x00\n") {
			return refuse(name, "the recorded sysctl.d line %q = %q holds a backslash, NUL or newline", key, v)
		}
		if err := checkPairSysctlLine(key, v); err != nil {
			return refuse(name, "%v", err)
		}
	}
	if old.SysctlFile == "" {
		return nil
	}
	st, ok := a.(sysctlTarget)
	if !ok {
		return refuse(name, "the actuator has no configured sysctl.d file to check the recorded one %q against", old.SysctlFile)
	}
	return checkSysctlPath(name, old.SysctlFile, st.SysctlFile())
}

// checkSysctlPath refuses a recorded sysctl.d file unless it lies directly in the directory of
// the configured one, has the project's name pattern, and is (when it exists) a regular file:
// opened with O_NOFOLLOW so that a symbolic link is refused, not followed.
func checkSysctlPath(setting, path, configured string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return refuse(setting, "the recorded sysctl_file %q is not a clean absolute path", path)
	}
	if filepath.Dir(path) != filepath.Dir(filepath.Clean(configured)) {
		return refuse(setting, "the recorded sysctl_file %q is not in the sysctl.d directory %s", path, filepath.Dir(configured))
	}
	if base := filepath.Base(path); base != filepath.Base(configured) && !sysctlName.MatchString(base) {
		return refuse(setting, "the recorded sysctl_file %q is not named like the advisor's own (NN-pgwal-advisor*.conf)", path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return refuse(setting, "the recorded sysctl_file %q cannot be opened without following links: %v", path, err)
	}
	defer unix.Close(fd)
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return refuse(setting, "stat the recorded sysctl_file %q: %v", path, err)
	}
	if sb.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse(setting, "the recorded sysctl_file %q is not a regular file", path)
	}
	return nil
}
