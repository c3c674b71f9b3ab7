package compiletest

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestValidate(t *testing.T) {
	require.NoError(t, Greet{Name: "ann", Lang: "en", Times: 2}.Validate())
	err := Greet{Name: "far too long a name", Lang: "fr"}.Validate()
	require.Error(t, err)
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *generics.FieldError
		require.True(t, errors.As(e, &fe))
		got = append(got, fe.Field+":"+fe.Rule)
	}
	require.Equal(t, []string{"name:max", "lang:oneof", "times:min"}, got)
	require.EqualError(t, Greet{Lang: "en", Times: 1}.Validate(), "field name: is required")
	require.Equal(t, "compile.greet", Greet{}.Kind())
	require.Equal(t, 2, Greet{}.PayloadVersion())
	require.Equal(t, KindCount, Count{}.Kind())
}

func TestRegisterKindsUpgrades(t *testing.T) {
	r := generics.NewRegistry()
	require.NoError(t, RegisterKinds(r))
	info, ok := r.Lookup(KindGreet)
	require.True(t, ok)
	// The kind's defaults are declared by its Defaults method, not copied into the registry.
	require.Equal(t, generics.KindDefaults{}, info.Defaults)
	require.Equal(t, generics.KindDefaults{Queue: "greetings", Priority: 3, MaxAttempts: 4, Lease: 5 * time.Second,
		Timeout: 3 * time.Second, RetryBase: 10 * time.Millisecond, RetryCap: 50 * time.Millisecond}, Greet{}.Defaults())
	d, ok := generics.DefaultsFor[Greet]()
	require.True(t, ok)
	require.Equal(t, Greet{}.Defaults(), d)
	require.Equal(t, []int{1}, info.Upgraders())
	g, err := generics.Decode[Greet](r, []byte(`{"name":"old"}`), 1)
	require.NoError(t, err)
	require.Equal(t, Greet{Name: "old", Lang: "en", Times: 1}, g)
	_, err = generics.Decode[Greet](r, []byte(`{"name":"","lang":"en","times":1}`), 2)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)
}

// legacyGreet is how an old producer still enqueues compile.greet: at version 1.
type legacyGreet struct {
	Name string `json:"name"`
}

func (legacyGreet) Kind() string        { return KindGreet }
func (legacyGreet) PayloadVersion() int { return 1 }

type handlers struct {
	mu      sync.Mutex
	greeted []string
	counted []int
	swept   []string
}

func (h *handlers) Greet(ctx context.Context, job *generics.Job[Greet]) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.greeted = append(h.greeted, job.Args.Name+"/"+job.Args.Lang)
	return nil
}

func (h *handlers) Count(ctx context.Context, job *generics.Job[Count]) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counted = append(h.counted, job.Args.N)
	return nil
}

func (h *handlers) Sweep(ctx context.Context, job *generics.Job[Sweep]) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.swept = append(h.swept, job.Args.Dir)
	return nil
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, &worker.Config{
		Queues:       map[string]worker.QueueConfig{"greetings": {}, jobs.DefaultQueue: {}},
		FetchPollMin: 10 * time.Millisecond, FetchPollMax: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	h := &handlers{}
	var adjusted []string
	require.NoError(t, RegisterHandlers(w, h, func(kind string, o *worker.HandlerOptions) {
		adjusted = append(adjusted, kind)
		if kind == KindGreet {
			// Timeout and Retry come from Greet's declared Defaults (worker.Register applies
			// them); the generated options carry only what Defaults cannot.
			require.Zero(t, o.Timeout)
			require.Nil(t, o.Retry)
			require.Len(t, o.Upgraders, 1)
		}
	}))
	require.Equal(t, []string{KindCount, KindGreet, KindSweep}, adjusted)
	require.Equal(t, generics.KindDefaults{DeleteOnSuccess: true}, Sweep{}.Defaults())
	sweepInfo, ok := w.Registry().Lookup(KindSweep)
	require.True(t, ok)
	require.True(t, sweepInfo.Defaults.DeleteOnSuccess, "the worker's registry records delete on success")
	require.Error(t, RegisterHandlers(w, h), "registering twice must fail")
	info, ok := w.Registry().Lookup(KindGreet)
	require.True(t, ok)
	require.Equal(t, generics.KindDefaults{Queue: "greetings", Priority: 3, MaxAttempts: 4, Lease: 5 * time.Second,
		Timeout: 3 * time.Second, RetryBase: 10 * time.Millisecond, RetryCap: 50 * time.Millisecond}, info.Defaults,
		"the worker's registry records the declared defaults")
	// Handler options that contradict the declaration are refused.
	w2, err := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"greetings": {}}})
	require.NoError(t, err)
	err = RegisterGreet(w2, h.Greet, func(_ string, o *worker.HandlerOptions) { o.Queue = "elsewhere" })
	require.ErrorIs(t, err, worker.ErrDefaultsConflict)

	// A client without a registry gets the declared defaults, through the helpers or not.
	c0, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	row0, err := c0.Insert(ctx, Greet{Name: "zed", Lang: "en", Times: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, "greetings", row0.Job.Queue)
	require.Equal(t, 4, row0.Job.MaxAttempts)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	row, err := EnqueueGreet(ctx, c, Greet{Name: "ann", Lang: "ko", Times: 1}, nil)
	require.NoError(t, err)
	require.False(t, row.Duplicate)
	require.Equal(t, "greetings", row.Job.Queue)
	require.Equal(t, 3, row.Job.Priority)
	require.Equal(t, 4, row.Job.MaxAttempts)
	require.Equal(t, 5*time.Second, row.Job.Lease)
	row, err = EnqueueGreet(ctx, c, Greet{Name: "bob", Lang: "en", Times: 2}, &jobs.InsertOpts{Priority: 5})
	require.NoError(t, err)
	require.Equal(t, 5, row.Job.Priority)
	require.Equal(t, "greetings", row.Job.Queue)

	// Invalid args write nothing.
	_, err = EnqueueGreet(ctx, c, Greet{Lang: "en", Times: 1}, nil)
	var fe *generics.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "name", fe.Field)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)

	// Inside a transaction: rolled back means never enqueued.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = EnqueueGreetTx(ctx, c, tx, Greet{Name: "ghost", Lang: "en", Times: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := EnqueueManyCountTx(ctx, c, tx, []Count{{N: 1}, {N: 2}}, nil)
	require.NoError(t, err)
	require.Len(t, ids, 2)
	require.Less(t, ids[0].Job.ID, ids[1].Job.ID)
	require.NoError(t, tx.Commit(ctx))
	ids, err = EnqueueManyCount(ctx, c, []Count{{N: 3}}, nil)
	require.NoError(t, err)
	require.Len(t, ids, 1)
	_, err = EnqueueManyCount(ctx, c, []Count{{N: 4}, {N: -1}}, nil)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)

	// A delete-on-success kind: its succeeded job leaves no row; a failing one keeps it.
	sweepRow, err := EnqueueSweep(ctx, c, Sweep{Dir: "/tmp"}, nil)
	require.NoError(t, err)

	// A version-1 payload from an old producer is upgraded by the registered upgrader.
	_, err = c.Insert(ctx, legacyGreet{Name: "old"}, &jobs.InsertOpts{Queue: "greetings"})
	require.NoError(t, err)

	require.NoError(t, w.Start(ctx))
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.mu.Lock()
		done := len(h.greeted) == 4 && len(h.counted) == 3 && len(h.swept) == 1
		h.mu.Unlock()
		if done {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs did not run")
		time.Sleep(20 * time.Millisecond)
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stop))
	sort.Strings(h.greeted)
	sort.Ints(h.counted)
	require.Equal(t, []string{"ann/ko", "bob/en", "old/en", "zed/en"}, h.greeted)
	require.Equal(t, []int{1, 2, 3}, h.counted)
	require.Equal(t, []string{"/tmp"}, h.swept)
	require.Zero(t, w.Stats().Dead)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE id = $1`, sweepRow.Job.ID).Scan(&left))
	require.Zero(t, left, "the succeeded compile.sweep job was deleted by its finish")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE id = $1 AND state = 'succeeded'`, row0.Job.ID).Scan(&left))
	require.Equal(t, 1, left, "kinds without delete_on_success keep their succeeded rows")
}
