package apply

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestCheckSysctlFile (issue 33, row 4): --apply.sysctl-file is refused unless it is an absolute
// *.conf path directly in a sysctl.d directory, absent or a regular file of the advisor's lines
// and comments. On b4517f4 /etc/shadow and a relative path were taken.
func TestCheckSysctlFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sysctl.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ours := write("90-ours.conf", sysctlHeader+"vm.dirty_bytes = 536870912\nvm.dirty_background_bytes = 67108864\n")
	comments := write("91-comments.conf", "# a copy of Debian's /etc/sysctl.conf: comments only\n;net.ipv4.ip_forward=1\n")
	foreign := write("92-foreign.conf", "# tuned\nvm.swappiness = 10\nvm.dirty_bytes = 536870912\n")
	shadow := write("93-shadow.conf", "root:$y$j9T$abc:19000:0:99999:7:::\n")
	huge := write("94-huge.conf", strings.Repeat("# x\n", maxSysctlFileBytes))
	link := filepath.Join(dir, "95-link.conf")
	if err := os.Symlink(ours, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "96-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	notSysctlD := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	for _, tc := range []struct {
		path string
		want string // "" for accepted
	}{
		{filepath.Join(dir, "90-absent.conf"), ""},
		{ours, ""},
		{comments, ""},
		{"sysctl.d/90-pgwal-advisor.conf", "not a clean absolute path"},
		{dir + "/../sysctl.d/90-pgwal-advisor.conf", "not a clean absolute path"},
		{filepath.Join(dir, "90-pgwal-advisor"), "does not end in .conf"},
		{"/etc/shadow", "does not end in .conf"},
		{notSysctlD, "not directly in a sysctl.d directory"},
		{foreign, `lines the advisor did not write (line 2: a setting of "vm.swappiness")`},
		{shadow, "lines the advisor did not write (line 1: a line that is no sysctl setting)"},
		{huge, "over 64 kB"},
		{link, "without following links"},
		{filepath.Join(dir, "96-dir.conf"), "not a regular file"},
	} {
		err := CheckSysctlFile(tc.path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckSysctlFile(%s) = %v, want it accepted", tc.path, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckSysctlFile(%s) = %v, want an error with %q", tc.path, err, tc.want)
		}
	}
	if err := CheckSysctlFile(shadow); err != nil && strings.Contains(err.Error(), "$y$") {
		t.Errorf("the error quotes the file's content: %v", err)
	}
}

// TestSysctlFileKeepsOthersComments: applying and restoring a knob in a file that holds someone
// else's comments and mode 0640 keeps both; on b4517f4 the file became 0644 and the rollback
// removed it (a copy of Debian's /etc/sysctl.conf, all comments).
func TestSysctlFileKeepsOthersComments(t *testing.T) {
	ctx := context.Background()
	root := procfsCopy(t)
	file := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	const theirs = "# /etc/sysctl.conf - Configuration file for setting system variables\n#net.ipv4.ip_forward=1\n"
	if err := os.WriteFile(file, []byte(theirs), 0o640); err != nil {
		t.Fatal(err)
	}
	k := NewKernel(root, file, zaptest.NewLogger(t))
	old, err := k.Read(ctx, KnobDirtyBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, KnobDirtyBytes, "536870912"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("after Set the file is %v (%v), want mode 0640 kept", st.Mode(), err)
	}
	if _, err := k.Restore(ctx, KnobDirtyBytes, old); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil || string(b) != theirs {
		t.Errorf("after Restore the file reads %q (%v), want its comments back as they were:\n%s", b, err, theirs)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("after Restore the file is %v (%v), want mode 0640", st.Mode(), err)
	}
}

// FuzzForeignSysctlLine: whatever a --apply.sysctl-file holds, the check does not panic, takes
// a file only when each line is blank, a comment or one of the pair's keys, and never echoes a
// line that is no setting.
func FuzzForeignSysctlLine(f *testing.F) {
	f.Add(sysctlHeader + "vm.dirty_bytes = 536870912\n")
	f.Add("# comment\n;x\nvm.swappiness=10\n")
	f.Add("root:$y$j9T$abc:19000:0:99999:7:::\n")
	f.Add("-vm/dirty_ratio = 20\n")
	f.Fuzz(func(t *testing.T, content string) {
		err := foreignSysctlLine("/etc/sysctl.d/90-pgwal-advisor.conf", content)
		for _, line := range strings.Split(content, "\n") {
			tl := strings.TrimSpace(line)
			if tl == "" || tl[0] == '#' || tl[0] == ';' {
				continue
			}
			k, _, ok := sysctlKey(line)
			if err == nil && (!ok || !slices.Contains(dirtyPairKeys(), k)) {
				t.Fatalf("took a file with the line %q", line)
			}
			if err != nil && !ok && len(tl) > 8 && strings.Contains(err.Error(), tl) {
				t.Fatalf("the error echoes the line %q: %v", tl, err)
			}
		}
	})
}
