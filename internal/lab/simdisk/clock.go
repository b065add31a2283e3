package simdisk

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// How wakeClock splits a wait. Measured on the lab machines (2 vCPUs), inside the FUSE server
// while it serves syncs: a Go timer fires 0.4-1 ms late (p10-p90), nanosleep(2) 0.05-0.15 ms
// late, with rare millisecond outliers for both.
const (
	// timerMargin is how long before the deadline a long wait stops using a Go timer (which
	// Close can cancel) and goes on with nanosleep: more than the timer's usual lateness.
	timerMargin = 2 * time.Millisecond
	// maxEarly bounds how early the clock wakes from nanosleep, and so how long it spins.
	maxEarly = 300 * time.Microsecond
	// earlyQuantile is the share of wake-ups the clock aims to have before the deadline; those
	// spin to it, the rest are late by nanosleep's tail.
	earlyQuantile = 0.9
	// earlyStep is the estimator's step: it settles within a few hundred waits and then moves
	// by a few microseconds at a time.
	earlyStep = 20 * time.Microsecond
)

// wakeClock waits until a deadline to within microseconds where a Go timer alone is late by
// most of a millisecond, which put a "4 ms" sync at 4.8 ms.
//
// A long wait sleeps on a Go timer until timerMargin before the deadline, so that Close can
// release it. The rest is slept in nanosleep(2), which blocks only this goroutine's thread, up
// to the point the clock has learnt nanosleep wakes in time from nine times out of ten; what
// is left (tens of microseconds) is spun, yielding the processor. The clock never returns
// before the deadline, so an operation never costs less than the device's configured time.
type wakeClock struct {
	// early is how long before the deadline nanosleep is asked to wake, in nanoseconds: a
	// running estimate of the earlyQuantile of its lateness (stochastic quantile
	// approximation), shared by concurrent waits.
	early atomic.Int64
}

// sleepUntil returns at deadline or later, or sooner when cancel is closed during the part of
// the wait a timer serves (all but the last timerMargin).
func (c *wakeClock) sleepUntil(deadline time.Time, cancel <-chan struct{}) {
	if wait := time.Until(deadline) - timerMargin; wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-cancel:
			timer.Stop()
			return
		}
	}
	target := deadline.Add(-time.Duration(c.early.Load()))
	if wait := time.Until(target); wait > 0 {
		ts := unix.NsecToTimespec(int64(wait))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		c.learn(time.Since(target))
	}
	for time.Now().Before(deadline) {
		runtime.Gosched()
	}
}

// learn moves the estimate of nanosleep's lateness towards its earlyQuantile: up when a wake-up
// was later than the estimate, down (by a ninth as much) when it was earlier.
func (c *wakeClock) learn(late time.Duration) {
	step := float64(earlyStep)
	for {
		old := c.early.Load()
		next := float64(old) - step*(1-earlyQuantile)
		if late > time.Duration(old) {
			next = float64(old) + step*earlyQuantile
		}
		next = min(max(next, 0), float64(maxEarly))
		if c.early.CompareAndSwap(old, int64(next)) {
			return
		}
	}
}
