package worker_test

// The same rules on every path (issue 29, items 1 and 2): what a handler hands the engine to
// write — an effect's result, an output — is checked by the database's own rules before anything
// is written, so a value Go accepts is never refused later, and an effect that ran is never run
// again because its result could not be kept.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

type effResultArgs struct {
	Case string `json:"case"`
}

func (effResultArgs) Kind() string        { return "eff_result" }
func (effResultArgs) PayloadVersion() int { return 1 }

// effectResultCases are results of every class: storable at the bound, and each reason a
// ledger refuses one (NUL in a value, NUL in a key, one byte over the bound as jsonb text, a
// value that does not encode).
var effectResultCases = map[string]struct {
	value   func() any
	refused bool
	cause   error
}{
	"at-limit":     {value: func() any { return strings.Repeat("x", worker.MaxEffectResultBytes-2) }},
	"over-limit":   {value: func() any { return strings.Repeat("x", worker.MaxEffectResultBytes-1) }, refused: true, cause: worker.ErrEffectResultTooLarge},
	"nul-value":    {value: func() any { return map[string]string{"receipt": "a\x00b"} }, refused: true, cause: generics.ErrNULCharacter},
	"nul-key":      {value: func() any { return map[string]int{"k\x00": 1} }, refused: true, cause: generics.ErrNULCharacter},
	"unencodable":  {value: func() any { return math.Inf(1) }, refused: true},
	"channel":      {value: func() any { return make(chan int) }, refused: true},
	"escapes-grow": {value: func() any { return strings.Repeat("\x01", (worker.MaxEffectResultBytes-2)/6+1) }, refused: true, cause: worker.ErrEffectResultTooLarge},
	"small-ints": {value: func() any { // 3 bytes of jsonb text per element, 2 of Go's JSON
		return make([]int, worker.MaxEffectResultBytes/3+1)
	}, refused: true, cause: worker.ErrEffectResultTooLarge},
}

// TestEffectWhoseResultCannotBeKeptRunsOnce: each job's handler runs one effect, then fails,
// for 3 attempts. The effect function runs once per job whatever its result: a refused result
// is recorded as applied, the first attempt gets the value with an *EffectRefusedError naming
// the cause, later attempts get the error with Replayed set. Before the fix every refused
// result made the effect run on every attempt (3 calls in 3 attempts).
func TestEffectWhoseResultCannotBeKeptRunsOnce(t *testing.T) {
	pool := pgtest.NewPool(t)
	cfg := fastConfig(nil)
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	type seen struct {
		attempt  int
		replayed bool
		err      error
		value    any
	}
	seenBy := map[string][]seen{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effResultArgs]) error {
		c := effectResultCases[job.Args.Case]
		res, err := worker.Effect(ctx, job.JobRow, "send", func(ctx context.Context, call worker.EffectCall) (any, error) {
			mu.Lock()
			calls[job.Args.Case]++
			mu.Unlock()
			return c.value(), nil
		})
		mu.Lock()
		seenBy[job.Args.Case] = append(seenBy[job.Args.Case], seen{job.Attempt, res.Replayed, err, res.Value})
		mu.Unlock()
		return errors.New("fail to retry")
	}, &worker.HandlerOptions{MaxAttempts: 3, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	startWorker(t, w)
	client := newClient(t, pool, w)
	ctx := context.Background()
	ids := map[string]int64{}
	for name := range effectResultCases {
		row, err := client.Insert(ctx, effResultArgs{Case: name}, nil)
		require.NoError(t, err)
		ids[name] = row.Job.ID
	}
	waitFor(t, 60*time.Second, "every job dead after 3 attempts", func() bool { return countState(t, pool, "dead") == len(ids) })

	mu.Lock()
	defer mu.Unlock()
	for name, c := range effectResultCases {
		require.Equal(t, 1, calls[name], "%s: the effect ran %d times in 3 attempts", name, calls[name])
		attempts := seenBy[name]
		require.Len(t, attempts, 3, name)
		for _, a := range attempts {
			if !c.refused {
				require.NoError(t, a.err, "%s attempt %d", name, a.attempt)
				require.Equal(t, a.attempt > 1, a.replayed, "%s attempt %d", name, a.attempt)
				require.Equal(t, worker.MaxEffectResultBytes-2, len(a.value.(string)), name)
				continue
			}
			var re *worker.EffectRefusedError
			require.ErrorAs(t, a.err, &re, "%s attempt %d", name, a.attempt)
			require.ErrorIs(t, a.err, worker.ErrEffectResultRefused, name)
			require.NotEmpty(t, re.Reason, name)
			if a.attempt == 1 {
				require.False(t, a.replayed, name)
				require.NotNil(t, a.value, "%s: the attempt that ran the effect gets its value", name)
				if c.cause != nil {
					require.ErrorIs(t, a.err, c.cause, name)
				}
			} else {
				require.True(t, a.replayed, "%s attempt %d", name, a.attempt)
				require.Nil(t, a.value, name)
			}
		}
		var refused *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT refused FROM tenure.effects WHERE job_id = $1`, ids[name]).Scan(&refused), name)
		require.Equal(t, c.refused, refused != nil, name)
	}
}

type outputArgs struct {
	Seed int64 `json:"seed"`
}

func (outputArgs) Kind() string        { return "output_gen" }
func (outputArgs) PayloadVersion() int { return 1 }

// genOutput builds a value whose jsonb text is near the output bound: arrays of small
// integers (jsonb text one byte per element larger than Go's JSON: the case that broke),
// strings with escapes, floats written in exponent form, nested objects.
func genOutput(r *rand.Rand) any {
	target := worker.MaxOutputBytes - 200 + r.IntN(400)
	switch r.IntN(4) {
	case 0:
		a := make([]int, target/3)
		for i := range a {
			a[i] = r.IntN(10)
		}
		return a
	case 1:
		return strings.Repeat("\"\n\\é", target/8)
	case 2:
		a := make([]float64, target/11)
		for i := range a {
			a[i] = float64(r.IntN(100)) * 1e-7
		}
		return a
	default:
		m := map[string]any{}
		for i := 0; i < target/16; i++ {
			m[strings.Repeat("k", 1+i%5)+string(rune('a'+i%26))+strings.Repeat("z", i/130)] = []any{i, true, nil}
		}
		return m
	}
}

// TestSetOutputAgreesWithTheDatabase: outputs generated around the bound, each set by a
// handler that then succeeds. Either SetOutput refuses the value (ErrInvalidOutput, and the job
// succeeds without it), or the job succeeds on its first attempt with the value stored. Before
// the fix SetOutput measured Go's JSON and the database the stored size: SetOutput accepted
// outputs the finish could not write, and those jobs ran again (attempts 2, 3, ...).
func TestSetOutputAgreesWithTheDatabase(t *testing.T) {
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var mu sync.Mutex
	accepted := map[int64][]byte{}
	refused := map[int64]bool{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[outputArgs]) error {
		v := genOutput(rand.New(rand.NewPCG(uint64(job.Args.Seed), 7)))
		err := worker.SetOutput(ctx, v)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidOutput) || !errors.Is(err, generics.ErrTooLarge) {
				return worker.Permanent(err)
			}
			refused[job.Args.Seed] = true
			return nil
		}
		b, _ := json.Marshal(v)
		accepted[job.Args.Seed] = b
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 5})
	startWorker(t, w)
	client := newClient(t, pool, w)
	ctx := context.Background()
	const n = 60
	for i := int64(0); i < n; i++ {
		_, err := client.Insert(ctx, outputArgs{Seed: i}, nil)
		require.NoError(t, err)
	}
	waitFor(t, 60*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == n })
	rows, err := pool.Query(ctx, `SELECT (payload->>'seed')::bigint, attempts, output IS NULL, coalesce(output = $1::jsonb, false) FROM tenure.jobs`, "null")
	require.NoError(t, err)
	defer rows.Close()
	mu.Lock()
	defer mu.Unlock()
	for rows.Next() {
		var seed int64
		var attempts int
		var noOutput, _x bool
		require.NoError(t, rows.Scan(&seed, &attempts, &noOutput, &_x))
		require.Equal(t, 1, attempts, "seed %d ran %d times", seed, attempts)
		require.Equal(t, refused[seed], noOutput, "seed %d: output stored iff SetOutput accepted it", seed)
	}
	require.NoError(t, rows.Err())
	for seed, b := range accepted {
		var same bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT output = $2::jsonb FROM tenure.jobs WHERE (payload->>'seed')::bigint = $1`, seed, string(b)).Scan(&same))
		require.True(t, same, "seed %d: stored output differs", seed)
	}
	require.NotEmpty(t, accepted, "the generator never made an acceptable output")
	require.NotEmpty(t, refused, "the generator never crossed the bound")
	t.Logf("%d outputs accepted, %d refused by SetOutput", len(accepted), len(refused))
}
