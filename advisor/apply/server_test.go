package apply

import (
	"strings"
	"testing"
)

func TestOtherServer(t *testing.T) {
	a := &Server{SystemIdentifier: "7412", DataDirectory: "/var/lib/postgresql/15/main"}
	for _, tc := range []struct {
		name      string
		was, is   *Server
		wantError bool
	}{
		{"same server", a, a, false},
		{"another cluster", a, &Server{SystemIdentifier: "9001", DataDirectory: a.DataDirectory}, true},
		{"a copy of it (pg_basebackup) in another directory", a, &Server{SystemIdentifier: "7412", DataDirectory: "/srv/copy"}, true},
		{"data directory unreadable now", a, &Server{SystemIdentifier: "7412"}, false},
		{"a journal from before servers were recorded", nil, a, false},
		{"a kernel knob", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &change{Intent: Record{ID: 3, Setting: "wal_buffers", Old: &Value{Value: "64kB", Server: tc.was}}}
			err := otherServer(c, Value{Value: "16MB", Server: tc.is})
			if (err != nil) != tc.wantError {
				t.Fatalf("otherServer = %v, want error %v", err, tc.wantError)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.was.String()) || !strings.Contains(err.Error(), tc.is.String())) {
				t.Errorf("the error does not name both servers: %v", err)
			}
		})
	}
}
