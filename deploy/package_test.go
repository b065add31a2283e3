package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The package's files, as dpkg installs them.
const (
	pkgName    = "pgwal-advisor"
	pkgBinary  = "/usr/bin/pgwal-advisor"
	pkgUnit    = "/lib/systemd/system/pgwal-advisor.service"
	pkgDefault = "/etc/default/pgwal-advisor"
	pkgDoc     = "/usr/share/doc/pgwal-advisor"
	pkgState   = "/var/lib/pgwal-advisor"
	pkgProbe   = "/var/lib/pgwal-advisor/probe"
)

// skipOrFail skips outside CI and fails under CI=true, where the package must be tested.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + "; CI is set, so this is a failure")
	}
	t.Skip(why)
}

// TestDebianPackage builds the .deb as `make package` does (scripts/package.sh), installs it on
// this machine with dpkg, checks its files, conffile, user and binary, reinstalls it over an
// edited conffile, removes it (state, user and conffile stay) and purges it (nothing stays).
func TestDebianPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("installs a package on this machine: not with -short")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "installing the package needs root")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		skipOrFail(t, "dpkg not found: the package test needs a Debian system")
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", pkgName).Output(); err == nil && strings.TrimSpace(string(out)) != "not-installed" {
		// An operator's installation is not the test's to replace or purge.
		t.Skipf("%s is already installed here (%s): the test would replace it", pkgName, out)
	}
	_, userErr := user.Lookup(pkgName)
	userBefore := userErr == nil

	deb := buildPackage(t)
	t.Cleanup(func() {
		// Whatever happened, the machine is left without the package.
		if isInstalled(t) {
			dpkg(t, "--purge", pkgName)
		}
	})

	dpkg(t, "--install", deb)
	checkInstalled(t, "v9.9.9-test")

	// An operator's edit of the conffile survives a reinstall.
	edit := "\n# edited by TestDebianPackage\n"
	appendFile(t, pkgDefault, edit)
	dpkg(t, "--install", deb)
	checkInstalled(t, "v9.9.9-test")
	if b, _ := os.ReadFile(pkgDefault); !bytes.HasSuffix(b, []byte(edit)) {
		t.Errorf("the reinstall replaced the edited %s", pkgDefault)
	}

	// remove keeps the state (the apply journal) and the user; purge takes them.
	dpkg(t, "--remove", pkgName)
	for _, p := range []string{pkgBinary, pkgUnit} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after dpkg --remove %s is still there", p)
		}
	}
	for _, p := range []string{pkgDefault, pkgState} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after dpkg --remove %s is gone: %v", p, err)
		}
	}
	if _, err := user.Lookup(pkgName); err != nil {
		t.Errorf("after dpkg --remove the %s user is gone", pkgName)
	}

	dpkg(t, "--purge", pkgName)
	for _, p := range []string{pkgBinary, pkgUnit, pkgDefault, pkgDoc, pkgState} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after dpkg --purge %s is still there", p)
		}
	}
	_, err := user.Lookup(pkgName)
	switch {
	case userBefore && err != nil:
		t.Errorf("dpkg --purge removed a %s user that was there before the package", pkgName)
	case !userBefore && err == nil:
		t.Errorf("after dpkg --purge the %s user is still there", pkgName)
	}
	if _, err := user.LookupGroup(pkgName); !userBefore && err == nil {
		t.Errorf("after dpkg --purge the %s group is still there", pkgName)
	}
	if isInstalled(t) {
		t.Errorf("dpkg still lists %s after --purge", pkgName)
	}
}

// built is the one build of the .deb the package's tests share (TestDebianPackage,
// TestFirstHourDebian): building takes a minute, and both want the same package. TestMain
// removes its directory.
var built struct {
	once             sync.Once
	dir, deb, stderr string
	err              error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildPackage runs scripts/package.sh into a temporary directory, once for the test binary,
// and returns the .deb.
func buildPackage(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "pgwal-deb-"); built.err != nil {
			return
		}
		cmd := exec.Command("../scripts/package.sh", built.dir)
		cmd.Env = append(os.Environ(), "VERSION=v9.9.9-test")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		built.err = cmd.Run()
		built.deb, built.stderr = strings.TrimSpace(stdout.String()), stderr.String()
	})
	var exit *exec.ExitError
	if errors.As(built.err, &exit) && exit.ExitCode() == 3 {
		// nfpm could not be had: the script said why in one line.
		skipOrFail(t, strings.TrimSpace(built.stderr))
	}
	if built.err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", built.err, built.stderr)
	}
	if filepath.Base(built.deb) != "pgwal-advisor_9.9.9.test_amd64.deb" {
		t.Fatalf("scripts/package.sh printed %q, want the path of pgwal-advisor_9.9.9.test_amd64.deb", built.deb)
	}
	return built.deb
}

// dpkg runs dpkg, waiting while someone else holds its lock (the machine is shared).
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err == nil {
			t.Logf("dpkg %s:\n%s", strings.Join(args, " "), out)
			return
		}
		if !bytes.Contains(out, []byte("lock")) || time.Now().After(deadline) {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(2 * time.Second)
	}
}

func isInstalled(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", pkgName).Output()
	return err == nil && strings.TrimSpace(string(out)) != "not-installed"
}

// checkInstalled checks what dpkg --install left: the files and their modes, the conffile, the
// user owning the state and probe directories, the unit pointing at the binary, the binary's
// version.
func checkInstalled(t *testing.T, version string) {
	t.Helper()
	for p, mode := range map[string]fs.FileMode{
		pkgBinary: 0o755, pkgUnit: 0o644, pkgDefault: 0o644, pkgDoc + "/examples/apply.conf": 0o644,
		pkgState: fs.ModeDir | 0o750, pkgProbe: fs.ModeDir | 0o770,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("after dpkg --install: %v", err)
			continue
		}
		if fi.Mode() != mode {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode(), mode)
		}
	}
	// The Prometheus rules and the dashboard are shipped as they are in the repository.
	for src, dst := range map[string]string{
		"prometheus/alerts.yml": "examples/prometheus/alerts.yml", "prometheus/recording.yml": "examples/prometheus/recording.yml",
		"prometheus/scrape.yml": "examples/prometheus/scrape.yml", "grafana/pgwal-advisor.json": "examples/grafana/pgwal-advisor.json",
		"grafana/pgwal-advisor-fleet.json": "examples/grafana/pgwal-advisor-fleet.json",
	} {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(pkgDoc + "/" + dst); err != nil || !bytes.Equal(got, want) {
			t.Errorf("the package's %s differs from deploy/%s (%v)", dst, src, err)
		}
	}
	out, err := exec.Command("dpkg-query", "-W", "-f=${Conffiles}", pkgName).Output()
	if err != nil || !strings.Contains(string(out), pkgDefault+" ") {
		t.Errorf("dpkg does not list %s as a conffile: %q %v", pkgDefault, out, err)
	}

	u, err := user.Lookup(pkgName)
	if err != nil {
		t.Fatalf("no %s user after dpkg --install: %v", pkgName, err)
	}
	passwd, _ := exec.Command("getent", "passwd", pkgName).Output()
	if fields := strings.Split(strings.TrimSpace(string(passwd)), ":"); len(fields) != 7 || fields[6] != "/usr/sbin/nologin" {
		t.Errorf("the %s user is %q, want a system user with the shell /usr/sbin/nologin", pkgName, passwd)
	}
	for _, dir := range []string{pkgState, pkgProbe} {
		if owner := ownerOf(t, dir); owner != u.Uid+":"+u.Gid {
			t.Errorf("%s is owned by %s, want %s:%s (%s)", dir, owner, u.Uid, u.Gid, pkgName)
		}
	}
	if unit, _ := os.ReadFile(pkgUnit); !bytes.Contains(unit, []byte("\nExecStart="+pkgBinary+" run ")) || !bytes.Contains(unit, []byte("\nUser="+pkgName+"\n")) {
		t.Errorf("%s does not run %s as %s", pkgUnit, pkgBinary, pkgName)
	}
	got, err := exec.Command(pkgBinary, "version").Output()
	if err != nil || !strings.HasPrefix(string(got), fmt.Sprintf("pgwal-advisor %s ", version)) {
		t.Errorf("%s version = %q (%v), want pgwal-advisor %s", pkgBinary, got, err, version)
	}
}

func ownerOf(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%u:%g", path).Output()
	if err != nil {
		t.Errorf("stat %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
