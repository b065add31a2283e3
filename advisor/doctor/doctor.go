// Package doctor checks, one by one, what the daemon needs on a host - the connection and the
// role's grants, the WAL directory and its device, the probe directory, /proc and /sys, and in
// apply mode the journal, the sysctl.d file and the privileges to change settings - and says
// for each that it is in place or exactly what to do (`pgwal-advisor doctor`).
package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// Check is one prerequisite: OK, or not with what to do about it in Detail.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Setup is what the daemon would run with.
type Setup struct {
	// ProbeDir is --probe.dir, or the default the daemon would take; "" for none.
	ProbeDir string
	// Apply checks apply mode's needs too: Journal, SysctlFile and the actuators' privileges.
	Apply      bool
	Journal    string
	SysctlFile string
	// Postgres and Kernel are apply's actuators (Writable is asked; nothing is changed).
	Postgres, Kernel apply.Actuator
}

// probeDirHint is what to do when there is no probe directory.
const probeDirHint = "create a directory on the WAL's file system, outside pg_wal and the data directory, for the advisor's user only, " +
	"and pass it as --probe.dir (install -d -o pgwal-advisor -g pgwal-advisor -m 0770 DIR); the package's is /var/lib/pgwal-advisor/probe"

// Diagnose judges snap (one snapshot as the daemon takes it) and setup. It writes nothing.
func Diagnose(ctx context.Context, snap collector.Snapshot, setup Setup) []Check {
	out := []Check{connection(snap), grants(snap), walDir(snap), walStorage(snap), kernel(snap), probeDir(snap, setup.ProbeDir)}
	if setup.Apply {
		out = append(out, applyChecks(ctx, setup)...)
	}
	return out
}

// OK reports whether every check passed.
func OK(checks []Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func connection(snap collector.Snapshot) Check {
	c := Check{Name: "postgres"}
	p, ok := snap.Part(collector.PartPostgres)
	switch {
	case !ok:
		c.Detail = "not checked"
	case !p.OK:
		c.Detail = p.Error
	case snap.Postgres != nil:
		c.OK, c.Detail = true, "connected: PostgreSQL "+snap.Postgres.Version
	}
	return c
}

func grants(snap collector.Snapshot) Check {
	c := Check{Name: "role"}
	p, _ := snap.Part(collector.PartPostgres)
	switch {
	case !p.OK:
		c.Detail = "not checked: PostgreSQL could not be read"
	case p.Status == collector.TargetMissingPrivileges:
		c.Detail = "the role lacks pg_monitor: " + noteWith(snap, "GRANT pg_monitor", "GRANT pg_monitor TO the advisor's role")
	default:
		c.OK, c.Detail = true, "sees data_directory and every session's wait events (pg_monitor)"
	}
	return c
}

func walDir(snap collector.Snapshot) Check {
	c := Check{Name: "wal-dir"}
	switch {
	case snap.Postgres == nil:
		c.Detail = "not checked: PostgreSQL could not be read"
	case snap.Postgres.WALDir != "":
		c.OK, c.Detail = true, snap.Postgres.WALDir
	case snap.Postgres.WALDirProblem != "":
		c.Detail = snap.Postgres.WALDirProblem
	default:
		c.Detail = "the WAL directory is unknown: set --wal-dir"
	}
	return c
}

func walStorage(snap collector.Snapshot) Check {
	c := Check{Name: "wal-storage"}
	p, _ := snap.Part(collector.PartWALStorage)
	switch s := snap.WALStorage; {
	case !p.OK && snap.Postgres == nil:
		c.Detail = "not checked: PostgreSQL could not be read, so the WAL directory is unknown"
	case !p.OK:
		c.Detail = p.Error
	case s != nil:
		c.OK = true
		c.Detail = fmt.Sprintf("%s on %s (%s, device %s %s)", s.Path, s.MountPoint, s.FSType, s.Device, s.DeviceName)
	}
	return c
}

func kernel(snap collector.Snapshot) Check {
	c := Check{Name: "proc"}
	p, _ := snap.Part(collector.PartKernel)
	if !p.OK {
		c.Detail = p.Error + " (the advisor reads /proc/sys/vm and /proc/meminfo: check --path.procfs and the unit's ProcSubset=, which must stay all)"
		return c
	}
	c.OK, c.Detail = true, "reads /proc/sys/vm and /proc/meminfo"
	return c
}

func probeDir(snap collector.Snapshot, dir string) Check {
	c := Check{Name: "probe-dir"}
	switch {
	case dir == "":
		c.Detail = "no probe directory: the sync probes and the rules that need them are off; " + probeDirHint
	case snap.Postgres == nil || snap.Postgres.WALDir == "":
		c.Detail = dir + ": not checked until the WAL directory is known (see wal-dir)"
	default:
		if err := probes.CheckDir(probes.Config{Dir: dir, WALDir: snap.Postgres.WALDir}); err != nil {
			c.Detail = err.Error()
			return c
		}
		c.OK, c.Detail = true, dir+": on the WAL's file system, writable, room for the probe file"
	}
	return c
}

func applyChecks(ctx context.Context, s Setup) []Check {
	judge := func(name string, err error, ok string) Check {
		if err != nil {
			return Check{Name: name, Detail: err.Error()}
		}
		return Check{Name: name, OK: true, Detail: ok}
	}
	out := []Check{
		judge("apply-journal", apply.CheckJournalPath(s.Journal), s.Journal),
		judge("sysctl-file", apply.CheckSysctlFile(s.SysctlFile), s.SysctlFile),
	}
	if s.Kernel != nil {
		out = append(out, judge("kernel-settings", s.Kernel.Writable(ctx, apply.KnobDirtyThresholds), "may write /proc/sys/vm/dirty_* and persist them"))
	}
	if s.Postgres != nil {
		out = append(out, judge("alter-system", s.Postgres.Writable(ctx, "wal_buffers"), "may ALTER SYSTEM and reload"))
	}
	return out
}

// noteWith is the postgres part's note that holds marker (the server's own words, naming the
// role), or fallback.
func noteWith(snap collector.Snapshot, marker, fallback string) string {
	if snap.Postgres != nil {
		for _, n := range snap.Postgres.Notes {
			if strings.Contains(n, marker) {
				return n
			}
		}
	}
	return fallback
}

// Write prints the checks as a table: ok or FAIL, the name, and the detail.
func Write(w io.Writer, checks []Check) error {
	for _, c := range checks {
		status := "ok  "
		if !c.OK {
			status = "FAIL"
		}
		if _, err := fmt.Fprintf(w, "%s  %-16s %s\n", status, c.Name, c.Detail); err != nil {
			return err
		}
	}
	msg := "Everything the daemon needs is in place.\n"
	if !OK(checks) {
		msg = "Not ready: fix each FAIL above, then run pgwal-advisor doctor again.\n"
	}
	_, err := io.WriteString(w, msg)
	return err
}
