package walimages

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// segmentWith builds a one-page segment start holding the given records, each laid out as
// PostgreSQL lays them (MAXALIGNed after the long page header) with a correct CRC.
func segmentWith(records ...[]byte) []byte {
	seg := make([]byte, 8192)
	binary.LittleEndian.PutUint16(seg, 0xD110)
	binary.LittleEndian.PutUint16(seg[2:], pageLongHeader)
	binary.LittleEndian.PutUint64(seg[8:], 16<<20)
	binary.LittleEndian.PutUint32(seg[32:], 16<<20)
	binary.LittleEndian.PutUint32(seg[36:], 8192)
	pos := longPageHeader
	for _, body := range records {
		rec := make([]byte, recordHeader+len(body))
		copy(rec[recordHeader:], body)
		binary.LittleEndian.PutUint32(rec, uint32(len(rec)))
		crc := crc32.Update(0, castagnoli, rec[recordHeader:])
		crc = crc32.Update(crc, castagnoli, rec[:crcOffset])
		binary.LittleEndian.PutUint32(rec[crcOffset:], crc)
		copy(seg[pos:], rec)
		pos = (pos + len(rec) + 7) &^ 7
	}
	return seg
}

// imageRecord is a record with block 0 holding an uncompressed 8192-byte-page image with a
// hole of 8192-n bytes, and a short main data.
func imageRecord(n int) []byte {
	b := []byte{0, blockHasImage, 0, 0}
	b = binary.LittleEndian.AppendUint16(b, uint16(n))
	b = binary.LittleEndian.AppendUint16(b, 24) // hole offset
	b = append(b, imageHasHole)
	b = append(b, make([]byte, relLocatorBytes+4)...)
	b = append(b, blockIDDataShort, 2)
	b = append(b, make([]byte, n)...)
	return append(b, 7, 7)
}

// TestDecodeBuilt reads a built segment: two records, one image, stopping at the zeros.
func TestDecodeBuilt(t *testing.T) {
	s, err := Decode(segmentWith(imageRecord(100), []byte{blockIDDataShort, 1, 9}), 8192, 150000)
	if err != nil {
		t.Fatal(err)
	}
	if s.Records != 2 || len(s.Images) != 1 || s.Images[0].Stored != 100 || s.Images[0].Raw != 100 || s.Stop != "end of WAL (zeros)" {
		t.Fatalf("got %d records, images %+v, stop %q", s.Records, s.Images, s.Stop)
	}
	bad := segmentWith(imageRecord(100))
	bad[longPageHeader+30] ^= 1
	if s, _ := Decode(bad, 8192, 150000); s.Records != 0 || s.Stop == "" {
		t.Errorf("a flipped bit: %d records, stop %q; want the CRC to stop it", s.Records, s.Stop)
	}
	for _, seg := range [][]byte{nil, make([]byte, 8192), segmentWith()[:30]} {
		if _, err := Decode(seg, 8192, 150000); err == nil {
			t.Errorf("%d bytes without a long header: no error", len(seg))
		}
	}
}

// FuzzDecode: any bytes, whatever their CRCs say, are read without a panic, and what is read
// is consistent: images within their pages, data within the segment.
func FuzzDecode(f *testing.F) {
	f.Add(segmentWith(imageRecord(100), []byte{blockIDDataShort, 1, 9}), 150000)
	f.Add(segmentWith(imageRecord(8000)), 140000)
	f.Fuzz(func(t *testing.T, seg []byte, version int) {
		s, err := Decode(seg, 8192, version)
		if err != nil {
			return
		}
		for _, im := range s.Images {
			if im.Stored <= 0 || im.Raw > 8192 || len(im.Data) != im.Stored || im.Method != "" && im.Stored >= im.Raw {
				t.Fatalf("image %+v", Image{Method: im.Method, Stored: im.Stored, Raw: im.Raw})
			}
		}
		if s.End > len(seg) {
			t.Fatalf("end %d past %d bytes", s.End, len(seg))
		}
	})
}

// FuzzDecodeRecord checks records directly (the CRC keeps random bytes out of decodeRecord
// in FuzzDecode).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(append(make([]byte, recordHeader), imageRecord(100)...))
	f.Fuzz(func(t *testing.T, rec []byte) {
		if len(rec) < recordHeader {
			return
		}
		for _, v := range []int{140000, 150000} {
			images, err := decodeRecord(rec, 8192, v)
			if err != nil {
				continue
			}
			total := 0
			for _, im := range images {
				total += im.Stored
				if im.Stored <= 0 || im.Raw > 8192 || len(im.Data) != im.Stored {
					t.Fatalf("image %+v", Image{Method: im.Method, Stored: im.Stored, Raw: im.Raw})
				}
			}
			if total > len(rec) {
				t.Fatalf("images of %d bytes in a %d-byte record", total, len(rec))
			}
		}
	})
}
