package apply

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDecodeClusterChanges(t *testing.T) {
	dcs := "64kB"
	good := ClusterChange{New: "16MB", Time: time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC), Host: "db1",
		Old: Value{Value: "64kB", Context: "postmaster", Route: RoutePatroni, DCS: &dcs, Server: &Server{SystemIdentifier: "7400000000000000001"}}}
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	noServer := good
	noServer.Old.Server = nil
	alterSystem := good
	alterSystem.Old.Route = ""
	control := good
	control.New = "16MB\n"
	for _, tc := range []struct {
		name, doc string
		want      []string // settings decoded
		problems  int
		err       bool
	}{
		{"no section", `{"postgresql":{"parameters":{"wal_buffers":"16MB"}}}`, nil, 0, false},
		{"null section", `{"pgwal_advisor":null}`, nil, 0, false},
		{"one record", `{"pgwal_advisor":{"changes":{"wal_buffers":` + enc(good) + `}}}`, []string{"wal_buffers"}, 0, false},
		{"sorted", `{"pgwal_advisor":{"changes":{"wal_buffers":` + enc(good) + `,"max_wal_size":` + enc(good) + `}}}`, []string{"max_wal_size", "wal_buffers"}, 0, false},
		{"a setting the advisor never changes", `{"pgwal_advisor":{"changes":{"fsync":` + enc(good) + `}}}`, nil, 1, false},
		{"a kernel knob", `{"pgwal_advisor":{"changes":{"vm.dirty_bytes":` + enc(good) + `}}}`, nil, 1, false},
		{"no server", `{"pgwal_advisor":{"changes":{"wal_buffers":` + enc(noServer) + `}}}`, nil, 1, false},
		{"not through Patroni", `{"pgwal_advisor":{"changes":{"wal_buffers":` + enc(alterSystem) + `}}}`, nil, 1, false},
		{"control character", `{"pgwal_advisor":{"changes":{"wal_buffers":` + enc(control) + `}}}`, nil, 1, false},
		{"not an object", `{"pgwal_advisor":"mine"}`, nil, 1, false},
		{"record not an object", `{"pgwal_advisor":{"changes":{"wal_buffers":7}}}`, nil, 1, false},
		{"not JSON", `{`, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems, err := decodeClusterChanges([]byte(tc.doc))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			var names []string
			for _, c := range got {
				names = append(names, c.Setting)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") || len(problems) != tc.problems {
				t.Errorf("decoded %v with problems %q, want %v and %d problems", names, problems, tc.want, tc.problems)
			}
		})
	}
}

// FuzzDecodeClusterChanges: the DCS is written by whoever holds Patroni's credentials; no
// document makes the decoder panic, and what it returns passes its own checks.
func FuzzDecodeClusterChanges(f *testing.F) {
	f.Add([]byte(`{"pgwal_advisor":{"changes":{"wal_buffers":{"new":"16MB","time":"2026-12-06T01:00:00Z","old":{"value":"64kB","route":"patroni","server":{"system_identifier":"1"}}}}}}`))
	f.Add([]byte(`{"pgwal_advisor":{"changes":{"x":null}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, _, err := decodeClusterChanges(b)
		if err != nil {
			return
		}
		if len(got) > maxClusterChanges {
			t.Fatalf("%d records, more than the bound", len(got))
		}
		for _, c := range got {
			if why := c.invalid(); why != "" {
				t.Fatalf("returned an invalid record %+v: %s", c, why)
			}
		}
	})
}
