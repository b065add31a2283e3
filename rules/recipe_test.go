package rules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryRuleHasTableTest guards step 3 of CONTRIBUTING.md's "Add a rule": every rule of
// All() has a test of its own in this package, named Test followed by its ID in CamelCase
// (fsync-off: TestFsyncOff; the case of the letters is free, WAL or Wal).
func TestEveryRuleHasTableTest(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[strings.ToLower(fn.Name.Name)] = true
			}
		}
	}
	for _, r := range All() {
		want := "Test"
		for _, part := range strings.Split(r.ID, "-") {
			want += strings.ToUpper(part[:1]) + part[1:]
		}
		if !tests[strings.ToLower(want)] {
			t.Errorf("rule %s has no table test: add %s in rules/<topic>_test.go (CONTRIBUTING.md, Add a rule, step 3)", r.ID, want)
		}
	}
}

// TestEveryDecideStepTested guards the second half of step 3 of "Add a rule": every decide step
// (a non-test function named decide<Topic>) is called from a test of this package, so that each
// threshold's side of the decision shows in a row of facts (rules/decide_test.go).
func TestEveryDecideStepTested(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decide := map[string]bool{} // decide steps -> called from a test
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		test := strings.HasSuffix(name, "_test.go")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if !test && n.Recv == nil && strings.HasPrefix(n.Name.Name, "decide") {
					decide[n.Name.Name] = decide[n.Name.Name] || false
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && test && strings.HasPrefix(id.Name, "decide") {
					decide[id.Name] = true
				}
			}
			return true
		})
	}
	for name, called := range decide {
		if !called {
			t.Errorf("decide step %s is called from no test: add a table of facts to rules/decide_test.go (CONTRIBUTING.md, Add a rule, step 3)", name)
		}
	}
}
