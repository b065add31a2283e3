package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
)

// RoutePatroni marks a value read, and a change made, through Patroni's configuration of the
// cluster (its DCS) instead of ALTER SYSTEM.
const RoutePatroni = "patroni"

// PatroniOptions configure a Patroni route.
type PatroniOptions struct {
	// URL is the member's REST API (restapi.connect_address), e.g. http://127.0.0.1:8008.
	URL string
	// Username and Password are restapi.authentication's, which PATCH /config needs.
	Username, Password string
	// ConfirmTimeout bounds the wait for the member to run (or to wait for a restart with) a
	// value after PATCH /config: Patroni applies it on its next loop (loop_wait, 10 s by
	// default). 0 means 30 s.
	ConfirmTimeout time.Duration
	Logger         *zap.Logger
}

// Patroni changes PostgreSQL settings for the whole cluster through Patroni's REST API: PATCH
// /config sets the parameter in the DCS, and Patroni writes it into every member's
// configuration and reloads it, or marks the members pending restart (Patroni docs, "Dynamic
// configuration", and its REST API's PATCH /config). postgresql.auto.conf is never written, so
// no member is left with an override the cluster does not have, and a switchover keeps the
// value. The member's own running value is read over the advisor's connection (pg), which also
// reports the server's identity; the record keeps what the DCS held (DCS, nil for absent), which
// Restore puts back, or removes.
type Patroni struct {
	opts   PatroniOptions
	pg     *Postgres
	client *http.Client
	logger *zap.Logger
}

// NewPatroni returns the Patroni route for the member pg connects to.
func NewPatroni(opts PatroniOptions, pg *Postgres) *Patroni {
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = 30 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	return &Patroni{opts: opts, pg: pg, client: &http.Client{Timeout: 10 * time.Second}, logger: logger.With(zap.String("actuator", "patroni"))}
}

// Owns reports whether name is a PostgreSQL setting: under Patroni every one goes through it.
func (p *Patroni) Owns(name string) bool { return p.pg.Owns(name) }

// Read returns the member's live value with what the DCS holds for the setting.
func (p *Patroni) Read(ctx context.Context, name string) (Value, error) {
	v, err := p.pg.Read(ctx, name)
	if err != nil {
		return v, err
	}
	params, err := p.parameters(ctx)
	if err != nil {
		return v, err
	}
	v.Route = RoutePatroni
	if s, ok := params[name]; ok {
		v.DCS = &s
	}
	return v, nil
}

// Writable checks that the REST API answers and takes the credentials: an empty PATCH /config
// changes nothing and is refused (401) without them.
func (p *Patroni) Writable(ctx context.Context, name string) error {
	if !p.Owns(name) {
		return fmt.Errorf("the Patroni route does not change %s", name)
	}
	if err := p.pg.refuseStandby(ctx); err != nil {
		return err
	}
	if _, err := p.patch(ctx, map[string]any{}, nil); err != nil {
		return routeRefused{err}
	}
	return nil
}

// routeRefused is the Patroni route refusing every setting (its REST API down, or refusing the
// credentials): to the manager and `apply --yes` it is what ErrAlterSystemRefused is to the
// ALTER SYSTEM route - the settings stay advice, backed off, and the command could not do its
// job - and it reads as its own cause.
type routeRefused struct{ err error }

func (e routeRefused) Error() string        { return e.err.Error() }
func (e routeRefused) Unwrap() error        { return e.err }
func (e routeRefused) Is(target error) bool { return target == ErrAlterSystemRefused }

// Set puts name = value into the cluster's configuration and waits until this member runs it
// (or, for a restart setting, reports it pending restart: Patroni restarts nothing by itself).
// On failure the DCS's old value is put back before Set returns.
func (p *Patroni) Set(ctx context.Context, name, value string) (Value, error) {
	if strings.ContainsAny(value, "\\\x00\n") {
		return Value{}, fmt.Errorf("%s=%q: a value with a backslash, NUL or newline is not written", name, value)
	}
	if err := p.pg.refuseStandby(ctx); err != nil {
		return Value{}, err
	}
	old, err := p.Read(ctx, name)
	if err != nil {
		return Value{}, err
	}
	if old.AutoConf != nil {
		return Value{}, fmt.Errorf("%s is set in this member's postgresql.auto.conf (%s), which overrides Patroni's configuration on this member: "+
			"a change in the DCS would not reach it; ALTER SYSTEM RESET %s on this member first (the ha-override finding)", name, *old.AutoConf, name)
	}
	rec := clusterChange(name, value, old, time.Now())
	if _, err := p.patch(ctx, map[string]any{name: value}, map[string]any{name: rec}); err != nil {
		return Value{}, err
	}
	live, err := p.waitFor(ctx, name, func(v Value) bool {
		return sameValue(name, v.Value, value) || old.Context == "postmaster" && v.PendingRestart
	})
	if err == nil && old.Context == "postmaster" {
		err = p.confirmPending(ctx, name)
	}
	if err != nil {
		if _, undoErr := p.restore(ctx, name, old); undoErr != nil {
			return live, fmt.Errorf("%w; putting back the DCS's old value failed too, restore %s with patronictl edit-config: %w", err, name, undoErr)
		}
		return live, fmt.Errorf("%w (the DCS's old value was put back)", err)
	}
	p.logger.Info("setting changed in Patroni's configuration", zap.String("setting", name), zap.String("old", old.Value),
		zap.String("new", value), zap.Bool("pending_restart", live.PendingRestart))
	return live, nil
}

// Restore puts back what the DCS held (or removes the parameter when it held none). A record
// made with ALTER SYSTEM (no route) is restored as it was made, on this member: taking back a
// node-local override is what Patroni wants too.
func (p *Patroni) Restore(ctx context.Context, name string, old Value) (Value, error) {
	if old.Route != RoutePatroni {
		return p.pg.Restore(ctx, name, old)
	}
	if err := p.pg.refuseStandby(ctx); err != nil {
		return Value{}, err
	}
	return p.restore(ctx, name, old)
}

func (p *Patroni) restore(ctx context.Context, name string, old Value) (Value, error) {
	var v any // nil: PATCH null removes the parameter
	if old.DCS != nil {
		v = *old.DCS
	}
	var recs map[string]any
	if doc, err := p.config(ctx); err == nil && doc.hasRecord(name) {
		recs = map[string]any{name: nil} // the record goes with the value it described
	}
	if _, err := p.patch(ctx, map[string]any{name: v}, recs); err != nil {
		return Value{}, err
	}
	live, err := p.waitFor(ctx, name, func(v Value) bool {
		return sameValue(name, v.Value, old.Value) || old.Context == "postmaster" && v.PendingRestart
	})
	if err != nil {
		return live, err
	}
	p.logger.Info("setting restored in Patroni's configuration", zap.String("setting", name), zap.String("value", old.Value))
	return live, nil
}

// waitFor reads the member until done holds or the confirm timeout passes.
func (p *Patroni) waitFor(ctx context.Context, name string, done func(Value) bool) (Value, error) {
	deadline := time.Now().Add(p.opts.ConfirmTimeout)
	for {
		v, err := p.Read(ctx, name)
		if err != nil {
			return v, err
		}
		if done(v) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("%s is %s (pending_restart %v) %s after PATCH %s/config: does Patroni run on this member, and is its configuration valid (patronictl show-config, Patroni's log)?",
				name, v.Value, v.PendingRestart, p.opts.ConfirmTimeout, p.opts.URL)
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("wait for %s to change: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// SegmentBytes and ServerBounds are the member's, for the guard.
func (p *Patroni) SegmentBytes(ctx context.Context) (int64, error) { return p.pg.SegmentBytes(ctx) }

// ServerBounds is the member's pg_settings bounds of name.
func (p *Patroni) ServerBounds(ctx context.Context, name string) (float64, float64, bool, error) {
	return p.pg.ServerBounds(ctx, name)
}

// Close closes the member's connection.
func (p *Patroni) Close(ctx context.Context) error { return p.pg.Close(ctx) }

// parameters reads the cluster's PostgreSQL parameters (GET /config), as JSON values printed.
func (p *Patroni) parameters(ctx context.Context) (map[string]string, error) {
	doc, err := p.config(ctx)
	return doc.params, err
}

// patroniConfig is what GET /config returned: the parameters, and the advisor's records.
type patroniConfig struct {
	params   map[string]string
	records  []ClusterChange
	problems []string
}

func (c patroniConfig) hasRecord(name string) bool {
	return slices.ContainsFunc(c.records, func(r ClusterChange) bool { return r.Setting == name })
}

// config reads Patroni's configuration of the cluster (GET /config).
func (p *Patroni) config(ctx context.Context) (patroniConfig, error) {
	body, err := p.do(ctx, http.MethodGet, nil)
	if err != nil {
		return patroniConfig{}, err
	}
	params, err := postgres.DecodePatroniParameters(body)
	if err != nil {
		return patroniConfig{}, fmt.Errorf("GET %s/config: %w", p.opts.URL, err)
	}
	recs, problems, err := decodeClusterChanges(body)
	if err != nil {
		return patroniConfig{}, fmt.Errorf("GET %s/config: %w", p.opts.URL, err)
	}
	return patroniConfig{params: params, records: recs, problems: problems}, nil
}

// ClusterChanges returns the advisor's records of changes made through Patroni that are in the
// cluster's configuration now: the record's value is the parameter's (a record whose parameter
// someone changed since is stale, and left out). problems says which records were not the
// advisor's to read.
func (p *Patroni) ClusterChanges(ctx context.Context) (changes []ClusterChange, problems []string, err error) {
	doc, err := p.config(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range doc.records {
		if v, ok := doc.params[r.Setting]; ok && sameValue(r.Setting, v, r.New) {
			changes = append(changes, r)
		}
	}
	return changes, doc.problems, nil
}

// patch sends PATCH /config with params as postgresql.parameters and records as the advisor's
// records (a nil value removes one), in one request: Patroni writes the document with one
// compare-and-set, so a parameter and its record change together or not at all.
func (p *Patroni) patch(ctx context.Context, params, records map[string]any) ([]byte, error) {
	doc := map[string]any{"postgresql": map[string]any{"parameters": params}}
	if len(records) > 0 {
		doc[clusterKey] = map[string]any{"changes": records}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return p.do(ctx, http.MethodPatch, b)
}

// confirmPending waits until every running member of the cluster reports a pending restart
// after a restart setting was changed: Patroni has written it into each member's
// configuration, and its restart (RestartPending, or the operator's) brings it into effect on
// all of them. A reload setting's value on another member is read by that member's advisor
// (Manager: a standby checks the cluster's records against what it runs).
func (p *Patroni) confirmPending(ctx context.Context, name string) error {
	deadline := time.Now().Add(p.opts.ConfirmTimeout)
	for {
		ms, err := p.members(ctx)
		if err != nil {
			return err
		}
		var waiting []string
		for _, m := range ms {
			if m.State == "running" && !m.PendingRestart {
				waiting = append(waiting, m.Name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: member(s) %s report no pending restart %s after PATCH %s/config (patronictl list shows each member's pending restart)",
				name, strings.Join(waiting, ", "), p.opts.ConfirmTimeout, p.opts.URL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the members of the cluster: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// members reads the cluster's members (GET /cluster).
func (p *Patroni) members(ctx context.Context) ([]member, error) {
	body, err := p.request(ctx, http.MethodGet, p.opts.URL+"/cluster", nil)
	if err != nil {
		return nil, err
	}
	var cl struct {
		Members []member `json:"members"`
	}
	if err := json.Unmarshal(body, &cl); err != nil {
		return nil, fmt.Errorf("GET %s/cluster: %w", p.opts.URL, err)
	}
	return cl.Members, nil
}

func (p *Patroni) do(ctx context.Context, method string, body []byte) ([]byte, error) {
	return p.request(ctx, method, p.opts.URL+"/config", body)
}

// memberRestartTimeout bounds one member's restart through Patroni, from the request to the
// member running with nothing pending.
const memberRestartTimeout = 3 * time.Minute

// request sends one request to a member's REST API with the credentials, bounded in size and
// by the client's 10 s timeout.
func (p *Patroni) request(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	return p.requestWith(ctx, p.client, method, url, body)
}

// requestWith is request through client.
func (p *Patroni) requestWith(ctx context.Context, client *http.Client, method, url string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, fmt.Errorf("the Patroni REST API %q: %w (give the member's restapi.connect_address, e.g. http://127.0.0.1:8008)", p.opts.URL, err)
	}
	if p.opts.Username != "" {
		req.SetBasicAuth(p.opts.Username, p.opts.Password)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (is Patroni running, and is this its REST API? nothing was changed)", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s %s: 401 %s: Patroni's REST API refused the credentials: give restapi.authentication's user and password "+
			"(--apply.patroni-user, --apply.patroni-password-file); nothing was changed", method, url, strings.TrimSpace(string(b)))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s %s: %s %s", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// member is one member of Patroni's GET /cluster.
type member struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	State          string `json:"state"`
	APIURL         string `json:"api_url"`
	PendingRestart bool   `json:"pending_restart"`
}

// RestartPending asks Patroni to restart each member whose PostgreSQL waits for a restart (POST
// /restart with restart_pending, which Patroni refuses to do for a member with nothing pending),
// replicas first and the leader last, one at a time, each confirmed running before the next: the
// settings the apply mode changes (wal_buffers) carry no constraint between members, and a
// replica restarted first keeps the leader serving while the others come back. The advisor never
// restarts PostgreSQL itself; this is Patroni's own restart, which it orders and confirms.
func (p *Patroni) RestartPending(ctx context.Context) error {
	ms, err := p.members(ctx)
	if err != nil {
		return err
	}
	var order []member
	for _, leaderLast := range []bool{false, true} {
		for _, m := range ms {
			if isLeader(m.Role) == leaderLast {
				order = append(order, m)
			}
		}
	}
	for _, m := range order {
		if err := p.restartMember(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func isLeader(role string) bool { return role == "leader" || role == "master" || role == "primary" }

// restartMember restarts one member if it waits for a restart, and waits until it runs again
// with nothing pending.
func (p *Patroni) restartMember(ctx context.Context, m member) error {
	api := strings.TrimSuffix(strings.TrimRight(m.APIURL, "/"), "/patroni")
	st, err := p.memberState(ctx, api)
	if err != nil || !st.PendingRestart {
		return err
	}
	b, _ := json.Marshal(map[string]any{"restart_pending": true})
	// Patroni answers POST /restart when the restart is done: a replica's shutdown waits for
	// its restartpoint, which takes seconds under load. A request that times out may have
	// started it all the same: the member's state below says.
	rctx, cancel := context.WithTimeout(ctx, memberRestartTimeout)
	_, err = p.requestWith(rctx, &http.Client{}, http.MethodPost, api+"/restart", b)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("restart member %s: %w", m.Name, err)
	}
	deadline := time.Now().Add(memberRestartTimeout)
	for {
		st, err := p.memberState(ctx, api)
		if err == nil && st.State == "running" && !st.PendingRestart {
			p.logger.Info("patroni restarted a member", zap.String("member", m.Name), zap.String("role", m.Role))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member %s is not running without a pending restart %s after POST %s/restart (state %q, %v)", m.Name, memberRestartTimeout, api, st.State, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (p *Patroni) memberState(ctx context.Context, api string) (member, error) {
	var st member
	body, err := p.request(ctx, http.MethodGet, api+"/patroni", nil)
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	return st, err
}
