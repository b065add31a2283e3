package postgres

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestConninfoHostPort(t *testing.T) {
	for _, tc := range []struct{ in, host, port, err string }{
		{"user=repmgr host=10.0.0.1 port=5433 application_name=node2", "10.0.0.1", "5433", ""},
		{"host='db 1' password='it''s' port=5432", "", "", "keyword = value"},
		{"host='db 1", "", "", "unterminated"},
		{`host='db\'1' password='a b'`, "db'1", "5432", ""},
		{"hostaddr=10.0.0.2 user=r", "10.0.0.2", "5432", ""},
		{"postgresql://repmgr@10.0.0.3:6432/repmgr?application_name=x", "10.0.0.3", "6432", ""},
		{"postgresql:///repmgr?host=/var/run/postgresql&port=5433", "/var/run/postgresql", "5433", ""},
		{"host=a,b port=5432", "", "", "several hosts"},
		{"", "", "", "empty"},
		{"user=repmgr", "", "", "no host"},
		{"host", "", "", "keyword = value"},
	} {
		host, port, err := conninfoHostPort(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("%q: %q %q %v, want %q %q", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

// TestWithHostPort: the advisor's DSN, led to the primary, keeps everything but host and port,
// and pgx reads it so.
func TestWithHostPort(t *testing.T) {
	for _, dsn := range []string{"host=/run/postgresql user=pgwal-advisor dbname=postgres", "postgresql://pgwal-advisor@localhost:5432/postgres?sslmode=disable&host=/tmp", ""} {
		out, err := withHostPort(dsn, "10.0.0.1", "5433")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgconn.ParseConfig(out)
		if err != nil {
			t.Fatalf("%q -> %q: %v", dsn, out, err)
		}
		if cfg.Host != "10.0.0.1" || cfg.Port != 5433 {
			t.Errorf("%q -> %q reaches %s:%d", dsn, out, cfg.Host, cfg.Port)
		}
		if dsn != "" && cfg.User != "pgwal-advisor" {
			t.Errorf("%q -> %q: user %q", dsn, out, cfg.User)
		}
	}
}

// FuzzConninfo: primary_conninfo is a server's setting, read as input.
func FuzzConninfo(f *testing.F) {
	f.Add("user=repmgr host=10.0.0.1 port=5433")
	f.Add(`host='a\'b' port=1`)
	f.Add("postgresql://h:1/db")
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := conninfoHostPort(s)
		if err == nil && (host == "" || port == "" || strings.Contains(host, ",")) {
			t.Fatalf("%q gave host %q port %q without an error", s, host, port)
		}
	})
}
