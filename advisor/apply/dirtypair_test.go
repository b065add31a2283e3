package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

func TestParseDirtyPair(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string // "" when parsing fails
		newOK   bool   // checkNewPair accepts it
		problem string // a word of the error
	}{
		{in: "10%/20%", want: "10%/20%", newOK: true},
		{in: " 5% / 10% ", want: "5%/10%", newOK: true},
		{in: "67108864/536870912", want: "67108864/536870912", newOK: true},
		{in: "67108864/20%", want: "67108864/20%", problem: "mixes"},
		{in: "20%/10%", want: "20%/10%", problem: "not below"},
		{in: "10%/10%", want: "10%/10%", problem: "not below"},
		{in: "536870912/67108864", want: "536870912/67108864", problem: "not below"},
		{in: "0%/20%", problem: "1%..100%"},
		{in: "10%/101%", problem: "1%..100%"},
		{in: "10%/-20%", problem: "percentage"},
		{in: "+10%/20%", problem: "percentage"},
		{in: "1024/536870912", problem: "outside"},
		{in: "67108864/4194304", problem: "outside"},
		{in: "67108864/2199023255553", problem: "outside"},
		{in: "0/0", problem: "outside"},
		{in: "10%", problem: "BACKGROUND/DIRTY"},
		{in: "10%/20%/30%", problem: "BACKGROUND/DIRTY"},
		{in: "", problem: "BACKGROUND/DIRTY"},
		{in: "%/20%", problem: "percentage"},
		{in: "10 %/20%", problem: "percentage"},
	} {
		p, err := parseDirtyPair(tc.in)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("parseDirtyPair(%q) = %v, %v; want an error naming %q", tc.in, p, err, tc.problem)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("parseDirtyPair(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
			continue
		}
		err = checkNewPair(p)
		if tc.newOK != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.problem)) {
			t.Errorf("checkNewPair(%s) = %v, want ok %v (%q)", p, err, tc.newOK, tc.problem)
		}
	}
}

// pairProcfs is a testdata procfs tree with the given four vm.dirty_* values, and a Kernel over
// it whose writes couple twins as the kernel does: writing one zeroes the other. writes lists
// the knobs written, in order.
func pairProcfs(t *testing.T, bgBytes, bgRatio, dirtyBytes, dirtyRatio int64) (string, *Kernel, *[]string) {
	t.Helper()
	root := procfsCopy(t)
	for knob, v := range map[string]int64{"dirty_background_bytes": bgBytes, "dirty_background_ratio": bgRatio, "dirty_bytes": dirtyBytes, "dirty_ratio": dirtyRatio} {
		if err := os.WriteFile(filepath.Join(root, "sys", "vm", knob), []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := NewKernel(root, filepath.Join(t.TempDir(), "90-pgwal-advisor.conf"), zaptest.NewLogger(t))
	var writes []string
	k.write = func(knob string, n int64) error {
		writes = append(writes, knob)
		if n == 0 {
			// The kernel refuses 0 for a bytes knob (EINVAL) and a ratio of 0 is never ours.
			return &os.PathError{Op: "write", Path: knob, Err: syscall.EINVAL}
		}
		if err := k.writeKnob(knob, n); err != nil {
			return err
		}
		return k.writeKnob(twinKnob(knob), 0)
	}
	return root, k, &writes
}

func knobs(t *testing.T, root string) string {
	t.Helper()
	var out []string
	for _, k := range []string{"dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"} {
		out = append(out, readKnobFile(t, root, k))
	}
	return strings.Join(out, " ")
}

// TestKernelPairRestoresRatios: from tuned's lowered bytes (64MB/512MB) to the kernel's ratios
// and back, as one change: all four files, the sysctl.d file's lines (another setting in it
// kept), one record of the old pair.
func TestKernelPairRestoresRatios(t *testing.T) {
	ctx := context.Background()
	root, k, writes := pairProcfs(t, 64<<20, 0, 512<<20, 0)
	orig := "# mine\nvm.swappiness = 10\nvm.dirty_bytes = 536870912\nvm.dirty_background_bytes = 67108864\n"
	if err := os.WriteFile(k.SysctlFile(), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := k.Read(ctx, KnobDirtyThresholds)
	if err != nil {
		t.Fatal(err)
	}
	if old.Value != "67108864/536870912" || old.Sysctl[KnobDirtyBytes] != "536870912" || old.Sysctl[KnobDirtyBackgroundBytes] != "67108864" || len(old.Sysctl) != 2 {
		t.Fatalf("Read = %+v", old)
	}
	live, err := k.Set(ctx, KnobDirtyThresholds, "10%/20%")
	if err != nil {
		t.Fatal(err)
	}
	if got := knobs(t, root); got != "0 10 0 20" || live.Value != "10%/20%" {
		t.Errorf("after Set: files %s, live %s; want 0 10 0 20", got, live.Value)
	}
	// No vmstat in the tree: a ratio counts as above the bytes, so the dirty side goes first.
	if strings.Join(*writes, " ") != "vm.dirty_ratio vm.dirty_background_ratio" {
		t.Errorf("writes %v, want the dirty ratio first (the threshold rises)", *writes)
	}
	b, _ := os.ReadFile(k.SysctlFile())
	if s := string(b); !strings.Contains(s, "vm.swappiness = 10") || strings.Contains(s, "_bytes") ||
		!strings.Contains(s, "vm.dirty_ratio = 20") || !strings.Contains(s, "vm.dirty_background_ratio = 10") {
		t.Errorf("sysctl.d file after Set: %q", s)
	}
	*writes = nil
	if _, err := k.Restore(ctx, KnobDirtyThresholds, old); err != nil {
		t.Fatal(err)
	}
	if got := knobs(t, root); got != "67108864 0 536870912 0" {
		t.Errorf("after Restore: %s, want 67108864 0 536870912 0", got)
	}
	if strings.Join(*writes, " ") != "vm.dirty_background_bytes vm.dirty_bytes" {
		t.Errorf("restore writes %v, want the background side first (the threshold falls)", *writes)
	}
	b, _ = os.ReadFile(k.SysctlFile())
	for _, line := range []string{"vm.swappiness = 10", "vm.dirty_bytes = 536870912", "vm.dirty_background_bytes = 67108864"} {
		if !strings.Contains(string(b), line) || strings.Contains(string(b), "ratio") {
			t.Errorf("sysctl.d file after Restore: %q, want %q back and no ratio line", b, line)
		}
	}
}

// TestKernelPairOrderByMemory: with vmstat, the order follows the thresholds in bytes.
func TestKernelPairOrderByMemory(t *testing.T) {
	ctx := context.Background()
	root, k, writes := pairProcfs(t, 0, 10, 0, 20)
	// 1 GiB dirtyable in 4 kB pages: the ratios are about 100MB/200MB.
	pages := int64(1<<30) / int64(os.Getpagesize())
	vmstat := "nr_free_pages " + strconv.FormatInt(pages/2, 10) + "\nnr_inactive_file " + strconv.FormatInt(pages/4, 10) + "\nnr_active_file " + strconv.FormatInt(pages/4, 10) + "\n"
	if err := os.WriteFile(filepath.Join(root, "vmstat"), []byte(vmstat), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, KnobDirtyThresholds, "268435456/1073741824"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(*writes, " ") != "vm.dirty_bytes vm.dirty_background_bytes" {
		t.Errorf("writes %v: 1GB is above 20%% of 1GiB, so the dirty side goes first", *writes)
	}
	*writes = nil
	if _, err := k.Set(ctx, KnobDirtyThresholds, "16777216/67108864"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(*writes, " ") != "vm.dirty_background_bytes vm.dirty_bytes" {
		t.Errorf("writes %v: lowering writes the background side first", *writes)
	}
}

// TestKernelPairSetFailsRestores: the second write fails; the first is undone and the file is
// untouched.
func TestKernelPairSetFailsRestores(t *testing.T) {
	root, k, _ := pairProcfs(t, 64<<20, 0, 512<<20, 0)
	coupled := k.write
	k.write = func(knob string, n int64) error {
		if knob == "vm.dirty_background_ratio" {
			return &os.PathError{Op: "write", Path: knob, Err: syscall.EIO}
		}
		return coupled(knob, n)
	}
	_, err := k.Set(context.Background(), KnobDirtyThresholds, "10%/20%")
	if err == nil || !strings.Contains(err.Error(), "the old values were restored") {
		t.Fatalf("Set = %v, want a failure that restored the old values", err)
	}
	if got := knobs(t, root); got != "67108864 0 536870912 0" {
		t.Errorf("after the failed Set: %s", got)
	}
	if _, err := os.Stat(k.SysctlFile()); !os.IsNotExist(err) {
		t.Errorf("the failed Set left a sysctl.d file: %v", err)
	}
}

// TestCheckPairWrite: the guard over a pair's new value and over a journal's record of one.
func TestCheckPairWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	k := NewKernel(t.TempDir(), filepath.Join(dir, "90-pgwal-advisor.conf"), nil)
	own := filepath.Join(dir, "90-pgwal-advisor.conf")
	good := func() Value {
		return Value{Value: "67108864/536870912", SysctlFile: own, Sysctl: map[string]string{KnobDirtyBytes: "536870912"}}
	}
	for _, tc := range []struct {
		name   string
		value  string
		old    func() Value // nil: a new value
		refuse string       // "" when allowed
	}{
		{name: "new ratios", value: "10%/20%"},
		{name: "new bytes", value: "67108864/536870912"},
		{name: "new mixed", value: "67108864/20%", refuse: "mixes"},
		{name: "new background above", value: "20%/10%", refuse: "not below"},
		{name: "new ratio zero", value: "0%/20%", refuse: "1%..100%"},
		{name: "restore recorded", value: "67108864/536870912", old: good},
		{name: "restore mixed", value: "67108864/20%", old: func() Value { v := good(); v.Value = "67108864/20%"; return v }},
		{name: "restore ratio above 100", value: "10%/120%", old: func() Value { v := good(); v.Value = "10%/120%"; return v }, refuse: "1%..100%"},
		{name: "restore both zero", value: "0/0", old: func() Value { v := good(); v.Value = "0/0"; return v }, refuse: "outside"},
		{name: "foreign key", value: "67108864/536870912", old: func() Value { v := good(); v.Sysctl["kernel.core_pattern"] = "|/bin/sh"; return v }, refuse: "not one of"},
		{name: "line out of bounds", value: "67108864/536870912", old: func() Value { v := good(); v.Sysctl["vm.dirty_ratio"] = "0"; return v }, refuse: "outside"},
		{name: "line not a number", value: "67108864/536870912", old: func() Value { v := good(); v.Sysctl["vm.dirty_ratio"] = "20\nvm.swappiness=0"; return v }, refuse: "newline"},
		{name: "twin fields", value: "67108864/536870912", old: func() Value { v := good(); v.Twin, v.TwinValue = "vm.dirty_ratio", "0"; return v }, refuse: "another kind"},
		{name: "foreign sysctl file", value: "67108864/536870912", old: func() Value { v := good(); v.SysctlFile = "/etc/passwd"; return v }, refuse: "sysctl_file"},
		{name: "misnamed sysctl file", value: "67108864/536870912", old: func() Value { v := good(); v.SysctlFile = filepath.Join(dir, "precious.conf"); return v }, refuse: "named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old *Value
			if tc.old != nil {
				v := tc.old()
				old = &v
			}
			err := checkWrite(ctx, k, KnobDirtyThresholds, tc.value, old)
			switch {
			case tc.refuse == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refuse != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refuse)):
				t.Errorf("checkWrite = %v, want a refusal naming %q", err, tc.refuse)
			}
		})
	}
	// Another kind's record may not carry the pair's lines.
	rec := Value{Value: "0", Twin: "vm.dirty_ratio", TwinValue: "20", Sysctl: map[string]string{KnobDirtyBytes: "536870912"}}
	if err := checkWrite(ctx, k, KnobDirtyBytes, "0", &rec); !errors.Is(err, ErrRefused) {
		t.Errorf("a vm.dirty_bytes record with the pair's lines: %v, want refused", err)
	}
	pgRec := Value{Value: "16MB", Sysctl: map[string]string{KnobDirtyBytes: "536870912"}}
	if err := checkWrite(ctx, newFakePG(map[string]string{collector.WALBuffers: "16MB"}, nil), collector.WALBuffers, "16MB", &pgRec); !errors.Is(err, ErrRefused) {
		t.Errorf("a wal_buffers record with sysctl lines: %v, want refused", err)
	}
}

// TestRollbackTamperedPairRecord: a journal someone else wrote, whose pair record would set a
// ratio of 0 or name a foreign file: refused, nothing written.
func TestRollbackTamperedPairRecord(t *testing.T) {
	root, k, _ := pairProcfs(t, 0, 10, 0, 20)
	j := NewJournal(filepath.Join(t.TempDir(), "apply.journal"))
	appendChange(t, j, KnobDirtyThresholds, "10%/20%", Value{Value: "0%/20%", SysctlFile: k.SysctlFile()}, false)
	appendChange(t, j, KnobDirtyThresholds, "10%/20%", Value{Value: "67108864/536870912", SysctlFile: k.SysctlFile(),
		Sysctl: map[string]string{"kernel.modprobe": "/tmp/x"}}, false)
	results, err := Rollback(context.Background(), j, []Actuator{k}, 0, nil, zaptest.NewLogger(t))
	if !errors.Is(err, ErrRefused) || len(results) != 2 {
		t.Fatalf("Rollback = %+v, %v; want two refusals", results, err)
	}
	for _, r := range results {
		if r.Refused == "" {
			t.Errorf("change %d was not refused: %+v", r.ID, r)
		}
	}
	if got := knobs(t, root); got != "0 10 0 20" {
		t.Errorf("after refused rollbacks: %s, want 0 10 0 20", got)
	}
	if _, err := os.Stat(k.SysctlFile()); !os.IsNotExist(err) {
		t.Errorf("a refused rollback wrote the sysctl.d file: %v", err)
	}
}

// pairFinding is writeback-stalls-wal's restore of the kernel's ratios.
func pairFinding() rules.Finding {
	return rules.Finding{Rule: "writeback-stalls-wal", Severity: rules.Warning, Setting: KnobDirtyThresholds,
		Current: "67108864/536870912", Recommended: "10%/20%", Action: rules.ActionSysctl}
}

// TestManagerKernelPair: the daemon applies the pair as one change, verifies it by the stall,
// and `rollback` puts all four files and the sysctl.d file back from its one record.
func TestManagerKernelPair(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	root, k, _ := pairProcfs(t, 64<<20, 0, 512<<20, 0)
	// The stall lasts while the lowered bytes are in force.
	w.kernel = neighbourStall(t, root, func(bg string) bool { return bg != "0" })
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg, k)
	w.setFindings(pairFinding())
	runUntil(t, m, w, 40, "verification", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	recs, _, _ := m.Journal().Read()
	var intents int
	for _, r := range recs {
		if r.Kind == KindIntent {
			intents++
		}
	}
	if intents != 1 || recs[0].Old == nil || recs[0].Old.Value != "67108864/536870912" {
		t.Fatalf("journal: %d intents, first old %+v; want one intent recording 67108864/536870912", intents, recs[0].Old)
	}
	if v := recordOf(t, m.Journal(), 1, Verified); !strings.Contains(v.Reason, FigureWritebackStall) {
		t.Errorf("verified by %q, want the stall (%s)", v.Reason, FigureWritebackStall)
	}
	if got := knobs(t, root); got != "0 10 0 20" {
		t.Errorf("applied: %s, want 0 10 0 20", got)
	}
	if _, err := Rollback(context.Background(), m.Journal(), []Actuator{pg, k}, 1, w.clock, nil); err != nil {
		t.Fatal(err)
	}
	if got := knobs(t, root); got != "67108864 0 536870912 0" {
		t.Errorf("after rollback: %s, want 67108864 0 536870912 0", got)
	}
	if _, err := os.Stat(k.SysctlFile()); !os.IsNotExist(err) {
		t.Errorf("after rollback the sysctl.d file is still there: %v", err)
	}
}

// TestKernelPairRealProc drives the host's four vm.dirty_* files through the pair: lowered to
// tuned's 64MB/512MB, back to the kernel's ratios, the lowered bytes restored from their record,
// and the host's own values restored from theirs. The kernel couples the twins itself here. It
// runs only as root with a writable /proc/sys, and Cleanup puts the original values back by
// hand even when it fails.
func TestKernelPairRealProc(t *testing.T) {
	const vm = "/proc/sys/vm/"
	if os.Geteuid() != 0 {
		t.Skip("writing /proc/sys/vm needs root")
	}
	if err := openForWrite(vm + "dirty_bytes"); err != nil {
		t.Skipf("/proc/sys/vm is not writable here: %v", err)
	}
	lab.LockHostVMForTest(t)
	ctx := context.Background()
	k := NewKernel("/proc", filepath.Join(t.TempDir(), "90-pgwal-advisor.conf"), zaptest.NewLogger(t))
	host, err := k.Read(ctx, KnobDirtyThresholds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := parseDirtyPair(host.Value)
		if err != nil {
			t.Errorf("the host's pair %q: %v", host.Value, err)
			return
		}
		bg, dirty := p.knobs()
		// Ratios (which zero the bytes) and bytes alike: the knob in force of each side.
		for _, w := range []struct {
			knob string
			n    int64
		}{{bg, p.bg.n}, {dirty, p.dirty.n}} {
			path := vm + strings.TrimPrefix(w.knob, "vm.")
			if err := os.WriteFile(path, []byte(strconv.FormatInt(w.n, 10)), 0o644); err != nil {
				t.Errorf("restore %s=%d BY HAND: %v", w.knob, w.n, err)
			}
		}
		if now, err := k.Read(ctx, KnobDirtyThresholds); err != nil || now.Value != host.Value {
			t.Errorf("vm.dirty_* read %s, were %s: restore them BY HAND (%v)", now.Value, host.Value, err)
		}
	})
	read := func() string {
		var out []string
		for _, n := range []string{"dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"} {
			b, err := os.ReadFile(vm + n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.TrimSpace(string(b)))
		}
		return strings.Join(out, " ")
	}
	if _, err := k.Set(ctx, KnobDirtyThresholds, "67108864/536870912"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "67108864 0 536870912 0" {
		t.Fatalf("lowered: %s, want 67108864 0 536870912 0", got)
	}
	lowered, err := k.Read(ctx, KnobDirtyThresholds)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Set(ctx, KnobDirtyThresholds, "10%/20%"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "0 10 0 20" {
		t.Errorf("the kernel's ratios: %s, want 0 10 0 20", got)
	}
	if _, err := k.Restore(ctx, KnobDirtyThresholds, lowered); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "67108864 0 536870912 0" {
		t.Errorf("restored the lowered bytes: %s", got)
	}
	if _, err := k.Restore(ctx, KnobDirtyThresholds, host); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(k.SysctlFile()); !os.IsNotExist(err) {
		t.Errorf("the sysctl.d file is still there after restoring the host's values: %v", err)
	}
}

// TestManagerKernelWaitsForStallEnd: a change judged by the stall is not made while the stall
// runs (the window before would hold only its start), and is made once it is over, with the
// whole stall in the figures before it.
func TestManagerKernelWaitsForStallEnd(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	root, k, _ := pairProcfs(t, 64<<20, 0, 512<<20, 0)
	n := 0
	stall := neighbourStall(t, root, func(string) bool { return n >= 12 && n < 20 })
	w.kernel = func(s *collector.Snapshot) {
		n++
		stall(s)
		if n == 13 { // the rule raises its finding a snapshot into the stall
			w.findings = []rules.Finding{pairFinding()}
		}
	}
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg, k)
	var waited bool
	for range 40 {
		run(t, m, w, 1)
		recs, _, _ := m.Journal().Read()
		if len(recs) > 0 {
			break
		}
		waited = waited || strings.Contains(m.Status().Waiting, "still runs")
	}
	recs, _, _ := m.Journal().Read()
	if len(recs) == 0 {
		t.Fatal("no change was made after the stall ended")
	}
	if !waited {
		t.Error("the status never said the change waits for the stall's end")
	}
	if end := w.start.Add(20 * time.Second); recs[0].Time.Before(end) {
		t.Errorf("the change was made at %s, during the stall (it ended at %s)", recs[0].Time, end)
	}
	if st, ok := recs[0].Before.get(FigureWritebackStall); !ok || st.Value < 7 {
		t.Errorf("the figures before the change hold a stall of %v s (%v), want the whole 8 s", st.Value, ok)
	}
}

// TestKernelFiguresPileReported: a kernel change is judged by the stall and the flush waits;
// the pile is shown, not judged, so that the ratios' larger pile (the lab: 470MB -> 2.6GB) is
// not called a regression, nor a lower threshold's smaller one an improvement.
func TestKernelFiguresPileReported(t *testing.T) {
	for _, s := range []string{KnobDirtyThresholds, KnobDirtyBytes} {
		if got := figureNames(s); slices.Contains(got, FigureDirtyPeak) || len(got) == 0 || got[0] != FigureWritebackStall {
			t.Errorf("%s judged by %v, want the stall first and not the pile", s, got)
		}
		if !slices.Contains(reportedFigures(s), FigureDirtyPeak) {
			t.Errorf("%s does not report the pile", s)
		}
	}
	pile := func(v float64) Figure { return Figure{Name: FigureDirtyPeak, Value: v, Samples: 100, Enough: true} }
	// The lab's second pass: one stall on each side, 39 -> 32 s, in one of six parts of each
	// window. One stall a side cannot show a gain: the change did not help, and the reason
	// says the interval and what the window could have detected.
	before := &Figures{Figures: []Figure{fig(FigureWritebackStall, 100, 0, 39, 0, 0, 0, 0), fig(FigureFlushWaitShare, 100, 0.95, 0.77, 0.86), pile(470 << 20)}}
	after := &Figures{MustImprove: true, Figures: []Figure{fig(FigureWritebackStall, 100, 0, 0, 32, 0, 0, 0), fig(FigureFlushWaitShare, 100, 0.70, 0.85, 0.76), pile(2650 << 20)}}
	if v := compare(before, after); !v.worse || !strings.Contains(v.reason, "did not help") || !strings.Contains(v.reason, "detectable") || strings.Contains(v.reason, FigureDirtyPeak) {
		t.Errorf("the lab's second pass (one stall a side, 39 -> 32 s): %+v; want did not help with the interval and the detectable effect, the pile not named", v)
	}
	// Stalls in most parts of each window, about halved: a gain the interval shows, with the
	// pile up.
	after.Figures[0] = fig(FigureWritebackStall, 100, 20, 18, 22, 19, 21, 20)
	before.Figures[0] = fig(FigureWritebackStall, 100, 39, 37, 41, 38, 40, 39)
	if v := compare(before, after); v.worse {
		t.Errorf("stalls 39 -> 20 s in every part with the pile up: %+v; want kept", v)
	}
}
