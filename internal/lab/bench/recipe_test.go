package bench

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// TestEveryScenarioHasQuickSmokeTest guards step 3 of CONTRIBUTING.md's "Add a lab scenario":
// every scenario of scenarios() is run in its quick form by some test of this package, a call
// Run(ctx, Options{Quick: true, Scenarios: []string{...}}) naming its ID constant.
func TestEveryScenarioHasQuickSmokeTest(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{} // constant name -> its string value
	covered := map[string]bool{}  // scenario IDs a quick Run names
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CompositeLit:
				if strings.HasSuffix(name, "_test.go") && isQuickOptions(n) {
					for _, id := range scenarioIdents(n) {
						covered[id] = true
					}
				}
			}
			return true
		})
	}
	quick := map[string]bool{}
	for id := range covered {
		quick[consts[id]] = true
	}
	for _, id := range ScenarioIDs() {
		if !quick[id] {
			t.Errorf("scenario %q has no quick smoke test: add a test running Run(ctx, Options{Quick: true, Scenarios: []string{<its ID constant>}}) "+
				"(CONTRIBUTING.md, Add a lab scenario, step 3)", id)
		}
	}
}

// isQuickOptions reports whether lit is Options{..., Quick: true, ...}.
func isQuickOptions(lit *ast.CompositeLit) bool {
	if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "Options" {
		return false
	}
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Quick" {
				v, ok := kv.Value.(*ast.Ident)
				return ok && v.Name == "true"
			}
		}
	}
	return false
}

// scenarioIdents returns the identifiers listed in lit's Scenarios field.
func scenarioIdents(lit *ast.CompositeLit) []string {
	var ids []string
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if k, isIdent := kv.Key.(*ast.Ident); !ok || !isIdent || k.Name != "Scenarios" {
			continue
		}
		if list, ok := kv.Value.(*ast.CompositeLit); ok {
			for _, v := range list.Elts {
				if id, ok := v.(*ast.Ident); ok {
					ids = append(ids, id.Name)
				}
			}
		}
	}
	return ids
}

// TestQuickSeed000AndCommit runs the quick forms of seed 000 (one client under each
// wal_sync_method, with the advisor's rounds) and of the commit grid: a smoke test of their
// harness, not of their figures.
func TestQuickSeed000AndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two quick scenarios (about a minute)")
	}
	requireEquipment(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	vmBefore := readKnobsT(t)
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{Seed000, Commit}, Progress: logWriter{t}}, zaptest.NewLogger(t))
	if errors.Is(err, simdisk.ErrNoFUSE) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quick seed000 and commit: %v", err)
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("%d scenarios reported, want 2", len(rep.Scenarios))
	}
	for _, s := range rep.Scenarios {
		if s.Error != "" {
			t.Errorf("%s: %s", s.ID, s.Error)
		}
		switch s.ID {
		case Seed000:
			if s.Advisor == nil || len(s.Advisor.Rounds) == 0 {
				t.Errorf("seed000: no advisor round")
			}
			for _, c := range s.Configs {
				if len(c.Runs) == 0 || c.Value <= 0 {
					t.Errorf("seed000: configuration %q has no result: runs %v", c.Name, c.Runs)
				}
			}
		case Commit:
			g := s.Commit
			if g == nil || len(g.Devices) == 0 {
				t.Fatalf("commit: no grid")
			}
			for _, d := range g.Devices {
				for _, c := range d.Configs {
					for i, runs := range c.TPS {
						if len(runs) == 0 || runs[0] <= 0 {
							t.Errorf("commit: %v ms, %s, %d clients: no tps (%v)", d.LatencyMS, c.Name, d.Clients[i], runs)
						}
					}
				}
			}
		}
	}
	if after := readKnobsT(t); after != vmBefore {
		t.Errorf("vm.dirty_* not restored: before %s, after %s", vmBefore, after)
	}
}
