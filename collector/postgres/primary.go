package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// readPrimary reads, on a standby of a repmgr cluster, the settings its primary runs from its
// postgresql.auto.conf: repmgr manages no parameters, so a change made with ALTER SYSTEM on the
// primary (the advisor's included) is not on the standby unless someone made it there too, and
// after a failover the standby runs its own value (docs/apply.md, "Under an HA manager"). The
// primary is reached at primary_conninfo's host and port with the advisor's own DSN otherwise
// (its user, database and credentials: never the replication user's password); what fails is
// said in pg.Primary.Error and a note.
func (c *Collector) readPrimary(ctx context.Context, pg *collector.Postgres) {
	if !pg.InRecovery || pg.HAManager == nil || pg.HAManager.Name != collector.ManagerRepmgr {
		c.closePrimary(ctx)
		return
	}
	var conninfo string
	ok := c.step(ctx, pg, "read primary_conninfo", func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('primary_conninfo')").Scan(&conninfo)
	})
	if !ok {
		return
	}
	p := &collector.PrimarySettings{}
	pg.Primary = p
	host, port, err := conninfoHostPort(conninfo)
	if err == nil {
		p.Address = net.JoinHostPort(host, port)
		err = c.queryPrimary(ctx, host, port, p)
	}
	if err != nil {
		p.Error = err.Error()
		pg.Notes = append(pg.Notes, "the primary's settings could not be read, so this standby cannot say which of them it does not run: "+p.Error)
	}
}

// queryPrimary reads the primary's settings of the setting table that come from its
// postgresql.auto.conf.
func (c *Collector) queryPrimary(ctx context.Context, host, port string, p *collector.PrimarySettings) error {
	dsn, err := withHostPort(c.dsn, host, port)
	if err != nil {
		return err
	}
	if c.primary == nil || c.primaryDSN != dsn {
		c.closePrimary(ctx)
		c.primary, c.primaryDSN = NewSession(dsn, SessionOptions{QueryTimeout: c.queryTimeout, ApplicationName: applicationName,
			Params: map[string]string{"timezone": "UTC"}, Purpose: "(the standby's primary, from primary_conninfo)", Logger: c.logger}), dsn
	}
	return c.primary.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		v := c.primary.Server().VersionNum
		settings, err := querySettings(ctx, conn, settingsQuery(v)+" AND pg_catalog.right(sourcefile, 20) OPERATOR(pg_catalog.=) 'postgresql.auto.conf'")
		p.Settings = settings
		return err
	})
}

func (c *Collector) closePrimary(ctx context.Context) {
	if c.primary != nil {
		c.primary.Close(ctx) //nolint:errcheck // a connection being let go
		c.primary, c.primaryDSN = nil, ""
	}
}

// conninfoHostPort reads the host and port of a libpq connection string (keyword/value pairs or
// a postgresql:// URI), as primary_conninfo holds one. It is a server's setting, read as input:
// a string it cannot read, or one naming several hosts, is an error, never a guess.
func conninfoHostPort(s string) (host, port string, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", "", errors.New("primary_conninfo is empty: this standby does not stream from a primary")
	}
	if strings.HasPrefix(s, "postgresql://") || strings.HasPrefix(s, "postgres://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", "", fmt.Errorf("primary_conninfo is not a URI libpq reads: %w", err)
		}
		host, port = u.Hostname(), u.Port()
		if q := u.Query(); host == "" {
			host, port = q.Get("host"), q.Get("port")
		}
	} else {
		kv, err := parseConninfo(s)
		if err != nil {
			return "", "", err
		}
		host, port = kv["host"], kv["port"]
		if host == "" {
			host = kv["hostaddr"]
		}
	}
	switch {
	case host == "":
		return "", "", errors.New("primary_conninfo names no host")
	case strings.Contains(host, ",") || strings.Contains(port, ","):
		return "", "", fmt.Errorf("primary_conninfo names several hosts (%.100s): which one is the primary is not this standby's to say", host)
	}
	if port == "" {
		port = "5432"
	}
	return host, port, nil
}

// parseConninfo reads libpq's keyword = value pairs: values may be single-quoted, with \' and \\
// inside quotes (libpq docs, "Keyword/Value Connection Strings").
func parseConninfo(s string) (map[string]string, error) {
	out := map[string]string{}
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	for {
		skip()
		if i >= len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[start:i]
		skip()
		if i >= len(s) || s[i] != '=' || key == "" {
			return nil, fmt.Errorf("primary_conninfo is not keyword = value pairs near byte %d", start)
		}
		i++
		skip()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				ch := s[i]
				if ch == '\\' && i+1 < len(s) {
					val.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if ch == '\'' {
					closed = true
					break
				}
				val.WriteByte(ch)
			}
			if !closed {
				return nil, fmt.Errorf("primary_conninfo has an unterminated quoted value for %.40q", key)
			}
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		out[key] = val.String()
	}
}

// withHostPort is dsn with its host and port replaced: a URI's authority, or keyword/value pairs
// with host and port appended (libpq and pgx take the last of a repeated keyword).
func withHostPort(dsn, host, port string) (string, error) {
	if strings.HasPrefix(dsn, "postgresql://") || strings.HasPrefix(dsn, "postgres://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("--dsn: %w", err)
		}
		u.Host = net.JoinHostPort(host, port)
		q := u.Query()
		q.Del("host")
		q.Del("hostaddr")
		q.Del("port")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	quote := func(v string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `'`, `\'`) + "'"
	}
	return strings.TrimSpace(dsn + " host=" + quote(host) + " port=" + quote(port)), nil
}
