// Package walimages reads the full-page images PostgreSQL wrote into its WAL: how many, how many
// bytes they took and, for images written uncompressed, the bytes themselves (the page without
// its hole, exactly what wal_compression would compress). It reads one WAL segment file as
// untrusted input: every page header and record is checked (page address, continuation length,
// CRC-32C) and reading stops at the first that does not check, as PostgreSQL's own WAL reader
// stops at the end of valid WAL. The full-page-images rule judges compression by these images
// (docs/rules.md, full-page-images).
package walimages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The WAL format (PostgreSQL's access/xlog_internal.h, access/xlogrecord.h), 14 to 18.
const (
	shortPageHeader = 24 // XLogPageHeaderData, MAXALIGNed
	longPageHeader  = 40 // XLogLongPageHeaderData, MAXALIGNed: the first page of a segment
	recordHeader    = 24 // XLogRecord
	crcOffset       = 20 // offsetof(XLogRecord, xl_crc)

	pageLongHeader   = 0x0002 // XLP_LONG_HEADER
	pageFirstIsCont  = 0x0001 // XLP_FIRST_IS_CONTRECORD
	pageInfoKnown    = 0x0007 // XLP_ALL_FLAGS
	maxRecordLen     = 1020 << 20
	blockIDMax       = 32   // XLR_MAX_BLOCK_ID
	blockIDTopXID    = 252  // XLR_BLOCK_ID_TOPLEVEL_XID
	blockIDOrigin    = 253  // XLR_BLOCK_ID_ORIGIN
	blockIDDataLong  = 254  // XLR_BLOCK_ID_DATA_LONG
	blockIDDataShort = 255  // XLR_BLOCK_ID_DATA_SHORT
	blockHasImage    = 0x10 // BKPBLOCK_HAS_IMAGE
	blockHasData     = 0x20 // BKPBLOCK_HAS_DATA
	blockSameRel     = 0x80 // BKPBLOCK_SAME_REL
	imageHasHole     = 0x01 // BKPIMAGE_HAS_HOLE
	relLocatorBytes  = 12
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Methods as wal_compression names them; "" is an image written uncompressed.
const (
	MethodPGLZ = "pglz"
	MethodLZ4  = "lz4"
	MethodZstd = "zstd"
)

// compressedWith reads bimg_info's compression bits: PostgreSQL 14 has one (pglz, 0x02); 15
// gave each method its own (pglz 0x04, lz4 0x08, zstd 0x10) and moved BKPIMAGE_APPLY to 0x02.
func compressedWith(info byte, versionNum int) (string, error) {
	if versionNum < 150000 {
		if info&0x02 != 0 {
			return MethodPGLZ, nil
		}
		return "", nil
	}
	switch info & 0x1c {
	case 0:
		return "", nil
	case 0x04:
		return MethodPGLZ, nil
	case 0x08:
		return MethodLZ4, nil
	case 0x10:
		return MethodZstd, nil
	}
	return "", fmt.Errorf("image flags %#x name more than one compression method", info)
}

// Image is one full-page image as the WAL holds it.
type Image struct {
	// Method is how it was compressed; "" when it was written as it is.
	Method string
	// Stored is its bytes in the WAL; Raw the page's bytes less its hole, what was compressed.
	Stored, Raw int
	// Data is the image's bytes in the WAL (Stored of them). It points into the segment read.
	Data []byte
}

// Segment is what one WAL segment file held, up to the end of its valid WAL.
type Segment struct {
	// Start is the WAL position of the segment's first byte (set by Recent; 0 from Decode).
	Start uint64
	// Records and RecordBytes count the whole records that start and end in the segment.
	Records     int
	RecordBytes int64
	// Images are the full-page images of those records, in WAL order.
	Images []Image
	// End is where reading stopped (a byte offset in the file) and Stop why: "end of segment",
	// or the first thing that did not check (zeros past the insert position are the usual one).
	End  int
	Stop string
}

// ImageBytes is the bytes the segment's images took in the WAL.
func (s Segment) ImageBytes() int64 {
	var n int64
	for _, im := range s.Images {
		n += int64(im.Stored)
	}
	return n
}

// Decode reads the segment file's bytes. blockSize is the server's block_size (a page image's
// size before its hole is taken out); versionNum its server_version_num. It fails only when the
// file is not a WAL segment at all (its first page header does not check); anything wrong later
// ends the valid WAL there, as a crash or a recycled segment leaves it.
func Decode(seg []byte, blockSize, versionNum int) (Segment, error) {
	var s Segment
	if blockSize < 1024 || blockSize > 32768 || blockSize&(blockSize-1) != 0 {
		return s, fmt.Errorf("block size %d: must be a power of two from 1024 to 32768", blockSize)
	}
	if len(seg) < longPageHeader {
		return s, fmt.Errorf("%d bytes: shorter than a WAL segment's first page header", len(seg))
	}
	first := readPageHeader(seg)
	if first.info&pageLongHeader == 0 {
		return s, errors.New("the first page has no long header: not the start of a WAL segment")
	}
	if first.info&^pageInfoKnown != 0 {
		return s, fmt.Errorf("the first page's flags %#x are not a WAL page's", first.info)
	}
	pageSize := int(binary.LittleEndian.Uint32(seg[36:]))
	segSize := int(binary.LittleEndian.Uint32(seg[32:]))
	if pageSize < 1024 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return s, fmt.Errorf("WAL page size %d in the first page header: not a WAL segment", pageSize)
	}
	if segSize < 1<<20 || segSize > 1<<30 || segSize&(segSize-1) != 0 || segSize%pageSize != 0 {
		return s, fmt.Errorf("WAL segment size %d in the first page header: not a WAL segment", segSize)
	}
	if first.addr%uint64(segSize) != 0 {
		return s, fmt.Errorf("the first page's address %#x is not a segment's start", first.addr)
	}
	r := reader{seg: seg[:min(len(seg), segSize)], pageSize: pageSize, magic: first.magic, start: first.addr,
		blockSize: blockSize, versionNum: versionNum}
	r.run(&s, first)
	return s, nil
}

type pageHeader struct {
	magic, info uint16
	addr        uint64
	remLen      uint32
}

func readPageHeader(b []byte) pageHeader {
	return pageHeader{
		magic:  binary.LittleEndian.Uint16(b),
		info:   binary.LittleEndian.Uint16(b[2:]),
		addr:   binary.LittleEndian.Uint64(b[8:]),
		remLen: binary.LittleEndian.Uint32(b[16:]),
	}
}

type reader struct {
	seg        []byte
	pageSize   int
	magic      uint16
	start      uint64
	blockSize  int
	versionNum int
	pos        int
}

// page checks the header of the page at offset off and returns it with the offset its
// contents start at.
func (r *reader) page(off int) (pageHeader, int, error) {
	if off+shortPageHeader > len(r.seg) {
		return pageHeader{}, 0, errors.New("end of segment")
	}
	h := readPageHeader(r.seg[off:])
	switch {
	case h.magic != r.magic:
		return h, 0, fmt.Errorf("page at %d: magic %#x, the segment's is %#x", off, h.magic, r.magic)
	case h.addr != r.start+uint64(off):
		return h, 0, fmt.Errorf("page at %d: address %#x, not %#x (a recycled segment's old page)", off, h.addr, r.start+uint64(off))
	case h.info&^pageInfoKnown != 0:
		return h, 0, fmt.Errorf("page at %d: unknown flags %#x", off, h.info)
	}
	if off == 0 {
		return h, longPageHeader, nil
	}
	return h, off + shortPageHeader, nil
}

func (r *reader) run(s *Segment, first pageHeader) {
	r.pos = longPageHeader
	stop := func(err error) { s.End, s.Stop = r.pos, err.Error() }
	if first.info&pageFirstIsCont != 0 {
		// The tail of a record that began in the previous segment: skip it.
		if err := r.skip(int(first.remLen)); err != nil {
			stop(err)
			return
		}
	}
	for {
		r.pos = (r.pos + 7) &^ 7
		if r.pos >= len(r.seg) {
			s.End, s.Stop = len(r.seg), "end of segment"
			return
		}
		if r.pos%r.pageSize == 0 {
			h, next, err := r.page(r.pos)
			if err != nil {
				stop(err)
				return
			}
			if h.info&pageFirstIsCont != 0 {
				stop(fmt.Errorf("page at %d continues a record where none was open", r.pos))
				return
			}
			r.pos = next
		}
		rec, err := r.record()
		if err != nil {
			stop(err)
			return
		}
		images, err := decodeRecord(rec, r.blockSize, r.versionNum)
		if err != nil {
			stop(fmt.Errorf("record ending at %d: %w", r.pos, err))
			return
		}
		s.Records++
		s.RecordBytes += int64(len(rec))
		s.Images = append(s.Images, images...)
	}
}

// skip steps over n bytes of a continued record, page headers excepted.
func (r *reader) skip(n int) error {
	for n > 0 {
		if r.pos%r.pageSize == 0 {
			h, next, err := r.page(r.pos)
			if err != nil {
				return err
			}
			if h.info&pageFirstIsCont == 0 || int(h.remLen) != n {
				return fmt.Errorf("page at %d does not continue the record being skipped", r.pos)
			}
			r.pos = next
		}
		take := min(n, r.pageSize-r.pos%r.pageSize)
		r.pos += take
		n -= take
		if r.pos > len(r.seg) {
			return errors.New("end of segment")
		}
	}
	return nil
}

// record reads the record at r.pos, across pages, and checks its CRC.
func (r *reader) record() ([]byte, error) {
	// A record starts MAXALIGNed, so its 4-byte length is always on the current page.
	if r.pos+4 > len(r.seg) {
		return nil, errors.New("end of segment")
	}
	total := int(binary.LittleEndian.Uint32(r.seg[r.pos:]))
	switch {
	case total == 0:
		return nil, errors.New("end of WAL (zeros)")
	case total < recordHeader || total > maxRecordLen:
		return nil, fmt.Errorf("record at %d: length %d", r.pos, total)
	}
	start := r.pos
	var rec []byte
	onePage := r.pos%r.pageSize+total <= r.pageSize
	if onePage {
		if r.pos+total > len(r.seg) {
			return nil, errors.New("end of segment")
		}
		rec = r.seg[r.pos : r.pos+total]
		r.pos += total
	} else {
		rec = make([]byte, 0, total)
		for len(rec) < total {
			if r.pos%r.pageSize == 0 {
				h, next, err := r.page(r.pos)
				if err != nil {
					r.pos = start
					return nil, err
				}
				if h.info&pageFirstIsCont == 0 || int(h.remLen) != total-len(rec) {
					r.pos = start
					return nil, fmt.Errorf("page at %d does not continue the record at %d", h.addr-r.start, start)
				}
				r.pos = next
			}
			take := min(total-len(rec), r.pageSize-r.pos%r.pageSize)
			if r.pos+take > len(r.seg) {
				r.pos = start
				return nil, errors.New("end of segment")
			}
			rec = append(rec, r.seg[r.pos:r.pos+take]...)
			r.pos += take
		}
	}
	crc := crc32.Update(0, castagnoli, rec[recordHeader:])
	crc = crc32.Update(crc, castagnoli, rec[:crcOffset])
	if crc != binary.LittleEndian.Uint32(rec[crcOffset:]) {
		r.pos = start
		return nil, fmt.Errorf("record at %d: CRC does not match", start)
	}
	return rec, nil
}

// block is what a block reference's header says.
type block struct {
	hasImage, hasData bool
	dataLen           int
	image             Image
}

// decodeRecord reads a record's block references and returns its images, as PostgreSQL's
// DecodeXLogRecord lays them out: headers first, then each block's image and data in order,
// then the main data; the lengths must add up to the record's.
func decodeRecord(rec []byte, blockSize, versionNum int) ([]Image, error) {
	b := rec[recordHeader:]
	off, dataTotal, lastID := 0, 0, -1
	need := func(n int) error {
		if off+n > len(b) {
			return fmt.Errorf("header cut short at %d of %d bytes", off, len(b))
		}
		return nil
	}
	var blocks []block
headers:
	for len(b)-off > dataTotal {
		if err := need(1); err != nil {
			return nil, err
		}
		id := int(b[off])
		off++
		switch {
		case id == blockIDDataShort:
			if err := need(1); err != nil {
				return nil, err
			}
			dataTotal += int(b[off])
			off++
			break headers
		case id == blockIDDataLong:
			if err := need(4); err != nil {
				return nil, err
			}
			dataTotal += int(binary.LittleEndian.Uint32(b[off:]))
			off += 4
			break headers
		case id == blockIDOrigin:
			off += 2
		case id == blockIDTopXID:
			off += 4
		case id <= blockIDMax:
			if id <= lastID {
				return nil, fmt.Errorf("block id %d out of order", id)
			}
			lastID = id
			blk, n, err := decodeBlock(b[off:], blockSize, versionNum)
			if err != nil {
				return nil, fmt.Errorf("block %d: %w", id, err)
			}
			off += n
			dataTotal += blk.dataLen + blk.image.Stored
			blocks = append(blocks, blk)
		default:
			return nil, fmt.Errorf("invalid block id %d", id)
		}
	}
	if off > len(b) || len(b)-off != dataTotal {
		return nil, fmt.Errorf("the blocks' and main data's lengths (%d) do not fill the record (%d bytes after the headers)", dataTotal, len(b)-off)
	}
	var images []Image
	for _, blk := range blocks {
		if blk.hasImage {
			blk.image.Data = b[off : off+blk.image.Stored]
			images = append(images, blk.image)
			off += blk.image.Stored
		}
		off += blk.dataLen
	}
	return images, nil
}

// decodeBlock reads one block reference's header: XLogRecordBlockHeader, the image's headers,
// the relation (unless the same as the previous block's) and the block number.
func decodeBlock(b []byte, blockSize, versionNum int) (block, int, error) {
	var blk block
	if len(b) < 3 {
		return blk, 0, errors.New("header cut short")
	}
	flags := b[0]
	blk.dataLen = int(binary.LittleEndian.Uint16(b[1:]))
	blk.hasImage, blk.hasData = flags&blockHasImage != 0, flags&blockHasData != 0
	if blk.hasData != (blk.dataLen > 0) {
		return blk, 0, fmt.Errorf("data flag %v with %d bytes of data", blk.hasData, blk.dataLen)
	}
	off := 3
	if blk.hasImage {
		if len(b) < off+5 {
			return blk, 0, errors.New("image header cut short")
		}
		stored := int(binary.LittleEndian.Uint16(b[off:]))
		holeOff := int(binary.LittleEndian.Uint16(b[off+2:]))
		info := b[off+4]
		off += 5
		method, err := compressedWith(info, versionNum)
		if err != nil {
			return blk, 0, err
		}
		hole := 0
		switch {
		case info&imageHasHole != 0 && method != "":
			if len(b) < off+2 {
				return blk, 0, errors.New("image hole length cut short")
			}
			hole = int(binary.LittleEndian.Uint16(b[off:]))
			off += 2
			if hole == 0 || holeOff+hole > blockSize {
				return blk, 0, fmt.Errorf("hole of %d bytes at %d in a %d-byte page", hole, holeOff, blockSize)
			}
		case info&imageHasHole != 0:
			hole = blockSize - stored
			if hole <= 0 || holeOff == 0 || holeOff+hole > blockSize {
				return blk, 0, fmt.Errorf("image of %d bytes with a hole at %d in a %d-byte page", stored, holeOff, blockSize)
			}
		default:
			if holeOff != 0 || method == "" && stored != blockSize {
				return blk, 0, fmt.Errorf("image of %d bytes without a hole in a %d-byte page", stored, blockSize)
			}
		}
		if stored == 0 || method != "" && stored >= blockSize-hole {
			return blk, 0, fmt.Errorf("%s image of %d bytes for %d raw", method, stored, blockSize-hole)
		}
		blk.image = Image{Method: method, Stored: stored, Raw: blockSize - hole}
	}
	if flags&blockSameRel == 0 {
		off += relLocatorBytes
	}
	off += 4 // block number
	if off > len(b) {
		return blk, 0, errors.New("header cut short")
	}
	return blk, off, nil
}
