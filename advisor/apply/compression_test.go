package apply

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TestWALCompressionSpec: wal_compression can be applied, as an enum where the server lists its
// values (15+) and as a boolean where it does not (14), and its change is judged by the
// commits' flush waits, then the WAL bytes per record.
func TestWALCompressionSpec(t *testing.T) {
	if _, err := ParseSettings([]string{collector.WALCompression}); err != nil {
		t.Fatalf("ParseSettings(wal_compression) = %v, want it accepted", err)
	}
	sp, ok := specFor(collector.WALCompression)
	if !ok {
		t.Fatal("no spec for wal_compression")
	}
	pg15 := &Value{Value: "off", EnumVals: []string{"pglz", "lz4", "zstd", "on", "off"}}
	noLZ4 := &Value{Value: "off", EnumVals: []string{"pglz", "on", "off"}}
	pg14 := &Value{Value: "off"}
	tests := []struct {
		name    string
		value   string
		live    *Value
		wantErr string
	}{
		{"15: lz4", "lz4", pg15, ""},
		{"15: off, as a rollback writes it", "off", pg15, ""},
		{"built without lz4", "lz4", noLZ4, "does not accept wal_compression=lz4"},
		{"built without lz4: pglz", "pglz", noLZ4, ""},
		{"14: on", "on", pg14, ""},
		{"14: off", "off", pg14, ""},
		{"14: a method name", "lz4", pg14, "not a boolean"},
		{"unknown server", "lz4", nil, "not a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkValue(sp, tt.value, true, tt.live)
			if tt.wantErr == "" && got != "" || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
				t.Errorf("checkValue(%q) = %q, want %q", tt.value, got, tt.wantErr)
			}
		})
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{{"on", "pglz", true}, {"off", "false", true}, {"lz4", "LZ4", true}, {"lz4", "pglz", false}, {"on", "off", false}} {
		if got := sameValue(collector.WALCompression, c.a, c.b); got != c.want {
			t.Errorf("sameValue(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if got, want := figureNames(collector.WALCompression), []string{FigureFlushWaitShare, FigureWALBytesPerRecord}; !slices.Equal(got, want) {
		t.Errorf("figureNames(wal_compression) = %v, want %v", got, want)
	}
}
