package advisor

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestFailureLog(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	snap := func(at time.Duration, status, reason string) collector.Snapshot {
		p := collector.Part{Name: collector.PartPostgres, OK: status == collector.TargetOK, Status: status}
		if !p.OK {
			p.Error = reason
		}
		return collector.Snapshot{Time: t0.Add(at), Parts: []collector.Part{p}}
	}
	core, logs := observer.New(zapcore.InfoLevel)
	var f failureLog
	for _, s := range []collector.Snapshot{
		snap(0, collector.TargetUnreachable, "connection refused"),                     // first: logged
		snap(time.Second, collector.TargetUnreachable, "connection refused"),           // same: not
		snap(2*time.Second, collector.TargetUnauthenticated, "password"),               // changed: logged
		snap(3*time.Second, collector.TargetUnauthenticated, "password"),               // same: not
		snap(3*time.Second+failureRepeat, collector.TargetUnauthenticated, "password"), // repeat due
		snap(4*time.Second+failureRepeat, collector.TargetOK, ""),                      // recovered: logged once
		snap(5*time.Second+failureRepeat, collector.TargetOK, ""),
	} {
		f.observe(zap.New(core), s)
	}
	var got []string
	for _, e := range logs.All() {
		target, _ := e.ContextMap()["target"].(string)
		got = append(got, e.Message+" "+target)
	}
	want := []string{"cannot use postgresql unreachable", "cannot use postgresql unauthenticated", "cannot use postgresql unauthenticated", "postgresql can be read again "}
	if len(got) != len(want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}
