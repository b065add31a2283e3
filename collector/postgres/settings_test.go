package postgres

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestSettingsFromRows(t *testing.T) {
	row := func(name, setting, unit, show string) settingRow {
		r := settingRow{Name: name, Setting: setting, Show: show, Source: "default", Context: "sighup"}
		if unit != "" {
			r.Unit = &unit
		}
		return r
	}
	tests := []struct {
		name        string
		rows        []settingRow
		setting     string
		wantBytes   *int64
		wantSeconds *float64
		wantValue   string
	}{
		{name: "shared_buffers in 8kB pages", rows: []settingRow{row("shared_buffers", "16384", "8kB", "128MB")},
			setting: "shared_buffers", wantBytes: ptr[int64](128 << 20), wantValue: "128MB"},
		{name: "max_wal_size in MB", rows: []settingRow{row("max_wal_size", "1024", "MB", "1GB")},
			setting: "max_wal_size", wantBytes: ptr[int64](1 << 30), wantValue: "1GB"},
		{name: "wal_writer_flush_after", rows: []settingRow{row("wal_writer_flush_after", "128", "8kB", "1MB")},
			setting: "wal_writer_flush_after", wantBytes: ptr[int64](1 << 20)},
		{name: "flush_after 0 disables", rows: []settingRow{row("checkpoint_flush_after", "0", "8kB", "0")},
			setting: "checkpoint_flush_after", wantBytes: ptr[int64](0)},
		{name: "checkpoint_timeout in s", rows: []settingRow{row("checkpoint_timeout", "300", "s", "5min")},
			setting: "checkpoint_timeout", wantSeconds: ptr(300.0), wantValue: "5min"},
		{name: "wal_writer_delay in ms", rows: []settingRow{row("wal_writer_delay", "200", "ms", "200ms")},
			setting: "wal_writer_delay", wantSeconds: ptr(0.2)},
		{name: "a time in min", rows: []settingRow{row("some_time", "2", "min", "2min")},
			setting: "some_time", wantSeconds: ptr(120.0)},
		// commit_delay has no unit in pg_settings but is documented in microseconds.
		{name: "commit_delay in microseconds", rows: []settingRow{row("commit_delay", "2000", "", "2000")},
			setting: "commit_delay", wantSeconds: ptr(0.002), wantValue: "2000"},
		{name: "a unitless number", rows: []settingRow{row("commit_siblings", "5", "", "5")},
			setting: "commit_siblings", wantValue: "5"},
		{name: "a real", rows: []settingRow{row("checkpoint_completion_target", "0.9", "", "0.9")},
			setting: "checkpoint_completion_target", wantValue: "0.9"},
		{name: "an enum", rows: []settingRow{row("wal_sync_method", "open_datasync", "", "open_datasync")},
			setting: "wal_sync_method", wantValue: "open_datasync"},
		{name: "wal_buffers resolved by the server", rows: []settingRow{row("wal_buffers", "512", "8kB", "4MB")},
			setting: "wal_buffers", wantBytes: ptr[int64](4 << 20), wantValue: "4MB"},
		{name: "wal_buffers set", rows: []settingRow{row("wal_buffers", "8", "8kB", "64kB")},
			setting: "wal_buffers", wantBytes: ptr[int64](64 << 10), wantValue: "64kB"},
		// -1: SHOW prints the effective size once the server has computed it.
		{name: "wal_buffers -1 from SHOW", rows: []settingRow{row("wal_buffers", "-1", "8kB", "16MB"), row("shared_buffers", "131072", "8kB", "1GB")},
			setting: "wal_buffers", wantBytes: ptr[int64](16 << 20), wantValue: "16MB"},
		// Else 1/32 of shared_buffers, within [64kB, 16MB].
		{name: "wal_buffers -1 from shared_buffers", rows: []settingRow{row("wal_buffers", "-1", "8kB", "-1"), row("shared_buffers", "16384", "8kB", "128MB")},
			setting: "wal_buffers", wantBytes: ptr[int64](4 << 20), wantValue: "-1"},
		{name: "wal_buffers -1 small shared_buffers", rows: []settingRow{row("wal_buffers", "-1", "8kB", "-1"), row("shared_buffers", "16", "8kB", "128kB")},
			setting: "wal_buffers", wantBytes: ptr[int64](64 << 10)},
		{name: "wal_buffers -1 large shared_buffers", rows: []settingRow{row("wal_buffers", "-1", "8kB", "-1"), row("shared_buffers", "2097152", "8kB", "16GB")},
			setting: "wal_buffers", wantBytes: ptr[int64](16 << 20)},
		{name: "wal_buffers -1 unknown", rows: []settingRow{row("wal_buffers", "-1", "8kB", "-1")},
			setting: "wal_buffers"},
		// Other negative values are sentinels, not sizes.
		{name: "a negative sentinel", rows: []settingRow{row("some_size", "-1", "kB", "-1")},
			setting: "some_size", wantValue: "-1"},
		// Rows are untrusted: a size past int64 or a number that is no number is left unknown
		// rather than wrapped to a negative size or an infinite time.
		{name: "a size past int64", rows: []settingRow{row("max_wal_size", "9223372036854775807", "MB", "x")},
			setting: "max_wal_size"},
		{name: "the largest size below 2^63", rows: []settingRow{row("some_size", "1125899906842623", "8kB", "x")},
			setting: "some_size", wantBytes: ptr[int64](1125899906842623 * 8192)},
		{name: "exactly 2^63 bytes", rows: []settingRow{row("some_size", "1125899906842624", "8kB", "x")},
			setting: "some_size"},
		{name: "an integer above 2^53 stays exact", rows: []settingRow{row("some_size", "9007199254740993", "B", "x")},
			setting: "some_size", wantBytes: ptr[int64](9007199254740993)},
		{name: "NaN", rows: []settingRow{row("some_size", "NaN", "kB", "x")}, setting: "some_size"},
		{name: "Inf bytes", rows: []settingRow{row("some_size", "Inf", "kB", "x")}, setting: "some_size"},
		{name: "Inf seconds", rows: []settingRow{row("some_time", "+Inf", "s", "x")}, setting: "some_time"},
		{name: "days overflowing to Inf", rows: []settingRow{row("some_time", "1e306", "d", "x")}, setting: "some_time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := settingsFromRows(tt.rows)[tt.setting]
			if !ok {
				t.Fatalf("setting %s missing", tt.setting)
			}
			if !reflect.DeepEqual(got.Bytes, tt.wantBytes) {
				t.Errorf("Bytes = %v, want %v", deref(got.Bytes), deref(tt.wantBytes))
			}
			if !reflect.DeepEqual(got.Seconds, tt.wantSeconds) {
				t.Errorf("Seconds = %v, want %v", deref(got.Seconds), deref(tt.wantSeconds))
			}
			if tt.wantValue != "" && got.Value != tt.wantValue {
				t.Errorf("Value = %q, want %q", got.Value, tt.wantValue)
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSettingFields(t *testing.T) {
	unit := "8kB"
	got := settingsFromRows([]settingRow{{
		Name: "wal_buffers", Setting: "8", Unit: &unit, Source: "configuration file", Context: "postmaster",
		PendingRestart: true, Show: "64kB",
	}, {
		Name: "wal_sync_method", Setting: "fdatasync", Source: "default", Context: "sighup", Show: "fdatasync",
		EnumVals: []string{"fsync", "fdatasync", "open_sync", "open_datasync"},
	}})
	wantWB := collector.Setting{Value: "64kB", Bytes: ptr[int64](64 << 10), Raw: "8", Unit: "8kB", Source: "configuration file",
		Context: "postmaster", PendingRestart: true}
	if !reflect.DeepEqual(got[collector.WALBuffers], wantWB) {
		t.Errorf("wal_buffers = %+v, want %+v", got[collector.WALBuffers], wantWB)
	}
	if ev := got[collector.WALSyncMethod].EnumVals; len(ev) != 4 || ev[3] != "open_datasync" {
		t.Errorf("wal_sync_method enumvals = %v", ev)
	}
}

func TestSettingsQuery(t *testing.T) {
	for _, tt := range []struct {
		versionNum int
		want       string
	}{{90400, "false,"}, {150000, "pending_restart,"}} {
		if q := settingsQuery(tt.versionNum); !strings.Contains(q, tt.want) || !strings.Contains(q, "current_setting(name)") {
			t.Errorf("settingsQuery(%d) = %q, want %q and current_setting(name)", tt.versionNum, q, tt.want)
		}
	}
}
