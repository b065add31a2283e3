package rules

import (
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TestCounterTableComplete fails when a counter constant has no table entry (the recipe in
// CONTRIBUTING.md skipped a step) or two counters share a name.
func TestCounterTableComplete(t *testing.T) {
	seen := map[string]Counter{}
	for _, c := range Counters() {
		d, ok := c.def()
		if !ok || d.name == "" || d.epoch == nil {
			t.Errorf("counter %d has no complete entry in counterTable", int(c))
			continue
		}
		if prev, dup := seen[d.name]; dup {
			t.Errorf("counters %d and %d are both named %q", int(prev), int(c), d.name)
		}
		seen[d.name] = c
	}
	if got := Counter(0).String(); got != "counter(0)" {
		t.Errorf("Counter(0).String() = %q, want counter(0)", got)
	}
}

// TestCounterValueMissingSource checks that every counter reads as absent from an empty
// snapshot instead of dereferencing a nil part.
func TestCounterValueMissingSource(t *testing.T) {
	empty := &collector.Snapshot{Time: time.Unix(1, 0)}
	half := &collector.Snapshot{Postgres: &collector.Postgres{}, WALStorage: &collector.Storage{}}
	for _, c := range Counters() {
		for _, s := range []*collector.Snapshot{empty, half} {
			if v, ok := c.Value(s); ok {
				t.Errorf("%s.Value(snapshot without its source) = %v, true; want false", c, v)
			}
		}
	}
}
