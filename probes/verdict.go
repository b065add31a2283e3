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

	// The fastest synced method at one 8kB write per sync is the one that could be cheating.
	var fastest MethodResult
	found := false
	for _, name := range SyncMethods() {
		m, ok := r.Pattern(name, 1, BlockBytes)
		if !ok || !m.Available || m.Samples == 0 {
			continue
		}
		v.Evidence[name+"_p50_us"] = m.LatencyUS.P50
		if !found || m.LatencyUS.P50 < fastest.LatencyUS.P50 {
			fastest, found = m, true
		}
	}
	// fdatasync is Linux's default and the method most servers use; it is the reference for
	// the sync/write ratio when measured.
	ref := fastest
	if m, ok := r.Pattern(Fdatasync, 1, BlockBytes); ok && m.Available && m.Samples > 0 {
		ref = m
	}
	ratio := math.NaN()
	if w, ok := r.Pattern(Write, 1, BlockBytes); ok && w.Samples > 0 {
		v.Evidence["write_p50_us"] = w.LatencyUS.P50
		if w.LatencyUS.P50 > 0 && found {
			ratio = ref.LatencyUS.P50 / w.LatencyUS.P50
			v.Evidence["sync_write_ratio"] = ratio
		}
	}
	if f.Rotational != nil {
		v.Evidence["rotational"] = b2f(*f.Rotational)
	}
	if f.WriteCache != "" {
		v.Evidence["write_cache_write_back"] = b2f(writeBack(f.WriteCache))
	}
	if f.FUA != nil {
		v.Evidence["fua"] = b2f(*f.FUA)
	}
	if volatileFS(f) {
		v.Evidence["volatile"] = 1
	}

	if !found {
		v.Status = VerdictUnknown
		v.Reason = "No sync method was measured, so nothing can be said about durability."
		return v
	}
	p50 := fastest.LatencyUS.P50
	switch {
	case volatileFS(f):
		v.Status = VerdictTooFast
		v.Reason = fmt.Sprintf("The probe directory is on %s, which lives in memory: a sync there persists nothing (%s p50 %s), and a power loss or reboot loses everything written. WAL there is fast and not durable.",
			orDefault(f.FSType, "a volatile file system"), fastest.Name, fmtUS(p50))
	case f.Virtual:
		// A virtual disk's queue flags are the emulation's (virtio-blk says rotational by
		// default); whether a flush reaches stable storage depends on the hypervisor's cache
		// mode (QEMU's cache=unsafe drops flushes) or the cloud's block storage, which the guest
		// cannot see. Calling it too fast from the rotational flag would be a false alarm on
		// nearly every VM.
		v.Evidence["virtual"] = 1
		v.Status = VerdictUnknown
		v.Reason = fmt.Sprintf("%s p50 is %s on a virtual disk: its rotational and cache flags describe the emulation, not the storage under it, so latency cannot tell whether syncs are persisted. Ask the platform whether flushes reach stable storage (the hypervisor's disk cache mode, or the block storage's durability guarantee).",
			ref.Name, fmtUS(ref.LatencyUS.P50))
	case f.Rotational != nil && *f.Rotational:
		v.Evidence["rotational_min_sync_us"] = RotationalMinSyncUS
		if p50 < RotationalMinSyncUS {
			v.Status = VerdictTooFast
			v.Reason = fmt.Sprintf("%s completes a sync in %s (p50) on a rotational disk, faster than a platter can persist a write (one turn of a 7200 RPM disk takes 8.3 ms): %s acknowledges syncs before the data is on the platter, and a power loss can lose committed transactions. Turn the drive's write cache off (hdparm -W0) unless a battery- or flash-backed controller cache protects it.",
				fastest.Name, fmtUS(p50), cacheWords(f.WriteCache))
			return v
		}
		v.Status = VerdictPlausible
		v.Reason = fmt.Sprintf("Syncs take %s or more (p50, %s fastest) on a rotational disk, as long as a platter needs to persist a write.", fmtUS(p50), fastest.Name)
	default:
		v.Status = VerdictUnknown
		var b strings.Builder
		if f.Rotational == nil {
			b.WriteString("Whether the device is rotational is not known, so latency alone cannot tell a persisted sync from a cache's acknowledgement. ")
		}
		fmt.Fprintf(&b, "%s p50 is %s", ref.Name, fmtUS(ref.LatencyUS.P50))
		if !math.IsNaN(ratio) {
			fmt.Fprintf(&b, ", %.1f times an unsynced write", ratio)
		}
		b.WriteString(". ")
		if !math.IsNaN(ratio) && ratio < EqualCostRatio && writeBack(f.WriteCache) && f.FUA != nil && !*f.FUA {
			b.WriteString("Syncs cost about as much as unsynced writes on a device reporting a volatile write-back cache without FUA: suspect that cache of acknowledging syncs it has not persisted. ")
		}
		b.WriteString(plpSentence)
		v.Reason = b.String()
	}
	return v
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
