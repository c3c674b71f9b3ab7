package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The markers of a generated password: a leak of any piece of it shows one of them.
var dsnMarkers = []string{"Kq7Z", "Wm3X", "Pv5J"}

// dsnsWithPassword spells a DSN to an unreachable server (127.0.0.1:1) carrying pw in every
// form an operator might write: URL with the password raw (as typed, however malformed) and
// percent-encoded, in the userinfo or the query; keyword/value unquoted and quoted.
func dsnsWithPassword(pw string) []string {
	q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
	return []string{
		"postgres://app:" + pw + "@127.0.0.1:1/db?connect_timeout=2",
		"postgresql://app:" + pw + "@127.0.0.1:1/db",
		"postgres://app:" + url.PathEscape(pw) + "@127.0.0.1:1/db?connect_timeout=2",
		(&url.URL{Scheme: "postgres", User: url.UserPassword("app", pw), Host: "127.0.0.1:1", Path: "/db", RawQuery: "connect_timeout=2"}).String(),
		"postgres://app@127.0.0.1:1/db?connect_timeout=2&password=" + pw,
		"postgres://app@127.0.0.1:1/db?password=" + url.QueryEscape(pw) + "&connect_timeout=2",
		"host=127.0.0.1 port=1 user=app password=" + pw + " dbname=db connect_timeout=2",
		"host=127.0.0.1 port=1 user=app password='" + q + "' dbname=db connect_timeout=2",
		"host=127.0.0.1 port=1 user=app dbname=db connect_timeout=2 password='" + q,
		"password=" + pw + " host=127.0.0.1 port=1",
	}
}

// checkDSNNeverShowsPassword runs a database command with each spelling of a DSN carrying a
// password built around core (markers between the pieces) and fails if any output or error
// shows a marker.
func checkDSNNeverShowsPassword(t *testing.T, core string) {
	pw := dsnMarkers[0] + core + dsnMarkers[1] + core + dsnMarkers[2]
	for _, dsn := range dsnsWithPassword(pw) {
		for _, args := range [][]string{{"workers", "-database-url", dsn}, {"migrate", "status"}} {
			r := tenure(t, dsn, args...)
			require.NotEqual(t, exitOK, r.code, "%q reached a server on port 1?", dsn)
			for _, m := range dsnMarkers {
				require.NotContains(t, r.stdout+r.stderr, m, "DSN %q shows its password:\n%s%s", dsn, r.stdout, r.stderr)
			}
		}
		shown, _ := redactDSN(dsn)
		for _, m := range dsnMarkers {
			require.NotContains(t, shown, m, "redactDSN(%q)", dsn)
		}
	}
}

// FuzzDSNNeverShowsPassword: whatever the password holds (@ : / % ? # spaces, quotes,
// backslashes, percent signs that are no escape), no output or error of the CLI shows it.
func FuzzDSNNeverShowsPassword(f *testing.F) {
	for _, s := range []string{"", "@", ":", "/", "%", "%zz", "%40", " ", "'", `"`, `\`, "?", "#", "&", "=",
		"p@ss", "a:b@c", "a/b@c", "12/", "@h/db", "a b", "x' y", `\'`, "@@:/%", "pass word=x", " host=evil ",
		"user=x", "%2F", "?password=", "\t", "é@ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, core string) {
		if strings.ContainsAny(core, "\x00\n\r") { // not a DSN anyone can pass in one argument line
			t.Skip()
		}
		for _, m := range dsnMarkers {
			if strings.Contains(strings.ToLower(core), strings.ToLower(m)) {
				t.Skip()
			}
		}
		checkDSNNeverShowsPassword(t, core)
	})
}

// TestDSNRedactionKeepsTheRest: the redacted form still names the user, host and database, so
// the error remains useful.
func TestDSNRedactionKeepsTheRest(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"postgres://app:s3cret@db.example:5432/jobs", "postgres://app:xxxxx@db.example:5432/jobs"},
		{"postgres://app:p@ss@db.example/jobs", "postgres://app:xxxxx@db.example/jobs"},
		{"postgres://app@db.example/jobs?sslmode=require&password=s3cret", "postgres://app@db.example/jobs?sslmode=require&password=xxxxx"},
		{"postgres://app@db.example/jobs?password=s3cret&sslmode=require", "postgres://app@db.example/jobs?password=xxxxx"},
		{"host=db user=app dbname=jobs password=s3cret", "host=db user=app dbname=jobs password=xxxxx"},
		{"host=db user=app password=s3cret dbname=jobs", "host=db user=app password=xxxxx"},
		{"host=db password='it\\'s a b' dbname=jobs", "host=db password=xxxxx dbname=jobs"},
		{"host=db password=two words dbname=jobs", "host=db password=xxxxx"},
	} {
		got, _ := redactDSN(c.dsn)
		require.Equal(t, c.want, got, c.dsn)
	}
	// A DSN pgx would read with another password than the one written is refused, naming it
	// redacted: postgres://u:p@ss@host reads password "p" and host "ss@host".
	r := tenure(t, "postgres://app:p@ss@127.0.0.1:1/db", "workers")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "postgres://app:xxxxx@127.0.0.1:1/db")
	require.Contains(t, r.stderr, "percent-encode")
}
