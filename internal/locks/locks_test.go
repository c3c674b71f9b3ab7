package locks_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/locks"
)

// TestKeysAreDistinct checks that no two advisory locks share a key, and that All lists every
// Key constant declared in this package (so a new key cannot escape the check).
func TestKeysAreDistinct(t *testing.T) {
	seen := map[locks.Key]string{}
	for _, n := range locks.All() {
		prev, dup := seen[n.Key]
		require.False(t, dup, "%s and %s share advisory lock key %#x", prev, n.Name, n.Key)
		seen[n.Key] = n.Name
		require.Equal(t, locks.Key(0x74656e757265), n.Key>>16, "%s does not start with \"tenure\"", n.Name)
	}

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "locks.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Key" {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	var listed []string
	for _, n := range locks.All() {
		listed = append(listed, n.Name)
	}
	require.ElementsMatch(t, declared, listed, "every Key constant must be in All")
}

// TestNoKeyLiteralsElsewhere fails when Go code outside this package spells a Tenure advisory
// lock key as a literal instead of using a constant from here.
func TestNoKeyLiteralsElsewhere(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "locks" || d.Name() == ".git" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(strings.ToLower(string(raw)), "0x74656e757265") {
			t.Errorf("%s spells a Tenure advisory lock key; use a constant of internal/locks", path)
		}
		return nil
	})
	require.NoError(t, err)
}
