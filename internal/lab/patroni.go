package lab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PatroniHint is the install hint for Debian's patroni and etcd-server.
const PatroniHint = "install Debian's patroni and etcd-server packages (as root: apt-get install --no-install-recommends patroni etcd-server, or make deps)"

// PatroniMember is one member of a throwaway Patroni cluster, started by NewTestPatroni.
type PatroniMember struct {
	Name    string
	DataDir string
	Socket  string
	Port    int
	RESTURL string
	// Config is the member's Patroni configuration file.
	Config string
}

// DSN connects to the member's PostgreSQL as the superuser over its socket.
func (m PatroniMember) DSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", m.Socket, m.Port)
}

// NewTestPatroni starts a single-node etcd and one Patroni 3 member (Debian's packages) on free
// loopback ports in a temporary directory, with dcsParams as the cluster's PostgreSQL
// parameters in the DCS (bootstrap.dcs), waits until the member leads, and stops everything when
// the test ends. Patroni runs as the server's user; its REST API asks for basic auth
// (patroni/restpass) on what changes anything.
func NewTestPatroni(t *testing.T, dcsParams map[string]string) PatroniMember {
	t.Helper()
	return NewTestPatroniCluster(t, dcsParams, 1)[0]
}

// NewTestPatroniCluster is NewTestPatroni with n members: the first bootstraps and leads, each
// other one is a streaming replica made by Patroni (pg_basebackup), running when this returns.
func NewTestPatroniCluster(t *testing.T, dcsParams map[string]string, n int) []PatroniMember {
	t.Helper()
	RequireServer(t)
	patroni := RequireTool(t, "patroni", PatroniHint)
	etcd := RequireTool(t, "etcd", PatroniHint)
	bin, err := FindBinDir()
	if err != nil {
		t.Skip(err)
	}
	cred, err := serverCredential()
	if err != nil {
		t.Fatal(err)
	}
	dir := SharedTempDir(t, "")
	ports := make([]int, 2+2*n)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	etcdClient, etcdPeer := ports[0], ports[1]
	StartProcess(t, "etcd", exec.Command(etcd, "--name", "etcd0", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("etcd0=http://127.0.0.1:%d", etcdPeer), "--initial-cluster-state", "new",
		"--initial-cluster-token", "pgwaltest", "--listen-metrics-urls", ""))

	var members []PatroniMember
	for i := range n {
		name := fmt.Sprintf("m%d", i+1)
		m := PatroniMember{Name: name, Socket: filepath.Join(dir, name), Port: ports[3+2*i], RESTURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2+2*i])}
		m.DataDir = filepath.Join(m.Socket, "data")
		m.Config = filepath.Join(m.Socket, "patroni.yml")
		if err := os.Mkdir(m.Socket, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.Config, []byte(patroniConfig(m, bin, etcdClient, dcsParams)), 0o600); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			for _, p := range []string{m.Socket, m.Config} {
				if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		cmd := exec.Command(patroni, m.Config)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + m.Socket, "LANG=C.UTF-8"}
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		StartProcess(t, "patroni "+name, cmd)
		WaitPatroniRole(t, m, i == 0)
		members = append(members, m)
	}
	return members
}

func patroniConfig(m PatroniMember, bin string, etcdClient int, dcsParams map[string]string) string {
	var params []string
	for k, v := range dcsParams {
		params = append(params, fmt.Sprintf("        %s: %q", k, v))
	}
	return fmt.Sprintf(`scope: pgwaltest
namespace: /service/
name: %s
log: {level: WARNING}
restapi:
  listen: %s
  connect_address: %s
  authentication: {username: patroni, password: restpass}
etcd3:
  hosts: 127.0.0.1:%d
bootstrap:
  dcs:
    ttl: 30
    loop_wait: 2
    retry_timeout: 10
    postgresql:
      # The old leader rejoins after a switchover by pg_rewind (its shutdown checkpoint is past
      # the new timeline's fork); checksums give pg_rewind the hint bits it needs.
      use_pg_rewind: true
      parameters:
%s
  initdb: [{encoding: UTF8}, data-checksums, {auth-local: trust}, {auth-host: md5}]
postgresql:
  listen: 127.0.0.1:%d
  connect_address: 127.0.0.1:%d
  data_dir: %s
  bin_dir: %s
  pgpass: %s
  authentication:
    superuser: {username: postgres, password: pgpass}
    replication: {username: replicator, password: replpass}
  parameters: {unix_socket_directories: '%s'}
  pg_hba:
  - local all all trust
  - host replication replicator 127.0.0.1/32 md5
  - host all all 127.0.0.1/32 md5
`, m.Name, strings.TrimPrefix(m.RESTURL, "http://"), strings.TrimPrefix(m.RESTURL, "http://"), etcdClient,
		strings.Join(params, "\n"), m.Port, m.Port, m.DataDir, bin, filepath.Join(m.Socket, "pgpass"), m.Socket)
}

// WaitPatroniRole waits up to two minutes until the member leads (leader) or replicates (a
// running replica), its socket is there and its REST API serves the cluster's configuration
// (GET /config answers 502 until the member's view of the DCS holds it).
func WaitPatroniRole(t *testing.T, m PatroniMember, leader bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var st struct {
			Role  string `json:"role"`
			State string `json:"state"`
		}
		resp, err := http.Get(m.RESTURL + "/patroni")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		isLeader := st.Role == "master" || st.Role == "primary" || st.Role == "leader"
		if err == nil && isLeader == leader && st.State == "running" {
			if _, err := os.Stat(filepath.Join(m.Socket, ".s.PGSQL."+strconv.Itoa(m.Port))); err == nil && configReady(m) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Patroni member %s is not a running %s after two minutes (last: %+v, %v)", m.Name, map[bool]string{true: "leader", false: "replica"}[leader], st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func configReady(m PatroniMember) bool {
	resp, err := http.Get(m.RESTURL + "/config")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
