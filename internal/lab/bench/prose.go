package bench

import (
	"bytes"
	"fmt"
	"strings"
)

// A scenario's prose block is the paragraph a person writes after reading the tables (what the
// figures mean, the mechanism behind them). The generator writes it between markers with a
// default text, and MergeProse carries the text from the previous report into a regenerated
// one, so rerunning the suite replaces the tables and keeps the prose.
const (
	proseOpen  = "<!-- prose:"
	proseClose = "<!-- /prose:"
	proseNote  = " (written by hand: `pgwal-lab bench --out` keeps this block) -->\n"
)

// proseFor is the default text of a scenario's prose block; scenarios without one have none.
func proseFor(id string) (string, bool) {
	switch id {
	case Neighbour:
		return neighbourProse, true
	case Seed001:
		return seed001Prose, true
	case NeighbourElsewhere:
		return elsewhereProse, true
	case Defaults:
		return defaultsProse, true
	case restoreProseID:
		return restoreProse, true
	}
	return "", false
}

// neighbourProse is the default mechanism paragraph: what the stack makes a WAL flush wait
// behind, and how to read the table. Rewrite it in the report from the full run's figures.
const neighbourProse = `**What a WAL flush waits behind on this stack.** A commit's WAL flush is an fdatasync on ext4: ` +
	`it writes the WAL's dirty pages through the loop device and ends with a cache flush, which the loop device passes ` +
	`to the simulated disk as an fsync. The bulk writer's data goes out through the same loop device. Once the kernel ` +
	`starts writing it back, the WAL's writes (and a journal commit, which under ext4's default data=ordered first forces ` +
	`out the data of blocks allocated in its transaction) queue behind what write-back has already submitted, and the commits wait until that ` +
	`backlog has reached the device at 80 MB/s: the stall shows as seconds in which no WAL flush completes, then one ` +
	`second that reports the whole stuck flush (the wait-event column says what the backends waited on). ` +
	`Write-back starts when Dirty passes the background threshold, or, for data that never does, when it expires ` +
	`(dirty_expire_centisecs, 30 s by default): with the default ratios on a large machine a writer smaller than ` +
	`the threshold stalls nobody while it writes and the commits stall about 30 s later. A lower threshold moves ` +
	`the stall to the writer's start, and above the dirty limit balance_dirty_pages throttles the writer itself. ` +
	`The simulated disk sees only the loop device's plain writes and flushes, so it cannot tell the WAL's writes ` +
	`from the neighbour's: its queue model (serial, or priority for syncs) changes where a flush waits, not where ` +
	`the WAL's data waits. Where the two queue models' stall seconds agree, a conclusion does not depend on the ` +
	`simulated disk's queue; where they differ, it does, and the serial model is the pessimistic one.`

// restoreProseID is the neighbour scenario's restore phase's block; restoreProse its default.
const (
	restoreProseID = "neighbour-restore"
	restoreProse   = `**What it decided.** Whether the daemon recommended the kernel's ratios, made one change of the four ` +
		`vm.dirty_* files, kept it by the stall or rolled it back, and what rollback left: from the table above.`
)

// defaultsProse is the default reading of the default-host matrix; rewrite it in the report
// from the full run's figures: per cell, what the advisor changed and what it gained.
const defaultsProse = `**What the matrix decided.** A cell's grid gains where one of its configurations' runs all beat ` +
	`every run of the start; a rule that warned on a cell without such a gain warned falsely, and its threshold moves ` +
	`(docs/rules.md says which). Every run starts from a CHECKPOINT, so the OLTP loads measure the first seconds of a ` +
	`checkpoint cycle, when images are most of the WAL: spacing checkpoints shows only where the load writes enough ` +
	`WAL to start one (the bulk load).`

// seed001Prose says why the static-tuner target stands missed: the target is kept, as a
// reader of the report should see it scored, not quietly dropped.
const seed001Prose = `**The target against the static tuners.** "At least 3x faster than the static tuners'" was set ` +
	`from a figure of the project's first simulated disk, which charged every O_DSYNC write twice: on it, the ` +
	`static tuners' wal_buffers=16MB under open_datasync stayed slow. On the calibrated disk 16MB removes most of ` +
	`seed 001's cost whatever the method (the 16MB rows against the 64kB ones above), so what the advisor adds over ` +
	`PGTune here is wal_sync_method (which the static tuners never touch; it matters at 64kB and 1MB, not at 16MB) and ` +
	`the steps beyond 16MB that wal-buffers-small takes when buffer-full writes still cost. The target is kept and ` +
	`scored as it was set; the measured ratio is the honest figure.`

func writeProse(b *strings.Builder, id, text string) {
	fmt.Fprintf(b, "%s%s%s%s\n%s%s -->\n\n", proseOpen, id, proseNote, strings.TrimSpace(text), proseClose, id)
}

// MergeProse returns generated (a report WriteMarkdown wrote) with what a person wrote in
// previous (the file it replaces) carried over: the text of every prose block both have, and
// every top-level section ("# ...") of previous that generated lacks, such as hand-written
// measurements appended after the tables.
func MergeProse(previous, generated []byte) []byte {
	out := generated
	for _, id := range proseIDs(generated) {
		old, ok := proseText(previous, id)
		if !ok || len(bytes.TrimSpace(old)) == 0 {
			continue
		}
		start, end, _ := proseBounds(out, id)
		out = append(append(append([]byte{}, out[:start]...), old...), out[end:]...)
	}
	for _, sec := range topSections(previous)[1:] {
		heading, _, _ := bytes.Cut(sec, []byte("\n"))
		if bytes.Contains(out, heading) {
			continue
		}
		out = append(bytes.TrimRight(out, "\n"), []byte("\n\n\n")...)
		out = append(out, bytes.TrimRight(sec, "\n")...)
		out = append(out, '\n')
	}
	return out
}

// proseBounds finds the text of prose block id in doc: doc[start:end] is what lies between the
// opening marker's line and the closing marker.
func proseBounds(doc []byte, id string) (start, end int, ok bool) {
	open := []byte(proseOpen + id + " ")
	i := bytes.Index(doc, open)
	if i < 0 {
		return 0, 0, false
	}
	nl := bytes.IndexByte(doc[i:], '\n')
	if nl < 0 {
		return 0, 0, false
	}
	start = i + nl + 1
	j := bytes.Index(doc[start:], []byte(proseClose+id+" -->"))
	if j < 0 {
		return 0, 0, false
	}
	return start, start + j, true
}

func proseText(doc []byte, id string) ([]byte, bool) {
	start, end, ok := proseBounds(doc, id)
	if !ok {
		return nil, false
	}
	return doc[start:end], true
}

func proseIDs(doc []byte) []string {
	var ids []string
	for rest := doc; ; {
		i := bytes.Index(rest, []byte(proseOpen))
		if i < 0 {
			return ids
		}
		rest = rest[i+len(proseOpen):]
		if j := bytes.IndexByte(rest, ' '); j > 0 {
			ids = append(ids, string(rest[:j]))
		}
	}
}

// topSections splits doc at its top-level headings; the first part is whatever precedes the
// second heading (the generated report's own).
func topSections(doc []byte) [][]byte {
	var secs [][]byte
	lines := bytes.SplitAfter(doc, []byte("\n"))
	var cur []byte
	inFence := false
	for k, l := range lines {
		if bytes.HasPrefix(l, []byte("```")) {
			inFence = !inFence
		}
		if !inFence && k > 0 && bytes.HasPrefix(l, []byte("# ")) {
			secs = append(secs, cur)
			cur = nil
		}
		cur = append(cur, l...)
	}
	return append(secs, cur)
}
