package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// OpError is a step that failed: what was attempted, the cause, and what to do about it. It is a
// type rather than fmt.Errorf so that the advice can follow the cause ("op: cause (hint)" reads
// as one line for an operator), and so that its text never carries a password from the DSN.
// advisor/apply builds its errors with it too, with its own hints.
type OpError struct {
	Op  string
	Err error
	// Hint says what an operator can do; empty: nothing to add.
	Hint string
	// Secrets are replaced wherever they occur in the text: DSNSecrets and the parsed password.
	Secrets []string
}

func (e *OpError) Error() string {
	msg := e.Op + ": " + causeText(e.Err)
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return redact(msg, e.Secrets)
}

func (e *OpError) Unwrap() error { return e.Err }

// causeText is err's text on one line. pgx's ConnectError repeats the user and database that
// the op already names, so its inner error is shown instead.
func causeText(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if inner := ce.Unwrap(); inner != nil {
			err = inner
		}
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// redact replaces every secret in s.
func redact(s string, secrets []string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}

// DSNSecrets finds the passwords in a connection string, in keyword (password=...) and URL
// (postgres://user:password@host, ?password=...) form, also when it does not parse: pgx redacts
// the passwords it recognizes in its parse errors, but only on a best-effort basis.
func DSNSecrets(dsn string) []string {
	var secrets []string
	add := func(s string) {
		if s == "" {
			return
		}
		secrets = append(secrets, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			secrets = append(secrets, u)
		}
	}
	if m := regexp.MustCompile(`^postgres(?:ql)?://[^:@/?#]*:([^/?#]*)@`).FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range regexp.MustCompile(`[?&]password=([^&#]*)`).FindAllStringSubmatch(dsn, -1) {
		add(m[1])
	}
	for _, m := range regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)`).FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
			add(v)
			v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v)
		}
		add(v)
	}
	return secrets
}

// hintFor says what an operator can do about err. user is the role the advisor connects as.
func hintFor(err error, user string, timeout time.Duration) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "28P01" || code == "28000":
			// 28000 is also "role does not exist" and "no pg_hba.conf entry".
			return "check the user/password in --dsn or ~/.pgpass, and that pg_hba.conf admits this user from this host"
		case code == "3D000":
			return "check dbname in --dsn"
		case code == "42501":
			return fmt.Sprintf("grant pg_monitor to the advisor's role: GRANT pg_monitor TO %s", QuoteIdent(user))
		case code == "53300":
			return "the server has no free connection slot: retry later or raise max_connections"
		case strings.HasPrefix(code, "57P"):
			return "the server is starting up or shutting down: retry later"
		case strings.HasPrefix(code, "08"):
			return "the connection failed: is the server running? check --dsn"
		}
		return ""
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return fmt.Sprintf("no answer within %s: is the server overloaded or hung?", timeout)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "check the host in --dsn"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return "is the server running? check host and port in --dsn"
	}
	return ""
}

// QuoteIdent quotes a role name for the GRANT an operator will paste; apply's hints use it too.
func QuoteIdent(name string) string {
	if name == "" {
		return "<role>"
	}
	if regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`).MatchString(name) {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
