package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestLandingPageWriters: writeback-stalls-wal's writer rows read as a person reads them (pid,
// name, unit or cgroup, the value in its unit), and a name a process gave itself is escaped.
func TestLandingPageWriters(t *testing.T) {
	st := healthyState()
	st.Findings = []rules.Finding{{
		Rule: "writeback-stalls-wal", Severity: rules.Warning, Setting: "wal_device", Current: "shared (loop3)",
		Recommended: "a device of its own for pg_wal, or the other writer throttled", Action: rules.ActionAdvice,
		Summary: "The writer: pid 4711 dd (backup.service) wrote 3.4GB.",
		Evidence: []rules.Evidence{
			{Name: "writeback_stall_seconds", Value: 20, Unit: rules.UnitSeconds},
			{Name: `writer_bytes{pid="4711",comm="dd",unit="backup.service"}`, Value: 3.6e9, Unit: rules.UnitBytes},
			{Name: `writer_write_rate{pid="4711",comm="dd",unit="backup.service"}`, Value: 72e6, Unit: rules.UnitBytesPerSecond},
			{Name: `writer_share_of_process_writes{pid="4711",comm="dd",unit="backup.service"}`, Value: 0.96, Unit: rules.UnitRatio},
			{Name: `writer_bytes{pid="66",comm="\u003cscript\u003e,x=\"1",cgroup="/a b"}`, Value: 1 << 20, Unit: rules.UnitBytes},
			{Name: `writer_bytes{pid="67",comm="tar",blkio_cgroup="/backup"}`, Value: 1 << 30, Unit: rules.UnitBytes},
			{Name: `writer_bytes{pid=broken}`, Value: 1, Unit: rules.UnitBytes},
		},
		FirstSeen: fixtureTime(), LastSeen: fixtureTime(),
	}}
	h := newTestHandler(t, &staticSource{st: st})
	_, _, body := get(t, h, http.MethodGet, "/")
	for _, want := range []string{
		"<li>writeback_stall_seconds = 20 seconds</li>",
		"<li>writer_bytes: pid 4711 dd (backup.service) = 3.4GB</li>",
		"<li>writer_write_rate: pid 4711 dd (backup.service) = 69MB/s</li>",
		"<li>writer_share_of_process_writes: pid 4711 dd (backup.service) = 96%</li>",
		"<li>writer_bytes: pid 66 &lt;script&gt;,x=&#34;1 (cgroup /a b) = 1MB</li>",
		"<li>writer_bytes: pid 67 tar (blkio cgroup /backup) = 1GB</li>",
		"<li>writer_bytes{pid=broken} = 1 bytes</li>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>") {
		t.Error("landing page contains <script>")
	}
	if t.Failed() {
		t.Logf("landing page:\n%s", body)
	}
}
