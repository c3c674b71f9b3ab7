package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
)

// pgJSONSize asks the server what generics.JSONSize computes: the length of raw's jsonb text,
// or the error the cast raises.
func pgJSONSize(ctx context.Context, pool *pgxpool.Pool, raw []byte) (int, error) {
	var n int
	// A text parameter: the server parses the JSON itself, as it does for every insert path.
	err := pool.QueryRow(ctx, `SELECT octet_length($1::text::jsonb::text)`, string(raw)).Scan(&n)
	return n, err
}

// agree checks that Go and PostgreSQL agree on raw: same size when Go accepts it, a refusal by
// the server when Go refuses it (but for nesting Go alone bounds).
func agree(t *testing.T, ctx context.Context, pool *pgxpool.Pool, raw []byte) {
	t.Helper()
	got, goErr := generics.JSONSize(raw)
	want, pgErr := pgJSONSize(ctx, pool, raw)
	switch {
	case goErr == nil && pgErr != nil:
		t.Fatalf("Go accepts %q (size %d), PostgreSQL refuses it: %v", clip(raw), got, pgErr)
	case goErr == nil && got != want:
		t.Fatalf("%q: Go says %d bytes as jsonb text, PostgreSQL %d", clip(raw), got, want)
	case goErr != nil && pgErr == nil && !errors.Is(goErr, generics.ErrJSONTooDeep):
		t.Fatalf("Go refuses %q (%v), PostgreSQL accepts it (%d bytes)", clip(raw), goErr, want)
	}
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

var jsonSizeSeeds = []string{
	`{}`, `[]`, `{"a":1}`, ` { "a" : [ 1 , 2 ] } `, `{"a":1,"a":22}`, `{"b":1,"a":{"x":1,"x":[]},"b":"zz"}`,
	`"\u0000"`, `"a\u0000b"`, `"\ud800"`, `"\udc00"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`,
	`"\b\f\n\r\t\"\\\/"`, `"\u0001\u001f\u007f\u0080"`, "\"\x7f\"", "\"\xff\"", "\"\xed\xa0\x80\"", "\"é😀\"",
	`0`, `-0`, `-0.0`, `0e5`, `0.000e2`, `1e2`, `1E+2`, `1.5e-3`, `12.50e1`, `123e-1`, `-1.0e-10`, `1e1000`,
	`1e-16383`, `1e-16384`, `0.5e-16383`, `1e131071`, `1e131072`, `1e999999999999`, `-1e-999999999999`,
	`01`, `1.`, `.5`, `-`, `1e`, `1x`, `+1`, `[1,]`, `{"a":1,}`, `{"a"}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `true`, `null`,
	`[[[[[[[[[[]]]]]]]]]]`, `{"k":{"k":{"k":{}}}}`, ``, ` `, `"x"  `, `"x" y`, "\"tab\there\"",
	`{"":""}`, `{"\u0061":1,"a":2}`, `{"a\/b":1,"a/b":2}`, `[true,false,null,0.10,"s",{},[]]`,
}

// FuzzJSONSizeAgreesWithPostgres: for any input, generics.JSONSize and the server agree on
// whether it is a jsonb and on the length of its text. `go test` runs the seeds;
// `go test -fuzz FuzzJSONSizeAgreesWithPostgres ./jobs` explores.
func FuzzJSONSizeAgreesWithPostgres(f *testing.F) {
	for _, s := range jsonSizeSeeds {
		f.Add([]byte(s))
	}
	pool := pgtest.NewPool(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		agree(t, ctx, pool, raw)
	})
}

// genJSON writes a random JSON value of the shapes users' values take and hostile ones:
// repeated keys, escapes of every kind, non-ASCII text, numbers with exponents and trailing
// zeros, whitespace, deep nesting.
func genJSON(r *rand.Rand, b *strings.Builder, depth int) {
	ws := func() {
		if r.IntN(6) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r", "  "}[r.IntN(5)])
		}
	}
	ws()
	switch k := r.IntN(10); {
	case depth > 0 && k < 2:
		b.WriteByte('[')
		for i, n := 0, r.IntN(5); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			genJSON(r, b, depth-1)
		}
		b.WriteByte(']')
	case depth > 0 && k < 4:
		b.WriteByte('{')
		for i, n := 0, r.IntN(5); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			genString(r, b, true)
			ws()
			b.WriteByte(':')
			genJSON(r, b, depth-1)
		}
		b.WriteByte('}')
	case k < 6:
		genString(r, b, false)
	case k < 9:
		genNumber(r, b)
	default:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	}
	ws()
}

func genString(r *rand.Rand, b *strings.Builder, key bool) {
	b.WriteByte('"')
	n := r.IntN(6)
	if key {
		n = r.IntN(3) // short keys repeat often
	}
	for i := 0; i < n; i++ {
		switch r.IntN(12) {
		case 0:
			b.WriteString([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[r.IntN(8)])
		case 1:
			fmt.Fprintf(b, `\u%04x`, []int{1, 0x1f, 0x20, 0x41, 0x7f, 0x80, 0xe9, 0x20ac, 0xfffd, 0xffff}[r.IntN(10)])
		case 2:
			b.WriteString(`\ud83d\ude00`)
		case 3:
			b.WriteString([]string{"é", "😀", "\u2028", "\u202e", "\x7f", "ß"}[r.IntN(6)])
		default:
			b.WriteByte("abcab01 _-"[r.IntN(10)])
		}
	}
	b.WriteByte('"')
}

func genNumber(r *rand.Rand, b *strings.Builder) {
	if r.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if r.IntN(3) == 0 {
		b.WriteByte('0')
	} else {
		b.WriteByte(byte('1' + r.IntN(9)))
		for i, n := 0, r.IntN(8); i < n; i++ {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		for i, n := 0, 1+r.IntN(6); i < n; i++ {
			b.WriteByte("0000123456789"[r.IntN(13)])
		}
	}
	if r.IntN(3) == 0 {
		b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)])
		fmt.Fprintf(b, "%d", r.IntN(30))
	}
}

// TestJSONSizeAgreesWithPostgresGenerated checks generics.JSONSize against the server on
// 5,000 generated values (and a mutation of each that is usually invalid), in batches.
func TestJSONSizeAgreesWithPostgresGenerated(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(29, 2))
	const n = 5000
	vals := make([]string, 0, 2*n)
	for i := 0; i < n; i++ {
		var b strings.Builder
		genJSON(r, &b, 1+r.IntN(5))
		v := b.String()
		vals = append(vals, v)
		// a mutation: a byte dropped, doubled or replaced
		if len(v) > 0 {
			j := r.IntN(len(v))
			switch r.IntN(3) {
			case 0:
				v = v[:j] + v[j+1:]
			case 1:
				v = v[:j] + v[j:j+1] + v[j:]
			default:
				v = v[:j] + string("{}[],:\"\\0e-"[r.IntN(11)]) + v[j+1:]
			}
		}
		if !utf8.ValidString(v) { // the server refuses the whole batch; Go must refuse it alone
			if n, err := generics.JSONSize([]byte(v)); err == nil {
				t.Errorf("%q is not UTF-8: JSONSize accepts it (%d bytes)", v, n)
			}
			continue
		}
		vals = append(vals, v)
	}
	// One round trip per batch: each value is cast on its own (a savepoint-free function
	// that reports the error text instead of failing the statement).
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE FUNCTION pg_temp.try_size(t text) RETURNS integer LANGUAGE plpgsql AS $$
		BEGIN RETURN octet_length(t::jsonb::text); EXCEPTION WHEN OTHERS THEN RETURN -1; END $$`); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	if err := conn.QueryRow(ctx, `SELECT array_agg(pg_temp.try_size(v) ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS u(v, i)`,
		vals).Scan(&sizes); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i, v := range vals {
		got, goErr := generics.JSONSize([]byte(v))
		switch want := sizes[i]; {
		case goErr == nil && want < 0:
			t.Errorf("Go accepts %q (size %d), PostgreSQL refuses it", clip([]byte(v)), got)
		case goErr == nil && got != want:
			t.Errorf("%q: Go says %d bytes, PostgreSQL %d", clip([]byte(v)), got, want)
		case goErr != nil && want >= 0:
			t.Errorf("Go refuses %q (%v), PostgreSQL accepts it (%d bytes)", clip([]byte(v)), goErr, want)
		case goErr == nil:
			accepted++
		}
	}
	if accepted < n/2 {
		t.Fatalf("only %d of %d generated values were valid JSON: the generator is broken", accepted, 2*n)
	}
	t.Logf("%d values, %d accepted by both", len(vals), accepted)
}

// TestJSONSizeDepth: Go refuses values nested beyond generics.MaxJSONDepth, which encoding/json
// could not decode for a handler anyway.
func TestJSONSizeDepth(t *testing.T) {
	ok := strings.Repeat("[", generics.MaxJSONDepth) + strings.Repeat("]", generics.MaxJSONDepth)
	if n, err := generics.JSONSize([]byte(ok)); err != nil || n != len(ok) {
		t.Fatalf("depth %d: %d, %v", generics.MaxJSONDepth, n, err)
	}
	deep := "[" + ok + "]"
	if _, err := generics.JSONSize([]byte(deep)); !errors.Is(err, generics.ErrJSONTooDeep) {
		t.Fatalf("depth %d: %v, want ErrJSONTooDeep", generics.MaxJSONDepth+1, err)
	}
}
