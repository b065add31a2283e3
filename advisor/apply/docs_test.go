package apply

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TestDocsSettingRows keeps docs/apply.md's "What may be changed" table in step with specs():
// every setting apply can change has a row, every row names such a setting, "(default)" marks
// exactly the default --apply.settings, and a kernel knob says sysctl where a server setting
// says reload or restart.
func TestDocsSettingRows(t *testing.T) {
	rows := docsSettingRows(t)
	if len(rows) == 0 {
		t.Fatal(`docs/apply.md: no rows found under "## What may be changed"`)
	}
	defaults := DefaultSettings()
	for _, s := range specs() {
		row, ok := rows[s.name]
		if !ok {
			t.Errorf("docs/apply.md: %s can be applied (specs() in advisor/apply/apply.go) but has no row in \"What may be changed\"", s.name)
			continue
		}
		if want := slices.Contains(defaults, s.name); row.isDefault != want {
			t.Errorf("docs/apply.md: %s is marked (default) = %v, but DefaultSettings() says %v", s.name, row.isDefault, want)
		}
		d, _ := collector.LookupSetting(s.name)
		switch {
		case d.Source == collector.FromKernel && row.how != "sysctl":
			t.Errorf("docs/apply.md: kernel knob %s is applied with sysctl, the row says %q", s.name, row.how)
		case d.Source == collector.FromPostgres && row.how != "reload" && row.how != "restart":
			t.Errorf("docs/apply.md: %s is applied by ALTER SYSTEM and a reload or restart, the row says %q", s.name, row.how)
		}
	}
	for name := range rows {
		if _, ok := specFor(name); !ok {
			t.Errorf("docs/apply.md: row names %s, which apply cannot change (no spec in specs())", name)
		}
	}
}

type docsRow struct {
	isDefault bool
	how       string
}

// docsSettingRows reads the setting table of docs/apply.md: the first cell names one or more
// settings in backquotes, each optionally followed by "(default)"; the second says how.
func docsSettingRows(t *testing.T) map[string]docsRow {
	t.Helper()
	b, err := os.ReadFile("../../docs/apply.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## What may be changed\n")
	if !ok {
		t.Fatal(`docs/apply.md has no section "## What may be changed"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([^`]+)`( \\(default\\))?")
	rows := map[string]docsRow{}
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "| `") {
			continue
		}
		how := strings.TrimSpace(cells[2])
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = docsRow{isDefault: m[2] != "", how: how}
		}
	}
	return rows
}
