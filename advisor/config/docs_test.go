package config

import (
	"os"
	"strings"
	"testing"
)

// docRow is a row's line in docs/http.md's bounds table.
func docRow(l Limit) string {
	var names []string
	if l.Key != "" {
		names = append(names, "`"+l.Key+"`")
	}
	if l.Flag != "" {
		names = append(names, "`--"+l.Flag+"`")
	}
	return "| " + strings.Join(names, ", ") + " | " + l.format(l.Min) + " | " + l.format(l.Max) + " |"
}

// docs/http.md lists every bound as Limits has it.
func TestBoundsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, l := range Limits() {
		if row := docRow(l); !strings.Contains(string(b), row+"\n") {
			missing = append(missing, row)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/http.md's bounds table lacks or differs in these rows (update it):\n%s", strings.Join(missing, "\n"))
	}
}
