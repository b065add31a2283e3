package compression

import "errors"

// pglz is PostgreSQL's own LZ compressor (src/common/pg_lzcompress.c), written again in Go with
// PGLZ_strategy_default, the strategy wal_compression=pglz uses: it must compress to at most
// 75% of its input, it gives up when the first 1024 bytes it writes hold no match, a match of
// 128 bytes ends the search, and each further candidate lowers that mark by 10%. Its output is
// byte for byte PostgreSQL's (TestPGLZMatchesPostgreSQL), so the ratio measured here is the
// server's, and its time the work the server would do.
const (
	pglzHistorySize  = 4096
	pglzMaxMatch     = 273
	pglzMinInput     = 32
	pglzMinCompRate  = 25
	pglzFirstSuccess = 1024
	pglzGoodMatch    = 128
	pglzGoodDrop     = 10
	pglzMaxOffset    = 0x0fff
)

type pglzEntry struct {
	next, prev int16 // indices into entries; 0 is none
	hindex     int
	pos        int
}

// pglzState is the compressor's history, kept between calls so that compressing a page
// allocates nothing.
type pglzState struct {
	start   [8192]int16
	entries [pglzHistorySize + 1]pglzEntry
}

// hashIndex hashes the next four bytes (fewer at the end of the input) as PostgreSQL does, with
// its bytes as x86's signed char: a byte from 0x80 up hashes negative before the mask.
func hashIndex(src []byte, s, mask int) int {
	c := func(i int) int { return int(int8(src[s+i])) }
	if len(src)-s < 4 {
		return c(0) & mask
	}
	return (c(0)<<6 ^ c(1)<<4 ^ c(2)<<2 ^ c(3)) & mask
}

// compress writes src compressed into dst (which needs len(src)+4 bytes) and returns its
// length, or -1 where PostgreSQL's would fail (then the image is written as it is).
func (st *pglzState) compress(src, dst []byte) int {
	slen := len(src)
	if slen < pglzMinInput {
		return -1
	}
	resultMax := slen * (100 - pglzMinCompRate) / 100
	hashSize := 8192
	switch {
	case slen < 128:
		hashSize = 512
	case slen < 256:
		hashSize = 1024
	case slen < 512:
		hashSize = 2048
	case slen < 1024:
		hashSize = 4096
	}
	mask := hashSize - 1
	clear(st.start[:hashSize])
	next, recycle := 1, false
	add := func(s int) {
		h := hashIndex(src, s, mask)
		e := &st.entries[next]
		if recycle {
			if e.prev == 0 {
				st.start[e.hindex] = e.next
			} else {
				st.entries[e.prev].next = e.next
			}
			if e.next != 0 {
				st.entries[e.next].prev = e.prev
			}
		}
		e.next, e.prev, e.hindex, e.pos = st.start[h], 0, h, s
		st.entries[st.start[h]].prev = int16(next) // entry 0 is scratch, as in PostgreSQL
		st.start[h] = int16(next)
		if next++; next >= pglzHistorySize+1 {
			next, recycle = 1, true
		}
	}
	out := pglzOut{dst: dst, ctrlPos: -1}
	found := false
	for dp := 0; dp < slen; {
		if out.bp >= resultMax || !found && out.bp >= pglzFirstSuccess {
			return -1
		}
		n, off, ok := st.findMatch(src, dp, mask)
		if !ok {
			out.literal(src[dp])
			add(dp)
			dp++
			continue
		}
		out.tag(n, off)
		for ; n > 0; n-- {
			add(dp)
			dp++
		}
		found = true
	}
	out.flush()
	if out.bp >= resultMax {
		return -1
	}
	return out.bp
}

// pglzOut writes pglz's output: a control byte before every eight items, whose bits say which
// of them are tags (back references) and which literal bytes.
type pglzOut struct {
	dst      []byte
	bp       int
	ctrlPos  int // -1 before the first control byte
	ctrlByte byte
	ctrl     int
}

func (o *pglzOut) nextItem() {
	if o.ctrl&0xff == 0 {
		o.flush()
		o.ctrlPos, o.ctrlByte, o.ctrl = o.bp, 0, 1
		o.bp++
	}
}

func (o *pglzOut) flush() {
	if o.ctrlPos >= 0 {
		o.dst[o.ctrlPos] = o.ctrlByte
	}
}

func (o *pglzOut) literal(b byte) {
	o.nextItem()
	o.dst[o.bp] = b
	o.bp++
	o.ctrl <<= 1
}

// tag writes a match of n bytes at offset off: 2 bytes, 3 when n is over 17.
func (o *pglzOut) tag(n, off int) {
	o.nextItem()
	o.ctrlByte |= byte(o.ctrl)
	o.ctrl <<= 1
	if n > 17 {
		o.dst[o.bp], o.dst[o.bp+1], o.dst[o.bp+2] = byte((off&0xf00)>>4|0x0f), byte(off&0xff), byte(n-18)
		o.bp += 3
		return
	}
	o.dst[o.bp], o.dst[o.bp+1] = byte((off&0xf00)>>4|(n-3)), byte(off&0xff)
	o.bp += 2
}

// findMatch walks the history list of the input at s for the longest earlier match, settling
// for less the more candidates it has seen; a match must save a byte (3 or more).
func (st *pglzState) findMatch(src []byte, s, mask int) (int, int, bool) {
	good := pglzGoodMatch
	bestLen, bestOff := 0, 0
	for e := st.start[hashIndex(src, s, mask)]; e != 0; {
		h := st.entries[e].pos
		off := s - h
		if off >= pglzMaxOffset {
			break
		}
		n := 0
		for s+n < len(src) && src[s+n] == src[h+n] && n < pglzMaxMatch {
			n++
		}
		if n > bestLen {
			bestLen, bestOff = n, off
		}
		if e = st.entries[e].next; e != 0 {
			if bestLen >= good {
				break
			}
			good -= good * pglzGoodDrop / 100
		}
	}
	if bestLen > 2 {
		return bestLen, bestOff, true
	}
	return 0, 0, false
}

// pglzDecompress expands src into exactly rawLen bytes, for images the server compressed.
func pglzDecompress(src []byte, rawLen int) ([]byte, error) {
	dst := make([]byte, 0, rawLen)
	for sp := 0; sp < len(src) && len(dst) < rawLen; {
		ctrl := src[sp]
		sp++
		for i := 0; i < 8 && sp < len(src) && len(dst) < rawLen; i++ {
			if ctrl&1 == 0 {
				dst = append(dst, src[sp])
				sp++
			} else {
				if sp+2 > len(src) {
					return nil, errors.New("pglz: tag cut short")
				}
				n, off := int(src[sp]&0x0f)+3, int(src[sp]&0xf0)<<4|int(src[sp+1])
				sp += 2
				if n == 18 {
					if sp >= len(src) {
						return nil, errors.New("pglz: tag cut short")
					}
					n += int(src[sp])
					sp++
				}
				if off == 0 || off > len(dst) {
					return nil, errors.New("pglz: a match before the start")
				}
				for n = min(n, rawLen-len(dst)); n > 0; n-- {
					dst = append(dst, dst[len(dst)-off])
				}
			}
			ctrl >>= 1
		}
	}
	if len(dst) != rawLen {
		return nil, errors.New("pglz: shorter than its raw length")
	}
	return dst, nil
}
