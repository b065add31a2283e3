package rules

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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

// benchCitation matches a citation of a docs/benchmarks.md table, with the figures it quotes
// in parentheses after "table" when it quotes any.
var benchCitation = regexp.MustCompile(`docs/benchmarks\.md,? +([a-z0-9_' ]+?) tables?\b(?: +\(([^()]*)\))?`)

// joinedLiterals is a Go string literal continued on the next line ("... " +\n\t\t"...");
// commentBreak a line break inside a comment, however indented.
var (
	joinedLiterals = regexp.MustCompile(`"\s*\+\s*\n\s*"`)
	commentBreak   = regexp.MustCompile(`\n\s*(//)?`)
)

var citedNumber = regexp.MustCompile(`\d+(?:\.\d+)?`)

// TestBenchmarkCitationsHold keeps the rules' "why" honest: every citation of a docs/benchmarks.md
// table, in the rules' sources and code and in the docs, names a section the generated report
// has, and every figure it quotes in parentheses stands in that section. A rerun of the suite
// that moves a figure, or a citation of a table that was never committed, fails here.
func TestBenchmarkCitationsHold(t *testing.T) {
	b, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatalf("read docs/benchmarks.md: %v", err)
	}
	sections := benchSections(string(b))
	var texts []string
	for _, r := range All() {
		texts = append(texts, strings.Join(r.Sources, "\n"))
	}
	for _, glob := range []string{"*.go", "../docs/*.md", "../deploy/prometheus/*.yml", "../README.md"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "benchmarks.md") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, string(src))
		}
	}
	cited, seen := 0, map[string]bool{}
	for _, text := range texts {
		// A citation broken over lines of a comment or of concatenated strings reads as one.
		text = joinedLiterals.ReplaceAllString(text, "")
		text = commentBreak.ReplaceAllString(text, " ")
		text = strings.Join(strings.Fields(text), " ")
		for _, m := range benchCitation.FindAllStringSubmatch(text, -1) {
			if seen[m[0]] {
				continue
			}
			seen[m[0]] = true
			name, _, _ := strings.Cut(m[1], "'s ")
			sec, ok := sections[strings.TrimSpace(name)]
			if !ok {
				t.Errorf("%q cites a %q table: docs/benchmarks.md has no section %q", m[0], name, name)
				continue
			}
			cited++
			for _, n := range citedNumber.FindAllString(m[2], -1) {
				if !containsNumber(sec, n) {
					t.Errorf("%q quotes %s, which the %q section of docs/benchmarks.md does not hold", m[0], n, name)
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("no citation of docs/benchmarks.md found: the pattern no longer matches how the code cites")
	}
	// Links into the report from the other docs land on a heading it has.
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[headingAnchor(h)] = true
		}
	}
	for _, text := range texts {
		for _, m := range benchLink.FindAllStringSubmatch(text, -1) {
			if !anchors[m[1]] {
				t.Errorf("a link to benchmarks.md#%s: docs/benchmarks.md has no such heading", m[1])
			}
		}
	}
}

var benchLink = regexp.MustCompile(`benchmarks\.md#([a-z0-9_-]+)`)

// headingAnchor is the anchor a Markdown renderer (GitHub's) gives a heading: lower case,
// punctuation other than hyphens and underscores dropped, spaces as hyphens.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// benchSections splits the report at its "## " headings, keyed by the lowercased heading up
// to its colon ("seed 001", "neighbour", "commit grouping"). A top-level "# " heading ends a
// section too, so the hand-written parts' headings are not read as the section before them.
func benchSections(doc string) map[string]string {
	out := map[string]string{}
	var name string
	var body strings.Builder
	flush := func() {
		if name != "" {
			out[name] += body.String()
		}
		body.Reset()
	}
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			h, _, _ = strings.Cut(h, ":")
			name = strings.ToLower(strings.TrimSpace(h))
		} else if strings.HasPrefix(line, "# ") {
			flush()
			name = ""
		}
		body.WriteString(line + "\n")
	}
	flush()
	return out
}

// containsNumber reports whether n stands in text as a number of its own, not as part of a
// longer one ("45.5" is not in "145.5" nor in "45.55").
func containsNumber(text, n string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], n)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(n)
		digit := func(k int) bool { return k >= 0 && k < len(text) && text[k] >= '0' && text[k] <= '9' }
		beforeOK := !digit(j-1) && !(j >= 2 && text[j-1] == '.' && digit(j-2))
		afterOK := !digit(end) && !(end+1 < len(text) && text[end] == '.' && digit(end+1))
		if beforeOK && afterOK {
			return true
		}
		i = j + 1
	}
}
