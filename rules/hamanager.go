package rules

import (
	"fmt"

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
