package tenure_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// coreModule is the root module's path; dbGen is sqlc's output for the core's statements.
const (
	coreModule = "github.com/tenureq/tenure"
	dbGen      = coreModule + "/db/gen"
)

// TestOnlyTheCoreImportsDBGen (issue 27, item 2): db/gen is generated code internal to the
// core, with no compatibility promise, so no package of another module of the repository (the
// integrations, the CLI, the examples, the benchmarks; their tests included) imports it: they
// use the core's public API or their own sqlc package. It lists, in workspace mode, every
// package of every module go.work uses besides the root, with its tests and dependencies
// (go list -deps -test), and fails on each package of a non-core module that imports db/gen.
func TestOnlyTheCoreImportsDBGen(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	work, err := filepath.Abs("go.work")
	if err != nil {
		t.Fatal(err)
	}
	mods := workspaceModules(t)
	var patterns []string
	for _, m := range mods {
		patterns = append(patterns, m+"/...")
	}
	args := append([]string{"list", "-e", "-deps", "-test", "-json=ImportPath,Imports,Module"}, patterns...)
	cmd := exec.Command(goBin, args...)
	cmd.Env = append(os.Environ(), "GOWORK="+work, "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	importers, seen, err := dbGenImporters(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if seen[m] == 0 {
			t.Errorf("go list found no package of module %s: the check would not see its imports", m)
		}
	}
	for _, p := range importers {
		t.Errorf("%s imports %s, the core's generated statements (no compatibility promise): use the core's public API or the module's own sqlc package (sqlc.yaml)", p, dbGen)
	}
}

// workspaceModules returns the module paths of the modules go.work uses, the core excepted.
func workspaceModules(t *testing.T) []string {
	t.Helper()
	work, err := os.ReadFile("go.work")
	if err != nil {
		t.Fatal(err)
	}
	modLine := regexp.MustCompile(`(?m)^module\s+(\S+)`)
	var mods []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(\.[^\s)]*)\s*$`).FindAllStringSubmatch(string(work), -1) {
		dir := filepath.Clean(m[1])
		if dir == "." {
			continue
		}
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		mm := modLine.FindSubmatch(gomod)
		if mm == nil {
			t.Fatalf("%s/go.mod has no module line", dir)
		}
		mods = append(mods, string(mm[1]))
	}
	if len(mods) == 0 {
		t.Fatal("go.work uses no module besides the core")
	}
	return mods
}

// dbGenImporters reads the JSON stream of go list -json and returns the packages (test
// variants included) of modules other than the core that import db/gen, and how many packages
// it saw per non-core module.
func dbGenImporters(listing []byte) ([]string, map[string]int, error) {
	type pkg struct {
		ImportPath string
		Imports    []string
		Module     *struct{ Path string }
	}
	var importers []string
	seen := map[string]int{}
	dec := json.NewDecoder(bytes.NewReader(listing))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, err
		}
		if p.Module == nil || p.Module.Path == coreModule {
			continue
		}
		seen[p.Module.Path]++
		if slices.Contains(p.Imports, dbGen) {
			importers = append(importers, p.ImportPath)
		}
	}
	return importers, seen, nil
}
