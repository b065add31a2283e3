package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Debian cluster the first-hour test makes with postgresql-common, as an operator's is made.
const (
	fhVersion = "15"
	fhCluster = "pgwalfirsthour"
)

// TestFirstHourDebian (issue 35) is an operator's first hour on Debian's own PostgreSQL, run as
// written: the .deb built and installed with dpkg; a cluster made by postgresql-common
// (pg_createcluster: its pg_hba.conf and pg_ident.conf as installed, a 0700 data directory); the
// SQL of the README's "Connecting" section, read from README.md, run as the superuser; then the
// unit's ExecStart as its User, with its Environment, EnvironmentFile, SupplementaryGroups and
// capabilities (setpriv does what systemd would). /readyz must answer 200 and the postgres and
// WAL storage parts must be read, with the probe running, within a minute; `doctor` must report
// every prerequisite ok, and name the fix for each one taken away in turn. dpkg --purge then
// leaves nothing. On b4517f4 the daemon could not log in (peer authentication), and with a
// pg_ident map it could not find the WAL (the data directory's mode).
func TestFirstHourDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("installs a package and makes a Debian cluster on this machine: not with -short")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "installing the package needs root")
	}
	for _, tool := range []string{"dpkg", "pg_createcluster", "setpriv", "/usr/lib/postgresql/" + fhVersion + "/bin/postgres"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, tool+" not found: the first-hour test needs Debian's postgresql-"+fhVersion+" and postgresql-common (make deps)")
		}
	}
	if isInstalled(t) {
		t.Skipf("%s is already installed here: the test would replace it", pkgName)
	}
	deb := buildPackage(t)
	t.Cleanup(func() {
		if isInstalled(t) {
			dpkg(t, "--purge", pkgName)
		}
	})
	dpkg(t, "--install", deb)
	port := newDebianCluster(t)

	for _, sql := range readmeSQL(t) {
		psql(t, port, sql)
	}
	unit := parseUnit(t, pkgUnit)
	env := unitEnv(t, unit, map[string]string{"PGPORT": strconv.Itoa(port)})
	addr := freeLoopback(t)
	env["PGWAL_ADVISOR_ARGS"] = strings.TrimSpace(env["PGWAL_ADVISOR_ARGS"] + " --web.listen-address=" + addr + " --interval=2s")

	t.Run("doctor all ok", func(t *testing.T) {
		out, code := asUnit(t, unit, env, true, pkgBinary, "doctor")
		if code != 0 || strings.Contains(out, "FAIL") {
			t.Errorf("doctor as the unit: exit %d:\n%s", code, out)
		}
		t.Logf("doctor as the unit:\n%s", out)
	})
	t.Run("daemon ready within a minute", func(t *testing.T) {
		runDaemonAsUnit(t, unit, env, addr)
	})
	t.Run("doctor names each fix", func(t *testing.T) {
		doctorPrerequisites(t, unit, env, port)
	})

	dpkg(t, "--purge", pkgName)
	for _, p := range []string{pkgBinary, pkgUnit, pkgDefault, pkgDoc, pkgState} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("after dpkg --purge %s is still there", p)
		}
	}
	if _, err := user.Lookup(pkgName); err == nil {
		t.Errorf("after dpkg --purge the %s user is still there", pkgName)
	}
}

// newDebianCluster makes and starts fhCluster with pg_createcluster on a free port, as Debian's
// tools make one (its configuration in /etc/postgresql, its data in /var/lib/postgresql, its
// socket in /run/postgresql), and drops it when the test ends.
func newDebianCluster(t *testing.T) int {
	t.Helper()
	port, _ := strconv.Atoi(strings.TrimPrefix(freeLoopback(t), "127.0.0.1:"))
	_ = exec.Command("pg_dropcluster", "--stop", fhVersion, fhCluster).Run() // a leftover of a killed run
	out, err := exec.Command("pg_createcluster", fhVersion, fhCluster, "-p", strconv.Itoa(port), "--start").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_createcluster: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("pg_dropcluster", "--stop", fhVersion, fhCluster).CombinedOutput(); err != nil {
			t.Errorf("pg_dropcluster: %v\n%s", err, out)
		}
	})
	data := filepath.Join("/var/lib/postgresql", fhVersion, fhCluster)
	if st, err := os.Stat(data); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the cluster's data directory %s is %v (%v): the test is of Debian's 0700", data, st.Mode(), err)
	}
	return port
}

// readmeSQL returns the SQL statements of README.md's "Connecting" section: its indented lines
// that end in a semicolon, as an operator pastes them into psql.
func readmeSQL(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(b)
	start := strings.Index(sec, "\n## Connecting\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Connecting" section`)
	}
	sec = sec[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	var sql []string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "    ") && strings.HasSuffix(strings.TrimSpace(line), ";") {
			sql = append(sql, strings.TrimSpace(line))
		}
	}
	if len(sql) == 0 {
		t.Fatal(`README.md's "Connecting" section has no SQL to run`)
	}
	return sql
}

// psql runs sql as the superuser postgres over the cluster's socket.
func psql(t *testing.T, port int, sql string) {
	t.Helper()
	out, err := exec.Command("runuser", "-u", "postgres", "--", "psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "/run/postgresql",
		"-p", strconv.Itoa(port), "-d", "postgres", "-c", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -c %q: %v\n%s", sql, err, out)
	}
}

// unit is a systemd unit's [Service] keys, each with its values in order.
type unit map[string][]string

// parseUnit reads the [Service] section of a unit file, joining continued lines.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	inService, cont := false, ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := cont + strings.TrimSpace(sc.Text())
		cont = ""
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\") + " "
			continue
		}
		switch {
		case strings.HasPrefix(line, "["):
			inService = line == "[Service]"
		case inService && line != "" && !strings.HasPrefix(line, "#"):
			k, v, _ := strings.Cut(line, "=")
			u[k] = append(u[k], v)
		}
	}
	return u
}

// last is the value of key in force: systemd's last assignment.
func (u unit) last(key string) string {
	if v := u[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// unitEnv is the environment systemd gives the service: its Environment= assignments, then its
// EnvironmentFile=, then extra (what an operator puts in /etc/default for this cluster).
func unitEnv(t *testing.T, u unit, extra map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, assignments := range u["Environment"] {
		for _, kv := range strings.Fields(assignments) {
			k, v, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			env[k] = v
		}
	}
	for _, f := range u["EnvironmentFile"] {
		b, err := os.ReadFile(strings.TrimPrefix(f, "-"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				k, v, _ := strings.Cut(line, "=")
				env[k] = v
			}
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

var unitVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// execStart is the unit's ExecStart with its $VARIABLES expanded as systemd expands them: a
// $VAR alone splits into words.
func execStart(u unit, env map[string]string) []string {
	var argv []string
	for _, w := range strings.Fields(u.last("ExecStart")) {
		argv = append(argv, strings.Fields(unitVar.ReplaceAllStringFunc(w, func(m string) string {
			return env[unitVar.FindStringSubmatch(m)[1]]
		}))...)
	}
	return argv
}

// setprivArgs runs a command as the unit would: its User and Group, SupplementaryGroups, the
// capabilities of AmbientCapabilities= (and a bounding set of them alone), NoNewPrivileges.
// caps false leaves the capabilities out (a prerequisite taken away).
func setprivArgs(t *testing.T, u unit, caps bool) []string {
	t.Helper()
	args := []string{"--reuid=" + u.last("User"), "--regid=" + u.last("Group")}
	if g := u.last("SupplementaryGroups"); g != "" {
		args = append(args, "--groups="+strings.Join(strings.Fields(g), ","))
	} else {
		args = append(args, "--clear-groups")
	}
	var names []string
	for _, c := range strings.Fields(u.last("AmbientCapabilities")) {
		names = append(names, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	if caps && len(names) > 0 {
		add := "+" + strings.Join(names, ",+")
		args = append(args, "--inh-caps="+add, "--ambient-caps="+add, "--bounding-set=-all,"+add)
	} else {
		args = append(args, "--inh-caps=-all", "--bounding-set=-all")
	}
	if u.last("NoNewPrivileges") == "yes" {
		args = append(args, "--no-new-privs")
	}
	return args
}

// asUnit runs argv as the unit would, with env alone, and returns its output and exit code.
func asUnit(t *testing.T, u unit, env map[string]string, caps bool, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", append(append(setprivArgs(t, u, caps), "--"), argv...)...)
	cmd.Env = envList(env)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %v as the unit: %v", argv, err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

func envList(env map[string]string) []string {
	out := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// runDaemonAsUnit starts ExecStart as the unit and waits for what an operator checks first.
func runDaemonAsUnit(t *testing.T, u unit, env map[string]string, addr string) {
	argv := execStart(u, env)
	cmd := exec.Command("setpriv", append(append(setprivArgs(t, u, true), "--"), argv...)...)
	cmd.Env = envList(env)
	cmd.Dir = "/"
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", logs.String())
		}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	var why string
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("the daemon exited (%v) before it was ready", err)
		case <-time.After(time.Second):
		}
		why = ready(base)
		if why == "" {
			t.Logf("ready: /readyz 200, the postgres and wal_storage parts read, the probe running")
			return
		}
	}
	t.Errorf("not ready within a minute of the unit's start: %s", why)
}

// ready returns "" when /readyz is 200, the snapshot's postgres and wal_storage parts are read
// and the probe is enabled, or what is missing.
func ready(base string) string {
	get := func(path string) (int, []byte) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := get("/readyz"); code != 200 {
		return fmt.Sprintf("/readyz %d %s", code, body)
	}
	_, body := get("/api/v1/snapshot")
	var snap struct {
		Parts []struct {
			Name  string `json:"name"`
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		} `json:"parts"`
	}
	if err := json.Unmarshal(body, &snap); err != nil {
		return fmt.Sprintf("/api/v1/snapshot: %v", err)
	}
	okParts := map[string]bool{}
	for _, p := range snap.Parts {
		if !p.OK && (p.Name == "postgres" || p.Name == "wal_storage") {
			return fmt.Sprintf("part %s: %s", p.Name, p.Error)
		}
		okParts[p.Name] = p.OK
	}
	if !okParts["postgres"] || !okParts["wal_storage"] {
		return fmt.Sprintf("parts read: %v", okParts)
	}
	if _, m := get("/metrics"); !bytes.Contains(m, []byte("\npgwal_advisor_probe_enabled 1\n")) {
		return "pgwal_advisor_probe_enabled is not 1"
	}
	return ""
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// doctorPrerequisites takes each prerequisite away in turn and expects doctor to fail its check
// with the fix, and exit 3; each is put back after.
func doctorPrerequisites(t *testing.T, u unit, env map[string]string, port int) {
	shm := filepath.Join("/dev/shm", "pgwal-firsthour-probe")
	if err := os.Mkdir(shm, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shm)
	if out, err := exec.Command("chown", pkgName+":"+pkgName, shm).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v %s", shm, err, out)
	}
	with := func(k, v string) map[string]string {
		e := map[string]string{}
		for a, b := range env {
			e[a] = b
		}
		e[k] = v
		return e
	}
	for _, tc := range []struct {
		name, check, fix string
		env              map[string]string
		noCaps           bool
		args             []string
		before, after    func()
	}{
		{name: "role without pg_monitor", check: "role", fix: `GRANT pg_monitor TO "pgwal-advisor"`,
			before: func() { psql(t, port, `REVOKE pg_monitor FROM "pgwal-advisor"`) },
			after:  func() { psql(t, port, `GRANT pg_monitor TO "pgwal-advisor"`) }},
		{name: "a role named unlike the OS user", check: "postgres", env: with("PGUSER", "pgwal_advisor"),
			fix: `peer authentication admits the OS user pgwal-advisor only as the role of the same name`},
		{name: "no CAP_DAC_READ_SEARCH", check: "wal-dir", noCaps: true, fix: "is mode 0700"},
		{name: "no probe directory", check: "probe-dir", args: []string{"--probe.dir", pkgState + "/nothing"}, fix: "does not exist"},
		{name: "a probe directory others can write", check: "probe-dir", fix: "chmod",
			before: func() { mustRun(t, "chmod", "0777", pkgProbe) }, after: func() { mustRun(t, "chmod", "0770", pkgProbe) }},
		{name: "a probe directory on another file system", check: "probe-dir", args: []string{"--probe.dir", shm}, fix: "file system"},
		{name: "/proc unreadable", check: "proc", args: []string{"--path.procfs", "/nonexistent"}, fix: "--path.procfs"},
		{name: "apply: no journal directory", check: "apply-journal", args: []string{"--apply", "--apply.journal", "/nonexistent/apply.journal"}, fix: "it must exist"},
		{name: "apply: a foreign sysctl file", check: "sysctl-file", args: []string{"--apply", "--apply.sysctl-file", "/etc/sysctl.conf"}, fix: "sysctl.d directory"},
		{name: "apply: no ALTER SYSTEM privilege", check: "alter-system", args: []string{"--apply"}, fix: "GRANT ALTER SYSTEM ON PARAMETER wal_buffers"},
		{name: "apply: /proc/sys/vm not writable", check: "kernel-settings", args: []string{"--apply"}, fix: "cannot write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			if tc.after != nil {
				defer tc.after()
			}
			e := env
			if tc.env != nil {
				e = tc.env
			}
			out, code := asUnit(t, u, e, !tc.noCaps, append([]string{pkgBinary, "doctor"}, tc.args...)...)
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, fmt.Sprintf("FAIL  %-16s ", tc.check)) {
					line = l
				}
			}
			if code != 3 || !strings.Contains(line, tc.fix) {
				t.Errorf("doctor: exit %d, want 3 and %s failing with %q:\n%s", code, tc.check, tc.fix, out)
			}
		})
	}
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v %s", name, args, err, out)
	}
}
