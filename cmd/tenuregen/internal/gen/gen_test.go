package gen

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden")

const goldenName = "tenure_gen.go.golden"

// TestGolden generates every testdata/golden/<case> package and compares the result with
// <case>/tenure_gen.go.golden (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/golden/*")
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			got, err := Generate(Options{Dir: dir})
			require.NoError(t, err)
			golden := filepath.Join(dir, goldenName)
			if *update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -run TestGolden -update to create it")
			require.Equal(t, string(want), string(got), "generated code differs from %s (rerun with -update if the change is intended)", golden)
			require.True(t, bytes.HasPrefix(got, []byte(Header+"\n")))
		})
	}
}

// TestDeterministic generates the same package repeatedly and gets the same bytes.
func TestDeterministic(t *testing.T) {
	for _, dir := range []string{"testdata/golden/basic", "testdata/golden/multifile"} {
		first, err := Generate(Options{Dir: dir})
		require.NoError(t, err)
		for range 3 {
			again, err := Generate(Options{Dir: dir})
			require.NoError(t, err)
			require.Equal(t, first, again)
		}
	}
}

// TestOutputIsNotInput checks that the file named by Out is never read, even without the
// generated header, and that the output does not depend on it.
func TestOutputIsNotInput(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("testdata/golden/minimal/minimal.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "minimal.go"), src, 0o644))
	want, err := Generate(Options{Dir: dir})
	require.NoError(t, err)
	// A hand-edited output file (no header) with a conflicting declaration is ignored.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jobs_out.go"), []byte("package minimal\n\nconst KindHello = 1\n"), 0o644))
	got, err := Generate(Options{Dir: dir, Out: "jobs_out.go"})
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestErrors runs every testdata/errors/<case> package and compares the reported errors with
// <case>/want.txt: one "file:line: substring" per expected error, in any order.
func TestErrors(t *testing.T) {
	dirs, err := filepath.Glob("testdata/errors/*")
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			_, err := Generate(Options{Dir: dir})
			var list ErrorList
			require.True(t, errors.As(err, &list), "want an ErrorList, got %v", err)
			wants := readWants(t, filepath.Join(dir, "want.txt"))
			matched := make([]bool, len(wants))
			for _, e := range list {
				require.Equal(t, dir, filepath.Dir(e.Pos.Filename), "error outside the package: %v", e)
				ok := false
				for i, w := range wants {
					if !matched[i] && w.file == filepath.Base(e.Pos.Filename) && w.line == e.Pos.Line && strings.Contains(e.Msg, w.substr) {
						matched[i], ok = true, true
						break
					}
				}
				require.True(t, ok, "unexpected error: %v", e)
				// file:line: message
				require.True(t, strings.HasPrefix(e.Error(), e.Pos.Filename+":"+strconv.Itoa(e.Pos.Line)+": "), e.Error())
			}
			for i, w := range wants {
				require.True(t, matched[i], "expected error not reported: %s:%d: %s\ngot:\n%v", w.file, w.line, w.substr, err)
			}
		})
	}
}

type want struct {
	file   string
	line   int
	substr string
}

func readWants(t *testing.T, path string) []want {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []want
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		file, rest, ok1 := strings.Cut(l, ":")
		line, msg, ok2 := strings.Cut(rest, ": ")
		n, err := strconv.Atoi(line)
		require.True(t, ok1 && ok2 && err == nil, "bad want line %q", l)
		out = append(out, want{file, n, msg})
	}
	require.NoError(t, sc.Err())
	return out
}

func TestNoJobTypes(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("package empty\n\ntype T struct{}\n"), 0o644))
	_, err := Generate(Options{Dir: dir})
	require.ErrorContains(t, err, "no //tenure:job types in package empty")
}

func TestSyntaxErrorHasPosition(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.go")
	require.NoError(t, os.WriteFile(path, []byte("package broken\n\nfunc f() {\n\treturn +\n}\n"), 0o644))
	_, err := Generate(Options{Dir: dir})
	var list ErrorList
	require.True(t, errors.As(err, &list), "got %v", err)
	require.Equal(t, path, list[0].Pos.Filename)
	require.Equal(t, 5, list[0].Pos.Line)
	require.True(t, strings.HasPrefix(err.Error(), path+":5: "), err.Error())
}

func TestNoGoFiles(t *testing.T) {
	_, err := Generate(Options{Dir: t.TempDir()})
	require.ErrorContains(t, err, "no Go files")
}

func TestDurExpr(t *testing.T) {
	for d, want := range map[string]string{
		"1h": "time.Hour", "90m": "90 * time.Minute", "1m30s": "90 * time.Second", "1500ms": "1500 * time.Millisecond",
		"1us": "time.Microsecond", "1ns": "time.Duration(1)",
	} {
		dur, err := time.ParseDuration(d)
		require.NoError(t, err)
		require.Equal(t, want, durExpr(dur), d)
	}
}

// TestGeneratedCodeCompilesAndRuns generates testdata/compile into a temporary package inside
// this module, then vets it and runs its tests (validation, upgraders, enqueue helpers and a
// worker round trip against PostgreSQL). It also checks that a Handlers value missing a kind
// does not compile.
func TestGeneratedCodeCompilesAndRuns(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	dir, err := os.MkdirTemp("testdata", "tmp-compile-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	files, err := filepath.Glob("testdata/compile/*.go")
	require.NoError(t, err)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), src, 0o644))
	}
	out, err := Generate(Options{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, DefaultOut), out, 0o644))

	pkg := "./" + filepath.ToSlash(dir)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(goBin, args...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if b, err := run("vet", pkg); err != nil {
		t.Fatalf("go vet of the generated package failed: %v\n%s", err, b)
	}
	if b, err := run("test", "-count=1", pkg); err != nil {
		t.Fatalf("tests of the generated package failed: %v\n%s", err, b)
	}
	// Regenerating over the generated file gives the same bytes.
	again, err := Generate(Options{Dir: dir})
	require.NoError(t, err)
	require.Equal(t, out, again)

	// A Handlers implementation without Count must not compile.
	partial := `package compiletest

import (
	"context"

	"github.com/tenureq/tenure/generics"
)

type partial struct{}

func (partial) Greet(context.Context, *generics.Job[Greet]) error { return nil }

var _ = RegisterHandlers(nil, partial{})
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "partial.go"), []byte(partial), 0o644))
	b, err := run("build", pkg)
	require.Error(t, err, "a Handlers value without every kind compiled:\n%s", b)
	require.Contains(t, b, "missing method Count")
}
