package apply

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSysctlFileBytes bounds the sysctl.d file read at start: the advisor's own holds a header
// and four lines.
const maxSysctlFileBytes = 64 << 10

// CheckSysctlFile refuses a --apply.sysctl-file that the advisor must not write: a relative or
// unclean path (no rollback could pass the guard, which compares clean absolute paths), a name
// sysctl.d(5) does not read (*.conf), a file not directly in a sysctl.d directory, a link or
// anything but a regular file, and a file with lines of its own - a setting of another key or
// anything that is not a comment - which an edit would rewrite and a rollback remove
// (docs/security.md, "The sysctl.d file"). An absent file is fine: the advisor creates it.
func CheckSysctlFile(path string) error {
	const example = "e.g. " + DefaultSysctlFile
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("--apply.sysctl-file %q is not a clean absolute path: give the full path of a file of its own (%s)", path, example)
	}
	if filepath.Ext(path) != ".conf" {
		return fmt.Errorf("--apply.sysctl-file %q does not end in .conf, so sysctl --system would not read it at boot (%s)", path, example)
	}
	if filepath.Base(filepath.Dir(path)) != "sysctl.d" {
		return fmt.Errorf("--apply.sysctl-file %q is not directly in a sysctl.d directory (/etc/sysctl.d, /run/sysctl.d): the advisor writes only a file of its own there (%s)", path, example)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--apply.sysctl-file %s cannot be opened without following links: %w (give a regular file of the advisor's own)", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("--apply.sysctl-file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("--apply.sysctl-file %s is not a regular file (%s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSysctlFileBytes+1))
	if err != nil {
		return fmt.Errorf("--apply.sysctl-file %s: %w", path, err)
	}
	if len(b) > maxSysctlFileBytes {
		return fmt.Errorf("--apply.sysctl-file %s is over %d kB, far more than the advisor writes: it is not the advisor's own file; give another path", path, maxSysctlFileBytes>>10)
	}
	return foreignSysctlLine(path, string(b))
}

// foreignSysctlLine returns an error for the first line of content that is neither blank, a
// comment, nor a setting of one of the keys the advisor writes.
func foreignSysctlLine(path, content string) error {
	for i, line := range strings.Split(content, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' || t[0] == ';' {
			continue
		}
		// The line itself is not quoted: the file may be anything (a password hash, a key).
		what := "a line that is no sysctl setting"
		if k, _, ok := sysctlKey(line); ok {
			if slices.Contains(dirtyPairKeys(), k) {
				continue
			}
			what = fmt.Sprintf("a setting of %.60q", k)
		}
		return fmt.Errorf("--apply.sysctl-file %s has lines the advisor did not write (line %d: %s): it would rewrite them and remove the file at rollback; "+
			"give a file of its own, e.g. %s", path, i+1, what, DefaultSysctlFile)
	}
	return nil
}
