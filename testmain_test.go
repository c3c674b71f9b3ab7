package tenure_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// needsServer are the test helpers that connect to PostgreSQL: a test binary that calls one
// needs a TestMain calling pgtest.Main (or tenuretest.Main), which starts a throwaway cluster
// when no server answers. Without it the package's tests pass on a machine whose server runs
// and fail on a fresh one whose PostgreSQL is installed but not running.
var needsServer = map[string]map[string]bool{
	"pgtest": {"AdminURL": true, "URLFor": true, "NewPool": true, "NewPoolWith": true, "NewMigratedDB": true,
		"NewEmptyDB": true, "ExamplePool": true, "NewRole": true, "RolePool": true},
	"tenuretest": {"Pool": true, "DatabaseURL": true, "Work": true},
}

// databaseTestsWithoutMain returns the directories under root (every module of the repository)
// whose test files call a helper of needsServer while none of them calls pgtest.Main or
// tenuretest.Main.
func databaseTestsWithoutMain(t *testing.T, root string) []string {
	t.Helper()
	uses, hasMain := map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			if needsServer[pkg.Name][sel.Sel.Name] {
				uses[dir] = true
			}
			if (pkg.Name == "pgtest" || pkg.Name == "tenuretest") && sel.Sel.Name == "Main" {
				hasMain[dir] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for dir := range uses {
		if !hasMain[dir] {
			rel, _ := filepath.Rel(root, dir)
			missing = append(missing, rel)
		}
	}
	sort.Strings(missing)
	return missing
}

// TestEveryDatabaseTestPackageHasTestMain: every package of every module whose tests use the
// database starts a throwaway server when none answers (docs: "running or not").
func TestEveryDatabaseTestPackageHasTestMain(t *testing.T) {
	if missing := databaseTestsWithoutMain(t, "."); len(missing) > 0 {
		t.Fatalf("test packages that use PostgreSQL without TestMain calling pgtest.Main (or tenuretest.Main): %q", missing)
	}
}

// TestDatabaseTestsWithoutMainDetects: the scan above flags a package whose tests call a
// database helper without a TestMain, in an internal or external test file, and accepts one
// with pgtest.Main or tenuretest.Main in any of its test files.
func TestDatabaseTestsWithoutMainDetects(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"a/a_test.go":      "package a_test\nfunc TestA(t *testing.T) { _ = pgtest.NewPool(t) }\n",
		"b/b_test.go":      "package b\nfunc TestB(t *testing.T) { _ = tenuretest.Pool(t) }\n",
		"ok1/x_test.go":    "package ok1_test\nfunc TestX(t *testing.T) { _ = pgtest.NewMigratedDB(t) }\n",
		"ok1/main_test.go": "package ok1\nfunc TestMain(m *testing.M) { pgtest.Main(m) }\n",
		"ok2/x_test.go":    "package ok2_test\nfunc TestX(t *testing.T) { tenuretest.Work(ctx, t, nil, nil, 1, nil) }\nfunc TestMain(m *testing.M) { tenuretest.Main(m) }\n",
		"nodb/x_test.go":   "package nodb\nfunc TestX(t *testing.T) { _ = pgtest.TemplateName() }\n",
	}
	for name, src := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := databaseTestsWithoutMain(t, root)
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("flagged %q, want [a b]", got)
	}
}
