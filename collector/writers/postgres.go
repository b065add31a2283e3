package writers

import (
	"path/filepath"
	"strconv"
)

// maxAncestors bounds the walk up a process's parents: process trees are shallow, and a
// loop (a pid reused by an ancestor of its own parent's reading) must end.
const maxAncestors = 64

// ancestry finds PostgreSQL's postmasters by walking up the parents in /proc/PID/stat. A
// postmaster is a process named postgres (or postmaster, the old name still installed as a
// link) whose parent is not: its children are forked from it and keep its name, whatever
// their process title says; programs they start (archive_command) are below them. Pids are
// read once per collection.
type ancestry struct {
	procfs string
	// known is a postmaster pid the caller knows (0: none): its descendants are PostgreSQL's
	// whatever their names.
	known int
	stats map[int]*procStat // nil entry: could not be read
	buf   []byte
}

func newAncestry(procfs string, known int) *ancestry {
	return &ancestry{procfs: procfs, known: known, stats: map[int]*procStat{}}
}

func (a *ancestry) stat(pid int) *procStat {
	if s, ok := a.stats[pid]; ok {
		return s
	}
	var s *procStat
	if b, err := readBounded(filepath.Join(a.procfs, strconv.Itoa(pid), "stat"), a.buf, maxProcFile); err == nil {
		a.buf = b
		if st, err := parseStat(b); err == nil {
			s = &st
		}
	}
	a.stats[pid] = s
	return s
}

// postmasterOf returns the pid of the postmaster pid descends from (pid itself when it is
// one), 0 when it is not PostgreSQL's or its parents could not be read.
func (a *ancestry) postmasterOf(pid int) int {
	for i := 0; i < maxAncestors && pid > 0; i++ {
		if a.known != 0 && pid == a.known {
			return pid
		}
		s := a.stat(pid)
		if s == nil {
			return 0
		}
		if isPostgresName(s.comm) {
			parent := a.stat(s.ppid)
			if s.ppid == 0 || parent == nil || !isPostgresName(parent.comm) {
				return pid
			}
		}
		pid = s.ppid
	}
	return 0
}

func isPostgresName(comm string) bool {
	return comm == "postgres" || comm == "postmaster"
}
