package apply

import (
	"fmt"
	"strings"
	"time"
)

// RestartWindow is when the operator lets an HA manager restart PostgreSQL for a change that
// waits for one (wal_buffers): days of the week and a time of day in the host's time zone. The
// zero value is never: without a window the advisor restarts nothing, as it always did.
type RestartWindow struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes since midnight; end <= start wraps past midnight
	set        bool
	text       string
}

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// ParseRestartWindow reads "DAYS HH:MM-HH:MM": DAYS is "*" for every day, or days and ranges of
// days separated by commas (Mon-Fri,Sun); the time range may pass midnight (22:00-02:00 starts on
// the days named). An "@" may stand for the space ("Sat,Sun@02:00-05:00"), for a systemd
// Environment= line, whose $VARIABLE splits on spaces. "" is no window.
func ParseRestartWindow(s string) (RestartWindow, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return RestartWindow{}, nil
	}
	const want = `want "DAYS HH:MM-HH:MM" (or DAYS@HH:MM-HH:MM) in the host's time zone, e.g. "Sat,Sun 02:00-05:00" or "*@03:00-04:00"`
	days, span, ok := strings.Cut(s, " ")
	if !ok {
		days, span, ok = strings.Cut(s, "@")
	}
	if !ok || len(s) > 100 {
		return RestartWindow{}, fmt.Errorf("restart window %q: %s", cutText(s), want)
	}
	w := RestartWindow{set: true, text: s}
	if err := w.parseDays(strings.ToLower(strings.TrimSpace(days))); err != nil {
		return RestartWindow{}, fmt.Errorf("restart window %q: %w; %s", s, err, want)
	}
	from, to, ok := strings.Cut(strings.TrimSpace(span), "-")
	var err1, err2 error
	w.start, err1 = clockMinutes(from)
	w.end, err2 = clockMinutes(to)
	if !ok || err1 != nil || err2 != nil || w.start == w.end {
		return RestartWindow{}, fmt.Errorf("restart window %q: the time range %q is not two different HH:MM times; %s", s, span, want)
	}
	return w, nil
}

func (w *RestartWindow) parseDays(days string) error {
	if days == "*" {
		for i := range w.days {
			w.days[i] = true
		}
		return nil
	}
	for _, part := range strings.Split(days, ",") {
		a, b, isRange := strings.Cut(part, "-")
		from, ok1 := weekdays[a]
		to, ok2 := weekdays[b]
		if !isRange {
			to, ok2 = from, ok1
		}
		if !ok1 || !ok2 {
			return fmt.Errorf("%q is not a day (Mon, Tue, ... Sun) or a range of days (Mon-Fri)", part)
		}
		for d := from; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == to {
				break
			}
		}
	}
	return nil
}

func clockMinutes(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Contains reports whether t (in its own location, the host's) is inside the window. A range
// that passes midnight belongs to the day it starts on.
func (w RestartWindow) Contains(t time.Time) bool {
	if !w.set {
		return false
	}
	m := t.Hour()*60 + t.Minute()
	if w.start < w.end {
		return w.days[t.Weekday()] && m >= w.start && m < w.end
	}
	if m >= w.start {
		return w.days[t.Weekday()]
	}
	return m < w.end && w.days[(t.Weekday()+6)%7]
}

// Set reports whether a window was given.
func (w RestartWindow) Set() bool { return w.set }

func (w RestartWindow) String() string {
	if !w.set {
		return "never"
	}
	return w.text
}

func cutText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
