package collector

import (
	"slices"
	"testing"
)

// TestSettingTable keeps the table's entries complete and unique.
func TestSettingTable(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range SettingTable() {
		if d.Name == "" || d.Source < FromPostgres || d.Source > FromHost || d.Apply < Observed || d.Apply > AppliedByDefault {
			t.Errorf("setting %q: incomplete entry %+v", d.Name, d)
		}
		if seen[d.Name] {
			t.Errorf("setting %s is listed twice", d.Name)
		}
		seen[d.Name] = true
		if _, ok := LookupSetting(d.Name); !ok {
			t.Errorf("LookupSetting(%q) finds nothing", d.Name)
		}
	}
	// The durability settings are advice only, whatever else changes in the table.
	for _, name := range []string{Fsync, SynchronousCommit, FullPageWrites} {
		if d, _ := LookupSetting(name); d.Apply != AdviceOnly {
			t.Errorf("%s: Apply = %v, want AdviceOnly", name, d.Apply)
		}
	}
}

// TestSettingNamesFromTable checks that the collector reads exactly the table's PostgreSQL
// entries, in the table's order (the order `collect` prints them): a setting added to the table
// is collected without a second list to keep in step.
func TestSettingNamesFromTable(t *testing.T) {
	var want []string
	for _, d := range SettingTable() {
		if d.Source == FromPostgres {
			want = append(want, d.Name)
		}
	}
	if got := SettingNames(); !slices.Equal(got, want) {
		t.Errorf("SettingNames() = %v, want the FromPostgres entries of SettingTable() %v", got, want)
	}
}
