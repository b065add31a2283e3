package apply

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Value is a setting as it is live, with what is needed to restore it exactly. The journal
// records it before a change (old) and after (live).
type Value struct {
	// Value is the running value: as SHOW prints it for PostgreSQL ("64kB", "fdatasync"), the
	// decimal number for a kernel knob.
	Value string `json:"value"`

	// PostgreSQL: pg_settings' source, sourcefile and context, and pending_restart.
	Source         string `json:"source,omitempty"`
	SourceFile     string `json:"sourcefile,omitempty"`
	Context        string `json:"context,omitempty"`
	PendingRestart bool   `json:"pending_restart,omitempty"`
	// AutoConf is what postgresql.auto.conf holds for the setting; nil when it holds nothing.
	// Rollback sets it back with ALTER SYSTEM SET, or with ALTER SYSTEM RESET when nil, so the
	// setting returns to wherever it came from (postgresql.conf, an include, the default).
	AutoConf *string `json:"auto_conf,omitempty"`
	// EnumVals are the values the server accepts for an enum setting.
	EnumVals []string `json:"enumvals,omitempty"`

	// Kernel: writing a *_bytes knob zeroes its *_ratio twin (kernel docs, admin-guide/sysctl/vm),
	// so both are recorded; rollback restores the pair.
	Twin      string `json:"twin,omitempty"`
	TwinValue string `json:"twin_value,omitempty"`
	// Persisted is the value the sysctl.d file held for the knob (nil: none), in SysctlFile.
	Persisted  *string `json:"persisted,omitempty"`
	SysctlFile string  `json:"sysctl_file,omitempty"`
	// Sysctl is what the sysctl.d file held for each of vm.dirty_thresholds' four keys (a key
	// it held no line for is absent); restoring the pair puts back exactly these lines.
	Sysctl map[string]string `json:"sysctl,omitempty"`

	// Server is the PostgreSQL server the value was read from (server.go); nil for a kernel knob,
	// and in journals written before it was recorded.
	Server *Server `json:"server,omitempty"`

	// Route is how the value was read and a change is made: "" for ALTER SYSTEM on one server,
	// RoutePatroni for Patroni's configuration of the cluster (patroni.go).
	Route string `json:"route,omitempty"`
	// DCS is what Patroni's configuration held for the setting (nil: nothing); restoring it
	// puts this back, or removes the parameter.
	DCS *string `json:"dcs,omitempty"`
}

// kindEnumOrBool is an enum on a server that lists its values (pg_settings.enumvals) and a
// boolean on one that does not: wal_compression, a boolean up to PostgreSQL 14 and an enum whose
// on is pglz from 15. It is declared here, with the code that reads it, after the kinds of apply.go.
const kindEnumOrBool = kindKernelBytes + 1

// kindKernelPair is vm.dirty_thresholds: "BACKGROUND/DIRTY" (dirtypair.go).
const kindKernelPair = kindEnumOrBool + 1

// isKernel reports whether a kind is written through /proc/sys (action sysctl).
func isKernel(k kind) bool { return k == kindKernelBytes || k == kindKernelPair }

// sameValue compares two values of a setting the way the server reads them: memory sizes in
// bytes ("16384kB" is "16MB"), times in seconds, numbers as numbers, names case-insensitively.
func sameValue(setting, a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if strings.EqualFold(a, b) {
		return true
	}
	sp, _ := specFor(setting)
	switch sp.kind {
	case kindMemory:
		x, err1 := collector.ParseMemory(a)
		y, err2 := collector.ParseMemory(b)
		return err1 == nil && err2 == nil && x == y
	case kindSeconds:
		x, err1 := collector.ParseSeconds(a)
		y, err2 := collector.ParseSeconds(b)
		return err1 == nil && err2 == nil && math.Abs(x-y) < 1e-9
	case kindBool:
		x, ok1 := parseBool(a)
		y, ok2 := parseBool(b)
		return ok1 && ok2 && x == y
	case kindEnumOrBool:
		// "on" is pglz on 15+, which SHOW prints as pglz; "off" is off everywhere.
		x, y := boolOrPGLZ(a), boolOrPGLZ(b)
		return strings.EqualFold(x, y)
	case kindKernelBytes:
		x, err1 := parseKnob(a)
		y, err2 := parseKnob(b)
		return err1 == nil && err2 == nil && x == y
	case kindKernelPair:
		x, err1 := parseDirtyPair(a)
		y, err2 := parseDirtyPair(b)
		return err1 == nil && err2 == nil && x == y
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}

// parseBool reads PostgreSQL's boolean spellings.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "on", "true", "yes", "1", "t", "y":
		return true, true
	case "off", "false", "no", "0", "f", "n":
		return false, true
	}
	return false, false
}

// boolOrPGLZ spells a wal_compression value the way a 15+ server shows it: a boolean's on is
// pglz and its off is off; method names stay.
func boolOrPGLZ(v string) string {
	if on, ok := parseBool(v); ok {
		if on {
			return "pglz"
		}
		return "off"
	}
	return strings.TrimSpace(v)
}

// parseKnob reads a kernel knob's value. The rules print an unset bytes knob as "0 (ratio 10%)":
// the number is what counts.
func parseKnob(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse kernel value %q: want a decimal number", s)
	}
	return n, nil
}

// numeric reads a value of a setting as the number its bounds are in (bytes, seconds, the
// number), and false for enum and boolean settings.
func numeric(sp spec, v string) (float64, bool, error) {
	switch sp.kind {
	case kindMemory:
		n, err := collector.ParseMemory(v)
		return float64(n), true, err
	case kindSeconds:
		n, err := collector.ParseSeconds(v)
		return n, true, err
	case kindKernelBytes:
		n, err := parseKnob(v)
		return float64(n), true, err
	case kindNumber:
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, true, fmt.Errorf("parse %q: want a number", v)
		}
		return n, true, nil
	}
	return 0, false, nil
}
