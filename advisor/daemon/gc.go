package daemon

import "runtime/debug"

// IdleGCPercent is the garbage collector's target for the running daemon, in place of Go's
// 100. Idle, the daemon's live heap is about 1.5 MB, so at 100 its heap is set by the runtime's
// 4 MB floor, not by what it keeps; 50 halves that floor. Side by side at one scrape a second
// that took RssAnon from 7.5 to 5.1 MB for +0.03 points of one core's CPU; a soft memory limit
// (6 or 8 MiB) saved 0.8 MB more but kept the collector running, at 1.7-1.9 % of a core
// (docs/http.md, "Footprint").
const IdleGCPercent = 50

// TuneGC sets the collector's target to IdleGCPercent unless GOGC is set in the environment
// (getenv reads it): an operator's GOGC wins, as does a GOMEMLIMIT beside it, which the runtime
// applies on its own. It reports whether it set the target. Only `run` calls it: the one-shot
// commands end before a collection matters.
func TuneGC(getenv func(string) string) bool {
	if getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(IdleGCPercent)
	return true
}
