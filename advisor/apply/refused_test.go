package apply

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// flushAfterFinding is a recommendation the manager may apply: bgwriter_flush_after from the
// cluster's 0 back to PostgreSQL's default (a reload, no durability change).
func flushAfterFinding() rules.Finding {
	return rules.Finding{Rule: "injected-flush-after", Severity: rules.Warning, Setting: "bgwriter_flush_after",
		Current: "0", Recommended: "512kB", Action: rules.ActionReload, Summary: "injected by the test"}
}

// stepManager runs a manager in apply mode for bgwriter_flush_after over a fresh snapshot of
// c at each step, for steps seconds, with no cool-down and four changes a day: on a server
// that refuses every change, each step could spend one.
func stepManager(t *testing.T, c *lab.Cluster, steps int) (*Manager, *Journal) {
	t.Helper()
	ctx := context.Background()
	journal := filepath.Join(t.TempDir(), "apply.journal")
	src := injected{src: sampling{ctx: ctx, s: newSampler(t, c)}, f: flushAfterFinding()}
	m, err := New(Config{Mode: ModeOn, Settings: []string{"bgwriter_flush_after"}, Journal: journal,
		VerifyWindow: time.Second, Cooldown: 0, MaxPerDay: DefaultMaxPerDay, RejectFor: time.Hour},
		src, []Actuator{newPostgres(t, c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for range steps {
		time.Sleep(time.Second)
		if err := m.Step(ctx); err != nil {
			t.Logf("step: %v", err)
		}
	}
	return m, NewJournal(journal)
}

// intents counts the changes the journal records as started.
func intents(t *testing.T, j *Journal) int {
	t.Helper()
	recs, _, err := j.Read()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Kind == KindIntent {
			n++
		}
	}
	return n
}

// TestServerRefusesAlterSystem: a server that refuses ALTER SYSTEM for every setting
// (allow_alter_system = off on PostgreSQL 17 and 18, an immutable postgresql.auto.conf) does
// not cost the daemon its daily changes. allow_alter_system is read before any try: no change
// is started. The immutable file is only seen by a try: one failed change, then the settings
// stay advice for refusedBackoff. Either way the status says why and what to do, and the
// setting keeps its value. Before this, each step started a change that failed, four a day.
func TestServerRefusesAlterSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL 15, 17 and 18 clusters")
	}
	for _, tc := range []struct {
		name      string
		major     int // 0: the default server
		settings  map[string]string
		immutable bool
		want      string
		intents   int
	}{
		{"allow_alter_system off, PostgreSQL 17", 17, map[string]string{"allow_alter_system": "off"}, false, "allow_alter_system is off", 0},
		{"allow_alter_system off, PostgreSQL 18", 18, map[string]string{"allow_alter_system": "off"}, false, "allow_alter_system is off", 0},
		{"immutable postgresql.auto.conf", 0, nil, true, "cannot write its postgresql.auto.conf", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := lab.ClusterOptions{Settings: map[string]string{"bgwriter_flush_after": "0"}}
			if tc.major > 0 {
				opts.BinDir = lab.RequireVersion(t, tc.major)
			}
			for k, v := range tc.settings {
				opts.Settings[k] = v
			}
			c := lab.NewTestCluster(t, opts)
			if tc.immutable {
				auto := filepath.Join(c.DataDir(), "postgresql.auto.conf")
				if out, err := exec.Command("chattr", "+i", auto).CombinedOutput(); err != nil {
					t.Skipf("chattr +i: %v: %s (the file system has no immutable flag)", err, out)
				}
				// Registered after the cluster: runs first, so that the cluster can be removed.
				t.Cleanup(func() { exec.Command("chattr", "-i", auto).Run() })
			}
			m, j := stepManager(t, c, 6)
			if n := intents(t, j); n != tc.intents {
				t.Errorf("%d changes started, want %d", n, tc.intents)
			}
			st := m.Status()
			if why := st.AdvisorOnly["bgwriter_flush_after"]; !strings.Contains(why, tc.want) || !strings.Contains(why, "the server refuses ALTER SYSTEM") {
				t.Errorf("status advisor_only = %q, want the server's refusal and %q", why, tc.want)
			}
			if st.ChangesLast24h != tc.intents {
				t.Errorf("changes in the last 24 hours = %d, want %d", st.ChangesLast24h, tc.intents)
			}
			if v, _, _ := lab.ReadSetting(t, c, "bgwriter_flush_after"); v != "0" {
				t.Errorf("bgwriter_flush_after = %s, want the cluster's 0", v)
			}
		})
	}
}

// TestManagerRefusesStandby: the daemon's apply path on a real standby (pg_basebackup -R)
// starts no change, spends nothing of the daily cap, leaves postgresql.auto.conf alone and
// says why in its status. The apply command's refusal is TestApplyRefusesStandby (cmd).
func TestManagerRefusesStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	t.Parallel()
	primary := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"bgwriter_flush_after": "0"}})
	standby := lab.NewTestStandby(t, primary)
	m, j := stepManager(t, standby, 4)
	if n := intents(t, j); n != 0 {
		t.Errorf("%d changes started on a standby, want none", n)
	}
	st := m.Status()
	if !strings.Contains(st.Waiting, "standby (in recovery)") || st.ChangesLast24h != 0 {
		t.Errorf("status waiting %q, %d changes in 24 h; want the standby named and none", st.Waiting, st.ChangesLast24h)
	}
	if v, _, _ := lab.ReadSetting(t, standby, "bgwriter_flush_after"); v != "0" {
		t.Errorf("the standby's bgwriter_flush_after = %s, want 0", v)
	}
}
