package postgres

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The daemon's packages: every query the advisor sends is written in one of them.
var daemonDirs = []string{"collector", "probes", "advisor", "cmd/pgwal-advisor"}

// TestSQLNamesCatalogObjects reads every string literal of the daemon's non-test Go files that is
// SQL and fails on a catalog object, type or operator it names without pg_catalog. The session's
// search_path (SearchPath) already keeps other schemas out; naming the schema holds also where a
// connection pooler drops the startup parameter (docs/security.md, "search_path").
func TestSQLNamesCatalogObjects(t *testing.T) {
	root := filepath.Join("..", "..")
	n := 0
	for _, dir := range daemonDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			for _, q := range sqlLiterals(t, path) {
				n++
				for _, bad := range unqualified(q.text) {
					t.Errorf("%s: %s in %q: name it with pg_catalog (pg_catalog.%s, OPERATOR(pg_catalog.=))", q.pos, bad, q.text, bad)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The collector and the actuator send more than a dozen queries: finding none means the
	// test no longer sees them.
	if n < 12 {
		t.Errorf("found %d SQL literals in %v, want the dozen and more the collector and apply send", n, daemonDirs)
	}
}

// TestUnqualified holds the checker to what it must find, so that the test above can fail.
func TestUnqualified(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want []string
	}{
		{"SELECT pg_catalog.to_jsonb(w) FROM pg_catalog.pg_stat_wal w", nil},
		{"SELECT to_jsonb(w) FROM pg_catalog.pg_stat_wal w", []string{"to_jsonb"}},
		{"SELECT pg_catalog.to_jsonb(w) FROM pg_stat_wal w", []string{"pg_stat_wal"}},
		{"SELECT pg_catalog.pg_has_role('x', 'USAGE')", nil},
		{"SELECT pg_has_role('x', 'USAGE')", []string{"pg_has_role"}},
		{"SELECT pg_catalog.pg_current_wal_insert_lsn()::text", []string{"text"}},
		{"SELECT a FROM pg_catalog.pg_settings WHERE name = $1", []string{"="}},
		{"SELECT a FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) $1 AND f LIKE 'x=y'", []string{"LIKE"}},
		{"SELECT coalesce(a, 'x') FROM pg_catalog.pg_settings s JOIN pg_roles r ON true", []string{"pg_roles"}},
		{"SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid <> 1", []string{"count", "<>"}},
		{"SELECT x FROM (SELECT 1) s", nil},
	} {
		got := unqualified(tc.sql)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("unqualified(%q) = %q, want %q", tc.sql, got, tc.want)
		}
	}
}

type sqlLiteral struct {
	pos  token.Position
	text string
}

// sqlStart tells a query from other text: the statements the advisor sends, or the FROM part of
// one built from pieces.
var sqlStart = regexp.MustCompile(`^\s*(SELECT|WITH|SHOW|SET|INSERT|UPDATE|DELETE|FROM|WHERE)\b`)

// sqlLiterals returns the SQL of a Go file: each +-chain of string literals joined (an operand
// that is not a literal reads as an identifier), kept when it reads as a query.
func sqlLiterals(t *testing.T, path string) []sqlLiteral {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []sqlLiteral
	ast.Inspect(f, func(n ast.Node) bool {
		e, ok := n.(ast.Expr)
		if !ok {
			return true
		}
		text, isString := joined(e)
		if !isString {
			return true
		}
		if sqlStart.MatchString(text) {
			out = append(out, sqlLiteral{pos: fset.Position(e.Pos()), text: text})
		}
		return false // the parts of a chain are not queries of their own
	})
	return out
}

// joined returns a string literal, or a +-chain holding at least one, as one text.
func joined(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		l, lok := joined(e.X)
		r, rok := joined(e.Y)
		if !lok && !rok {
			return "", false
		}
		if !lok {
			l = " x "
		}
		if !rok {
			r = " x "
		}
		return l + r, true
	case *ast.ParenExpr:
		return joined(e.X)
	}
	return "", false
}

var (
	sqlString   = regexp.MustCompile(`'(?:[^']|'')*'`)
	sqlOperator = regexp.MustCompile(`(?i)OPERATOR\s*\([^)]*\)`)
	sqlCall     = regexp.MustCompile(`(?i)([a-z_][a-z0-9_.]*)\s*\(`)
	sqlRelation = regexp.MustCompile(`(?i)\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_.]*)`)
	sqlCast     = regexp.MustCompile(`::\s*([a-z_][a-z0-9_.]*)`)
	sqlBareOp   = regexp.MustCompile(`(?i)(<>|!=|<=|>=|\|\||[=<>~]|\bI?LIKE\b|\bSIMILAR\b)`)
)

// sqlKeywords may stand before a parenthesis without being a function of a schema: syntax, and
// the few functions that are keywords (coalesce, nullif, greatest, least).
var sqlKeywords = map[string]bool{
	"select": true, "from": true, "where": true, "and": true, "or": true, "not": true, "on": true,
	"as": true, "in": true, "any": true, "all": true, "exists": true, "values": true, "by": true,
	"coalesce": true, "nullif": true, "greatest": true, "least": true, "filter": true, "over": true,
	"cast": true, "operator": true, "join": true, "with": true, "returning": true, "then": true,
	"else": true, "when": true,
}

// unqualified lists what sql names without pg_catalog: functions, relations, casts' types, and
// operators written bare. String constants are left out, and statements that are not queries
// (ALTER SYSTEM SET x = v: its = is syntax, not an operator).
func unqualified(sql string) []string {
	s := sqlString.ReplaceAllString(sql, "''")
	var bad []string
	qualified := func(name string) bool { return strings.HasPrefix(strings.ToLower(name), "pg_catalog.") }
	for _, m := range sqlCall.FindAllStringSubmatch(s, -1) {
		if !qualified(m[1]) && !sqlKeywords[strings.ToLower(m[1])] {
			bad = append(bad, m[1])
		}
	}
	for _, m := range sqlRelation.FindAllStringSubmatch(s, -1) {
		if !qualified(m[1]) {
			bad = append(bad, m[1])
		}
	}
	for _, m := range sqlCast.FindAllStringSubmatch(s, -1) {
		if !qualified(m[1]) {
			bad = append(bad, m[1])
		}
	}
	s = sqlOperator.ReplaceAllString(sqlCast.ReplaceAllString(s, ""), "")
	bad = append(bad, sqlBareOp.FindAllString(s, -1)...)
	return bad
}
