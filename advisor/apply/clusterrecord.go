package apply

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// clusterKey is the key of Patroni's dynamic configuration under which the advisor keeps a
// record of each change it made through the DCS. Patroni keeps keys it does not know and merges
// PATCH /config into the document it stores with one compare-and-set (Patroni's REST API,
// "PATCH /config"), so the parameter and its record change together, and every member's REST
// API reads both: after a switchover the daemon on the new leader knows the change as the
// advisor's, and can roll it back.
const clusterKey = "pgwal_advisor"

// maxClusterChanges bounds the records read from the DCS: the allowed table has fewer settings.
const maxClusterChanges = 64

// ClusterChange is the advisor's record of a change it made through Patroni, as the DCS keeps it
// beside the parameter: the value set, the member's value before (with the DCS's, which rollback
// puts back), when, and the host whose advisor made it.
type ClusterChange struct {
	Setting string    `json:"-"`
	New     string    `json:"new"`
	Old     Value     `json:"old"`
	Time    time.Time `json:"time"`
	Host    string    `json:"host,omitempty"`
}

// clusterChange is the record Set writes for name = value over old.
func clusterChange(name, value string, old Value, now time.Time) ClusterChange {
	host, _ := os.Hostname()
	old.Source, old.SourceFile, old.EnumVals = "", "", nil // what restoring needs, no more
	return ClusterChange{Setting: name, New: value, Old: old, Time: now.UTC(), Host: host}
}

// decodeClusterChanges reads the advisor's records from Patroni's configuration document. The
// DCS is written by anyone who holds the REST API's credentials (patronictl edit-config), so a
// record is checked like any journal line: a setting of the allowed table, values of its kind
// without control characters, the Patroni route. A record that fails is left out and said in
// problems; the rest are returned sorted by setting.
func decodeClusterChanges(body []byte) (changes []ClusterChange, problems []string, err error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, fmt.Errorf("decode Patroni's configuration: %w", err)
	}
	raw, ok := doc[clusterKey]
	if !ok || string(raw) == "null" {
		return nil, nil, nil
	}
	var section struct {
		Changes map[string]json.RawMessage `json:"changes"`
	}
	if err := json.Unmarshal(raw, &section); err != nil {
		return nil, []string{fmt.Sprintf("%s in Patroni's configuration is not the advisor's (%v): left alone", clusterKey, err)}, nil
	}
	for name, rawRec := range section.Changes {
		if len(changes)+len(problems) >= maxClusterChanges {
			problems = append(problems, fmt.Sprintf("%s holds more than %d changes: the rest are ignored", clusterKey, maxClusterChanges))
			break
		}
		var c ClusterChange
		if err := json.Unmarshal(rawRec, &c); err != nil {
			problems = append(problems, fmt.Sprintf("%s.changes.%.64q: %v", clusterKey, name, err))
			continue
		}
		c.Setting = name
		if why := c.invalid(); why != "" {
			problems = append(problems, fmt.Sprintf("%s.changes.%.64q: %s", clusterKey, name, why))
			continue
		}
		changes = append(changes, c)
	}
	slices.SortFunc(changes, func(a, b ClusterChange) int { return strings.Compare(a.Setting, b.Setting) })
	slices.Sort(problems)
	return changes, problems, nil
}

// invalid says what is wrong with a record read from the DCS, "" when nothing is.
func (c ClusterChange) invalid() string {
	sp, ok := specFor(c.Setting)
	switch {
	case !ok || isKernel(sp.kind):
		return "not a PostgreSQL setting the advisor changes"
	case c.Old.Route != RoutePatroni:
		return "its old value was not read through Patroni"
	case c.Old.Server == nil || c.Old.Server.SystemIdentifier == "":
		return "it names no server"
	case c.Time.IsZero():
		return "it has no time"
	}
	values := []string{c.New, c.Old.Value, c.Old.Context, c.Host, c.Old.Server.SystemIdentifier, c.Old.Server.DataDirectory}
	if c.Old.DCS != nil {
		values = append(values, *c.Old.DCS)
	}
	if c.Old.AutoConf != nil {
		values = append(values, *c.Old.AutoConf)
	}
	for _, v := range values {
		if len(v) > 1024 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
			return "a value is longer than 1024 bytes or holds a control character or backslash"
		}
	}
	if c.New == "" || c.Old.Value == "" {
		return "it has no old or new value"
	}
	return ""
}
