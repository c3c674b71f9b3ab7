package tenure_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestWorkspaceListsEveryModule: go.work and the Makefile's MODULES name exactly the
// directories of the repository that hold a go.mod, so `make test`, `make vet` and
// `make check-mod` (and CI) cover every module, and a new module cannot be left out.
func TestWorkspaceListsEveryModule(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)

	work, err := os.ReadFile("go.work")
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(\.[^\s)]*)\s*$`).FindAllStringSubmatch(string(work), -1) {
		used = append(used, strings.TrimPrefix(filepath.ToSlash(filepath.Clean(m[1])), "./"))
	}
	slices.Sort(used)
	if !slices.Equal(dirs, used) {
		t.Errorf("go.work uses %q; the repository's modules are %q", used, dirs)
	}

	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MODULES\s*:=\s*(.*)$`).FindStringSubmatch(string(mk))
	if m == nil {
		t.Fatal("the Makefile has no MODULES := line")
	}
	listed := strings.Fields(m[1])
	slices.Sort(listed)
	if !slices.Equal(dirs, listed) {
		t.Errorf("the Makefile's MODULES is %q; the repository's modules are %q", listed, dirs)
	}
}
