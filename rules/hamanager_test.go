package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// haInput is one snapshot of a server with manager m.
func haInput(m *collector.HAManager) Input {
	h := NewHistory(2)
	now := time.Unix(1764583200, 0)
	h.Add(collector.Snapshot{Time: now, Postgres: &collector.Postgres{VersionNum: 150000, HAManager: m}})
	return Input{History: h, Now: now, Config: DefaultThresholds()}
}

func TestHaOverride(t *testing.T) {
	patroni := func(cluster, auto map[string]string) *collector.HAManager {
		return &collector.HAManager{Name: collector.ManagerPatroni, ClusterSettings: cluster, AutoConf: auto}
	}
	for _, tc := range []struct {
		name      string
		m         *collector.HAManager
		notEnough bool
		want      []wantFinding
		mention   string
	}{
		{"no manager", nil, false, nil, ""},
		{"none", &collector.HAManager{Name: collector.ManagerNone}, false, nil, ""},
		{"patroni, no override", patroni(map[string]string{"wal_buffers": "64kB"}, map[string]string{}), false, nil, ""},
		{"patroni, an override the cluster does not set", patroni(map[string]string{"wal_buffers": "64kB"}, map[string]string{"work_mem": "8MB"}), false, nil, ""},
		{"patroni, seed 001's wal_buffers shadowed", patroni(map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}, map[string]string{"wal_buffers": "16MB"}),
			false, []wantFinding{{collector.HostHAConfig, Warning, ""}}, "wal_buffers = 16MB (the cluster's: 64kB)"},
		{"patroni, an override equal to the cluster's still hides its next change", patroni(map[string]string{"wal_sync_method": "fdatasync"}, map[string]string{"wal_sync_method": "fdatasync"}),
			false, []wantFinding{{collector.HostHAConfig, Warning, ""}}, "ALTER SYSTEM RESET wal_sync_method;"},
		{"patroni, its configuration unreadable", &collector.HAManager{Name: collector.ManagerPatroni, ConfigError: "GET /config: 503"}, true, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := haOverride().Eval(haInput(tc.m))
			checkResult(t, res, tc.notEnough, tc.want...)
			if tc.mention != "" && !strings.Contains(res.Findings[0].Summary+res.Findings[0].ExpectedEffect, tc.mention) {
				t.Errorf("the finding does not say %q:\n%s\n%s", tc.mention, res.Findings[0].Summary, res.Findings[0].ExpectedEffect)
			}
		})
	}
}

func TestHAStandbyDiffers(t *testing.T) {
	mb := func(n int64) *int64 { b := n << 20; return &b }
	kb := func(n int64) *int64 { b := n << 10; return &b }
	repmgr := &collector.HAManager{Name: collector.ManagerRepmgr}
	standby := func(m *collector.HAManager, recovery bool, here map[string]collector.Setting, p *collector.PrimarySettings) Input {
		h := NewHistory(2)
		now := time.Unix(1764583200, 0)
		h.Add(collector.Snapshot{Time: now, Postgres: &collector.Postgres{VersionNum: 150000, HAManager: m, InRecovery: recovery, Settings: here, Primary: p}})
		return Input{History: h, Now: now, Config: DefaultThresholds()}
	}
	seed := map[string]collector.Setting{
		"wal_buffers":     {Value: "64kB", Bytes: kb(64), Context: "postmaster"},
		"wal_sync_method": {Value: "open_datasync", Context: "sighup"},
	}
	primary := &collector.PrimarySettings{Address: "10.0.0.1:5432", Settings: map[string]collector.Setting{
		"wal_buffers":     {Value: "16MB", Bytes: mb(16), Context: "postmaster"},
		"wal_sync_method": {Value: "fdatasync", Context: "sighup"},
	}}
	same := &collector.PrimarySettings{Address: "10.0.0.1:5432", Settings: map[string]collector.Setting{
		"wal_buffers": {Value: "65536kB", Bytes: kb(64), Context: "postmaster"},
	}}
	for _, tc := range []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
		mention   string
	}{
		{"a primary", standby(repmgr, false, seed, nil), false, nil, ""},
		{"a standby under Patroni: its DCS, not this rule", standby(&collector.HAManager{Name: collector.ManagerPatroni}, true, seed, primary), false, nil, ""},
		{"a standby of no manager", standby(nil, true, seed, primary), false, nil, ""},
		{"seed 001's changes on the primary only", standby(repmgr, true, seed, primary), false, []wantFinding{{collector.HostHAConfig, Warning, ""}},
			"ALTER SYSTEM SET wal_buffers = '16MB'; ALTER SYSTEM SET wal_sync_method = 'fdatasync'; SELECT pg_reload_conf(); then a restart"},
		{"the same size in other units", standby(repmgr, true, map[string]collector.Setting{"wal_buffers": {Value: "64kB", Bytes: kb(64)}}, same), false, nil, ""},
		{"nothing in the primary's postgresql.auto.conf", standby(repmgr, true, seed, &collector.PrimarySettings{Address: "10.0.0.1:5432"}), false, nil, ""},
		{"the primary unreachable", standby(repmgr, true, seed, &collector.PrimarySettings{Error: "connect: refused"}), true, nil, ""},
		{"primary_conninfo unreadable", standby(repmgr, true, seed, nil), true, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := haStandbyDiffers().Eval(tc.in)
			checkResult(t, res, tc.notEnough, tc.want...)
			if tc.mention != "" && !strings.Contains(res.Findings[0].Summary+res.Findings[0].ExpectedEffect, tc.mention) {
				t.Errorf("the finding does not say %q:\n%s\n%s", tc.mention, res.Findings[0].Summary, res.Findings[0].ExpectedEffect)
			}
		})
	}
}
