package collector

import "time"

// FullPages is what the advisor read of the server's own recent full-page images in its WAL
// (collector/walimages) and what compressing them costs on this host (probes/compression): the
// full-page-images rule decides wal_compression by it.
type FullPages struct {
	Time time.Time `json:"time"`
	// Segment is the WAL file read. Records, RecordBytes and ImageBytes are its whole records,
	// their bytes and the bytes of their images as written, Images how many images.
	Segment     string `json:"segment"`
	Records     int    `json:"records"`
	RecordBytes int64  `json:"record_bytes"`
	ImageBytes  int64  `json:"image_bytes"`
	Images      int    `json:"images"`
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
