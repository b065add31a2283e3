package lab

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PgBouncerHint is the install hint for Debian's pgbouncer.
const PgBouncerHint = "install Debian's pgbouncer package (as root: apt-get install --no-install-recommends pgbouncer, or make deps)"

// NewTestPgBouncer starts Debian's PgBouncer in front of c on a free loopback port, with the
// pool mode given (transaction, session), trust authentication and the postgres database, run as
// the server's user (PgBouncer refuses root), and stops it when the test ends. It returns the
// DSN through the pooler.
func NewTestPgBouncer(t *testing.T, c *Cluster, poolMode string) string {
	t.Helper()
	bin := RequireTool(t, "pgbouncer", PgBouncerHint)
	dir := SharedTempDir(t, "")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = 2
logfile = %s
`, c.Port(), port, filepath.Join(dir, "userlist.txt"), poolMode, filepath.Join(dir, "pgbouncer.log"))
	for name, content := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.chown(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	StartProcess(t, "pgbouncer", cmd)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer does not listen on %s after 10s: %s", addr, lastLines(log, 5))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port)
}
