package pgtest_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests run in parallel, each in a database of its own on one server, and pg_stat_activity
// lists the sessions of every database. A test that looks for "a claim waiting for a lock" in
// it without naming its database finds another test's (TestClaimBatchStopWhilePendingStrandsNothing
// stopped its worker before its own claim was sent, CI stop 39; its neighbour terminates the
// pids it finds). Every test query of pg_stat_activity therefore names its database or the
// session it means.
func TestTestsReadOnlyTheirOwnSessions(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	scoped := regexp.MustCompile(`datname = current_database\(\)|\bpid = \$\d|pg_blocking_pids\(|application_name = \$\d`)
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || path == mustAbs(t, "isolation_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for off := 0; ; {
			i := strings.Index(src[off:], "FROM pg_stat_activity")
			if i < 0 {
				break
			}
			at := off + i
			// The query's text: up to its closing backquote or quote.
			end := strings.IndexAny(src[at:], "`\"")
			if end < 0 {
				end = len(src) - at
			}
			seen++
			line := strings.Count(src[:at], "\n") + 1
			require.Regexp(t, scoped, src[at:at+end], "%s:%d: a test's pg_stat_activity query must name its database (datname = current_database()) or a session", path, line)
			off = at + 1
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, seen, "the walk found the tests' pg_stat_activity queries")
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}
