package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClusterLifecycle(t *testing.T) {
	RequireServer(t)
	ctx := context.Background()
	walParent, err := os.MkdirTemp("", "pgwal-lab-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(walParent)
	if err := os.Chmod(walParent, 0o755); err != nil {
		t.Fatal(err)
	}
	walDir := filepath.Join(walParent, "wal")

	c, err := StartCluster(ctx, ClusterOptions{WALDir: walDir, Settings: map[string]string{"wal_buffers": "64kB"}})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	base := c.baseDir
	defer c.Stop()

	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var walBuffers, dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_buffers'), current_setting('data_directory')").Scan(&walBuffers, &dataDir); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if walBuffers != "64kB" {
		t.Errorf("wal_buffers = %q, want 64kB", walBuffers)
	}
	link, err := os.Readlink(filepath.Join(dataDir, "pg_wal"))
	if err != nil || link != walDir {
		t.Errorf("pg_wal -> %q (%v), want %q", link, err, walDir)
	}

	// ALTER SYSTEM must be able to override the lab's settings (apply mode relies on it).
	if err := c.Exec(ctx, "ALTER SYSTEM SET wal_buffers = '1MB'"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	conn, err = c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW wal_buffers").Scan(&walBuffers); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if walBuffers != "1MB" {
		t.Errorf("after ALTER SYSTEM and restart wal_buffers = %q, want 1MB", walBuffers)
	}

	if d, err := c.BulkInsert(ctx, "foo", 1000); err != nil || d <= 0 {
		t.Errorf("BulkInsert = %v, %v", d, err)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, p := range []string{base, walDir} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Stop (%v)", p, err)
		}
	}
}

func TestStartClusterBadWALDir(t *testing.T) {
	RequireServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junk"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := StartCluster(context.Background(), ClusterOptions{WALDir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("StartCluster with a non-empty WAL dir: err = %v, want 'not empty'", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "junk")); err != nil {
		t.Errorf("a refused WAL dir must be left alone: %v", err)
	}
}
