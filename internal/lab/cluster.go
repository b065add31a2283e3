// Package lab is the test and demo equipment: throwaway PostgreSQL clusters and the seed
// workloads that tests, the demo and the benchmarks run against them. Nothing in the daemon's
// production path imports it.
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoServer is returned when no PostgreSQL server binaries are found.
var ErrNoServer = errors.New("no PostgreSQL server binaries found (initdb, pg_ctl, postgres): install them (Debian: apt-get install postgresql) or put pg_config on PATH")

// ClusterOptions configure a throwaway cluster.
type ClusterOptions struct {
	// BinDir holds initdb, pg_ctl and postgres; empty means FindBinDir.
	BinDir string
	// WALDir, when set, puts pg_wal there (initdb -X). It must be empty or absent; Stop removes it.
	WALDir string
	// BaseDir is where the cluster's temporary directory is made; empty means os.TempDir(). It
	// must be traversable by the postgres user when running as root (t.TempDir() is not).
	BaseDir string
	// Settings are written to an included configuration file before the first start, so that
	// ALTER SYSTEM can still override them (a -c on the command line could not be overridden).
	Settings map[string]string
}

// Cluster is a running throwaway PostgreSQL cluster. Stop it (always: it removes everything).
type Cluster struct {
	binDir  string
	baseDir string
	dataDir string
	walDir  string
	sockDir string
	logFile string
	port    int
	cred    *syscall.Credential
}

// FindBinDir finds PostgreSQL's server binaries: pg_config --bindir first, then the newest
// /usr/lib/postgresql/*/bin.
func FindBinDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	candidates = append(candidates, dirs...)
	for _, d := range candidates {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// StartCluster runs initdb and starts a cluster listening on a unix socket in its own
// directory and on a free loopback port. On error nothing is left behind.
func StartCluster(ctx context.Context, opts ClusterOptions) (c *Cluster, err error) {
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp(opts.BaseDir, "pgwal-lab-")
	if err != nil {
		return nil, fmt.Errorf("make cluster directory: %w", err)
	}
	c = &Cluster{
		binDir:  binDir,
		baseDir: base,
		dataDir: filepath.Join(base, "data"),
		sockDir: filepath.Join(base, "sock"),
		logFile: filepath.Join(base, "server.log"),
		cred:    cred,
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if err := os.Mkdir(c.sockDir, 0o700); err != nil {
		return c, fmt.Errorf("make socket directory: %w", err)
	}
	if err := c.chown(base, c.sockDir); err != nil {
		return c, err
	}
	args := []string{"-D", c.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"}
	if opts.WALDir != "" {
		if err := prepareWALDir(opts.WALDir); err != nil {
			return c, err
		}
		// Only now is the WAL directory ours to remove on Stop.
		c.walDir = opts.WALDir
		if err := c.chown(c.walDir); err != nil {
			return c, err
		}
		args = append(args, "-X", c.walDir)
	}
	if out, err := c.command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("initdb: %w: %s", err, lastLines(out, 5))
	}
	if err := c.WriteSettings(opts.Settings); err != nil {
		return c, err
	}
	// A free port can be taken by someone else between our probe and the server's bind: retry.
	for attempt := 0; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			return c, err
		}
		if err = c.start(ctx); err == nil {
			return c, nil
		}
		if attempt == 2 || ctx.Err() != nil {
			return c, err
		}
	}
}

// prepareWALDir checks that dir is absent or empty, as initdb -X requires.
func prepareWALDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o700)
	case err != nil:
		return fmt.Errorf("WAL directory %s: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("WAL directory %s is not empty: initdb -X needs an empty directory", dir)
	}
	return nil
}

// serverCredential returns the postgres user's credential when running as root (PostgreSQL
// refuses to run as root), nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres user, which was not found (install postgresql or create it): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (c *Cluster) chown(paths ...string) error {
	if c.cred == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("give %s to the postgres user: %w", p, err)
		}
	}
	return nil
}

// command builds a command for one of the server binaries, run as the server's user.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.baseDir
	cmd.Env = []string{"PATH=" + c.binDir + ":/usr/bin:/bin", "LC_ALL=C", "HOME=" + c.baseDir}
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.port, c.sockDir)
	out, err := c.command(ctx, "pg_ctl", "start", "-D", c.dataDir, "-l", c.logFile, "-w", "-t", "60", "-o", opts).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(c.logFile)
		return fmt.Errorf("pg_ctl start: %w: %s; server log: %s", err, lastLines(out, 3), lastLines(log, 5))
	}
	return nil
}

// WriteSettings replaces the lab's settings file (included from postgresql.conf). The new values
// take effect at the next Reload or Restart.
func (c *Cluster) WriteSettings(settings map[string]string) error {
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# written by pgwal-advisor's lab\n")
	for _, k := range names {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	labConf := filepath.Join(c.dataDir, "lab.conf")
	if err := os.WriteFile(labConf, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write lab settings: %w", err)
	}
	if err := c.chown(labConf); err != nil {
		return err
	}
	conf := filepath.Join(c.dataDir, "postgresql.conf")
	main, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	if !bytes.Contains(main, []byte("include_if_exists = 'lab.conf'")) {
		main = append(main, []byte("\ninclude_if_exists = 'lab.conf'\n")...)
		if err := os.WriteFile(conf, main, 0o600); err != nil {
			return fmt.Errorf("write postgresql.conf: %w", err)
		}
	}
	return nil
}

// Restart restarts the server (fast shutdown), e.g. after a restart-context setting changed.
func (c *Cluster) Restart(ctx context.Context) error {
	if out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "fast", "-w", "-t", "60").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, lastLines(out, 3))
	}
	return c.start(ctx)
}

// Stop stops the server and removes its directories (and the WAL directory). It is safe to
// call more than once and on a half-started cluster; it never leaves a server running.
func (c *Cluster) Stop() error {
	if c == nil || c.baseDir == "" {
		return nil
	}
	var errs []error
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		// Immediate: the cluster is thrown away, so its shutdown checkpoint would only cost
		// time (tens of seconds after a write-heavy test on a slow or busy disk).
		out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-t", "30").CombinedOutput()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop: %w: %s", err, lastLines(out, 3)))
			c.kill()
		}
	}
	if c.walDir != "" {
		if err := os.RemoveAll(c.walDir); err != nil {
			errs = append(errs, fmt.Errorf("remove WAL directory: %w", err))
		}
	}
	if err := os.RemoveAll(c.baseDir); err != nil {
		errs = append(errs, fmt.Errorf("remove cluster directory: %w", err))
	}
	c.baseDir = ""
	return errors.Join(errs...)
}

// kill ends the postmaster by its pid when pg_ctl could not stop it; SIGQUIT makes it kill its
// children, SIGKILL follows if it does not go.
func (c *Cluster) kill() {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGQUIT)
	for i := 0; i < 50; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// DSN is a libpq keyword connection string for the cluster's unix socket.
func (c *Cluster) DSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", c.sockDir, c.port)
}

// URL is the cluster's connection string in URL form, for tests of that DSN form.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port is the TCP port the cluster listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// SocketDir is the directory of the cluster's unix socket.
func (c *Cluster) SocketDir() string { return c.sockDir }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Connect opens a connection to the cluster.
func (c *Cluster) Connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return nil, fmt.Errorf("connect to lab cluster: %w", err)
	}
	return conn, nil
}

// Exec runs SQL statements on a fresh connection.
func (c *Cluster) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("exec %q: %w", firstLine(sql), err)
	}
	return nil
}

// Reload asks the server to reread its configuration.
func (c *Cluster) Reload(ctx context.Context) error {
	return c.Exec(ctx, "SELECT pg_reload_conf()")
}

// Command returns a command for a binary in BinDir (pgbench, pg_test_fsync, psql), run as the
// server's user with the connection environment set.
//
// A client tool that BinDir lacks (the npm server builds hold initdb, pg_ctl and postgres only)
// comes from the distribution's server (FindBinDir): pgbench and psql speak to any later server.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := c.command(ctx, name, args...)
	if !isExecutable(cmd.Path) {
		if dir, err := FindBinDir(); err == nil && isExecutable(filepath.Join(dir, name)) {
			cmd.Path = filepath.Join(dir, name)
			cmd.Args[0] = cmd.Path
		}
	}
	cmd.Env = append(cmd.Env, "PGHOST="+c.sockDir, "PGPORT="+strconv.Itoa(c.port), "PGUSER=postgres", "PGDATABASE=postgres")
	return cmd
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
