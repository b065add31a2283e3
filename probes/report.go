// Package probes measures what a sync costs on the WAL's own file system, the way PostgreSQL
// issues it for each wal_sync_method (like pg_test_fsync, but continuous, cheap and with honest
// statistics), and judges from those figures and the device's facts whether syncs can be durable.
package probes

import "time"

// Sync methods, named as wal_sync_method names them.
const (
	OpenDatasync      = "open_datasync"
	Fdatasync         = "fdatasync"
	Fsync             = "fsync"
	FsyncWritethrough = "fsync_writethrough"
	OpenSync          = "open_sync"
	// Write is the unsynced baseline: the same 8kB write with no sync at all.
	Write = "write"
)

// DurableMethods are the wal_sync_methods that sync (PostgreSQL docs, wal_sync_method; the
// probes say which of them work here and whether they reach the device), in the order the
// advisor prefers them when the probes cannot tell them apart: fdatasync first because it is
// Linux's default and pays once per flush however many writes precede it (seed 001), then
// fsync, then the open_* methods, which pay per write, then fsync_writethrough, which Linux
// does not have. This is the project's one list of them.
func DurableMethods() []string {
	return []string{Fdatasync, Fsync, OpenDatasync, OpenSync, FsyncWritethrough}
}

// Report is the outcome of one probe run (or, in continuous mode, the results accumulated over
// the recent bursts).
type Report struct {
	Dir      string    `json:"dir"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// WallSeconds is the time the run took, warm-up included.
	WallSeconds float64 `json:"wall_seconds"`
	// BudgetSeconds is the measuring time allowed (Config.Duration, or the burst length in
	// continuous mode); Precision the relative half-width of the 95% interval that ends a run
	// early.
	BudgetSeconds float64 `json:"budget_seconds"`
	Precision     float64 `json:"precision"`
	// Stop says why measuring ended: StopPrecision, StopBudget, StopSampleCap or
	// StopContinuous.
	Stop string `json:"stop"`
	// Bursts is, in continuous mode, how many bursts the samples came from (the window keeps
	// only the most recent samples of each method).
	Bursts int `json:"bursts,omitempty"`
	// DirectIOPolicy says, in words, where O_DIRECT was used and why (which server it emulates).
	DirectIOPolicy string         `json:"direct_io_policy"`
	Methods        []MethodResult `json:"methods"`
	Durability     Verdict        `json:"durability"`
}

// Why a run stopped measuring.
const (
	StopPrecision  = "precision"
	StopBudget     = "budget"
	StopSampleCap  = "sample_cap"
	StopContinuous = "continuous"
)

// Pattern returns the result for a method, writes per sync and write size; unlike Method it
// tells open_sync's 16kB-in-pieces series (WriteBytes 16384, 4096, ...) from the 8kB patterns.
func (r *Report) Pattern(name string, writesPerSync, writeBytes int) (MethodResult, bool) {
	for _, m := range r.Methods {
		if m.Name == name && m.WritesPerSync == writesPerSync && m.WriteBytes == writeBytes {
			return m, true
		}
	}
	return MethodResult{}, false
}

// Method returns the result for a wal_sync_method name and writes per sync.
func (r *Report) Method(name string, writesPerSync int) (MethodResult, bool) {
	for _, m := range r.Methods {
		if m.Name == name && m.WritesPerSync == writesPerSync {
			return m, true
		}
	}
	return MethodResult{}, false
}

// MethodResult is what one method and write pattern measured.
type MethodResult struct {
	// Name is the wal_sync_method name, or Write for the unsynced baseline.
	Name string `json:"name"`
	// DirectIO says whether the file was opened with O_DIRECT, as the configured server would.
	DirectIO      bool `json:"direct_io"`
	WritesPerSync int  `json:"writes_per_sync"`
	WriteBytes    int  `json:"write_bytes"`
	// Available is false where the method cannot be used here (fsync_writethrough on Linux, or
	// an open flag the file system refuses); Error says why.
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
	// Note qualifies a figure, e.g. that the file system refused O_DIRECT and the method was
	// measured without it (so it is not what the configured server would see).
	Note    string `json:"note,omitempty"`
	Samples int    `json:"samples"`
	// OpsPerSec is syncs (not writes) per second: 1 / mean latency.
	OpsPerSec float64 `json:"ops_per_sec"`
	LatencyUS Latency `json:"latency_us"`
}

// Latency summarizes one sync's latency in microseconds. CILow and CIHigh bound the mean at
// 95% confidence (Student's t with n-1 degrees of freedom; see Summarize). Percentiles
// interpolate linearly between order statistics.
type Latency struct {
	Mean float64 `json:"mean"`
	// StdDev is the sample standard deviation (n-1 denominator); Compare needs it.
	StdDev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
}

// Durability verdicts.
const (
	// VerdictPlausible: sync latencies are consistent with the device persisting the data.
	VerdictPlausible = "plausible"
	// VerdictTooFast: syncs complete faster than the device can physically persist them.
	VerdictTooFast = "too_fast"
	// VerdictUnknown: latency alone cannot tell (e.g. an SSD with power-loss protection and one
	// whose cache lies look alike).
	VerdictUnknown = "unknown"
)

// Verdict is the probes' judgement on whether syncs reach stable storage, with its evidence.
type Verdict struct {
	Status string `json:"status"`
	// Reason is one or two sentences an operator can act on.
	Reason string `json:"reason"`
	// Evidence holds the named figures behind the verdict (e.g. "fdatasync_p50_us": 45).
	Evidence map[string]float64 `json:"evidence,omitempty"`
	// Facts echoes the device facts the verdict used.
	Facts DeviceFacts `json:"facts"`
}

// DeviceFacts are what the collector knows of the storage under the probe directory.
type DeviceFacts struct {
	FSType     string `json:"fs_type"`
	Rotational *bool  `json:"rotational,omitempty"`
	WriteCache string `json:"write_cache,omitempty"`
	FUA        *bool  `json:"fua,omitempty"`
	Volatile   bool   `json:"volatile"`
	// Virtual: a hypervisor's or cloud's virtual disk, whose flags are the emulation's.
	Virtual bool `json:"virtual"`
}
