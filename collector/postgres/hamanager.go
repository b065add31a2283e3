package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// haFacts are what tells the HA managers apart, from the server and from its host.
type haFacts struct {
	// From the server: pg_settings' source files, shared_preload_libraries, cluster_name and
	// allow_alter_system ("" before 17).
	SourceFiles      []string
	PreloadLibraries string
	ClusterName      string
	AllowAlterSystem string
	// From the data directory: patroni.dynamic.json exists; postgresql.conf's first lines;
	// where postgresql.auto.conf links to ("" when it is no link).
	DynamicJSON    bool
	ConfHeader     string
	AutoConfTarget string
	// ParentCmdline is the postmaster's parent's command line, arguments joined by spaces.
	ParentCmdline string
}

// decideHAManager names the manager the facts show, and why. Each manager leaves a mark of its
// own: Patroni starts the postmaster itself and keeps patroni.dynamic.json in the data
// directory (Patroni docs, "Dynamic configuration"); Stolon links postgresql.auto.conf to
// /dev/null so that ALTER SYSTEM has no effect; CloudNativePG writes its parameters to
// custom.conf and override.conf and turns allow_alter_system off from 17; repmgr needs its
// library in shared_preload_libraries.
func decideHAManager(f haFacts) collector.HAManager {
	m := collector.HAManager{Name: collector.ManagerNone, Cluster: f.ClusterName}
	switch {
	case strings.Contains(f.ParentCmdline, "patroni"):
		m.Name, m.Evidence = collector.ManagerPatroni, "the postmaster's parent runs "+cutCmdline(f.ParentCmdline)
	case f.DynamicJSON:
		m.Name, m.Evidence = collector.ManagerPatroni, "the data directory holds patroni.dynamic.json"
	case strings.Contains(f.ConfHeader, "Patroni"):
		m.Name, m.Evidence = collector.ManagerPatroni, "postgresql.conf says Patroni writes it"
	case f.AutoConfTarget == "/dev/null" || strings.Contains(f.ParentCmdline, "stolon-keeper"):
		m.Name, m.Evidence = collector.ManagerStolon, "postgresql.auto.conf is a link to /dev/null (Stolon's keeper makes it one)"
	case cnpgFile(f.SourceFiles) != "":
		m.Name, m.Evidence = collector.ManagerCloudNativePG, "settings come from "+cnpgFile(f.SourceFiles)+" (CloudNativePG's configuration files)"
		if f.AllowAlterSystem == "off" {
			m.Evidence += "; allow_alter_system is off"
		}
	case hasLibrary(f.PreloadLibraries, "repmgr"):
		m.Name, m.Evidence = collector.ManagerRepmgr, "shared_preload_libraries loads repmgr"
	default:
		m.Cluster = ""
	}
	return m
}

// cnpgFile is the first of files that CloudNativePG writes (custom.conf, override.conf), or "".
func cnpgFile(files []string) string {
	for _, f := range files {
		if b := filepath.Base(f); b == "custom.conf" || b == "override.conf" {
			return f
		}
	}
	return ""
}

func hasLibrary(list, name string) bool {
	for _, l := range strings.Split(list, ",") {
		if strings.Trim(strings.TrimSpace(l), `"`) == name {
			return true
		}
	}
	return false
}

func cutCmdline(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// haFactsQuery reads the server's side of haFacts.
const haFactsQuery = `SELECT pg_catalog.current_setting('shared_preload_libraries'), pg_catalog.current_setting('cluster_name'),
	coalesce(pg_catalog.current_setting('allow_alter_system', true), ''),
	coalesce((SELECT pg_catalog.array_agg(DISTINCT s.sourcefile) FROM pg_catalog.pg_settings s WHERE s.sourcefile IS NOT NULL), '{}'::pg_catalog.text[])`

// readHAFacts reads haFacts: the server's over conn, the host's from dataDir and procfs. What
// cannot be read (a data directory the user may not search) is left out.
func readHAFacts(ctx context.Context, conn *pgx.Conn, procfs, dataDir string) (haFacts, error) {
	var f haFacts
	if err := conn.QueryRow(ctx, haFactsQuery).Scan(&f.PreloadLibraries, &f.ClusterName, &f.AllowAlterSystem, &f.SourceFiles); err != nil {
		return f, err
	}
	if dataDir == "" {
		return f, nil
	}
	_, err := os.Stat(filepath.Join(dataDir, "patroni.dynamic.json"))
	f.DynamicJSON = err == nil
	f.ConfHeader = string(readHead(filepath.Join(dataDir, "postgresql.conf"), 512))
	f.AutoConfTarget, _ = os.Readlink(filepath.Join(dataDir, "postgresql.auto.conf"))
	f.ParentCmdline = postmasterParent(procfs, dataDir)
	return f, nil
}

// readHead returns at most n bytes from the start of path; nil when it cannot be read.
func readHead(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return b
}

// postmasterParent is the command line of the postmaster's parent process (postmaster.pid's
// first line is the postmaster's pid), "" when it cannot be read.
func postmasterParent(procfs, dataDir string) string {
	line, _, _ := bytes.Cut(readHead(filepath.Join(dataDir, "postmaster.pid"), 64), []byte("\n"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil || pid <= 0 {
		return ""
	}
	status := readHead(filepath.Join(procfs, strconv.Itoa(pid), "status"), 4096)
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			ppid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || ppid <= 1 {
				return ""
			}
			cmd := readHead(filepath.Join(procfs, strconv.Itoa(ppid), "cmdline"), 4096)
			return strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte(" "))))
		}
	}
	return ""
}

// patroniRESTURL reads Patroni's REST API address from the configuration file its command line
// names (restapi.connect_address, https when restapi.certfile is set), when the file's
// postgresql.data_dir is dataDir ("" for any); "" when there is none.
func patroniRESTURL(cmdline, dataDir string) string {
	for _, arg := range strings.Fields(cmdline) {
		if ext := filepath.Ext(arg); ext != ".yml" && ext != ".yaml" {
			continue
		}
		var cfg struct {
			RESTAPI struct {
				ConnectAddress string `yaml:"connect_address"`
				Listen         string `yaml:"listen"`
				CertFile       string `yaml:"certfile"`
			} `yaml:"restapi"`
			PostgreSQL struct {
				DataDir string `yaml:"data_dir"`
			} `yaml:"postgresql"`
		}
		if yaml.Unmarshal(readHead(arg, 1<<20), &cfg) != nil {
			return ""
		}
		if dataDir != "" && filepath.Clean(cfg.PostgreSQL.DataDir) != filepath.Clean(dataDir) {
			return ""
		}
		addr := cfg.RESTAPI.ConnectAddress
		if addr == "" {
			addr = cfg.RESTAPI.Listen
		}
		if addr == "" {
			return ""
		}
		scheme := "http"
		if cfg.RESTAPI.CertFile != "" {
			scheme = "https"
		}
		return fmt.Sprintf("%s://%s", scheme, addr)
	}
	return ""
}

// DetectHAManager names the HA manager that runs the server conn is connected to (dataDir is its
// data_directory, procfs where /proc is): the collector reports it, and apply's PostgreSQL
// actuator refuses ALTER SYSTEM under one.
func DetectHAManager(ctx context.Context, conn *pgx.Conn, procfs, dataDir string) (collector.HAManager, error) {
	f, err := readHAFacts(ctx, conn, procfs, dataDir)
	if err != nil {
		return collector.HAManager{}, err
	}
	m := decideHAManager(f)
	if m.Name == collector.ManagerPatroni {
		m.RESTURL = patroniRESTURL(f.ParentCmdline, "")
		if m.RESTURL == "" {
			m.RESTURL = findPatroni(procfs, dataDir)
		}
		if m.AutoConf, err = autoConfSettings(ctx, conn); err != nil {
			return m, err
		}
		m.ClusterSettings, err = patroniParameters(ctx, m.RESTURL)
		if err != nil {
			m.ConfigError = err.Error()
		}
	}
	return m, nil
}

// autoConfSettings are the settings the server runs from postgresql.auto.conf (pg_settings'
// sourcefile, which pg_read_all_settings shows; pg_file_settings is for superusers only).
func autoConfSettings(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT name, pg_catalog.current_setting(name) FROM pg_catalog.pg_settings
		WHERE sourcefile OPERATOR(pg_catalog.~~) '%/postgresql.auto.conf'::pg_catalog.text`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var name, value string
	_, err = pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		out[name] = value
		return nil
	})
	return out, err
}

// patroniParameters reads the cluster's PostgreSQL parameters from Patroni's REST API
// (GET /config, which needs no credentials), bounded in time and size.
func patroniParameters(ctx context.Context, restURL string) (map[string]string, error) {
	if restURL == "" {
		return nil, errors.New("the Patroni REST API was not found (its configuration file names it)")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, restURL+"/config", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/config: %w", restURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/config: %s", restURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s/config: %w", restURL, err)
	}
	params, err := DecodePatroniParameters(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/config: %w", restURL, err)
	}
	return params, nil
}

// DecodePatroniParameters reads postgresql.parameters from the body of Patroni's GET or PATCH
// /config, each value as a string (Patroni keeps numbers and booleans as JSON wrote them).
func DecodePatroniParameters(body []byte) (map[string]string, error) {
	var cfg struct {
		PostgreSQL struct {
			Parameters map[string]any `json:"parameters"`
		} `json:"postgresql"`
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range cfg.PostgreSQL.Parameters {
		switch v := v.(type) {
		case nil:
		case string:
			out[k] = v
		case float64, bool:
			out[k] = fmt.Sprint(v)
		default:
			return nil, fmt.Errorf("parameter %s is not a scalar", k)
		}
	}
	return out, nil
}

// findPatroni looks for the Patroni process whose configuration names dataDir and returns its
// REST API: Patroni starts the postmaster detached (its parent is init), so the parent alone
// does not lead to it. "" when none is found.
func findPatroni(procfs, dataDir string) string {
	if dataDir == "" {
		return ""
	}
	entries, err := os.ReadDir(procfs)
	if err != nil {
		return ""
	}
	for i, e := range entries {
		if i > 65536 {
			break
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(readHead(filepath.Join(procfs, e.Name(), "cmdline"), 4096), []byte{0}, []byte(" ")))
		if !strings.Contains(cmd, "patroni") {
			continue
		}
		if url := patroniRESTURL(cmd, dataDir); url != "" {
			return url
		}
	}
	return ""
}
