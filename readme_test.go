package tenure_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickstartIsTheExample keeps the README's quickstart identical to the code of
// worker.Example, which `go test` compiles and runs against PostgreSQL.
func TestReadmeQuickstartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("worker/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	src := string(ex)
	begin, end := strings.Index(src, "// quickstart:begin\n"), strings.Index(src, "\t// quickstart:end")
	if begin < 0 || end < 0 {
		t.Fatal("quickstart markers missing from worker/example_test.go")
	}
	var want []string
	for _, l := range strings.Split(src[begin+len("// quickstart:begin\n"):end], "\n") {
		want = append(want, strings.TrimPrefix(l, "\t"))
	}
	snippet := strings.TrimRight(strings.Join(want, "\n"), "\n") + "\n"
	if !strings.Contains(string(readme), "```go\n"+snippet+"```") {
		t.Fatalf("README.md's quickstart differs from worker/example_test.go's Example; paste:\n%s", snippet)
	}
}

// TestReadmeIsAFrontDoor keeps the README short and in the order a newcomer reads it: what
// Tenure is and promises, the two commands, the quickstart, the features, a benchmark headline
// that links to docs/benchmarks.md, then the contributor commands (make test-short among them).
func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; at most 250 (tables and details belong in docs/)", n)
	}
	last := -1
	for _, h := range []string{"# Tenure\n", "What it promises", "\n## The two commands\n", "\n## Quickstart\n",
		"\n## Features\n", "\n## Benchmarks\n", "docs/benchmarks.md", "\n## Contributing", "make test-short"} {
		i := strings.Index(readme, h)
		if i < 0 {
			t.Errorf("README.md lacks %q", h)
			continue
		}
		if i < last {
			t.Errorf("README.md has %q out of order", h)
		}
		last = i
	}
	bench := readme[strings.Index(readme, "\n## Benchmarks\n")+1:]
	bench = bench[:strings.Index(bench[1:], "\n## ")+1]
	if n := strings.Count(bench, "\n"); n > 16 {
		t.Errorf("the README's benchmark section has %d lines; a headline is about 10 (the rest: docs/benchmarks.md)", n)
	}
	if _, err := os.Stat("docs/benchmarks.md"); err != nil {
		t.Error(err)
	}
}
