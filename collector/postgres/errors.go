package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/user"
	"regexp"
	"slices"
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
	// connect marks a Session's failed connect, which Session.Err does not wrap again.
	connect bool
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

// redactMask replaces a secret.
const redactMask = "xxxxx"

// redact masks every occurrence of every secret in s, overlapping ones included: the bytes any
// occurrence covers become one mask per run. Replacing the leftmost occurrence alone could cut a
// later one apart ("password=p" found at the start of "password=password=p" leaves
// "xxxxxassword=p"). One round can make a secret appear where the mask meets the text around it
// ("ax" in "aax" gives "axxxxx"), so it repeats until nothing changes; every covered run holds a
// byte that is not an x (a secret of x's alone is skipped: it is the mask itself and cannot be
// told apart from it), so each round removes at least one such byte, and it ends.
func redact(s string, secrets []string) string {
	for {
		covered := make([]bool, len(s))
		any := false
		for _, secret := range secrets {
			if strings.Trim(secret, "x") == "" {
				continue
			}
			for i := 0; i <= len(s)-len(secret); {
				j := strings.Index(s[i:], secret)
				if j < 0 {
					break
				}
				for k := i + j; k < i+j+len(secret); k++ {
					covered[k] = true
				}
				any = true
				i += j + 1
			}
		}
		if !any {
			return s
		}
		var b strings.Builder
		for i := 0; i < len(s); {
			if !covered[i] {
				b.WriteByte(s[i])
				i++
				continue
			}
			for i < len(s) && covered[i] {
				i++
			}
			b.WriteString(redactMask)
		}
		s = b.String()
	}
}

// The forms a password takes in a connection string, as pgx and libpq read them: the userinfo
// of a postgres:// URL, a password or sslpassword query parameter, and a password or sslpassword
// keyword, quoted ('...' with \' and \\ escapes) or not (a backslash escapes the next byte,
// also a space; the value ends at the next unescaped ASCII space).
var (
	dsnURLPassword = regexp.MustCompile(`^postgres(?:ql)?://[^:@/?#]*:([^/?#]*)@`)
	// An operator may paste a password into a URL without percent-encoding it; then its / ? #
	// end the authority early, and it reaches as far as the last @.
	dsnRawURLPassword = regexp.MustCompile(`(?s)^postgres(?:ql)?://[^:@/?#]*:(.*)@`)
	// pgx reads a # in the query as part of the value: it keeps no fragment.
	dsnQueryPassword   = regexp.MustCompile(`[?&](?:ssl)?password=([^&]*)`)
	dsnKeywordPassword = regexp.MustCompile(`(?s)(?:^|[ \t\n\r\v\f'])(?:ssl)?password[ \t\n\r\v\f]*=[ \t\n\r\v\f]*(?:'((?:[^'\\]|\\.)*)'?|((?:[^ \t\n\r\v\f\\]|\\.)+))`)
)

// DSNSecrets finds the passwords in a connection string, in keyword (password=..., also
// sslpassword, the client key's) and URL (postgres://user:password@host, ?password=...) form,
// as written and as decoded, also when the string does not parse: pgx redacts the passwords
// it recognizes in its parse errors, but only on a best-effort basis, and what it cannot parse
// it may quote (`missing "=" after "word"`). Where a malformed string leaves the end of a
// password in doubt, the longer reading is a secret too: masking too much of a broken DSN in an
// error costs little, showing part of a password does not.
func DSNSecrets(dsn string) []string {
	var secrets []string
	add := func(forms ...string) {
		for _, s := range forms {
			if s != "" && !slices.Contains(secrets, s) {
				secrets = append(secrets, s)
			}
		}
	}
	decoded := func(s string, unescape func(string) (string, error)) string {
		if u, err := unescape(s); err == nil {
			return u
		}
		return ""
	}
	if m := dsnURLPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1], decoded(m[1], url.PathUnescape))
	}
	if m := dsnRawURLPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range dsnQueryPassword.FindAllStringSubmatchIndex(dsn, -1) {
		v := dsn[m[2]:m[3]]
		// pgx decodes percent escapes only; a reader of the query as a form decodes + as a space
		// and ends the value at a #: every reading is a secret.
		for _, v := range []string{v, strings.Split(v, "#")[0]} {
			add(v, decoded(v, url.PathUnescape), decoded(v, url.QueryUnescape))
		}
		add(v + dsn[m[3]:m[3]+queryContinuation(dsn[m[3]:])])
	}
	for _, m := range dsnKeywordPassword.FindAllStringSubmatchIndex(dsn, -1) {
		if m[2] >= 0 {
			// A quoted value's inside.
			v := dsn[m[2]:m[3]]
			add(v, unescapeKeyword(v))
			continue
		}
		v := dsn[m[4]:m[5]]
		add(v, unescapeKeyword(v))
		if n := keywordContinuation(dsn[m[5]:]); n > 0 {
			add(dsn[m[4] : m[5]+n])
		}
	}
	return secrets
}

// isConnSpace is libpq's whitespace in a keyword/value connection string.
func isConnSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// keywordContinuation is how much of rest, which follows an unquoted keyword value, still
// belongs to it when the string is malformed ("password=two words host=db"): the words that
// are not keyword=value and are not a keyword followed by "=".
func keywordContinuation(rest string) int {
	n := 0
	for {
		i := n
		for i < len(rest) && isConnSpace(rest[i]) {
			i++
		}
		if i == n || i == len(rest) {
			return n
		}
		j := i
		for j < len(rest) && !isConnSpace(rest[j]) {
			j++
		}
		k := j
		for k < len(rest) && isConnSpace(rest[k]) {
			k++
		}
		if strings.Contains(rest[i:j], "=") || k < len(rest) && rest[k] == '=' {
			return n
		}
		n = j
	}
}

// queryContinuation is how much of rest, which follows a query parameter's value, still belongs
// to it when the URL is malformed ("?password=a&b&sslmode=disable"): the pieces after & that
// are not key=value.
func queryContinuation(rest string) int {
	n := 0
	for n < len(rest) && rest[n] == '&' {
		j := n + 1
		for j < len(rest) && rest[j] != '&' {
			j++
		}
		if strings.Contains(rest[n+1:j], "=") {
			return n
		}
		n = j
	}
	return n
}

// unescapeKeyword reads a keyword value's backslash escapes as libpq does: a backslash stands for
// the byte after it.
func unescapeKeyword(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			if i++; i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hintFor says what an operator can do about err. user is the role the advisor connects as.
func hintFor(err error, user string, timeout time.Duration) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "28000" && strings.HasPrefix(pgErr.Message, "Peer authentication failed"):
			return peerHint(user)
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

// peerHint says why peer authentication refused role: it admits an OS user as the role of the
// same name only (pg_hba.conf's "local all all peer", Debian's and Ubuntu's default), and the two
// ways to make the names agree.
func peerHint(role string) string {
	u, err := user.Current()
	if err != nil || u.Username == role {
		return "peer authentication admits an OS user only as the role of the same name (or as pg_ident.conf maps it): check pg_hba.conf and pg_ident.conf"
	}
	os := QuoteIdent(u.Username)
	return fmt.Sprintf("peer authentication admits the OS user %s only as the role of the same name, and the advisor connects as %s: "+
		"create the role %s (CREATE ROLE %s LOGIN; GRANT pg_monitor TO %s;) and connect without user= or PGUSER, "+
		"or map %s to %s in pg_ident.conf and use that map in a pg_hba.conf line above \"local all all peer\" (README, \"Connecting\")",
		u.Username, role, os, os, os, u.Username, role)
}
