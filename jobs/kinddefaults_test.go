package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// tickArgs declares its kind's defaults with the args type (value receiver).
type tickArgs struct {
	N int `json:"n"`
}

func (tickArgs) Kind() string        { return "kd_tick" }
func (tickArgs) PayloadVersion() int { return 1 }
func (tickArgs) Defaults() generics.KindDefaults {
	return generics.KindDefaults{Queue: "periodic", Priority: 3, MaxAttempts: 4, Lease: 7 * time.Second, Timeout: 9 * time.Second}
}

// mailArgs declares on a pointer receiver; a value of it still carries the declaration.
type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) Kind() string        { return "kd_mail" }
func (mailArgs) PayloadVersion() int { return 1 }
func (*mailArgs) Defaults() generics.KindDefaults {
	return generics.KindDefaults{Queue: "mail", MaxAttempts: 6, Unique: &generics.UniqueDefaults{ByArgs: true}}
}

type landed struct {
	queue             string
	priority, maxAtts int
	lease             time.Duration
}

func readLanded(t *testing.T, c *jobs.Client, id int64) landed {
	t.Helper()
	r, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return landed{r.Queue, r.Priority, r.MaxAttempts, r.Lease}
}

// Every insert path of a client built WITHOUT a registry applies the args type's declared
// defaults (issue 27: Insert(Tick{}) went to queue "default" with 25 attempts).
func TestDeclaredDefaultsOnEveryClientInsertPath(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	want := landed{"periodic", 3, 4, 7 * time.Second}

	row, err := c.Insert(ctx, tickArgs{N: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, want, readLanded(t, c, row.Job.ID), "Insert")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	row, err = c.InsertTx(ctx, tx, tickArgs{N: 2}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, want, readLanded(t, c, row.Job.ID), "InsertTx")

	ids, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: tickArgs{N: 3}}, {Args: tickArgs{N: 4}}})
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, want, readLanded(t, c, id.Job.ID), "InsertMany")
	}

	n, err := c.InsertManyFast(ctx, []jobs.InsertManyParams{{Args: tickArgs{N: 5}}, {Args: tickArgs{N: 6}}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	page, err := c.List(ctx, jobs.ListParams{Kind: "kd_tick"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 6)
	for _, j := range page.Jobs {
		require.Equal(t, want, landed{j.Queue, j.Priority, j.MaxAttempts, j.Lease}, "job %d", j.ID)
	}

	// Per-insert options win over the declaration, field by field.
	row, err = c.Insert(ctx, tickArgs{N: 7}, &jobs.InsertOpts{Queue: "other", MaxAttempts: 2})
	require.NoError(t, err)
	require.Equal(t, landed{"other", 3, 2, 7 * time.Second}, readLanded(t, c, row.Job.ID))

	// A pointer-receiver declaration counts for a value, and declared uniqueness applies.
	first, err := c.Insert(ctx, mailArgs{To: "a@b"}, nil)
	require.NoError(t, err)
	require.Equal(t, landed{"mail", jobs.DefaultPriority, 6, jobs.DefaultLease}, readLanded(t, c, first.Job.ID))
	dup, err := c.Insert(ctx, mailArgs{To: "a@b"}, nil)
	require.NoError(t, err)
	require.True(t, dup.Duplicate, "declared Unique applies")
	require.Equal(t, first.Job.ID, dup.Job.ID)
	res, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: &mailArgs{To: "a@b"}}, {Args: &mailArgs{To: "c@d"}}})
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)
	require.False(t, res[1].Duplicate)
	require.Equal(t, "mail", readLanded(t, c, res[1].Job.ID).queue)
}

// The declaration wins over what a registry recorded for the kind (from HandlerOptions).
func TestDeclaredDefaultsWinOverRegistry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	reg := generics.NewRegistry()
	_, err := generics.Register[tickArgs](reg, generics.WithDefaults(generics.KindDefaults{Queue: "reg", Priority: 8, MaxAttempts: 9, Lease: 11 * time.Second}))
	require.NoError(t, err)
	_, err = generics.Register[emailArgs](reg, generics.WithDefaults(generics.KindDefaults{Queue: "reg", MaxAttempts: 9}))
	require.NoError(t, err)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: reg})
	require.NoError(t, err)
	row, err := c.Insert(ctx, tickArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, landed{"periodic", 3, 4, 7 * time.Second}, readLanded(t, c, row.Job.ID))
	// A kind that declares nothing still takes the registry's defaults.
	row, err = c.Insert(ctx, emailArgs{To: "x@y"}, nil)
	require.NoError(t, err)
	require.Equal(t, landed{"reg", jobs.DefaultPriority, 9, jobs.DefaultLease}, readLanded(t, c, row.Job.ID))
}

// badDefaults declares a value out of range: the insert is refused, naming the field.
type badDefaults struct{}

func (badDefaults) Kind() string                    { return "kd_bad" }
func (badDefaults) PayloadVersion() int             { return 1 }
func (badDefaults) Defaults() generics.KindDefaults { return generics.KindDefaults{MaxAttempts: 5000} }

func TestDeclaredDefaultsOutOfRangeAreRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = c.Insert(context.Background(), badDefaults{}, nil)
	var oe *jobs.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Defaults", oe.Field)
	require.Contains(t, oe.Msg, "MaxAttempts")
}
