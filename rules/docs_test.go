package rules

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDocsCoverRules keeps docs/rules.md in step with the code: every rule has a section
// headed by its ID, and every threshold is documented.
func TestDocsCoverRules(t *testing.T) {
	b, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	doc := string(b)
	headings := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if id, ok := strings.CutPrefix(line, "## "); ok {
			headings[strings.TrimSpace(id)] = true
		}
	}
	// The resolver's recommendations-conflict finding is documented like every rule's.
	for _, r := range append(All(), conflictRule()) {
		if !headings[r.ID] {
			t.Errorf("docs/rules.md has no section %q", "## "+r.ID)
		}
		for _, s := range r.Settings {
			if !strings.Contains(doc, "`"+s+"`") {
				t.Errorf("docs/rules.md does not mention %s's setting %s", r.ID, s)
			}
		}
	}
	typ := reflect.TypeOf(Thresholds{})
	for i := range typ.NumField() {
		if name := typ.Field(i).Name; !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/rules.md does not document threshold %s", name)
		}
	}
}

// TestDocsThresholdDefaults checks the defaults column of the thresholds table against
// DefaultThresholds.
func TestDocsThresholdDefaults(t *testing.T) {
	b, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	documented := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		fields := strings.Fields(cells[2])
		if len(fields) > 0 {
			documented[name] = strings.TrimSuffix(fields[0], "/s")
		}
	}
	def := reflect.ValueOf(DefaultThresholds())
	for i := range def.NumField() {
		name := def.Type().Field(i).Name
		t.Run(name, func(t *testing.T) {
			doc, ok := documented[name]
			if !ok {
				t.Fatalf("no row for %s in the thresholds table", name)
			}
			v := def.Field(i)
			var got, want float64
			switch v.Interface().(type) {
			case time.Duration:
				d, err := time.ParseDuration(doc)
				if err != nil {
					t.Fatalf("default %q: %v", doc, err)
				}
				got, want = float64(d), float64(v.Int())
			case float64:
				f, err := strconv.ParseFloat(doc, 64)
				if err != nil {
					t.Fatalf("default %q: %v", doc, err)
				}
				got, want = f, v.Float()
			case int, int64:
				n, err := parseDocBytes(doc)
				if err != nil {
					t.Fatalf("default %q: %v", doc, err)
				}
				got, want = float64(n), float64(v.Int())
			default:
				t.Fatalf("unhandled type %s", v.Type())
			}
			if got != want {
				t.Errorf("docs say %s = %s, code says %v", name, doc, v.Interface())
			}
		})
	}
}

func parseDocBytes(s string) (int64, error) {
	for suffix, mult := range map[string]int64{"GB": gB, "MB": mB, "kB": kB} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// TestDocsSectionsAreRules is the other direction of TestDocsCoverRules: a section of
// docs/rules.md headed by a rule-like ID (kebab-case) names a rule that exists, so that a
// renamed or removed rule does not leave its section behind. It also checks what
// CONTRIBUTING.md's rule recipe asks of the Rule value itself.
func TestDocsSectionsAreRules(t *testing.T) {
	b, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	ids := map[string]bool{}
	for _, r := range append(All(), conflictRule()) {
		if ids[r.ID] {
			t.Errorf("rule ID %s is used twice", r.ID)
		}
		ids[r.ID] = true
	}
	for _, r := range All() {
		if r.Title == "" || r.Rationale == "" || len(r.Sources) == 0 || r.Eval == nil {
			t.Errorf("rule %s: a rule needs a Title, a Rationale, Sources and Eval", r.ID)
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		id, ok := strings.CutPrefix(line, "## ")
		id = strings.TrimSpace(id)
		if !ok || !strings.Contains(id, "-") || strings.ContainsAny(id, " ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			continue
		}
		if !ids[id] {
			t.Errorf("docs/rules.md has a section %q but no rule has that ID", "## "+id)
		}
	}
}
