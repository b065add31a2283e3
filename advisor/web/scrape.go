package web

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// scrapeMaxAge bounds how long one encoding of /metrics is served while the evaluation stays
// the same. The advisor's own metrics change only at an evaluation; the Go runtime's, the
// process's and the apply mode's change in between, and this keeps them at most this stale
// (and keeps /metrics moving when the loop is stuck before its first snapshot).
const scrapeMaxAge = 5 * time.Second

// scrapeCache serves /metrics from one encoding per evaluation: gathering (reading the state
// and /proc for the process collector) and encoding cost most of a scrape, and the advisor's
// figures cannot change before the next evaluation, so a hundred scrapers in a second cost one
// encoding, and each scrape is a copy of a ready buffer (gzipped once, for the scrapers that
// accept it, as Prometheus does). Requests that arrive while an encoding is made wait for it.
type scrapeCache struct {
	src    StateSource
	g      prometheus.Gatherer
	logger *zap.Logger
	format expfmt.Format
	now    func() time.Time

	mu  sync.Mutex // one encoding at a time
	cur atomic.Pointer[encoding]
}

// encoding is one evaluation's /metrics, plain and gzipped.
type encoding struct {
	key      stateKey
	at       time.Time
	plain    []byte
	gzipped  []byte
	gathered bool
}

// stateKey tells evaluations apart: every evaluation publishes a new snapshot, and a probe
// report, a set of findings or a reason probing is off only change with one.
type stateKey struct {
	snapshot     *collector.Snapshot
	probe        *probes.Report
	evaluated    time.Time
	findings     int
	probeEnabled bool
	probeOff     string
}

func keyOf(src StateSource) stateKey {
	st := src.State()
	return stateKey{
		snapshot: st.Snapshot, probe: st.Probe, evaluated: st.Evaluated, findings: len(st.Findings),
		probeEnabled: st.ProbeEnabled, probeOff: st.ProbeDisabledReason,
	}
}

func newScrapeCache(src StateSource, g prometheus.Gatherer, logger *zap.Logger) *scrapeCache {
	return &scrapeCache{
		src: src, g: g, logger: logger, now: time.Now,
		// The text format, as promhttp answers a scraper that asks for nothing in particular.
		format: expfmt.NegotiateAccept(http.Header{}, expfmt.NewFormat(expfmt.TypeTextPlain)),
	}
}

func (c *scrapeCache) fresh(e *encoding, key stateKey) bool {
	return e != nil && e.key == key && c.now().Sub(e.at) < scrapeMaxAge
}

// current returns the encoding of the current evaluation, making it when there is none.
func (c *scrapeCache) current() *encoding {
	key := keyOf(c.src)
	if e := c.cur.Load(); c.fresh(e, key) {
		return e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Another request may have made it while this one waited.
	if e := c.cur.Load(); c.fresh(e, key) {
		return e
	}
	e := c.encode(key)
	c.cur.Store(e)
	return e
}

// encode gathers and encodes once. As promhttp's ContinueOnError: a metric that cannot be
// gathered is logged and the rest is served.
func (c *scrapeCache) encode(key stateKey) *encoding {
	e := &encoding{key: key, at: c.now()}
	mfs, err := c.g.Gather()
	if err != nil {
		c.logger.Error("gather metrics", zap.Error(err))
	}
	e.gathered = len(mfs) > 0 || err == nil
	var plain bytes.Buffer
	enc := expfmt.NewEncoder(&plain, c.format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			c.logger.Error("encode metric family", zap.String("family", mf.GetName()), zap.Error(err))
		}
	}
	e.plain = plain.Bytes()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(e.plain) // writes to memory cannot fail
	_ = zw.Close()
	e.gzipped = gz.Bytes()
	return e
}

func (c *scrapeCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := c.current()
	if !e.gathered {
		http.Error(w, "no metrics could be gathered: see the daemon's log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(c.format))
	h.Add("Vary", "Accept-Encoding")
	body := e.plain
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = e.gzipped
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// acceptsGzip reads Accept-Encoding: gzip listed with a q-value above 0 ("gzip;q=0" names gzip
// to refuse it).
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
			if !ok {
				return true
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(q), 64); err == nil && f > 0 {
				return true
			}
		}
	}
	return false
}
