package dbschema

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/locks"
)

func TestRewrite(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"SELECT * FROM tenure.jobs WHERE id = $1", "SELECT * FROM app2.jobs WHERE id = $1"},
		{"SELECT TENURE.enqueue('k', '{}')", "SELECT app2.enqueue('k', '{}')"},
		{`SELECT "tenure".jobs.id FROM "tenure"."jobs"`, `SELECT "app2".jobs.id FROM "app2"."jobs"`},
		{"CREATE SCHEMA IF NOT EXISTS tenure;", "CREATE SCHEMA IF NOT EXISTS app2;"},
		// Literals are kept, including ones that look like qualified names or comments.
		{"SELECT metadata ->> 'tenure.concurrency_key' FROM tenure.jobs", "SELECT metadata ->> 'tenure.concurrency_key' FROM app2.jobs"},
		{"SELECT 'a -- tenure.x', 'b /* tenure.y */', 'it''s tenure.z'", "SELECT 'a -- tenure.x', 'b /* tenure.y */', 'it''s tenure.z'"},
		{`SELECT E'it\'s tenure.x', tenure.f()`, `SELECT E'it\'s tenure.x', app2.f()`},
		// Comments are kept.
		{"-- reads tenure.jobs\nSELECT 1 FROM tenure.jobs /* tenure.jobs /* nested tenure.x */ */", "-- reads tenure.jobs\nSELECT 1 FROM app2.jobs /* tenure.jobs /* nested tenure.x */ */"},
		// Other identifiers that contain the name are not the schema.
		{"SELECT tenure_x, x.tenure_y, tenures FROM t", "SELECT tenure_x, x.tenure_y, tenures FROM t"},
		// Channels: a literal that is exactly a channel name, and nothing else.
		{"SELECT pg_notify('tenure_jobs', q), pg_notify('tenure_cancel', x), pg_notify('tenure_queues', y)",
			"SELECT pg_notify('app2_jobs', q), pg_notify('app2_cancel', x), pg_notify('app2_queues', y)"},
		{"SELECT 'tenure_jobs2', ' tenure_jobs', E'tenure_jobs'", "SELECT 'tenure_jobs2', ' tenure_jobs', E'tenure_jobs'"},
		// Dollar-quoted bodies are SQL: rewritten, with their own literals kept.
		{"CREATE FUNCTION tenure.f() RETURNS int LANGUAGE plpgsql AS $fn$ BEGIN PERFORM pg_notify('tenure_jobs', 'tenure.x'); RETURN (SELECT count(*) FROM tenure.jobs); END $fn$;",
			"CREATE FUNCTION app2.f() RETURNS int LANGUAGE plpgsql AS $fn$ BEGIN PERFORM pg_notify('app2_jobs', 'tenure.x'); RETURN (SELECT count(*) FROM app2.jobs); END $fn$;"},
		{"AS $$ SELECT $a$tenure.x$a$, tenure.y $$", "AS $$ SELECT $a$app2.x$a$, app2.y $$"},
		// Parameters are not dollar quotes.
		{"SELECT $1, tenure.f($2)", "SELECT $1, app2.f($2)"},
		// Identifiers may contain $.
		{"SELECT a$tenure$ FROM tenure.t", "SELECT a$tenure$ FROM app2.t"},
	} {
		require.Equal(t, c.want, Rewrite(c.in, "app2"), c.in)
		require.Equal(t, c.in, Rewrite(c.in, Default), "the default schema rewrites nothing")
	}
}

func TestRewriteLockClasses(t *testing.T) {
	s := Must("app2")
	in := "SELECT pg_advisory_xact_lock(1952804473, hashint8(id)), 1952804473.5, x1952804473, 19528044730"
	want := "SELECT pg_advisory_xact_lock(" + itoa(s.FinishWaitClass()) + ", hashint8(id)), 1952804473.5, x1952804473, 19528044730"
	require.Equal(t, want, Rewrite(in, "app2"))
	require.Equal(t, int32(1952804473), locks.FinishWaitClass, "the SQL spells this value")
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }

// TestRewriteSchemaNamedLikeAPrefix: a schema named e (or b, x, n, u) must not turn the name
// followed by a literal into a prefixed literal.
func TestRewriteSchemaNamedLikeAPrefix(t *testing.T) {
	require.Equal(t, `SELECT "e"'x', e.jobs`, Rewrite("SELECT tenure'x', tenure.jobs", "e"))
}

func TestDerivedNames(t *testing.T) {
	d := Must(Default)
	require.Equal(t, "tenure_jobs", d.JobsChannel())
	require.Equal(t, "tenure_cancel", d.CancelChannel())
	require.Equal(t, "tenure_queues", d.QueuesChannel())
	require.Equal(t, "tenure_done", d.DoneChannel())
	require.Equal(t, "tenure_await", d.AwaitChannel())
	require.Equal(t, "'app2_await'", Rewrite("'tenure_await'", "app2"))
	require.Equal(t, "app2_done", Rewrite("'tenure_done'", "app2")[1:10])
	require.Equal(t, "tenure.signals", d.SignalsSetting())
	require.Equal(t, "current_setting('app2.signals', true)", Rewrite("current_setting('tenure.signals', true)", "app2"))
	for _, k := range locks.All() {
		require.Equal(t, int64(k.Key), d.Key(k.Key), "the default schema keeps %s", k.Name)
	}
	require.Equal(t, locks.LimitsClass, d.LimitsClass())
	require.Equal(t, locks.FinishWaitClass, d.FinishWaitClass())

	seenKeys := map[int64]string{}
	for _, k := range locks.All() {
		seenKeys[int64(k.Key)] = "tenure"
	}
	seenClasses := map[int32]string{}
	for c := locks.LimitsClass; c <= locks.FinishWaitClass; c++ {
		seenClasses[c] = "tenure"
	}
	for _, name := range []string{"app2", "alt", "a", "tenure2", "tenure_", "_x", "billing_jobs"} {
		s := Must(name)
		require.Same(t, s, Must(name), "one *Schema per name")
		require.Equal(t, name+"_jobs", s.JobsChannel())
		for _, k := range locks.All() {
			key := s.Key(k.Key)
			prev, dup := seenKeys[key]
			require.False(t, dup, "%s's %s key %#x is %s's", name, k.Name, key, prev)
			seenKeys[key] = name
			require.Equal(t, int64(k.Key)&0xffff, key&0xffff, "the purpose stays in the low 16 bits")
		}
		for c := s.LimitsClass(); c <= s.FinishWaitClass(); c++ {
			prev, dup := seenClasses[c]
			require.False(t, dup, "%s's class %d is %s's", name, c, prev)
			seenClasses[c] = name
		}
		require.Equal(t, s.LimitsClass()+4, s.FinishWaitClass())
	}
}

func TestValidate(t *testing.T) {
	for _, ok := range []string{"tenure", "app2", "a", "_x", "billing_jobs", strings.Repeat("a", MaxLen)} {
		require.NoError(t, Validate(ok), ok)
	}
	for _, bad := range []string{"", "App2", "2app", "app-2", "app 2", "app.x", `a"b`, "tenure;drop", "é",
		strings.Repeat("a", MaxLen+1), "select", "user", "public", "pg_catalog", "pg_x", "information_schema"} {
		err := Validate(bad)
		require.ErrorIs(t, err, ErrInvalid, bad)
		var ie *InvalidError
		require.True(t, errors.As(err, &ie), bad)
		require.Equal(t, bad, ie.Name)
		if bad != "" {
			_, err = New(bad)
			require.ErrorIs(t, err, ErrInvalid, bad)
		}
	}
	s, err := New("")
	require.NoError(t, err)
	require.True(t, s.IsDefault())
}

// tenureSQL returns every SQL text Tenure runs from files: db/queries.sql and each migration.
func tenureSQL(t testing.TB) map[string]string {
	root := filepath.Join("..", "..", "db")
	out := map[string]string{}
	raw, err := os.ReadFile(filepath.Join(root, "queries.sql"))
	require.NoError(t, err)
	out["queries.sql"] = string(raw)
	files, err := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		out[filepath.Base(f)] = string(raw)
	}
	return out
}

// TestTenureSQLRewritesCompletely rewrites every file of Tenure's SQL for another schema and
// checks that no identifier still names "tenure" (the rewritten text runs nothing in schema
// tenure), that every string literal but the channels (and the signals setting) is kept byte
// for byte, and that the only literals naming a channel are the channels.
func TestTenureSQLRewritesCompletely(t *testing.T) {
	for name, sql := range tenureSQL(t) {
		out := Rewrite(sql, "alt")
		for _, tok := range flatten(Lex(out)) {
			if tok.Kind == Ident || tok.Kind == QuotedIdent {
				require.NotEqual(t, "tenure", strings.Trim(strings.ToLower(tok.Text), `"`), "%s: an identifier still names schema tenure", name)
			}
			if tok.Kind == String {
				require.NotRegexp(t, `^'tenure_[a-z_]*'$`, tok.Text, "%s: a channel-like literal was not mapped", name)
			}
		}
		in, got := literals(sql), literals(out)
		require.Len(t, got, len(in), name)
		for i := range in {
			if in[i] != got[i] {
				require.Contains(t, []string{"'tenure_jobs'", "'tenure_cancel'", "'tenure_queues'", "'tenure_done'", "'tenure_await'", "'tenure.signals'"}, in[i], name)
			}
		}
	}
}

// flatten returns the tokens of toks with every terminated dollar-quoted body's tokens in
// place of the body.
func flatten(toks []Token) []Token {
	var out []Token
	for _, t := range toks {
		if t.Kind == Dollar && t.Tag != "" {
			out = append(out, flatten(Lex(t.Body))...)
			continue
		}
		out = append(out, t)
	}
	return out
}

func literals(sql string) []string {
	var out []string
	for _, t := range flatten(Lex(sql)) {
		if t.Kind == String || t.Kind == Comment {
			out = append(out, t.Text)
		}
	}
	return out
}

func FuzzRewrite(f *testing.F) {
	for _, sql := range tenureSQL(f) {
		f.Add(sql, "alt")
	}
	for _, s := range []string{"SELECT 'tenure.x' FROM tenure.jobs", "$$ tenure.x $$", "$a$ 'x' $a", "E'\\''", "/* /* */",
		"'tenure_jobs'", "1952804473", "tenure'x'", `"tenure"."x"`, "$1$2$$", "--x\ntenure"} {
		f.Add(s, "e")
		f.Add(s, "app2")
	}
	f.Fuzz(func(t *testing.T, sql, schema string) {
		toks := Lex(sql)
		var whole strings.Builder
		for _, tok := range toks {
			whole.WriteString(tok.Text)
		}
		if whole.String() != sql {
			t.Fatalf("Lex lost bytes: %q -> %q", sql, whole.String())
		}
		if Rewrite(sql, Default) != sql {
			t.Fatalf("the default schema changed %q", sql)
		}
		if Validate(schema) != nil {
			schema = "app2"
		}
		out := Rewrite(sql, schema)
		in, got := literals(sql), literals(out)
		if len(in) != len(got) {
			t.Fatalf("literal count changed: %q -> %q", sql, out)
		}
		channels := map[string]bool{"'tenure_jobs'": true, "'tenure_cancel'": true, "'tenure_queues'": true, "'tenure_done'": true, "'tenure_await'": true,
			"'tenure.signals'": true}
		for i := range in {
			if in[i] != got[i] && !(channels[in[i]] && got[i] == "'"+schema+in[i][len("'tenure"):]) {
				t.Fatalf("literal or comment %q became %q (%q -> %q)", in[i], got[i], sql, out)
			}
		}
	})
}
