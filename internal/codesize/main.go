// Command codesize enforces the sizes the house keeps (CONTRIBUTING.md, "How code is kept"): no
// non-test Go file over 500 lines anywhere, and no non-test function over 80 lines in the core
// packages (collector, probes, rules, advisor), where a reader should see a decision in a screen.
// A table - a function whose body returns one composite literal after at most two short
// statements, such as metricTable - is data, not logic, and is exempt.
//
// Usage: go run ./internal/codesize [-root DIR] [-v]. It exits 1 and lists every violation.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

const (
	maxFileLines = 500
	maxFuncLines = 80
)

// coreDirs are the top-level folders whose functions are held to maxFuncLines.
func coreDirs() []string { return []string{"collector", "probes", "rules", "advisor"} }

func main() {
	root := flag.String("root", ".", "the repository's root")
	verbose := flag.Bool("v", false, "also print the longest functions and files")
	flag.Parse()
	rep, err := measure(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(2)
	}
	if *verbose {
		rep.printTop(os.Stdout, 5)
	}
	for _, v := range rep.violations {
		fmt.Println(v)
	}
	if len(rep.violations) > 0 {
		fmt.Printf("codesize: %d violations (files over %d lines; functions over %d lines in %s)\n",
			len(rep.violations), maxFileLines, maxFuncLines, strings.Join(coreDirs(), ", "))
		os.Exit(1)
	}
}

type sized struct {
	where string
	lines int
}

type report struct {
	files, funcs []sized
	violations   []string
}

// measure reads every non-test Go file below root, skipping testdata, vendor and hidden folders.
func measure(root string) (*report, error) {
	rep := &report{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return rep.file(fset, path, filepath.ToSlash(rel))
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

func (r *report) file(fset *token.FileSet, path, rel string) error {
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return fmt.Errorf("parse %s: %w", rel, err)
	}
	lines := fset.File(f.Pos()).LineCount()
	r.files = append(r.files, sized{rel, lines})
	if lines > maxFileLines {
		r.violations = append(r.violations, fmt.Sprintf("%s: %d lines (at most %d)", rel, lines, maxFileLines))
	}
	core := slices.Contains(coreDirs(), strings.SplitN(rel, "/", 2)[0])
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		n := end.Line - start.Line + 1
		where := fmt.Sprintf("%s:%d %s", rel, start.Line, funcName(fn))
		r.funcs = append(r.funcs, sized{where, n})
		if core && n > maxFuncLines && !isTable(fset, fn) {
			r.violations = append(r.violations, fmt.Sprintf("%s: %d lines (at most %d)", where, n, maxFuncLines))
		}
	}
	return nil
}

// isTable reports whether fn returns one composite literal after at most two statements of one
// line each: a table of entries, whose length is its data.
func isTable(fset *token.FileSet, fn *ast.FuncDecl) bool {
	list := fn.Body.List
	if len(list) == 0 || len(list) > 3 {
		return false
	}
	ret, ok := list[len(list)-1].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return false
	}
	if _, ok := ret.Results[0].(*ast.CompositeLit); !ok {
		return false
	}
	for _, s := range list[:len(list)-1] {
		if fset.Position(s.End()).Line != fset.Position(s.Pos()).Line {
			return false
		}
	}
	return true
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func (r *report) printTop(w *os.File, n int) {
	top := func(title string, s []sized) {
		sort.Slice(s, func(i, j int) bool { return s[i].lines > s[j].lines })
		fmt.Fprintf(w, "%s:\n", title)
		for _, x := range s[:min(n, len(s))] {
			fmt.Fprintf(w, "  %5d  %s\n", x.lines, x.where)
		}
	}
	top("longest functions", r.funcs)
	top("longest files", r.files)
}
