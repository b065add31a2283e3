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
