package apply

import (
	"slices"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TestSpecsMatchSettingTable guards CONTRIBUTING.md's setting recipe from apply's side: a
// setting the table says apply can change has a spec (bounds, kind, family), a spec belongs to
// such a setting, and a setting that is never applied is never marked applicable.
func TestSpecsMatchSettingTable(t *testing.T) {
	for _, d := range collector.SettingTable() {
		_, has := specFor(d.Name)
		switch {
		case d.Apply.Applies() && !has:
			t.Errorf("%s is marked %v in collector.SettingTable but has no spec in specs() (advisor/apply/apply.go): add one or mark it AdviceOnly", d.Name, d.Apply)
		case !d.Apply.Applies() && has:
			t.Errorf("%s has a spec but collector.SettingTable marks it %v: mark it Applicable", d.Name, d.Apply)
		}
	}
	for _, s := range specs() {
		if _, ok := collector.LookupSetting(s.name); !ok {
			t.Errorf("spec %s is not in collector.SettingTable (collector/settings.go)", s.name)
		}
	}
	for _, name := range neverApplied() {
		if d, ok := collector.LookupSetting(name); ok && d.Apply.Applies() {
			t.Errorf("%s is never applied but collector.SettingTable marks it %v", name, d.Apply)
		}
	}
	defaults := DefaultSettings()
	if len(defaults) == 0 {
		t.Fatal("DefaultSettings() is empty")
	}
	got, err := ParseSettings(defaults)
	if err != nil || !slices.Equal(got, defaults) {
		t.Errorf("ParseSettings(DefaultSettings()) = %v, %v; want them back unchanged", got, err)
	}
}
