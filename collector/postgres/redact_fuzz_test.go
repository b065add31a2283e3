package postgres

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// dsnForm is a connection string with a password in one of the forms an operator writes:
// prefix + the password as written + suffix.
type dsnForm struct {
	name           string
	prefix, suffix string
	encode         func(string) string
	// raw forms paste the password unencoded; ok says which passwords the form can carry at all.
	raw bool
	ok  func(string) bool
	// ssl forms hold the client key's password, which is not Config.Password.
	ssl bool
	// parsedSuffix is what pgx adds to the password it reads: it keeps a URL's # in the value.
	parsedSuffix string
}

// keywordEscape writes s as an unquoted keyword value: a backslash before each space, quote and
// backslash (libpq's conninfo_parse).
func keywordEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if isConnSpace(s[i]) || s[i] == '\'' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// quoteEscape writes the inside of a quoted keyword value.
func quoteEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

func userinfoEscape(s string) string {
	u := url.UserPassword("a", s).String()
	return strings.TrimPrefix(u, "a:")
}

// queryEscape writes a query value as pgx (like libpq) decodes it: percent escapes only, so a
// space is %20, not +.
func queryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

func always(string) bool { return true }

var dsnForms = []dsnForm{
	{name: "keyword", prefix: "host=db user=a password=", suffix: " dbname=x", encode: keywordEscape, ok: always},
	{name: "keyword quoted", prefix: "host=db user=a password='", suffix: "' dbname=x", encode: quoteEscape, ok: always},
	{name: "keyword spaced, newlines", prefix: "host=db\npassword = '", suffix: "'\nuser=a", encode: quoteEscape, ok: always},
	{name: "keyword after a quote", prefix: "user='a'password='", suffix: "'", encode: quoteEscape, ok: always},
	{name: "sslpassword quoted", prefix: "host=db sslpassword='", suffix: "' user=a", encode: quoteEscape, ok: always, ssl: true},
	{name: "sslpassword", prefix: "sslpassword=", suffix: "\thost=db", encode: keywordEscape, ok: always, ssl: true},
	{name: "URL userinfo", prefix: "postgres://a:", suffix: "@db:5432/x?sslmode=disable", encode: userinfoEscape, ok: always},
	{name: "URL query", prefix: "postgres://a@db/x?sslmode=disable&password=", suffix: "&application_name=y", encode: queryEscape, ok: always},
	{name: "URL query and fragment", prefix: "postgresql://db/x?password=", suffix: "#frag", encode: queryEscape, ok: always, parsedSuffix: "#frag"},
	{name: "URL sslpassword", prefix: "postgres://a@db/x?sslpassword=", suffix: "", encode: queryEscape, ok: always, ssl: true},
	// Pasted without encoding. A raw "=" in a query or keyword value, or a quote or backslash
	// in a keyword value, is ambiguous even to a reader: which part is the password is unknown.
	{name: "raw URL userinfo", prefix: "postgres://a:", suffix: "@db/x", raw: true, ok: always},
	{name: "raw URL query", prefix: "postgres://a@db/x?password=", suffix: "&sslmode=disable", raw: true,
		ok: func(s string) bool { return !strings.Contains(s, "=") }},
	{name: "raw keyword", prefix: "host=db password=", suffix: " user=a", raw: true,
		// A raw keyword value ends at white space: a password with white space at either end is
		// not what the string holds, and the test would look for text it never wrote.
		ok: func(s string) bool { return !strings.ContainsAny(s, `='\`) && strings.TrimSpace(s) == s }},
}

// FuzzDSNRedaction writes a password into each form of connection string and checks what an
// operator may see: the string redacted with DSNSecrets, and pgx's parse error through
// OpError, show neither the password nor the text it was written as, nor any four bytes of
// that text that the rest of the string does not hold. For the encoded forms DSNSecrets also
// knows the decoded password, which messages built from the parsed config carry.
func FuzzDSNRedaction(f *testing.F) {
	for i := range dsnForms {
		for _, pw := range []string{"sekrit", "se cr'et", `back\slash`, "p@ss/w#rd?&x=1", "two words", "new\nline", "+plus+", "%41", "é\xff", "ax", "password=a"} {
			f.Add(uint8(i), pw)
		}
	}
	f.Fuzz(func(t *testing.T, form uint8, pw string) {
		fm := dsnForms[int(form)%len(dsnForms)]
		// A password of x's alone is the mask itself.
		if strings.Trim(pw, "x") == "" || !fm.ok(pw) || fm.raw && strings.TrimSpace(pw) == "" {
			return
		}
		written := pw
		if !fm.raw {
			written = fm.encode(pw)
		}
		dsn := fm.prefix + written + fm.suffix
		secrets := DSNSecrets(dsn)

		out := redact(dsn, secrets)
		leaks := func(text string) bool {
			return strings.Contains(text, pw) || strings.Contains(text, written)
		}
		if leaks(out) {
			t.Fatalf("%s: redact(%q) = %q shows the password %q", fm.name, dsn, out, pw)
		}
		template := fm.prefix + redactMask + fm.suffix
		for i := 0; i+4 <= len(written); i++ {
			if w := written[i : i+4]; strings.Contains(out, w) && !strings.Contains(template, w) {
				t.Fatalf("%s: redact(%q) = %q shows %q of the password %q", fm.name, dsn, out, w, written)
			}
		}
		if !fm.raw {
			if !strings.Contains(strings.Join(secrets, "\x00")+"\x00", pw+"\x00") {
				t.Fatalf("%s: DSNSecrets(%q) = %q, want the decoded password %q among them", fm.name, dsn, secrets, pw)
			}
		}

		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			msg := (&OpError{Op: "parse --dsn", Err: err, Secrets: secrets}).Error()
			if leaks(msg) {
				t.Fatalf("%s: parse error of %q reads %q: shows the password %q", fm.name, dsn, msg, pw)
			}
			return
		}
		if !fm.raw && !fm.ssl && cfg.Password != pw+fm.parsedSuffix {
			t.Fatalf("%s: the test wrote %q as %q, which pgx reads as %q", fm.name, pw, dsn, cfg.Password)
		}
	})
}
