package apply

import (
	"context"
	"errors"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// FuzzJournal: the parser never panics, returns only records with a kind, and a tail of NUL
// bytes after a whole journal (a crash mid-write) never turns it into an error.
func FuzzJournal(f *testing.F) {
	f.Add([]byte(`{"id":1,"time":"2026-12-01T00:00:00Z","kind":"intent","setting":"fsync","new":"on","old":{"value":"off"}}` + "\n"))
	f.Add([]byte(`{"id":1,"kind":"outcome","outcome":"applied"}` + "\n" + `{"id":2,"ki`))
	f.Add([]byte(`{"id":1,"kind":"intent","setting":"wal_buffers","new":"32MB","predicted":{"name":"wal_write_wait_seconds_per_mb","current":0.8,"value":0.4,"unit":"seconds_per_mb","basis":"b"}}` + "\n" +
		`{"id":1,"kind":"outcome","outcome":"verified","prediction_check":{"name":"x","current":0.8,"predicted":0.4,"measured":0.5,"error":0.25}}` + "\n"))
	f.Add([]byte("\x00\x00\x00"))
	f.Add([]byte("not json\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _, err := parseJournal("j", b)
		for _, r := range recs {
			if r.Kind == "" {
				t.Fatalf("a record without a kind: %+v", r)
			}
		}
		if err != nil || (len(b) > 0 && b[len(b)-1] != '\n') {
			return
		}
		more, torn, err := parseJournal("j", append(slices.Clone(b), make([]byte, 64)...))
		if err != nil || len(more) != len(recs) || torn == "" {
			t.Fatalf("a NUL tail after a whole journal: %d records (want %d), torn %q, %v", len(more), len(recs), torn, err)
		}
	})
}

// FuzzSysctlKey: a "key = value" line reads back as written, a comment never sets a key, and
// no line yields a key holding '=' or surrounding space.
func FuzzSysctlKey(f *testing.F) {
	f.Add("vm.dirty_bytes = 67108864")
	f.Add("# vm.dirty_bytes = 1")
	f.Add("-vm/dirty_ratio=20")
	f.Add(";x")
	f.Fuzz(func(t *testing.T, line string) {
		if k, _, ok := sysctlKey(line); ok && (strings.Contains(k, "=") || k != strings.TrimSpace(k)) {
			t.Fatalf("sysctlKey(%q) key %q", line, k)
		}
		if k, _, ok := sysctlKey("# " + line); ok {
			t.Fatalf("a comment set %q", k)
		}
		v := strings.TrimSpace(strings.ReplaceAll(line, "\n", ""))
		if k, got, ok := sysctlKey(KnobDirtyBytes + " = " + v); !ok || k != KnobDirtyBytes || got != v {
			t.Fatalf("wrote %s = %q, read %q %q %v", KnobDirtyBytes, v, k, got, ok)
		}
	})
}

// FuzzCheckWrite: whatever a journal holds, the guard never lets through a never-changed or
// unknown setting, a value outside the spec's bounds, a non-syncing wal_sync_method, or a
// sysctl_file that is not beside the configured one.
func FuzzCheckWrite(f *testing.F) {
	f.Add("fsync", "off", "off", "", "10")
	f.Add("wal_buffers", "2TB", "-1", "", "")
	f.Add("wal_sync_method", "open_sync", "", "", "")
	f.Add(KnobDirtyBytes, "0", "", "/etc/passwd", "20")
	f.Add(KnobDirtyBytes, "67108864", "", "/sysctl.d/90-pgwal-advisor.conf", "0")
	f.Add(KnobDirtyThresholds, "10%/20%", "", "/sysctl.d/90-pgwal-advisor.conf", "")
	f.Add(KnobDirtyThresholds, "0%/0%", "", "/etc/passwd", "")
	f.Add(KnobDirtyThresholds, "67108864/20%", "", "", "20")
	dir := f.TempDir()
	configured := filepath.Join(dir, "90-pgwal-advisor.conf")
	f.Fuzz(func(t *testing.T, setting, value, autoConf, sysctlFile, twin string) {
		pg := newFakePG(map[string]string{setting: value}, nil)
		k := NewKernel(dir, configured, nil)
		if strings.HasPrefix(sysctlFile, "/sysctl.d/") {
			sysctlFile = filepath.Join(dir, strings.TrimPrefix(sysctlFile, "/sysctl.d/"))
		}
		old := &Value{Value: value, SysctlFile: sysctlFile, TwinValue: twin}
		if autoConf != "" {
			old.AutoConf = &autoConf
		}
		var a Actuator = pg
		if k.Owns(setting) {
			a = k
		}
		for _, o := range []*Value{nil, old} {
			err := checkWrite(context.Background(), a, setting, value, o)
			if err != nil {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("checkWrite(%q, %q) = %v, not a refusal", setting, value, err)
				}
				continue
			}
			sp, ok := specFor(setting)
			if !ok || slices.Contains(neverApplied(), setting) {
				t.Fatalf("let through %s", setting)
			}
			if n, isNum, nerr := numeric(sp, value); isNum && (nerr != nil || (n != 0 || o == nil) && (n < sp.min || n > sp.max)) {
				t.Fatalf("let through %s=%q (%v, bounds %s)", setting, value, nerr, sp.bounds)
			}
			if setting == KnobDirtyThresholds {
				p, perr := parseDirtyPair(value)
				if perr != nil || (o == nil && checkNewPair(p) != nil) || (o != nil && (o.TwinValue != "" || o.AutoConf != nil)) {
					t.Fatalf("let through %s=%q (old %+v): %v", setting, value, o, perr)
				}
			}
			if setting == collector.WALSyncMethod && !slices.Contains(probes.DurableMethods(), strings.TrimSpace(value)) {
				t.Fatalf("let through wal_sync_method=%q", value)
			}
			if o != nil && o.SysctlFile != "" && filepath.Dir(o.SysctlFile) != dir {
				t.Fatalf("let through sysctl_file %q", o.SysctlFile)
			}
		}
	})
}

// FuzzParseDirtyPair: whatever a journal or a finding holds, a pair that parses has both sides
// within their bounds and prints as it parses again.
func FuzzParseDirtyPair(f *testing.F) {
	for _, s := range []string{"10%/20%", "67108864/536870912", "0/0", "0%/20%", "10%/101%", "-1%/5%", "9223372036854775807/1%", "10%/20%/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseDirtyPair(s)
		if err != nil {
			return
		}
		for _, side := range []struct {
			d   dirtySide
			min int64
		}{{p.bg, dirtyBgBytesMin}, {p.dirty, dirtyBytesMin}} {
			if side.d.ratio && (side.d.n < 1 || side.d.n > 100) || !side.d.ratio && (side.d.n < side.min || side.d.n > dirtyBytesMax) {
				t.Fatalf("%q parsed to %s, a side out of bounds", s, p)
			}
		}
		if q, err := parseDirtyPair(p.String()); err != nil || q != p {
			t.Fatalf("%q -> %s -> %v, %v", s, p, q, err)
		}
	})
}
