package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap/zaptest"
)

func TestHintFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"wrong password", &pgconn.PgError{Code: "28P01"}, "check the user/password in --dsn or ~/.pgpass"},
		{"unknown role", &pgconn.PgError{Code: "28000"}, "check the user/password in --dsn or ~/.pgpass"},
		{"unknown database", &pgconn.PgError{Code: "3D000"}, "check dbname in --dsn"},
		{"permission denied", fmt.Errorf("query: %w", &pgconn.PgError{Code: "42501"}), "GRANT pg_monitor TO advisor"},
		{"too many connections", &pgconn.PgError{Code: "53300"}, "max_connections"},
		{"starting up", &pgconn.PgError{Code: "57P03"}, "retry later"},
		{"timeout", context.DeadlineExceeded, "no answer within 5s"},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, "is the server running?"},
		{"unknown host", &net.DNSError{Name: "nosuchhost"}, "check the host in --dsn"},
		{"other", errors.New("something"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hintFor(tt.err, "advisor", 5*time.Second)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("hintFor(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{"advisor": "advisor", "Advisor": `"Advisor"`, `a"b`: `"a""b"`, "": "<role>"} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDSNSecrets(t *testing.T) {
	tests := []struct {
		dsn  string
		want []string
	}{
		{"host=db user=a password=sekrit", []string{"sekrit"}},
		{"host=db password = 'se cr\\'et' user=a", []string{"se cr\\'et", "se cr'et"}},
		{"postgres://a:sekrit@db:5432/x", []string{"sekrit"}},
		{"postgresql://a:se%40krit@db/x", []string{"se%40krit", "se@krit"}},
		{"postgres://a@db/x?sslmode=disable&password=sekrit", []string{"sekrit"}},
		{"host=db user=a", nil},
		{"", nil},
	}
	for _, tt := range tests {
		got := DSNSecrets(tt.dsn)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("DSNSecrets(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	tests := []struct {
		name, dsn string
		// password is what must not be seen; want is the whole redacted string.
		password, want string
	}{
		{"sslpassword keyword", "host=db sslpassword=keypass user=a", "keypass", "host=db sslpassword=xxxxx user=a"},
		{"sslpassword query", "postgres://a@db/x?sslpassword=keypass", "keypass", "postgres://a@db/x?sslpassword=xxxxx"},
		{"keyword right after a quote", "user='a'password=sekrit", "sekrit", "user='a'password=xxxxx"},
		{"escaped space in an unquoted value", `host=db password=se\ krit user=a`, "krit", "host=db password=xxxxx user=a"},
		{"escaped newline in a quoted value", "password='se\\\nkrit' host=db", "krit", "password='xxxxx' host=db"},
		{"escaped quote before the closing one", `password='it\'s\\' host=db`, `it\'s`, `password='xxxxx' host=db`},
		{"raw / in URL userinfo", "postgres://a:sek@ret/phrase@db/x", "ret/phrase", "postgres://a:xxxxx@db/x"},
		{"raw & in a query password", "postgres://a@db/x?password=sek&ret&sslmode=disable", "ret", "postgres://a@db/x?password=xxxxx&sslmode=disable"},
		{"# in a query password", "postgres://a@db/x?password=sek%23ret#phrase", "phrase", "postgres://a@db/x?password=xxxxx"},
		{"unescaped words in a keyword value", "host=db password=two words user=a", "words", "host=db password=xxxxx user=a"},
		{"a keyword with spaces around = is not part of the value", "password=pw host = db", "pw", "password=xxxxx host = db"},
		// Masking "ax" in "aax" leaves "axxxxx", which holds "ax" again.
		{"mask next to the text", "password=ax user=aax", "ax", "password=xxxxx user=xxxxxxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redact(tt.dsn, DSNSecrets(tt.dsn))
			if strings.Contains(got, tt.password) || got != tt.want {
				t.Errorf("redact(%q) = %q, want %q (DSNSecrets %q)", tt.dsn, got, tt.want, DSNSecrets(tt.dsn))
			}
		})
	}
}

// closedPort returns a loopback port that nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// These need no server: the server is down.
func TestConnectErrors(t *testing.T) {
	port := closedPort(t)
	tests := []struct {
		name string
		dsn  string
		env  map[string]string
		want []string
	}{
		{name: "server down", dsn: fmt.Sprintf("host=127.0.0.1 port=%d user=advisor password=sekrit dbname=postgres sslmode=disable", port),
			want: []string{"connect to PostgreSQL at host=127.0.0.1 port=" + strconv.Itoa(port), "is the server running?"}},
		{name: "URL", dsn: fmt.Sprintf("postgres://advisor:sekrit@127.0.0.1:%d/postgres?sslmode=disable", port),
			want: []string{"port=" + strconv.Itoa(port), "is the server running?"}},
		{name: "password in URL query", dsn: fmt.Sprintf("postgres://advisor@127.0.0.1:%d/postgres?password=sekrit", port),
			want: []string{"is the server running?"}},
		{name: "malformed keyword DSN", dsn: "host=127.0.0.1 password=sekrit port=notaport",
			want: []string{"parse --dsn", "postgres:// URL"}},
		{name: "malformed URL", dsn: "postgres://advisor:sekrit@127.0.0.1:notaport/postgres",
			want: []string{"parse --dsn"}},
		{name: "malformed quoted password", dsn: "host=127.0.0.1 password='sekrit",
			want: []string{"parse --dsn"}},
		// An empty DSN means the PG* environment, as with psql.
		{name: "environment", dsn: "", env: map[string]string{
			"PGHOST": "127.0.0.1", "PGPORT": strconv.Itoa(port), "PGUSER": "advisor", "PGPASSWORD": "sekrit", "PGSSLMODE": "disable",
		}, want: []string{"host=127.0.0.1 port=" + strconv.Itoa(port) + " user=advisor", "is the server running?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c := New(tt.dsn, Options{QueryTimeout: 2 * time.Second, Logger: zaptest.NewLogger(t)})
			defer c.Close(context.Background())
			pg, err := c.Collect(context.Background())
			if err == nil {
				t.Fatalf("Collect = %+v, want an error", pg)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "sekrit") {
				t.Errorf("error %q contains the password", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is more than one line", msg)
			}
			serr := c.SampleWaitEvents(context.Background())
			if serr == nil || strings.Contains(serr.Error(), "sekrit") {
				t.Errorf("SampleWaitEvents = %v, want an error without the password", serr)
			}
		})
	}
}

// A server that accepts connections and never answers must not hang the collector.
func TestHungServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			// Hold the connection open, say nothing; closed when the test ends.
			t.Cleanup(func() { conn.Close() })
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	c := New(fmt.Sprintf("host=127.0.0.1 port=%d user=advisor sslmode=disable", port), Options{QueryTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err = c.Collect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("Collect error = %v, want a timeout naming 300ms", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Collect took %s against a hung server", d)
	}
}

// A caller whose context ends while another holds the connection gives up.
func TestAcquireHonoursContext(t *testing.T) {
	c := New("host=127.0.0.1", Options{})
	if err := c.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Collect(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Collect while busy = %v, want the context's deadline", err)
	}
	if err := c.SampleWaitEvents(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SampleWaitEvents while busy = %v, want the context's deadline", err)
	}
}

// TestRedactOverlapping: a password that also begins earlier in the string than where it stands
// ("password=p" at the start of "password=password=p") is masked whole, not cut at its first
// occurrence (which showed "xxxxxassword=p": 9 of its 10 bytes).
func TestRedactOverlapping(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"host=db user=a password=password=p", "host=db user=a xxxxx"},
		{"postgres://a:pp@db/x?password=pp", "postgres://a:xxxxx@db/x?password=xxxxx"},
	} {
		if got := redact(tc.dsn, DSNSecrets(tc.dsn)); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
