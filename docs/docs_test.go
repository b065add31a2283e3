// Package docs holds the tests that keep the documentation in step with the benchmark report it
// cites: a rerun of the bench that moves a figure updates docs/benchmarks.md, and this package's
// tests say which citation in docs/rules.md, the runbook, the README, the alert rules or the
// strings the rules print no longer holds.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// citedFiles are the texts that cite docs/benchmarks.md, relative to this directory: the docs
// (benchmarks.md itself excepted), the README, the alert rules, and the rules' Go files, whose
// summaries and expected effects quote the lab to the operator.
func citedFiles(t *testing.T) map[string]string {
	t.Helper()
	texts := map[string]string{}
	for _, glob := range []string{"*.md", "../README.md", "../deploy/prometheus/*.yml", "../rules/*.go"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if filepath.Base(f) == "benchmarks.md" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			texts[f] = string(b)
		}
	}
	if len(texts) == 0 {
		t.Fatal("no text to check: run from the docs directory")
	}
	return texts
}

func readBenchmarks(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("benchmarks.md")
	if err != nil {
		t.Fatalf("read docs/benchmarks.md: %v", err)
	}
	return string(b)
}

// TestBenchmarkCitationsHold keeps the "why" honest: every citation of a docs/benchmarks.md table
// names a section the report has, and every figure it quotes in parentheses stands in that
// section; every link into the report lands on a heading it has. A rerun that moves a figure, or
// a citation of a table that was never committed, fails here.
func TestBenchmarkCitationsHold(t *testing.T) {
	problems, cited := checkCitations(readBenchmarks(t), citedFiles(t))
	for _, p := range problems {
		t.Error(p)
	}
	if cited == 0 {
		t.Fatal("no citation of docs/benchmarks.md found: the pattern no longer matches how the docs cite")
	}
}

// TestBenchmarkCitationsCatchARerun shows the check can fail: with one quoted figure moved in
// the report, as a rerun would move it, the citation that quotes it is reported.
func TestBenchmarkCitationsCatchARerun(t *testing.T) {
	bench, texts := readBenchmarks(t), citedFiles(t)
	for _, c := range citationsIn(texts) {
		if len(c.figures) == 0 {
			continue
		}
		sections := benchSections(bench)
		old := sections[c.section]
		rerun := strings.Replace(bench, old, moveNumber(old, c.figures[0]), 1)
		problems, _ := checkCitations(rerun, texts)
		for _, p := range problems {
			if strings.Contains(p, "quotes "+c.figures[0]+",") {
				return
			}
		}
		t.Fatalf("moving %s in the %q section of docs/benchmarks.md was not caught (problems: %q)", c.figures[0], c.section, problems)
	}
	t.Fatal("no citation quotes a figure")
}

// moveNumber puts a 9 before every place n stands in text as a number of its own, as a rerun
// that measured another figure would.
func moveNumber(text, n string) string {
	var b strings.Builder
	for {
		j := numberIndex(text, n)
		if j < 0 {
			return b.String() + text
		}
		b.WriteString(text[:j] + "9" + n)
		text = text[j+len(n):]
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
	citedNumber    = regexp.MustCompile(`\d+(?:\.\d+)?`)
	benchLink      = regexp.MustCompile(`benchmarks\.md#([a-z0-9_-]+)`)
)

// citation is one citation of a table: the text as written, the section it names, the figures
// it quotes.
type citation struct {
	text, section string
	figures       []string
}

// citationsIn finds the citations in texts, each once, in a stable order.
func citationsIn(texts map[string]string) []citation {
	var names []string
	for name := range texts {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []citation
	seen := map[string]bool{}
	for _, name := range names {
		// A citation broken over lines of a comment or of concatenated strings reads as one.
		text := joinedLiterals.ReplaceAllString(texts[name], "")
		text = commentBreak.ReplaceAllString(text, " ")
		text = strings.Join(strings.Fields(text), " ")
		for _, m := range benchCitation.FindAllStringSubmatch(text, -1) {
			if seen[m[0]] {
				continue
			}
			seen[m[0]] = true
			section, _, _ := strings.Cut(m[1], "'s ")
			out = append(out, citation{text: m[0], section: strings.TrimSpace(section), figures: citedNumber.FindAllString(m[2], -1)})
		}
	}
	return out
}

// checkCitations checks the citations and links in texts against the report bench, returning
// what does not hold and how many citations named a section the report has.
func checkCitations(bench string, texts map[string]string) (problems []string, cited int) {
	sections := benchSections(bench)
	for _, c := range citationsIn(texts) {
		sec, ok := sections[c.section]
		if !ok {
			problems = append(problems, "\""+c.text+"\" cites a \""+c.section+"\" table: docs/benchmarks.md has no such section")
			continue
		}
		cited++
		for _, n := range c.figures {
			if !containsNumber(sec, n) {
				problems = append(problems, "\""+c.text+"\" quotes "+n+", which the \""+c.section+"\" section of docs/benchmarks.md does not hold")
			}
		}
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(bench, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[headingAnchor(h)] = true
		}
	}
	for _, text := range texts {
		for _, m := range benchLink.FindAllStringSubmatch(text, -1) {
			if !anchors[m[1]] {
				problems = append(problems, "a link to benchmarks.md#"+m[1]+": docs/benchmarks.md has no such heading")
			}
		}
	}
	return problems, cited
}

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
func containsNumber(text, n string) bool { return numberIndex(text, n) >= 0 }

// numberIndex is where n first stands in text as a number of its own, or -1.
func numberIndex(text, n string) int {
	for i := 0; ; {
		j := strings.Index(text[i:], n)
		if j < 0 {
			return -1
		}
		j += i
		end := j + len(n)
		digit := func(k int) bool { return k >= 0 && k < len(text) && text[k] >= '0' && text[k] <= '9' }
		beforeOK := !digit(j-1) && !(j >= 2 && text[j-1] == '.' && digit(j-2))
		afterOK := !digit(end) && !(end+1 < len(text) && text[end] == '.' && digit(end+1))
		if beforeOK && afterOK {
			return j
		}
		i = j + 1
	}
}
