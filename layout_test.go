package tenure_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutRow is one row of docs/design.md's layout table: its paths and its module.
type layoutRow struct {
	paths  []string
	module string
}

// designLayout parses the table under "## Layout" in docs/design.md.
func designLayout(t *testing.T) []layoutRow {
	t.Helper()
	b, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Layout\n")
	if i < 0 {
		t.Fatal("docs/design.md has no ## Layout section")
	}
	section := doc[i+len("\n## Layout\n"):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	tick := regexp.MustCompile("`([^`]+)`")
	var rows []layoutRow
	for _, l := range strings.Split(section, "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		var r layoutRow
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			r.paths = append(r.paths, strings.TrimSuffix(m[1], "/"))
		}
		r.module = strings.Trim(strings.TrimSpace(cells[2]), "`")
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md's layout table has no rows")
	}
	return rows
}

// moduleOf returns the directory of the module that holds path: the nearest ancestor with a
// go.mod, "core" for the root.
func moduleOf(path string) string {
	for d := path; d != "." && d != "/" && d != ""; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.ToSlash(d)
		}
	}
	return "core"
}

// TestDesignLayoutMatchesTheTree: every path of docs/design.md's layout table exists and lies
// in the module the table says, and every directory of the repository holding Go files is
// under a path of the table.
func TestDesignLayoutMatchesTheTree(t *testing.T) {
	rows := designLayout(t)
	var listed []string
	for _, r := range rows {
		for _, p := range r.paths {
			listed = append(listed, p)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("the layout table lists %s, which does not exist", p)
				continue
			}
			if r.module == "—" {
				continue
			}
			if got := moduleOf(p); got != r.module {
				t.Errorf("the layout table puts %s in module %q; it is in %q", p, r.module, got)
			}
		}
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Dir(path) == "." {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, p := range listed {
			if dir == p || strings.HasPrefix(dir, p+"/") {
				return nil
			}
		}
		t.Errorf("%s holds Go files but is under no path of docs/design.md's layout table", dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
