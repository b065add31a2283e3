package apply

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxRecordBytes bounds one line of the journal. A record is a few kilobytes (the finding's
// evidence, the figures); a longer line is none, and reading it whole could take any memory.
const maxRecordBytes = 1 << 20

// scanned is what a pass over journal lines read.
type scanned struct {
	// lines and bytes count the whole lines read; bytes also an unterminated last line that
	// held a whole record. A torn last line is not counted: the next pass reads it again (it
	// may be a record another process is writing).
	lines int
	bytes int64
	// torn are the numbers of the lines cut short by a crash.
	torn []int
}

// scanJournal reads journal lines from r, whose first line is line first+1 of path, and calls
// fn with each record and its line, in order; fn's error stops the scan. A line cut short by a
// crash mid-write (a prefix of a record, or NUL bytes where the rest of it never reached the
// disk) is skipped and reported in torn; any other line that is not a record is an error, since
// the state it held is lost. Only one line is in memory at a time.
func scanJournal(path string, r io.Reader, first int, fn func(rec Record, line []byte) error) (scanned, error) {
	var s scanned
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordBytes+1)
	sc.Split(splitLines)
	for sc.Scan() {
		raw := sc.Bytes()
		n := first + s.lines + 1
		terminated := raw[len(raw)-1] == '\n'
		rec, text, torn, err := parseLine(path, n, raw)
		if err != nil {
			return s, err
		}
		if terminated || text != nil {
			s.lines++
			s.bytes += int64(len(raw))
		}
		if torn {
			s.torn = append(s.torn, n)
		}
		if text != nil {
			if err := fn(rec, text); err != nil {
				return s, err
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return s, fmt.Errorf("apply journal %s line %d is longer than %d bytes, which no record is: repair or move the file; nothing is applied until then",
			path, first+s.lines+1, maxRecordBytes)
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("read apply journal %s: %w", path, err)
	}
	return s, nil
}

// splitLines splits at '\n' and keeps it, so that a line without one (the last, torn or still
// being written) is told apart.
func splitLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// parseLine reads one line: a record (text is the record's JSON), a torn line (torn), a blank
// one (neither), or an error.
func parseLine(path string, n int, raw []byte) (rec Record, text []byte, torn bool, err error) {
	// A crash mid-write can also leave the file longer than what reached the disk: the rest
	// reads as NUL bytes (delayed allocation). A tail of NULs is a cut record too.
	line := bytes.TrimSpace(raw)
	cut := bytes.TrimSpace(bytes.TrimRight(line, "\x00"))
	if len(cut) == 0 {
		return Record{}, nil, len(line) > 0, nil
	}
	err = json.Unmarshal(cut, &rec)
	if err == nil && rec.Kind == "" {
		err = errors.New("no kind")
	}
	if err == nil {
		return rec, cut, false, nil
	}
	// A record cut short by a crash mid-write is a prefix of one: JSON that ends early.
	// Append ends such a line before writing the next record, so it may be anywhere.
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) && strings.Contains(err.Error(), "unexpected end of JSON input") {
		return Record{}, nil, true, nil
	}
	return Record{}, nil, false, fmt.Errorf("apply journal %s line %d is not a journal record (%v): repair or move the file; nothing is applied until then", path, n, err)
}

// parseJournal reads a whole journal held in memory (tests and fuzzing).
func parseJournal(path string, b []byte) ([]Record, string, error) {
	var recs []Record
	s, err := scanJournal(path, bytes.NewReader(b), 0, func(r Record, _ []byte) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return recs, tornMessage(path, s.torn), nil
}

// tornMessage says which lines were cut short ("" when none); it names at most ten.
func tornMessage(path string, torn []int) string {
	if len(torn) == 0 {
		return ""
	}
	names := make([]string, 0, 11)
	for i, n := range torn {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(torn)-10))
			break
		}
		names = append(names, strconv.Itoa(n))
	}
	return fmt.Sprintf("line(s) %s of %s were cut short by a crash while being written and are ignored", strings.Join(names, ", "), path)
}
