package versions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Version boundaries the test names spell out (server_version_num / 10000).
const (
	compressionEnumMajor = 15 // wal_compression an enum (pglz, lz4, zstd where built); a boolean before
	checkpointerMajor    = 17 // pg_stat_checkpointer; the IO wait events renamed (WALWrite -> WalWrite)
	walIOMajor           = 18 // WAL writes and syncs in pg_stat_io (object 'wal')
)

// TestVersions runs, on every major version at once (they share nothing but the binary):
//   - check on fsync=off: critical fsync-off;
//   - seed 001's start on a simulated 4 ms disk (wal_buffers=64kB, open_datasync) under a
//     batched bulk load: collect's contract paths checked against the server's own views (WAL
//     writes and syncs from pg_stat_wal or, on 18, pg_stat_io; checkpoints from pg_stat_bgwriter
//     or, on 17+, pg_stat_checkpointer), the WAL wait events under the version's names, check's
//     warnings, full-page-images judged (pg_stat_wal's wal_fpi on every version; 18's pg_stat_io
//     adds nothing to it), wal_compression as a boolean (14) or an enum with its values (15+),
//     and apply + rollback of wal_sync_method.
func TestVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("the version matrix starts a cluster of every PostgreSQL version: not with -short")
	}
	bin := buildAdvisor(t)
	for _, major := range lab.MatrixVersions() {
		t.Run(fmt.Sprintf("pg%d", major), func(t *testing.T) {
			t.Parallel()
			binDir := lab.RequireVersion(t, major)
			t.Run("check_fsync_off_critical", func(t *testing.T) { testFsyncOff(t, bin, binDir) })
			testSeed001(t, bin, binDir, major)
		})
	}
}

// buildAdvisor builds cmd/pgwal-advisor into a temporary directory: the test runs the binary an
// operator runs, not the package in-process.
func buildAdvisor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgwal-advisor")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/pgwal-advisor/pgwal-advisor/cmd/pgwal-advisor").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/pgwal-advisor: %v\n%s", err, out)
	}
	return bin
}

// advisor runs the binary and returns stdout, stderr and the exit status.
func advisor(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), 0
}

// checkResult is the part of check --format json this test reads (its documented contract).
type checkResult struct {
	Findings []struct {
		Rule        string `json:"rule"`
		Severity    string `json:"severity"`
		Setting     string `json:"setting"`
		Current     string `json:"current"`
		Recommended string `json:"recommended"`
		Action      string `json:"action"`
	} `json:"findings"`
	NotEnoughData map[string]string `json:"not_enough_data"`
	ProbeSkipped  string            `json:"probe_skipped"`
}

func runCheck(t *testing.T, bin string, args ...string) (checkResult, int) {
	t.Helper()
	out, stderr, code := advisor(t, bin, append([]string{"check", "--format", "json"}, args...)...)
	var res checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("check (exit %d) printed no JSON: %v\nstdout: %s\nstderr: %s", code, err, out, stderr)
	}
	for _, f := range res.Findings {
		t.Logf("%s %s %s: %s -> %s (%s)", f.Severity, f.Rule, f.Setting, f.Current, f.Recommended, f.Action)
	}
	return res, code
}

func testFsyncOff(t *testing.T, bin, binDir string) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{BinDir: binDir, Settings: map[string]string{"fsync": "off"}})
	res, code := runCheck(t, bin, "--dsn", c.DSN(), "--window", "30s", "--interval", "1s")
	if code != 2 {
		t.Errorf("check on fsync=off exited %d, want 2 (critical)", code)
	}
	for _, f := range res.Findings {
		if f.Rule == "fsync-off" {
			if f.Severity != "critical" || f.Action != "never-auto" {
				t.Errorf("fsync-off is %s/%s, want critical/never-auto", f.Severity, f.Action)
			}
			return
		}
	}
	t.Errorf("check on fsync=off: no fsync-off finding")
}

// seed001 is a cluster with seed 001's settings and its WAL on a simulated 4 ms disk, under a
// batched bulk load from start to end of the test.
type seed001 struct {
	c        *lab.Cluster
	walDir   string
	probeDir string
	waits    *waitNames
}

func startSeed001(t *testing.T, binDir string, major int) *seed001 {
	t.Helper()
	disk := simdisk.MountForTest(t, simdisk.Options{Latency: 4 * time.Millisecond})
	mnt := disk.Mountpoint()
	s := &seed001{walDir: filepath.Join(mnt, "wal"), probeDir: filepath.Join(mnt, "probe"), waits: &waitNames{seen: map[string]bool{}}}
	if err := os.Mkdir(s.probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after the disk's cleanup, so the cluster stops before the disk is unmounted.
	s.c = lab.NewTestCluster(t, lab.ClusterOptions{
		BinDir: binDir,
		WALDir: s.walDir,
		Settings: map[string]string{
			"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "track_wal_io_timing": "on",
		},
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Batches, because pg_stat_wal counts a backend's WAL only at transaction end; rounds of
		// a million rows keep the table (and the time a round takes) bounded.
		for ctx.Err() == nil {
			if _, err := s.c.BatchedLoad(ctx, "foo", 1000000, 20000); err != nil && ctx.Err() == nil {
				t.Errorf("bulk load: %v", err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		s.waits.sample(ctx, t, s.c)
	}()
	// Registered last, so it runs first: the load stops before the cluster does.
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	// The load is under way once a buffer-full write has been counted: a backend reports its WAL
	// counters when a transaction ends, and five clusters on two cores start slowly.
	for deadline := time.Now().Add(time.Minute); readWALCounters(t, s.c, major)[2] == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no buffer-full WAL write counted after a minute of bulk load with wal_buffers=64kB")
		}
	}
	return s
}

func testSeed001(t *testing.T, bin, binDir string, major int) {
	s := startSeed001(t, binDir, major)
	dsn := []string{"--dsn", s.c.DSN()}

	t.Run("collector_fixtures_match_server", func(t *testing.T) { checkFixtures(t, s.c, major) })

	// A few snapshots a second apart: the wait events are sampled between them.
	var snaps []map[string]any
	t.Run("collect_rates_under_load", func(t *testing.T) {
		out, stderr, code := advisor(t, bin, append([]string{"collect", "--format", "json", "--interval", "1s", "--count", "4", "--wait-events.interval", "100ms"}, dsn...)...)
		if code != 0 {
			t.Fatalf("collect --interval exited %d: %s", code, stderr)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("collect --interval: %v\n%s", err, out)
			}
			snaps = append(snaps, m)
		}
		if len(snaps) != 4 {
			t.Fatalf("collect --count 4 printed %d snapshots", len(snaps))
		}
		if _, ok := snaps[3]["rates"]; !ok {
			t.Errorf("the last snapshot has no .rates")
		}
	})

	walSource := "pg_stat_wal"
	if major >= walIOMajor {
		walSource = "pg_stat_io"
	}
	t.Run("collect_contract_wal_writes_syncs_from_"+walSource, func(t *testing.T) {
		before := readWALCounters(t, s.c, major)
		doc := collectOnce(t, bin, dsn)
		after := readWALCounters(t, s.c, major)
		checkContract(t, doc, major, s.walDir)
		checkCompressionSetting(t, doc, major)
		// open_datasync syncs by writing (O_DSYNC): PostgreSQL counts no syncs for it, so syncs
		// stay 0 here and are checked under fdatasync, after apply.
		checkWALCounters(t, doc, walSource, before, after, true)
	})

	cpSource := "pg_stat_bgwriter"
	if major >= checkpointerMajor {
		cpSource = "pg_stat_checkpointer"
	}
	t.Run("collect_checkpoints_from_"+cpSource, func(t *testing.T) {
		before := readRequestedCheckpoints(t, s.c, major)
		if err := s.c.Exec(context.Background(), "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		// Up to 14 the statistics collector receives the checkpointer's counters by message, a
		// moment after CHECKPOINT returns; from 15 they are in shared memory when it returns.
		var doc map[string]any
		var got int64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			doc = collectOnce(t, bin, dsn)
			if got = int64(number(t, doc, ".postgres.checkpointer.requested")); got >= before+1 || time.Now().After(deadline) {
				break
			}
		}
		if got < before+1 {
			t.Errorf(".postgres.checkpointer.requested = %d after a CHECKPOINT, want at least %d (%s said %d before)", got, before+1, cpSource, before)
		}
		number(t, doc, ".postgres.checkpointer.timed")
		number(t, doc, ".postgres.checkpointer.sync_time_seconds")
		// num_done is new in 18: requested checkpoints that found nothing to do are not done.
		if done, ok := lookup(doc, ".postgres.checkpointer.done"); ok != (major >= walIOMajor) {
			t.Errorf(".postgres.checkpointer.done = %v (present %v), want it present exactly from 18 on", done, ok)
		}
	})

	// The IO events were renamed in 17: WALWrite became WalWrite, WALSync WalSync.
	ioWrite := "WALWrite"
	if major >= checkpointerMajor {
		ioWrite = "WalWrite"
	}
	t.Run("wait_events_io_"+ioWrite, func(t *testing.T) {
		seen := s.waits.names()
		t.Logf("IO wait events of client backends seen: %v", seen)
		if !s.waits.has(ioWrite) {
			t.Errorf("the load never waited on IO %s (saw %v); the version's name for a WAL write wait is not what the test expects", ioWrite, seen)
		}
		var counted int64
		for _, snap := range snaps[1:] {
			for _, k := range []string{"io_wal_write", "io_wal_sync"} {
				if v, ok := lookup(snap, ".postgres.wait_events.counts."+k); ok {
					counted += int64(v.(float64))
				}
			}
		}
		if counted == 0 {
			t.Errorf("collect counted no io_wal_write or io_wal_sync waits while the server showed %v", seen)
		}
	})

	t.Run("check_seed001_warnings", func(t *testing.T) {
		res, code := runCheck(t, bin, append([]string{"--window", "32s", "--interval", "1s", "--wait-events.interval", "200ms",
			"--probe.dir", s.probeDir, "--probe.budget", "4s"}, dsn...)...)
		for id, why := range res.NotEnoughData {
			t.Logf("not enough data: %s: %s", id, why)
		}
		if code != 1 {
			t.Errorf("check exited %d, want 1 (warnings)", code)
		}
		var fdatasync, buffers bool
		for _, f := range res.Findings {
			fdatasync = fdatasync || (f.Setting == "wal_sync_method" && f.Recommended == "fdatasync" && f.Severity == "warning")
			buffers = buffers || (f.Rule == "wal-buffers-small" && f.Recommended != "" && f.Severity == "warning")
		}
		if !fdatasync {
			t.Errorf("no warning recommending wal_sync_method=fdatasync (probe skipped: %q)", res.ProbeSkipped)
		}
		if !buffers {
			t.Errorf("no wal-buffers-small warning")
		}
		checkFullPageImages(t, res, major)
	})

	t.Run("apply_rollback_wal_sync_method", func(t *testing.T) {
		journal := filepath.Join(t.TempDir(), "apply.journal")
		out, stderr, code := advisor(t, bin, append([]string{"apply", "--yes", "--format", "json", "--apply.settings", "wal_sync_method",
			"--apply.journal", journal, "--window", "32s", "--interval", "1s", "--wait-events.interval", "200ms",
			"--probe.dir", s.probeDir, "--probe.budget", "4s"}, dsn...)...)
		if code != 0 {
			t.Fatalf("apply --yes exited %d: %s\n%s", code, stderr, out)
		}
		// fdatasync, or fsync when the probe measures it faster on this machine's disk at the
		// time (the suite's other packages share it): both are seed 001's fix, and both count a
		// sync for every flush.
		applied, _, _ := lab.ReadSetting(t, s.c, "wal_sync_method")
		if applied != "fdatasync" && applied != "fsync" {
			t.Fatalf("after apply --yes wal_sync_method = %s, want fdatasync or fsync; apply said:\n%s", applied, out)
		}
		t.Run("collect_wal_syncs_from_"+walSource, func(t *testing.T) {
			// Under fdatasync (or fsync) every flush is a write and a counted sync.
			first := readWALCounters(t, s.c, major)
			time.Sleep(2 * time.Second)
			before := readWALCounters(t, s.c, major)
			doc := collectOnce(t, bin, dsn)
			after := readWALCounters(t, s.c, major)
			checkWALCounters(t, doc, walSource, before, after, false)
			if before[1] <= first[1] {
				t.Errorf("%s counted no syncs in 2 s of load under %s (%d then %d)", walSource, applied, first[1], before[1])
			}
		})
		out, stderr, code = advisor(t, bin, append([]string{"rollback", "--journal", journal, "--all"}, dsn...)...)
		if code != 0 {
			t.Fatalf("rollback --all exited %d: %s\n%s", code, stderr, out)
		}
		if v, src, file := lab.ReadSetting(t, s.c, "wal_sync_method"); v != "open_datasync" || src != "configuration file" || !strings.HasSuffix(file, "lab.conf") {
			t.Errorf("after rollback wal_sync_method = %s from %s %s, want open_datasync from lab.conf", v, src, file)
		}
	})
}
