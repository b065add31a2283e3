package apply

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestPatroniRouteRestart (issue 31): on a real Patroni member with seed 001's wal_buffers in
// the DCS, the Patroni route sets wal_buffers for the cluster (pending restart, nothing in
// postgresql.auto.conf); the manager asks Patroni to restart only inside the restart window -
// outside it the member keeps waiting - and then the member runs 16MB; restoring puts the DCS's
// 64kB back the same way.
func TestPatroniRouteRestart(t *testing.T) {
	m := lab.NewTestPatroni(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"})
	ctx := context.Background()
	pg := NewPostgres(m.DSN(), PostgresOptions{Logger: zaptest.NewLogger(t)})
	defer pg.Close(ctx)
	route := NewPatroni(PatroniOptions{URL: m.RESTURL, Username: "patroni", Password: "restpass", Logger: zaptest.NewLogger(t)}, pg)
	auto := filepath.Join(m.DataDir, "postgresql.auto.conf")
	before, _ := os.ReadFile(auto)

	old, err := route.Read(ctx, "wal_buffers")
	if err != nil {
		t.Fatal(err)
	}
	if old.Route != RoutePatroni || old.DCS == nil || *old.DCS != "64kB" || old.Value != "64kB" {
		t.Fatalf("Read = %+v, want 64kB running and in the DCS, route patroni", old)
	}
	live, err := actuatorFor([]Actuator{route}, "wal_buffers").Set(ctx, "wal_buffers", "16MB")
	if err != nil {
		t.Fatal(err)
	}
	if !live.PendingRestart || live.Value != "64kB" {
		t.Fatalf("after Set: %+v, want 64kB running and a pending restart", live)
	}

	mgr := &Manager{cfg: Config{Now: time.Now}, logger: zaptest.NewLogger(t), restartAfter: map[int]time.Time{}}
	c := &change{Intent: Record{ID: 1, Setting: "wal_buffers", New: "16MB", Old: &old}}
	closed, _ := ParseRestartWindow(time.Now().Add(2*time.Hour).Format("Mon") + " " + time.Now().Add(2*time.Hour).Format("15:04") + "-" + time.Now().Add(3*time.Hour).Format("15:04"))
	mgr.cfg.RestartWindow = closed
	mgr.restartInWindow(ctx, c, route)
	if v, _ := route.Read(ctx, "wal_buffers"); v.Value != "64kB" || !v.PendingRestart {
		t.Fatalf("outside the window: %+v, want still 64kB pending restart", v)
	}
	mgr.cfg.RestartWindow, _ = ParseRestartWindow("* 00:00-23:59")
	if time.Now().Format("15:04") == "23:59" {
		time.Sleep(time.Minute)
	}
	mgr.restartInWindow(ctx, c, route)
	if v, err := route.Read(ctx, "wal_buffers"); err != nil || v.Value != "16MB" || v.PendingRestart {
		t.Fatalf("inside the window: %+v (%v), want 16MB running, nothing pending", v, err)
	}

	if _, err := actuatorFor([]Actuator{route}, "wal_buffers").Restore(ctx, "wal_buffers", old); err != nil {
		t.Fatal(err)
	}
	if err := route.RestartPending(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := route.Read(ctx, "wal_buffers"); err != nil || v.Value != "64kB" || v.DCS == nil || *v.DCS != "64kB" {
		t.Errorf("after Restore and the restart: %+v (%v), want 64kB running and in the DCS", v, err)
	}
	if after, _ := os.ReadFile(auto); string(after) != string(before) {
		t.Errorf("postgresql.auto.conf was written:\n%s", after)
	}
}
