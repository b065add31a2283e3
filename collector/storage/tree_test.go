package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// extractTree writes the files and symlinks of a txtar archive (golang.org/x/tools/txtar; a
// name "NAME -> TARGET" is a symlink) under a new temporary directory and returns it.
//
// The procfs and sysfs fixtures live in an archive, as node_exporter and procfs keep theirs,
// rather than as committed trees: sysfs names hold colons (dev/block/8:1), which a Go module
// zip may not contain (golang.org/x/mod/module.CheckFilePath), so committed trees would make
// the module impossible to fetch or `go install`; module zips also drop symlinks. The format is
// simple enough that parsing it here costs less than a dependency on x/tools.
func extractTree(t *testing.T, archive string) string {
	t.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	root := t.TempDir()
	var name string
	var content strings.Builder
	flush := func() {
		if name == "" {
			return
		}
		if link, target, ok := strings.Cut(name, " -> "); ok {
			p := filepath.Join(root, filepath.FromSlash(link))
			mkdirAll(t, filepath.Dir(p))
			if err := os.Symlink(target, p); err != nil {
				t.Fatalf("extract %s: %v", archive, err)
			}
			return
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		mkdirAll(t, filepath.Dir(p))
		if err := os.WriteFile(p, []byte(content.String()), 0o644); err != nil {
			t.Fatalf("extract %s: %v", archive, err)
		}
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			name = strings.TrimSpace(trimmed[3 : len(trimmed)-3])
			content.Reset()
			continue
		}
		if name != "" {
			content.WriteString(line)
		}
	}
	flush()
	return root
}

func mkdirAll(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("extract: %v", err)
	}
}
