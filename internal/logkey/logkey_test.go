package logkey_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/logkey"
)

// firstKey is, per function or method name, the index of the first key among a call's
// arguments: slog.Logger's methods (msg first; ctx, msg for the Context ones; With has only
// attributes) and Tenure's own helpers that take attributes.
var firstKey = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"With":        0,
	"engineError": 3, // (t, what, err, attrs...)
	"logAttrs":    0, // (more...)
	"jobAttrs":    2, // (j, act, more...)
}

// slogAttr are slog's Attr constructors: their first argument is a key, and the Attr takes
// one argument slot.
var slogAttr = map[string]bool{"String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true,
	"Bool": true, "Time": true, "Duration": true, "Any": true, "Group": true}

// isLogger reports whether a method call's receiver looks like a *slog.Logger or a Tenure
// helper (log, w.log, c.log, q.w.log, Logger, logger).
func isLogger(fun ast.Expr) (string, bool) {
	switch f := fun.(type) {
	case *ast.Ident:
		_, ok := firstKey[f.Name]
		return f.Name, ok && (f.Name == "jobAttrs")
	case *ast.SelectorExpr:
		if _, ok := firstKey[f.Sel.Name]; !ok {
			return "", false
		}
		if f.Sel.Name == "engineError" || f.Sel.Name == "logAttrs" {
			return f.Sel.Name, true
		}
		var recv string
		switch x := f.X.(type) {
		case *ast.Ident:
			recv = x.Name
		case *ast.SelectorExpr:
			recv = x.Sel.Name
		case *ast.CallExpr: // slog.Default().Info(...)
			if s, ok := x.Fun.(*ast.SelectorExpr); ok {
				recv = s.Sel.Name
			}
		}
		l := strings.ToLower(recv)
		return f.Sel.Name, l == "log" || l == "logger" || l == "slog" || l == "default"
	}
	return "", false
}

// badKeys parses src and returns "file:line: key" for every log key not in logkey.Known, and
// the number of log calls it checked.
func badKeys(t *testing.T, fset *token.FileSet, file *ast.File) (bad []string, calls int) {
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		name, ok := isLogger(call.Fun)
		if !ok {
			return true
		}
		calls++
		args := call.Args
		for i := firstKey[name]; i < len(args); {
			if call.Ellipsis.IsValid() && i == len(args)-1 {
				break // attrs... spread: checked where it is built
			}
			var key string
			step := 2
			switch a := args[i].(type) {
			case *ast.BasicLit:
				if a.Kind != token.STRING {
					bad = append(bad, fset.Position(a.Pos()).String()+": a key that is not a string")
					return true
				}
				key, _ = strconv.Unquote(a.Value)
			case *ast.SelectorExpr:
				if x, ok := a.X.(*ast.Ident); ok && x.Name == "logkey" {
					key = "" // a constant of this package: known by construction
					break
				}
				bad = append(bad, fset.Position(a.Pos()).String()+": a key that is neither a literal nor a logkey constant")
				return true
			case *ast.CallExpr: // slog.String("key", v) and the like
				s, ok := a.Fun.(*ast.SelectorExpr)
				if x, isIdent := s.X.(*ast.Ident); !ok || !isIdent || x.Name != "slog" || !slogAttr[s.Sel.Name] || len(a.Args) == 0 {
					bad = append(bad, fset.Position(a.Pos()).String()+": an argument in key position that is not a key")
					return true
				}
				step = 1
				if lit, ok := a.Args[0].(*ast.BasicLit); ok {
					key, _ = strconv.Unquote(lit.Value)
				}
			default:
				bad = append(bad, fset.Position(args[i].Pos()).String()+": an argument in key position that is not a key")
				return true
			}
			if key != "" && !logkey.Known[key] {
				bad = append(bad, fset.Position(args[i].Pos()).String()+": "+key)
			}
			i += step
		}
		return true
	})
	return bad, calls
}

// TestLogCallsUseKnownKeys parses every non-test Go file of the packages that log (worker,
// jobs, cmd, tenureprom, tenureotel) and fails on a log call (or attribute helper) whose key
// is not in logkey.Known: a new spelling of an existing key ("jobID", "id") or an undocumented
// one.
func TestLogCallsUseKnownKeys(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	calls := 0
	for _, dir := range []string{"worker", "jobs", "cmd", "tenureprom", "tenureotel"} {
		root := filepath.Join("..", "..", dir)
		require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			b, n := badKeys(t, fset, f)
			bad, calls = append(bad, b...), calls+n
			return nil
		}))
	}
	require.Empty(t, bad, "log keys not in internal/logkey.Known (use the logkey constants; document a new key in docs/operations.md)")
	require.Greater(t, calls, 30, "sanity: the scan finds the engine's log calls")
}

// TestBadKeysDetects: the scan above notices a misspelt key, a key that is not a string, an
// unknown slog.Attr key, and accepts the known forms.
func TestBadKeysDetects(t *testing.T) {
	src := `package p
func f() {
	w.log.Warn("m", "jobID", 1)
	c.log.InfoContext(ctx, "m", "job_id", 1, "actor", a)
	log.Error("m", 7, 1)
	q.w.log.Info("m", slog.String("gen", "x"), logkey.Kind, k)
	w.engineError(t, "claim", err, "queue", q, "oops", 1)
	w.log.Warn("m", e.c.logAttrs("why", why, "because", 2)...)
	w.log.Info("m", attrs...)
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	bad, calls := badKeys(t, fset, f)
	require.Equal(t, 8, calls)
	var keys []string
	for _, b := range bad {
		keys = append(keys, b[strings.LastIndex(b, ": ")+2:])
	}
	require.Equal(t, []string{"jobID", "a key that is not a string", "gen", "oops", "because"}, keys)
}
