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
