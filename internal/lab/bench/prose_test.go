package bench

import (
	"strings"
	"testing"
)

func TestMergeProse(t *testing.T) {
	block := func(id, text string) string {
		var b strings.Builder
		writeProse(&b, id, text)
		return b.String()
	}
	generated := "# Seed benchmarks\n\n## Neighbour\n\n| t |\n\n" + block("neighbour", "default text") + "Scenario time: 1s.\n"
	tests := []struct {
		name, previous string
		want, notWant  []string
	}{
		{
			name:     "no previous report: the default stays",
			previous: "",
			want:     []string{"default text"},
		},
		{
			name: "hand-written prose and sections are kept",
			previous: "# Seed benchmarks\n\n## Neighbour\n\n| old |\n\n" + block("neighbour", "measured: the flush waits behind write-back") +
				"\n# Scrape cost\n\nby hand\n\n## Scrape cost on a quiet machine\n\nalso by hand\n",
			want:    []string{"measured: the flush waits behind write-back", "# Scrape cost\n\nby hand", "## Scrape cost on a quiet machine", "| t |"},
			notWant: []string{"default text", "| old |"},
		},
		{
			name:     "an empty block in the previous report does not erase the default",
			previous: "# Seed benchmarks\n" + block("neighbour", ""),
			want:     []string{"default text"},
		},
		{
			name:     "a section the new report has is not doubled",
			previous: "# Seed benchmarks\n\nold tables\n",
			want:     []string{"| t |"},
			notWant:  []string{"old tables"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(MergeProse([]byte(tt.previous), []byte(generated)))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("merged report lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("merged report has %q:\n%s", w, got)
				}
			}
			if n := strings.Count(got, "# Seed benchmarks"); n != 1 {
				t.Errorf("the report's heading appears %d times:\n%s", n, got)
			}
		})
	}
}
