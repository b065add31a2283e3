package rules

import (
	"fmt"
	"path"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// The throttle that works here: a writer that fills the WAL's device is limited to half the
// device's measured write rate - in the lab that removed the stall (docs/benchmarks.md,
// neighbour table: the writer limited to 40 MB/s of the device's 80, 0 stall seconds against 45
// unthrottled) - by whatever limits a buffered writer on this host. Only cgroup v2 with the io
// and memory controllers charges write-back to the writer's cgroup (kernel doc
// admin-guide/cgroup-v2, "Writeback"); on v1 blkio (and a hybrid host, whose blkio is v1) the
// flusher writes the pages back from the root cgroup, so a limit on the writer would not hold:
// there the writer's own rate option, or a device of its own for pg_wal.

// ThrottleInput is what the advice needs: the host's cgroup layout, the writer, and the device
// it fills.
type ThrottleInput struct {
	Layout collector.CgroupLayout
	// Unit is the writer's systemd unit ("" when none); Cgroup its cgroup v2 path.
	Unit, Cgroup string
	// Device is the WAL's whole disk as "MAJ:MIN" (io.max takes no partition); DevicePath its
	// node for systemd, "" for /dev/block/MAJ:MIN.
	Device, DevicePath string
	// DeviceWriteRate is what the device wrote during the stall, bytes per second.
	DeviceWriteRate float64
	// Comm is the writer's process name (/proc/PID/comm).
	Comm string
}

// How a ThrottleAdvice limits the writer.
const (
	// ThrottleSystemd: systemctl set-property on the writer's unit.
	ThrottleSystemd = "systemd"
	// ThrottleIOMax: a line written to the writer's cgroup v2 io.max.
	ThrottleIOMax = "io.max"
	// ThrottleOwnLimit: the writer's own rate option.
	ThrottleOwnLimit = "own-limit"
	// ThrottleNone: nothing on this host limits this writer; a device of its own for pg_wal.
	ThrottleNone = "none"
)

// ThrottleAdvice is the command that limits one writer on this host, or why there is none.
type ThrottleAdvice struct {
	Kind string
	// Rate is the proposed limit in bytes per second: half the device's measured rate; 0 when
	// the rate is unknown.
	Rate int64
	// Command is what an operator runs (shell-quoted), empty when there is none.
	Command string
	// Text says what to do, and why it works, or why a cgroup limit does not, on this host.
	Text string
	// Basis is where the figures come from.
	Basis string
}

// throttleBasis cites the measurement and the kernel's rule the advice stands on.
const throttleBasis = "docs/benchmarks.md, neighbour table (the writer limited to half the device's bandwidth: " +
	"0 stall seconds against 45 unthrottled); kernel doc admin-guide/cgroup-v2, Writeback"

// Throttle returns the advice for limiting a writer on the host the input describes. The
// caller passes a writer that is not PostgreSQL's own.
func Throttle(in ThrottleInput) ThrottleAdvice {
	a := ThrottleAdvice{Basis: throttleBasis}
	if in.DeviceWriteRate > 0 {
		a.Rate = int64(in.DeviceWriteRate / 2)
	}
	if !validDevice(in.Device) {
		in.Device = ""
	}
	if !in.Layout.WritebackThrottle() {
		a.Kind, a.Command, a.Text = ownLimit(in, a.Rate)
		a.Text = noCgroupThrottle(in.Layout) + " " + a.Text
		return a
	}
	sized := a.Rate > 0 && in.Device != ""
	switch {
	case sized && systemdUnit(in):
		a.Kind, a.Command = ThrottleSystemd, setProperty(in, a.Rate)
		a.Text = fmt.Sprintf("Limit the writer's unit %s to %s/s on the WAL's device: `%s`%s. %s",
			in.Unit, throttleRate(a.Rate), a.Command, rateNote(in, a.Rate), v2Why)
	case sized && in.Cgroup != "" && in.Layout.V2Mount != "":
		a.Kind, a.Command = ThrottleIOMax, ioMaxLine(in, a.Rate)
		a.Text = fmt.Sprintf("Limit the writer's cgroup %s to %s/s on the WAL's device: `%s`%s. %s%s",
			in.Cgroup, throttleRate(a.Rate), a.Command, rateNote(in, a.Rate), v2Why, subtreeNote(in.Layout))
	default:
		a.Kind, a.Command, a.Text = ownLimit(in, a.Rate)
		a.Text = "A cgroup v2 write limit on the writer's cgroup, at half the device's write rate, " +
			"would hold its write-back here, but " + unsized(in) + ". " + a.Text
	}
	return a
}

// v2Why says why a cgroup limit holds a buffered writer on this host.
const v2Why = "On cgroup v2 with the io and memory controllers the kernel charges write-back to the cgroup " +
	"that dirtied the pages, so the limit holds the writer's buffered writes too; half the device's rate " +
	"removed the lab's stall (docs/benchmarks.md, neighbour table)."

// noCgroupThrottle says why no cgroup limit holds a buffered writer on this layout.
func noCgroupThrottle(l collector.CgroupLayout) string {
	const v1 = "blkio.throttle limits only direct and synchronous writes. The kernel's flusher threads write a " +
		"buffered writer's pages back from the root cgroup, so a blkio limit on the writer would not slow its write-back " +
		"(kernel doc admin-guide/cgroup-v2, Writeback: only cgroup v2 with the io and memory controllers charges it to the writer)."
	switch l.Version {
	case collector.CgroupV1:
		return "This host's cgroups are v1: " + v1
	case collector.CgroupHybrid:
		return "This host's cgroups are hybrid (blkio on a v1 hierarchy, the unified hierarchy without the io controller): " + v1
	case collector.CgroupV2:
		return "This host's cgroup v2 lacks the io or the memory controller (cgroup.controllers: " +
			strings.Join(l.V2Controllers, " ") + "), without which the kernel does not charge write-back to the writer's cgroup."
	case collector.CgroupNone:
		return "This host mounts no cgroups, so no cgroup limit can hold the writer."
	}
	return "This host's cgroup layout is unknown, so no cgroup limit is proposed."
}

// ownLimit is the advice without a cgroup limit: the rate option of a writer known by name
// (the well-known tools that have one; dd's direct I/O), else a pipe through pv, and a device
// of its own for pg_wal.
func ownLimit(in ThrottleInput, rate int64) (kind, command, text string) {
	const device = " Or give pg_wal a device of its own, which no other writer's queue can hold up."
	if rate <= 0 {
		return ThrottleNone, "", "Limit the writer with its own rate option (pg_basebackup --max-rate, rsync --bwlimit, " +
			"pv -L in its pipe) to about half the device's write rate." + device
	}
	m := suffixRate(rate)
	var what string
	switch in.Comm {
	case "pg_basebackup":
		// --max-rate takes kB/s or an M suffix, between 32 kB/s and 1024 MB/s (pg_basebackup(1)).
		command, what = "pg_basebackup --max-rate="+maxRateArg(rate), "add --max-rate to the pg_basebackup command"
	case "rsync":
		command, what = fmt.Sprintf("rsync --bwlimit=%d", max(rate>>10, 1)), "add --bwlimit (KiB/s) to the rsync command"
	case "pv":
		command, what = "pv -L "+m, "add -L to the pv command"
	case "dd":
		command, what = "dd oflag=direct", "run dd with oflag=direct (its writes then bypass the page cache and wait "+
			"for the device, so no pile builds up), or feed it through pv -L "+m
	default:
		return ThrottleNone, "", fmt.Sprintf("Limit the writer itself to about %s/s%s: with its own rate option where it "+
			"has one, or through pv -L %s where it writes a stream.", throttleRate(rate), rateNote(in, rate), m) + device
	}
	return ThrottleOwnLimit, command, fmt.Sprintf("Limit the writer itself to about %s/s%s: %s (`%s`).",
		throttleRate(rate), rateNote(in, rate), what, command) + device
}

// rateNote says where the rate comes from.
func rateNote(in ThrottleInput, rate int64) string {
	if rate <= 0 {
		return ""
	}
	return fmt.Sprintf(" (half the %s/s the device wrote during the stall)", throttleRate(int64(in.DeviceWriteRate)))
}

// unsized says what is missing to write the limit.
func unsized(in ThrottleInput) string {
	switch {
	case in.DeviceWriteRate <= 0:
		return "the device's write rate was not measured to size it"
	case in.Device == "":
		return "the WAL's block device is unknown"
	}
	return "the writer's cgroup is unknown"
}

// systemdUnit reports whether the writer's unit can be limited with systemctl: the host runs
// systemd, the unit's name is one systemd could have made, and it belongs to the system
// manager - a unit below user@UID.service is the user's manager's, and its cgroup is limited
// through io.max instead.
func systemdUnit(in ThrottleInput) bool {
	if !in.Layout.Systemd || !unitName(in.Unit) {
		return false
	}
	for p := path.Dir(path.Clean("/" + in.Cgroup)); p != "/" && p != "."; p = path.Dir(p) {
		if b := path.Base(p); strings.HasPrefix(b, "user@") && strings.HasSuffix(b, ".service") {
			return false
		}
	}
	return true
}

// unitName checks a unit name against the characters systemd allows (systemd.unit(5)), so that
// no name read from /proc becomes an option or a shell word.
func unitName(u string) bool {
	if u == "" || len(u) > 255 || u[0] == '-' || !(strings.HasSuffix(u, ".service") || strings.HasSuffix(u, ".scope")) {
		return false
	}
	for _, r := range u {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.@-\\", r)) {
			return false
		}
	}
	return true
}

// setProperty is the systemctl command; --runtime keeps the limit until the next boot.
func setProperty(in ThrottleInput, rate int64) string {
	dev := in.DevicePath
	if dev == "" {
		dev = "/dev/block/" + in.Device
	}
	var mem string
	if !containsWord(in.Layout.V2SubtreeControl, "memory") {
		// Write-back is charged to the writer's cgroup only when its memory controller is on too.
		mem = " MemoryAccounting=yes"
	}
	prop := "IOWriteBandwidthMax=" + dev + " " + suffixRate(rate)
	arg := `"` + prop[len("IOWriteBandwidthMax="):] + `"`
	if shellSafe(dev) {
		arg = "IOWriteBandwidthMax=" + arg
	} else {
		arg = shellQuote(prop)
	}
	return fmt.Sprintf("systemctl set-property --runtime %s%s %s", shellQuote(in.Unit), mem, arg)
}

// ioMaxLine writes the limit into the writer's cgroup's io.max.
func ioMaxLine(in ThrottleInput, rate int64) string {
	file := path.Join(in.Layout.V2Mount, path.Clean("/"+in.Cgroup), "io.max")
	return fmt.Sprintf(`echo "%s wbps=%d" > %s`, in.Device, rate, shellQuote(file))
}

// subtreeNote says what io.max needs above the cgroup when the root does not hand the
// controllers down.
func subtreeNote(l collector.CgroupLayout) string {
	if containsWord(l.V2SubtreeControl, "io") && containsWord(l.V2SubtreeControl, "memory") {
		return ""
	}
	return " The root's cgroup.subtree_control lacks io or memory: enable both (+io +memory) in the cgroup.subtree_control " +
		"of each cgroup above the writer's first, or io.max does not exist there."
}

// validDevice checks a "MAJ:MIN" device number, which the io.max line quotes as it is.
func validDevice(d string) bool {
	maj, min, ok := strings.Cut(d, ":")
	return ok && digits(maj) && digits(min)
}

func digits(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func containsWord(list []string, w string) bool {
	for _, s := range list {
		if s == w {
			return true
		}
	}
	return false
}

// throttleRate prints a rate's bytes for the text, as every finding does ("40MB").
func throttleRate(b int64) string { return collector.FormatBytes(float64(b)) }

// suffixRate prints a rate as systemd (systemd.resource-control(5)) and pv read it: whole K or
// M, base 1024, rounded down.
func suffixRate(b int64) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%dM", b>>20)
	}
	return fmt.Sprintf("%dK", max(b>>10, 1))
}

// maxRateArg prints pg_basebackup's --max-rate within its range of 32 kB/s to 1024 MB/s.
func maxRateArg(b int64) string {
	switch k := b >> 10; {
	case k < 32:
		return "32k"
	case k >= 1<<20:
		return "1024M"
	case k >= 1<<10:
		return fmt.Sprintf("%dM", k>>10)
	default:
		return fmt.Sprintf("%dk", k)
	}
}

// shellSafe reports whether s needs no quoting in a POSIX shell.
func shellSafe(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			return false
		}
	}
	return true
}

// shellQuote quotes s for a POSIX shell when it needs it: names read from /proc (a cgroup a
// user created in a delegated subtree, a unit) must reach the operator's root shell as one word.
func shellQuote(s string) string {
	if shellSafe(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
