package apply

import (
	"strings"
	"testing"
	"time"
)

func TestRestartWindow(t *testing.T) {
	at := func(day time.Weekday, hhmm string) time.Time {
		// 2026-12-06 is a Sunday.
		d, _ := time.ParseInLocation("2006-01-02 15:04", "2026-12-06 "+hhmm, time.Local)
		return d.AddDate(0, 0, int(day))
	}
	for _, tc := range []struct {
		window string
		t      time.Time
		want   bool
	}{
		{"", at(time.Sunday, "03:00"), false},
		{"* 03:00-04:00", at(time.Wednesday, "03:30"), true},
		{"* 03:00-04:00", at(time.Wednesday, "04:00"), false},
		{"Sat,Sun 02:00-05:00", at(time.Sunday, "02:00"), true},
		{"Sat,Sun 02:00-05:00", at(time.Monday, "02:30"), false},
		{"Sat,Sun@02:00-05:00", at(time.Sunday, "02:00"), true},
		{"*@03:00-04:00", at(time.Monday, "04:00"), false},
		{"Mon-Fri 01:00-02:00", at(time.Friday, "01:10"), true},
		{"Mon-Fri 01:00-02:00", at(time.Saturday, "01:10"), false},
		{"Fri-Mon 01:00-02:00", at(time.Sunday, "01:10"), true},
		{"Fri-Mon 01:00-02:00", at(time.Tuesday, "01:10"), false},
		{"Sat 22:00-02:00", at(time.Saturday, "23:00"), true},
		{"Sat 22:00-02:00", at(time.Sunday, "01:00"), true},
		{"Sat 22:00-02:00", at(time.Sunday, "23:00"), false},
		{"sat 22:00-02:00", at(time.Friday, "01:00"), false},
	} {
		w, err := ParseRestartWindow(tc.window)
		if err != nil {
			t.Fatalf("ParseRestartWindow(%q): %v", tc.window, err)
		}
		if got := w.Contains(tc.t); got != tc.want {
			t.Errorf("%q contains %s = %v, want %v", tc.window, tc.t.Format("Mon 15:04"), got, tc.want)
		}
	}
	for _, bad := range []string{"03:00-04:00", "Someday 03:00-04:00", "* 3-4", "* 03:00-03:00", "* 25:00-26:00", "Mon-", strings.Repeat("x", 200)} {
		if _, err := ParseRestartWindow(bad); err == nil || !strings.Contains(err.Error(), "DAYS HH:MM-HH:MM") {
			t.Errorf("ParseRestartWindow(%.40q) = %v, want an error with the form", bad, err)
		}
	}
}

// FuzzParseRestartWindow: whatever the flag holds, the parser does not panic and a window it
// takes answers Contains for any time.
func FuzzParseRestartWindow(f *testing.F) {
	for _, s := range []string{"* 03:00-04:00", "Sat,Sun 22:00-02:00", "Fri-Mon 01:00-02:00", "mon 00:00-23:59", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseRestartWindow(s)
		if err != nil {
			return
		}
		for h := 0; h < 48; h++ {
			_ = w.Contains(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).Add(time.Duration(h) * 30 * time.Minute))
		}
	})
}
