package probes

import (
	"fmt"
	"math"
	"strings"
)

// Thresholds of the durability verdict.
const (
	// RotationalMinSyncUS is the fastest a rotational disk can persist a write, in
	// microseconds. A 7200 RPM platter turns once in 8.3 ms (4.2 ms on average to reach a
	// sector), a 15000 RPM one in 4 ms; even with the head already on the track, writing the
	// sector and flushing the drive's cache takes a millisecond or more. A sync that completes
	// faster was acknowledged by a cache, which is safe only if that cache survives a power cut
	// (seed 004: drives with their write cache on corrupted the database on every power pull;
	// with it off, every run survived; seed 000: "is open_sync really syncing?").
	RotationalMinSyncUS = 1000.0
	// EqualCostRatio is the synced/unsynced latency ratio below which a sync costs about as
	// much as a write into the page cache: the sync then did little or no device work, which
	// on a volatile write-back cache without FUA means the cache, not the medium, answered.
	EqualCostRatio = 1.5
)

// plpSentence is what latency cannot tell on a device without moving parts.
const plpSentence = "An SSD with power-loss protection and one whose volatile cache acknowledges syncs it has not persisted look alike from latency alone; check the drive's datasheet (or ask the storage vendor) for power-loss protection."

// Judge tells from the report's latencies and the device facts whether syncs can be reaching
// stable storage. It never guesses: where latency cannot decide, the verdict is VerdictUnknown
// and the reason says why.
func Judge(r *Report, f DeviceFacts) Verdict {
	v := Verdict{Facts: f, Evidence: map[string]float64{}}
	s := gatherSyncs(r, v.Evidence)
	deviceEvidence(f, v.Evidence)
	if !s.found {
		v.Status = VerdictUnknown
		v.Reason = "No sync method was measured, so nothing can be said about durability."
		return v
	}
	p50 := s.fastest.LatencyUS.P50
	switch {
	case volatileFS(f):
		v.Status = VerdictTooFast
		v.Reason = fmt.Sprintf("The probe directory is on %s, which lives in memory: a sync there persists nothing (%s p50 %s), and a power loss or reboot loses everything written. WAL there is fast and not durable.",
			orDefault(f.FSType, "a volatile file system"), s.fastest.Name, fmtUS(p50))
	case f.Virtual:
		// A virtual disk's queue flags are the emulation's (virtio-blk says rotational by
		// default); whether a flush reaches stable storage depends on the hypervisor's cache
		// mode (QEMU's cache=unsafe drops flushes) or the cloud's block storage, which the guest
		// cannot see. Calling it too fast from the rotational flag would be a false alarm on
		// nearly every VM.
		v.Evidence["virtual"] = 1
		v.Status = VerdictUnknown
		v.Reason = fmt.Sprintf("%s p50 is %s on a virtual disk: its rotational and cache flags describe the emulation, not the storage under it, so latency cannot tell whether syncs are persisted. Ask the platform whether flushes reach stable storage (the hypervisor's disk cache mode, or the block storage's durability guarantee).",
			s.ref.Name, fmtUS(s.ref.LatencyUS.P50))
	case f.Rotational != nil && *f.Rotational:
		v.Evidence["rotational_min_sync_us"] = RotationalMinSyncUS
		if p50 < RotationalMinSyncUS {
			v.Status = VerdictTooFast
			v.Reason = fmt.Sprintf("%s completes a sync in %s (p50) on a rotational disk, faster than a platter can persist a write (one turn of a 7200 RPM disk takes 8.3 ms): %s acknowledges syncs before the data is on the platter, and a power loss can lose committed transactions. Turn the drive's write cache off (hdparm -W0) unless a battery- or flash-backed controller cache protects it.",
				s.fastest.Name, fmtUS(p50), cacheWords(f.WriteCache))
			return v
		}
		v.Status = VerdictPlausible
		v.Reason = fmt.Sprintf("Syncs take %s or more (p50, %s fastest) on a rotational disk, as long as a platter needs to persist a write.", fmtUS(p50), s.fastest.Name)
	default:
		v.Status = VerdictUnknown
		v.Reason = unknownReason(s, f)
	}
	return v
}

// syncs are the report's figures the verdict reads.
type syncs struct {
	// fastest is the fastest synced method at one 8kB write per sync: the one that could be
	// cheating. found is false when no synced method was measured.
	fastest MethodResult
	found   bool
	// ref is fdatasync when measured (Linux's default, the method most servers use), else
	// fastest: the reference of the sync/write ratio.
	ref MethodResult
	// ratio is ref's p50 over the unsynced write's; NaN when either is missing.
	ratio float64
}

// gatherSyncs reads the verdict's figures from r and records them in evidence.
func gatherSyncs(r *Report, evidence map[string]float64) syncs {
	s := syncs{ratio: math.NaN()}
	for _, name := range SyncMethods() {
		m, ok := r.Pattern(name, 1, BlockBytes)
		if !ok || !m.Available || m.Samples == 0 {
			continue
		}
		evidence[name+"_p50_us"] = m.LatencyUS.P50
		if !s.found || m.LatencyUS.P50 < s.fastest.LatencyUS.P50 {
			s.fastest, s.found = m, true
		}
	}
	s.ref = s.fastest
	if m, ok := r.Pattern(Fdatasync, 1, BlockBytes); ok && m.Available && m.Samples > 0 {
		s.ref = m
	}
	if w, ok := r.Pattern(Write, 1, BlockBytes); ok && w.Samples > 0 {
		evidence["write_p50_us"] = w.LatencyUS.P50
		if w.LatencyUS.P50 > 0 && s.found {
			s.ratio = s.ref.LatencyUS.P50 / w.LatencyUS.P50
			evidence["sync_write_ratio"] = s.ratio
		}
	}
	return s
}

// deviceEvidence records the device facts the verdict weighs.
func deviceEvidence(f DeviceFacts, evidence map[string]float64) {
	if f.Rotational != nil {
		evidence["rotational"] = b2f(*f.Rotational)
	}
	if f.WriteCache != "" {
		evidence["write_cache_write_back"] = b2f(writeBack(f.WriteCache))
	}
	if f.FUA != nil {
		evidence["fua"] = b2f(*f.FUA)
	}
	if volatileFS(f) {
		evidence["volatile"] = 1
	}
}

// unknownReason says why latency cannot decide on a device that is not known to be rotational,
// and what the figures suggest.
func unknownReason(s syncs, f DeviceFacts) string {
	var b strings.Builder
	if f.Rotational == nil {
		b.WriteString("Whether the device is rotational is not known, so latency alone cannot tell a persisted sync from a cache's acknowledgement. ")
	}
	fmt.Fprintf(&b, "%s p50 is %s", s.ref.Name, fmtUS(s.ref.LatencyUS.P50))
	if !math.IsNaN(s.ratio) {
		fmt.Fprintf(&b, ", %.1f times an unsynced write", s.ratio)
	}
	b.WriteString(". ")
	if !math.IsNaN(s.ratio) && s.ratio < EqualCostRatio && writeBack(f.WriteCache) && f.FUA != nil && !*f.FUA {
		b.WriteString("Syncs cost about as much as unsynced writes on a device reporting a volatile write-back cache without FUA: suspect that cache of acknowledging syncs it has not persisted. ")
	}
	b.WriteString(plpSentence)
	return b.String()
}

// volatileFS reports whether the facts describe a file system that lives in memory.
func volatileFS(f DeviceFacts) bool {
	return f.Volatile || f.FSType == "tmpfs" || f.FSType == "ramfs"
}

// writeBack reports whether sysfs's write_cache value ("write back" or "write through") says
// the device has a volatile cache.
func writeBack(wc string) bool { return strings.EqualFold(strings.TrimSpace(wc), "write back") }

func cacheWords(wc string) string {
	if wc == "" {
		return "a write cache"
	}
	return fmt.Sprintf("its write cache (%q)", wc)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// fmtUS prints a latency given in microseconds for a sentence.
func fmtUS(v float64) string {
	if v < 1000 {
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f ms", v/1000)
}
