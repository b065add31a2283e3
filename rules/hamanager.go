package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// ManagedCommand is how a PostgreSQL setting is changed on a server an HA manager runs, for the
// whole cluster and so that it survives a switchover; "" where ALTER SYSTEM is the way (no
// manager, or repmgr, which manages no parameters: there the change is made on every node).
// Patroni puts postgresql.auto.conf above its own configuration, as a node-local override (Patroni
// docs, "Dynamic configuration"); CloudNativePG refuses ALTER SYSTEM (allow_alter_system = off from
// 17, a read-only postgresql.auto.conf before) because its changes are not replicated; Stolon
// links postgresql.auto.conf to /dev/null (docs/apply.md, "Under an HA manager").
func ManagedCommand(m *collector.HAManager, setting, value string) string {
	if m == nil {
		return ""
	}
	cluster := m.Cluster
	if cluster == "" {
		cluster = "CLUSTER"
	}
	switch m.Name {
	case collector.ManagerPatroni:
		return fmt.Sprintf("patronictl edit-config --pg %s=%s (Patroni applies it on every member; a restart setting then needs patronictl restart %s --pending)", setting, value, cluster)
	case collector.ManagerCloudNativePG:
		return fmt.Sprintf(`kubectl patch cluster %s --type merge -p '{"spec":{"postgresql":{"parameters":{"%s":"%s"}}}}'`, cluster, setting, value)
	case collector.ManagerStolon:
		return fmt.Sprintf(`stolonctl update --patch '{"pgParameters":{"%s":"%s"}}'`, setting, value)
	}
	return ""
}

// patroniDynamicConfig is Patroni's documentation of the configuration's layers, which puts
// postgresql.auto.conf above the DCS's.
const patroniDynamicConfig = "https://patroni.readthedocs.io/en/latest/dynamic_configuration.html"

// haOverride: under Patroni, a value in a member's postgresql.auto.conf (ALTER SYSTEM) wins over
// the cluster's configuration in the DCS for that member only (Patroni docs, "Dynamic
// configuration": postgresql.auto.conf is applied last). The member then runs what the cluster
// does not say, a later patronictl edit-config of the setting does not reach it, and a switchover
// to another member changes the value without anyone changing it (docs/rules.md, ha-override).
func haOverride() Rule {
	return Rule{
		ID:       "ha-override",
		Title:    "A member's postgresql.auto.conf shadows the HA manager's configuration",
		Severity: Warning,
		Settings: []string{collector.HostHAConfig},
		Rationale: "Under Patroni the cluster's PostgreSQL parameters live in its DCS and reach every " +
			"member; ALTER SYSTEM writes one member's postgresql.auto.conf, which overrides them on that " +
			"member alone and survives every later change of the cluster's configuration.",
		Sources:   []string{patroniDynamicConfig, pgDocs + "config-setting.html#CONFIG-SETTING-SQL"},
		Immediate: true,
		Eval:      withDefaults(evalHAOverride),
	}
}

// shadowed is one setting a member runs from postgresql.auto.conf that the cluster's
// configuration sets too.
type shadowed struct{ Setting, Member, Cluster string }

// haOverrideFacts are what the manager's configuration and the member's postgresql.auto.conf hold.
type haOverrideFacts struct {
	Manager  string
	Shadowed []shadowed
	// Unknown says why the cluster's configuration could not be compared ("" when it could).
	Unknown string
}

func haOverrideFactsOf(pg *collector.Postgres) haOverrideFacts {
	m := pg.HAManager
	if m == nil || m.Name != collector.ManagerPatroni {
		return haOverrideFacts{}
	}
	f := haOverrideFacts{Manager: m.Name}
	if m.ClusterSettings == nil {
		f.Unknown = "the cluster's configuration could not be read: " + m.ConfigError
		return f
	}
	for _, name := range slices.Sorted(maps.Keys(m.AutoConf)) {
		if v, ok := m.ClusterSettings[name]; ok {
			f.Shadowed = append(f.Shadowed, shadowed{Setting: name, Member: m.AutoConf[name], Cluster: v})
		}
	}
	return f
}

// decideHAOverride fires for any shadowed setting, equal values included: an override that
// agrees today still hides the cluster's next change.
func decideHAOverride(f haOverrideFacts) verdict {
	switch {
	case f.Manager == "":
		return verdictQuiet
	case f.Unknown != "":
		return verdictUnknown
	case len(f.Shadowed) > 0:
		return verdictFire
	}
	return verdictQuiet
}

func evalHAOverride(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	f := haOverrideFactsOf(pg)
	switch decideHAOverride(f) {
	case verdictUnknown:
		return notEnough("%s", f.Unknown)
	case verdictQuiet:
		return found()
	}
	var list, resets []string
	var ev []Evidence
	for _, s := range f.Shadowed {
		list = append(list, fmt.Sprintf("%s = %s (the cluster's: %s)", s.Setting, s.Member, s.Cluster))
		resets = append(resets, "ALTER SYSTEM RESET "+s.Setting+";")
	}
	ev = append(ev, Evidence{Name: "shadowed_settings", Value: float64(len(f.Shadowed)), Unit: UnitCount})
	return found(Finding{
		Severity: Warning,
		Setting:  collector.HostHAConfig,
		Current:  strings.Join(list, ", "),
		Action:   ActionAdvice,
		Summary: fmt.Sprintf("This member runs %s from its postgresql.auto.conf, over Patroni's configuration of the cluster: "+
			"a patronictl edit-config of these settings does not reach it, and a switchover changes them without anyone changing them.", strings.Join(list, ", ")),
		Evidence: ev,
		ExpectedEffect: "On this member, as a superuser: " + strings.Join(resets, " ") + " SELECT pg_reload_conf(); then it runs the cluster's values " +
			"(a restart setting after patronictl restart --pending); change them for the cluster with patronictl edit-config.",
	})
}

// haStandbyDiffers: repmgr manages no parameters (repmgr docs: it manages replication and
// failover, not postgresql.conf), so a setting changed with ALTER SYSTEM on the primary - by a
// person or by the advisor's apply mode - stays on the primary. A standby that does not run it
// too runs its own value after a failover, and the change is lost without anyone undoing it
// (docs/rules.md, ha-standby-differs).
func haStandbyDiffers() Rule {
	return Rule{
		ID:       "ha-standby-differs",
		Title:    "A repmgr standby does not run what its primary's postgresql.auto.conf sets",
		Severity: Warning,
		Settings: []string{collector.HostHAConfig},
		Rationale: "Under repmgr every node keeps its own configuration: a setting changed with ALTER SYSTEM on " +
			"the primary is not on a standby unless it was made there too, and a failover to that standby " +
			"drops it.",
		Sources:   []string{repmgrDocs, pgDocs + "config-setting.html#CONFIG-SETTING-SQL"},
		Immediate: true,
		Eval:      withDefaults(evalHAStandbyDiffers),
	}
}

// repmgrDocs is repmgr's documentation.
const repmgrDocs = "https://www.repmgr.org/docs/current/index.html"

// differing is one setting a standby runs with another value than its primary's
// postgresql.auto.conf sets.
type differing struct{ Setting, Standby, Primary, Context string }

// haStandbyFacts are a repmgr standby's settings against its primary's.
type haStandbyFacts struct {
	Standby   bool
	Address   string
	Differing []differing
	// Unknown says why the primary's settings could not be compared ("" when they could).
	Unknown string
}

func haStandbyFactsOf(pg *collector.Postgres) haStandbyFacts {
	if !pg.InRecovery || pg.HAManager == nil || pg.HAManager.Name != collector.ManagerRepmgr {
		return haStandbyFacts{}
	}
	f := haStandbyFacts{Standby: true}
	p := pg.Primary
	switch {
	case p == nil:
		f.Unknown = "the primary's settings were not read (primary_conninfo needs pg_read_all_settings: GRANT pg_monitor)"
		return f
	case p.Error != "":
		f.Unknown = "the primary's settings could not be read: " + p.Error
		return f
	}
	f.Address = p.Address
	for _, name := range slices.Sorted(maps.Keys(p.Settings)) {
		want, have := p.Settings[name], pg.Settings[name]
		if _, ok := pg.Settings[name]; ok && sameSetting(want, have) {
			continue
		}
		f.Differing = append(f.Differing, differing{Setting: name, Standby: have.Value, Primary: want.Value, Context: want.Context})
	}
	return f
}

// sameSetting compares two servers' values of one setting as the servers read them: memory in
// bytes, times in seconds, the rest by name.
func sameSetting(a, b collector.Setting) bool {
	switch {
	case a.Bytes != nil && b.Bytes != nil:
		return *a.Bytes == *b.Bytes
	case a.Seconds != nil && b.Seconds != nil:
		return *a.Seconds == *b.Seconds
	}
	return strings.EqualFold(a.Value, b.Value)
}

func decideHAStandbyDiffers(f haStandbyFacts) verdict {
	switch {
	case !f.Standby:
		return verdictQuiet
	case f.Unknown != "":
		return verdictUnknown
	case len(f.Differing) > 0:
		return verdictFire
	}
	return verdictQuiet
}

func evalHAStandbyDiffers(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	f := haStandbyFactsOf(pg)
	switch decideHAStandbyDiffers(f) {
	case verdictUnknown:
		return notEnough("%s", f.Unknown)
	case verdictQuiet:
		return found()
	}
	var list, sets []string
	restart := false
	for _, d := range f.Differing {
		here := d.Standby
		if here == "" {
			here = "unknown"
		}
		list = append(list, fmt.Sprintf("%s = %s here, %s on the primary", d.Setting, here, d.Primary))
		sets = append(sets, fmt.Sprintf("ALTER SYSTEM SET %s = '%s';", d.Setting, d.Primary))
		restart = restart || d.Context == "postmaster"
	}
	then := "SELECT pg_reload_conf();"
	if restart {
		then += " then a restart of this standby for the restart settings (repmgr node service --action=restart, or the service manager)"
	}
	return found(Finding{
		Severity: Warning,
		Setting:  collector.HostHAConfig,
		Current:  strings.Join(list, ", "),
		Action:   ActionAdvice,
		Summary: fmt.Sprintf("This repmgr standby runs %s (its primary at %s sets them in its postgresql.auto.conf): repmgr manages no parameters, "+
			"so after a failover to this standby the cluster would run this standby's values.", strings.Join(list, ", "), f.Address),
		Evidence: []Evidence{{Name: "differing_settings", Value: float64(len(f.Differing)), Unit: UnitCount}},
		ExpectedEffect: "On this standby, as a superuser: " + strings.Join(sets, " ") + " " + then +
			" Then it runs what the primary runs, and a failover keeps it.",
	})
}
