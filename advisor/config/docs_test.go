package config

import (
	"os"
	"slices"
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
	var commands []string
	if slices.Contains(l.Commands, "*") {
		commands = []string{"every command"}
	} else if l.Key != "" {
		commands = append(commands, "run")
	}
	for _, c := range l.Commands {
		if c != "*" && !slices.Contains(commands, c) {
			commands = append(commands, c)
		}
	}
	return "| " + strings.Join(names, ", ") + " | " + strings.Join(commands, ", ") + " | " + l.format(l.Min) + " | " + l.format(l.Max) + " |"
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
