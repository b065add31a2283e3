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
