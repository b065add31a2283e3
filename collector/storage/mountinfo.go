package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// mount is one line of /proc/<pid>/mountinfo (proc(5)).
type mount struct {
	major, minor uint32
	point        string
	fsType       string
	source       string
	// options are the per-mount options followed by the file system's super options, without
	// duplicates: "rw" appears in both, and data=/barrier options only in the second.
	options []string
}

// maxMountinfoLine bounds one mountinfo line. Mount options can be long (overlay's lowerdir
// lists); a line longer than this is skipped like any other odd line, not a failure of the file.
const maxMountinfoLine = 1 << 20

// parseMountinfo reads mountinfo lines:
//
//	36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)         (6)       (7)    (8) (9)  (10)      (11)
//
// Field 7 is zero or more optional fields ended by the "-" separator. Lines that do not have
// this shape are skipped, so that one odd line (a future kernel's extra field) does not lose
// every mount; a file where no line parses is an error.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	lines := 0
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, tooLong, err := readLine(br, maxMountinfoLine)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		lines++
		if tooLong {
			continue
		}
		if m, ok := parseMountinfoLine(string(line)); ok {
			mounts = append(mounts, m)
		}
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("no mountinfo lines among %d lines", lines)
	}
	return mounts, nil
}

// readLine returns the next line without its newline, and tooLong instead of the line when it is
// longer than limit bytes (the rest of it is read and dropped). A last line without a newline
// counts; err is io.EOF after it.
func readLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	dropped := false
	for {
		chunk, err := br.ReadSlice('\n')
		// One byte over the limit may be the newline; the length check below settles it.
		if dropped = dropped || len(line)+len(chunk) > limit+1; !dropped {
			line = append(line, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(line) > 0 || dropped):
			err = nil
		}
		if err != nil {
			return nil, false, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if dropped || len(line) > limit {
			return nil, true, nil
		}
		return line, false, nil
	}
}

func parseMountinfoLine(line string) (mount, bool) {
	// The kernel separates fields with single spaces and escapes space, tab, newline and
	// backslash inside them (\040). Other bytes are raw: a label may hold a no-break space or
	// bytes that are not UTF-8, which strings.Fields would take for (or mistake around)
	// separators. A field may be empty: "mount -t tmpfs '' /mnt" gives an empty source.
	f := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+3 {
		return mount{}, false
	}
	majStr, minStr, ok := strings.Cut(f[2], ":")
	if !ok {
		return mount{}, false
	}
	major, err := strconv.ParseUint(majStr, 10, 32)
	if err != nil {
		return mount{}, false
	}
	minor, err := strconv.ParseUint(minStr, 10, 32)
	if err != nil {
		return mount{}, false
	}
	m := mount{
		major:  uint32(major),
		minor:  uint32(minor),
		point:  unescape(f[4]),
		fsType: unescape(f[sep+1]),
		source: unescape(f[sep+2]),
	}
	opts := strings.Split(f[5], ",")
	if len(f) > sep+3 {
		opts = append(opts, strings.Split(f[sep+3], ",")...)
	}
	seen := make(map[string]bool, len(opts))
	for _, o := range opts {
		o = unescape(o)
		if o == "" || seen[o] {
			continue
		}
		seen[o] = true
		m.options = append(m.options, o)
	}
	return m, true
}

// unescape undoes the kernel's mangling of mountinfo fields (fs/proc_namespace.c escapes space,
// tab, newline and backslash as \ooo octal), so "/mnt/wal\040disk" becomes "/mnt/wal disk".
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		// \ooo names one byte, so its first digit is at most 3; the kernel writes no others.
		if s[i] == '\\' && i+3 < len(s) && s[i+1] <= '3' && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// findMount returns the mount that holds path (absolute, symlinks resolved) on device
// major:minor: the one with the longest mount point that is a prefix of path, so that a bind
// mount of a subdirectory wins over the file system's own mount point, and the later of two
// mounts on the same point (the one on top) wins. When no mount of that device holds the path
// (a btrfs subvolume has its own anonymous st_dev that mountinfo does not list), it falls back
// to the longest prefix on any device and says so.
func findMount(mounts []mount, path string, major, minor uint32) (m *mount, note string) {
	best := longestPrefix(mounts, path, func(m *mount) bool { return m.major == major && m.minor == minor })
	if best != nil {
		return best, ""
	}
	best = longestPrefix(mounts, path, func(*mount) bool { return true })
	if best == nil {
		return nil, fmt.Sprintf("no mount in mountinfo holds %s", path)
	}
	return best, fmt.Sprintf("device %d:%d is not in mountinfo: mount %s (device %d:%d) chosen by path alone",
		major, minor, best.point, best.major, best.minor)
}

func longestPrefix(mounts []mount, path string, match func(*mount) bool) *mount {
	var best *mount
	for i := range mounts {
		m := &mounts[i]
		if !match(m) || !under(path, m.point) {
			continue
		}
		if best == nil || len(m.point) >= len(best.point) {
			best = m
		}
	}
	return best
}

// under reports whether path is dir or inside it, comparing whole path components.
func under(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}
