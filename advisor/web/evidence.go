package web

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// landingEvidence is what a finding's row shows of its evidence: the figures the rule judged,
// and a link to the chart that draws them (Anchor is empty when no chart does).
type landingEvidence struct {
	Anchor string
	Items  []string
}

func evidenceOf(f rules.Finding) landingEvidence {
	e := landingEvidence{Anchor: evidenceAnchor(f.Rule)}
	for _, ev := range f.Evidence {
		if item, ok := writerItem(ev); ok {
			e.Items = append(e.Items, item)
			continue
		}
		item := ev.Name + " = " + strconv.FormatFloat(ev.Value, 'g', 6, 64)
		if ev.Unit != "" {
			item += " " + ev.Unit
		}
		e.Items = append(e.Items, item)
	}
	return e
}

// writerItem renders a writer's row of writeback-stalls-wal (docs/rules.md: a name labelled
// with the writer, `writer_bytes{pid="4711",comm="dd",unit="backup.service"}`) as a person
// reads it: "writer_bytes: pid 4711 dd (backup.service) = 3.4GB". False for any other row, or
// labels that do not parse, which then show as they are.
func writerItem(ev rules.Evidence) (string, bool) {
	name, rest, ok := strings.Cut(ev.Name, "{")
	if !ok || !strings.HasPrefix(name, "writer_") || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	labels := map[string]string{}
	for rest = strings.TrimSuffix(rest, "}"); rest != ""; rest = strings.TrimPrefix(rest, ",") {
		key, after, ok := strings.Cut(rest, "=")
		q, err := strconv.QuotedPrefix(after)
		if !ok || err != nil {
			return "", false
		}
		labels[key], _ = strconv.Unquote(q)
		rest = after[len(q):]
	}
	where := labels["unit"]
	switch {
	case where != "":
	case labels["cgroup"] != "":
		where = "cgroup " + labels["cgroup"]
	case labels["blkio_cgroup"] != "":
		where = "blkio cgroup " + labels["blkio_cgroup"]
	default:
		where = "cgroup unknown"
	}
	var value string
	switch ev.Unit {
	case rules.UnitBytes:
		value = collector.FormatBytes(ev.Value)
	case rules.UnitBytesPerSecond:
		value = collector.FormatBytes(ev.Value) + "/s"
	case rules.UnitRatio:
		value = strconv.FormatFloat(ev.Value*100, 'f', 0, 64) + "%"
	default:
		value = strconv.FormatFloat(ev.Value, 'g', 6, 64) + " " + ev.Unit
	}
	return fmt.Sprintf("%s: pid %s %s (%s) = %s", name, labels["pid"], labels["comm"], where, value), true
}

// evidenceTemplate is the evidence cell of a findings row; html/template escapes each item.
const evidenceTemplate = `
{{- define "evidence"}}
{{- with .Items}}<ul class="evidence">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{- with .Anchor}}<a class="evidence-link" href="#{{.}}">see the chart</a>{{end}}
{{- end}}`
