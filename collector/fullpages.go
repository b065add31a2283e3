package collector

import (
	"fmt"
	"time"
)

// FullPages is what the advisor read of the server's own recent full-page images in its WAL
// (collector/walimages) and what compressing them costs on this host (probes/compression): the
// full-page-images rule decides wal_compression by it.
type FullPages struct {
	Time time.Time `json:"time"`
	// Segment is the newest WAL file read, FirstSegment the oldest, Files how many were read
	// (probes/compression spans several). Records, RecordBytes and ImageBytes are their whole
	// records, their bytes and the bytes of their images as written, Images how many images.
	Segment      string `json:"segment"`
	FirstSegment string `json:"first_segment,omitempty"`
	Files        int    `json:"files,omitempty"`
	Records      int    `json:"records"`
	RecordBytes  int64  `json:"record_bytes"`
	ImageBytes   int64  `json:"image_bytes"`
	Images       int    `json:"images"`
	// Written counts the images by how the server wrote them: Method "" as they are, else the
	// method that compressed them.
	Written []WrittenImages `json:"written,omitempty"`
	// Sampled images (SampledBytes before compression) were compressed with each method below.
	Sampled      int               `json:"sampled"`
	SampledBytes int64             `json:"sampled_bytes"`
	Methods      []CompressionCost `json:"methods,omitempty"`
}

// WrittenImages are the images of one kind in the segment: their bytes as written and before
// compression (the page less its hole).
type WrittenImages struct {
	Method   string `json:"method"`
	Images   int    `json:"images"`
	Bytes    int64  `json:"bytes"`
	RawBytes int64  `json:"raw_bytes"`
}

// CompressionCost is one method over the sampled images, as PostgreSQL would write them: Kept is
// the share of their bytes left (an image the method cannot shrink enough is written as it is,
// Failed of them), CPUSecondsPerMB the CPU time to compress a megabyte (2^20 bytes) of images on
// this host.
type CompressionCost struct {
	Method          string  `json:"method"`
	Kept            float64 `json:"kept"`
	Failed          int     `json:"failed"`
	CPUSecondsPerMB float64 `json:"cpu_seconds_per_mb"`
}

// Where names the WAL files read, for a finding: "WAL file X" or "N WAL files, X to Y".
func (f *FullPages) Where() string {
	if f.Files <= 1 || f.FirstSegment == "" {
		return "WAL file " + f.Segment
	}
	return fmt.Sprintf("%d WAL files, %s to %s", f.Files, f.FirstSegment, f.Segment)
}

// Cost returns the named method's cost and whether it was measured.
func (f *FullPages) Cost(method string) (CompressionCost, bool) {
	if f == nil {
		return CompressionCost{}, false
	}
	for _, m := range f.Methods {
		if m.Method == method {
			return m, true
		}
	}
	return CompressionCost{}, false
}
