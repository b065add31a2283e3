package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// OriginCluster marks a change taken into this journal from the cluster's configuration: the
// advisor on another member (or this one, in a journal since lost) made it through Patroni.
// Like a change of `apply --yes`, it is managed (watched, rolled back) but not verified here:
// the figures before it were another server's, or another role's.
const OriginCluster = "cluster"

// clusterLedger is a route that keeps the advisor's records in the cluster's configuration
// (Patroni: clusterrecord.go).
type clusterLedger interface {
	ClusterChanges(ctx context.Context) ([]ClusterChange, []string, error)
}

// clusterLedgers returns the actuators that keep records in the cluster's configuration.
func clusterLedgers(acts []Actuator) []clusterLedger {
	var out []clusterLedger
	for _, a := range acts {
		if g, ok := a.(guarded); ok {
			a = g.Actuator
		}
		if c, ok := a.(clusterLedger); ok {
			out = append(out, c)
		}
	}
	return out
}

// ClusterChangeStatus is one of the advisor's changes in the cluster's configuration, as the
// member --dsn reaches runs it.
type ClusterChangeStatus struct {
	Setting string    `json:"setting"`
	New     string    `json:"new"`
	Host    string    `json:"host,omitempty"`
	Since   time.Time `json:"since"`
	Live    string    `json:"live"`
	// State is running (the member runs New), pending_restart (it waits for a restart to) or
	// not_running (it runs something else: a local override, or Patroni has not reached it).
	State string `json:"state"`
}

// States of a cluster change on this member.
const (
	ClusterRunning        = "running"
	ClusterPendingRestart = "pending_restart"
	ClusterNotRunning     = "not_running"
)

// adoptCluster takes into journal j the cluster's records of changes the advisor made through
// the DCS that j does not hold in effect: after a switchover, the daemon (and `rollback`) on the
// new leader knows them as the advisor's, and can roll them back, instead of calling the value
// someone else's. A record whose member does not run its value yet (Patroni reaches members on
// its next loop) waits for the next call. It returns how this member runs each record; with j
// nil it only reads that (a standby, dry-run).
func adoptCluster(ctx context.Context, j *Journal, acts []Actuator, now time.Time, logger *zap.Logger) ([]ClusterChangeStatus, error) {
	var out []ClusterChangeStatus
	var errs []error
	for _, route := range clusterLedgers(acts) {
		recs, problems, err := route.ClusterChanges(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the advisor's records in the cluster's configuration: %w", err))
			continue
		}
		for _, p := range problems {
			logger.Warn("a record in the cluster's configuration is not the advisor's to read; it is left alone", zap.String("detail", p))
		}
		for _, rec := range recs {
			st, err := adoptOne(ctx, j, acts, rec, now, logger)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, st)
		}
	}
	return out, errors.Join(errs...)
}

func adoptOne(ctx context.Context, j *Journal, acts []Actuator, rec ClusterChange, now time.Time, logger *zap.Logger) (ClusterChangeStatus, error) {
	st := ClusterChangeStatus{Setting: rec.Setting, New: rec.New, Host: rec.Host, Since: rec.Time}
	a := actuatorFor(acts, rec.Setting)
	if a == nil {
		return st, fmt.Errorf("the cluster's change of %s: no actuator reads it", rec.Setting)
	}
	live, err := a.Read(ctx, rec.Setting)
	if err != nil {
		return st, fmt.Errorf("the cluster's change of %s: %w", rec.Setting, err)
	}
	st.Live = live.Value
	switch {
	case sameValue(rec.Setting, live.Value, rec.New):
		st.State = ClusterRunning
	case live.PendingRestart && rec.Old.Context == "postmaster":
		st.State = ClusterPendingRestart
	default:
		st.State = ClusterNotRunning
		return st, nil
	}
	if j == nil {
		return st, nil // a standby's, or dry-run's, view: nothing is journaled
	}
	if live.Server != nil && live.Server.SystemIdentifier != rec.Old.Server.SystemIdentifier {
		return st, fmt.Errorf("the cluster's change of %s names the server with %s, but --dsn reaches %s: is --apply.patroni-url this server's Patroni?",
			rec.Setting, rec.Old.Server, live.Server)
	}
	l, _, err := j.load()
	if err != nil {
		return st, err
	}
	if c := l.managing(rec.Setting); c != nil && sameValue(rec.Setting, c.Intent.New, rec.New) {
		return st, nil // this journal's own, or adopted before
	}
	old := rec.Old
	in, err := j.Append(Record{Time: now, Kind: KindIntent, Origin: OriginCluster, Setting: rec.Setting, Old: &old, New: rec.New,
		Reason: fmt.Sprintf("made through Patroni by the advisor on %s at %s; taken into this journal from the cluster's configuration",
			hostOr(rec.Host), rec.Time.UTC().Format(time.RFC3339))})
	if err != nil {
		return st, err
	}
	outcome := Applied
	if st.State == ClusterPendingRestart {
		outcome = PendingRestart
	}
	if _, err := j.Append(Record{ID: in[0].ID, Time: now, Kind: KindOutcome, Origin: OriginCluster, Outcome: outcome,
		Setting: rec.Setting, New: rec.New, Live: &live, Reason: "the cluster's configuration holds it"}); err != nil {
		return st, err
	}
	logger.Info("apply: a change the advisor made through Patroni was taken into this journal from the cluster's configuration",
		zap.Int("id", in[0].ID), zap.String("setting", rec.Setting), zap.String("value", rec.New), zap.String("made_on", hostOr(rec.Host)))
	return st, nil
}

func hostOr(h string) string {
	if h == "" {
		return "another member"
	}
	return h
}

// readCluster reads how this member runs the advisor's changes in the cluster's configuration,
// and with adopt takes those this journal lacks into it (under the change lock). A member that
// runs another value than the cluster's is said once: after a failover it would run that.
func (m *Manager) readCluster(ctx context.Context, adopt bool) error {
	if len(clusterLedgers(m.acts)) == 0 {
		return nil
	}
	var j *Journal
	if adopt {
		unlock, _, err := m.journal.lockChanges(true)
		if err != nil {
			return err
		}
		defer unlock()
		j = m.journal
	}
	sts, err := adoptCluster(ctx, j, m.acts, m.now(), m.logger)
	m.cluster = sts
	for _, st := range sts {
		if st.State == ClusterNotRunning {
			m.once(fmt.Sprintf("cluster:%s:%s:%s", st.Setting, st.New, st.Live), func() {
				m.logger.Warn("apply: this member does not run a change the advisor made in the cluster's configuration",
					zap.String("setting", st.Setting), zap.String("cluster", st.New), zap.String("member", st.Live))
			})
		}
	}
	return err
}
