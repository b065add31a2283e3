package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesOversizedFile: a configuration file over 1 MiB is refused before it is parsed
// (issue 33: 100 MB took 721 MB of memory at start and on SIGHUP), naming the file and the bound.
func TestLoadRefusesOversizedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yml")
	if err := os.WriteFile(path, []byte("log_level: \""+strings.Repeat("x", maxFileBytes)+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "over 1 MiB") || len(err.Error()) > 500 {
		t.Errorf("Load of a 1 MiB file: %.300v, want a short refusal naming the bound", err)
	}
}
