package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Daemon is a pgwal-advisor binary that a measurement runs beside a throwaway cluster, as a
// database host runs it. Stop it when done.
type Daemon struct {
	// Addr is the loopback address it serves /metrics on.
	Addr string
	cmd  *exec.Cmd
}

// StartDaemon runs `bin run` against c at the daemon's defaults (--interval 15s, probing every
// 5 min in 2 s bursts), as deployed, with its probe file in probeDir and args added after the
// defaults. It logs warnings and errors to stderr. It does not wait for the daemon to be ready:
// poll URL("/readyz") with WaitHTTPOK. Should the lab's process die, the daemon dies with it.
func StartDaemon(ctx context.Context, bin string, c *Cluster, probeDir string, args ...string) (*Daemon, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--dsn", c.DSN(), "--web.listen-address", addr,
		"--probe.dir", probeDir, "--log.level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the daemon %s: %w", bin, err)
	}
	return &Daemon{Addr: addr, cmd: cmd}, nil
}

// Pid is the daemon's process ID, for /proc and for signals.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// URL is the daemon's address for path ("/metrics", "/readyz").
func (d *Daemon) URL(path string) string { return "http://" + d.Addr + path }

// Stop ends the daemon and waits for it. It continues it first, since a measurement may have
// stopped it with SIGSTOP, and a stopped process would not act on SIGTERM.
func (d *Daemon) Stop() {
	_ = d.cmd.Process.Signal(syscall.SIGCONT)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
}

// LoadAverage is the first three fields of /proc/loadavg ("?" when it cannot be read). The lab
// shares its machine: a figure means little without the load it was taken under.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
