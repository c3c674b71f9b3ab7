package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

type emailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (emailArgs) Kind() string        { return "email" }
func (emailArgs) PayloadVersion() int { return 2 }
func (a emailArgs) Validate() error {
	if !strings.Contains(a.To, "@") {
		return &generics.FieldError{Field: "to", Rule: "email", Msg: "must be an address"}
	}
	return nil
}

type blobArgs struct {
	Data string `json:"data"`
}

func (blobArgs) Kind() string        { return "blob" }
func (blobArgs) PayloadVersion() int { return 1 }

func count(t testing.TB, c *jobs.Client) int {
	t.Helper()
	page, err := c.List(context.Background(), jobs.ListParams{Limit: 1000})
	require.NoError(t, err)
	return len(page.Jobs)
}

func TestInsertInCommittedAndRolledBackTransactions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY, total int NOT NULL)")
	require.NoError(t, err)

	// rolled back: neither the order nor the job is ever visible
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO orders (total) VALUES (10)")
	require.NoError(t, err)
	row, err := c.InsertTx(ctx, tx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = c.Get(ctx, row.Job.ID)
	require.ErrorIs(t, err, jobs.ErrNotFound)

	// committed: both
	var ids []int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (total) VALUES (20)"); err != nil {
			return err
		}
		r, err := c.InsertTx(ctx, tx, emailArgs{To: "a@b.c", Subject: "receipt"}, &jobs.InsertOpts{Queue: "mail", Priority: jobs.PriorityHigh})
		if err != nil {
			return err
		}
		many, err := c.InsertManyTx(ctx, tx, []jobs.InsertManyParams{{Args: emailArgs{To: "x@y.z"}}, {Args: blobArgs{Data: "d"}}})
		if err != nil {
			return err
		}
		ids = []int64{r.Job.ID, many[0].Job.ID, many[1].Job.ID}
		return nil
	}))
	require.Len(t, ids, 3)
	got, err := c.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
	require.Equal(t, "mail", got.Queue)
	require.Equal(t, jobs.PriorityHigh, got.Priority)
	require.Equal(t, 2, got.PayloadVersion)
	require.JSONEq(t, `{"to":"a@b.c","subject":"receipt"}`, string(got.Payload))
	require.Equal(t, 3, count(t, c))
}

func TestInsertNotifiesOnCommitOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN tenure_jobs")
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, emailArgs{To: "a@b.c"}, &jobs.InsertOpts{Queue: "mail"})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = conn.WaitForNotification(short)
	cancel()
	require.Error(t, err, "no notification before commit")
	require.NoError(t, tx.Commit(ctx))
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wait)
	require.NoError(t, err)
	// queue, priority band and the job's due time (unix µs), separated by chr(31)
	parts := strings.Split(n.Payload, "\x1f")
	require.Len(t, parts, 3, n.Payload)
	require.Equal(t, []string{"mail", strconv.Itoa(jobs.PriorityNormal)}, parts[:2])
	us, err := strconv.ParseInt(parts[2], 10, 64)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.UnixMicro(us), time.Minute)

	// a scheduled job does not wake anyone
	_, err = c.Insert(ctx, emailArgs{To: "a@b.c"}, &jobs.InsertOpts{Queue: "later", Delay: time.Hour})
	require.NoError(t, err)
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	_, err = conn.WaitForNotification(short)
	require.Error(t, err)
}

func TestInsertManyTenThousand(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	params := make([]jobs.InsertManyParams, 10000)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: "x"}, Opts: &jobs.InsertOpts{Priority: 1 + i%4}}
	}
	ids, err := c.InsertMany(ctx, params)
	require.NoError(t, err)
	require.Len(t, ids, 10000)
	for i := 1; i < len(ids); i++ {
		require.Greater(t, ids[i].Job.ID, ids[i-1].Job.ID, "ids come back in input order")
	}
	var n, prios int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT priority) FROM tenure.jobs WHERE state='ready'").Scan(&n, &prios))
	require.Equal(t, 10000, n)
	require.Equal(t, 4, prios)

	// one bad job rejects the whole call and writes nothing
	params[5000] = jobs.InsertManyParams{Args: emailArgs{To: "nope"}}
	_, err = c.InsertMany(ctx, params)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 10000, n)
}

func TestInsertRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	reg := generics.NewRegistry()
	_, err := generics.Register[emailArgs](reg, generics.WithDefaults(generics.KindDefaults{Queue: "mail", MaxAttempts: 7}))
	require.NoError(t, err)
	strict, err := jobs.NewClient(pool, &jobs.Config{Registry: reg, MaxPayloadBytes: 1024})
	require.NoError(t, err)
	loose, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	var perr *generics.PayloadError
	_, err = loose.Insert(ctx, emailArgs{To: "not-an-address"}, nil)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)
	require.ErrorAs(t, err, &perr)
	var ferr *generics.FieldError
	require.ErrorAs(t, err, &ferr)
	require.Equal(t, "to", ferr.Field)

	_, err = strict.Insert(ctx, blobArgs{Data: "x"}, nil)
	require.ErrorIs(t, err, jobs.ErrUnknownKind)

	_, err = loose.Insert(ctx, blobArgs{Data: strings.Repeat("x", 70<<10)}, nil)
	require.ErrorIs(t, err, generics.ErrPayloadTooLarge, "default limit is 64 KiB")
	_, err = strict.Insert(ctx, emailArgs{To: "a@b.c", Subject: strings.Repeat("s", 2000)}, nil)
	require.ErrorIs(t, err, generics.ErrPayloadTooLarge, "configured limit")

	for name, opts := range map[string]*jobs.InsertOpts{
		"priority":     {Priority: 10},
		"queue":        {Queue: "no spaces"},
		"max attempts": {MaxAttempts: 5000},
		"lease":        {Lease: time.Millisecond},
		"delay":        {Delay: -time.Second},
		"both":         {Delay: time.Second, RunAt: time.Now()},
	} {
		_, err := loose.Insert(ctx, emailArgs{To: "a@b.c"}, opts)
		require.ErrorIs(t, err, jobs.ErrInvalidOptions, name)
		var oe *jobs.OptionError
		require.ErrorAs(t, err, &oe, name)
	}
	require.Zero(t, count(t, loose))

	// the registry's kind defaults apply
	row, err := strict.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	require.Equal(t, "mail", row.Job.Queue)
	require.Equal(t, 7, row.Job.MaxAttempts)
	require.Equal(t, jobs.DefaultLease, row.Job.Lease)
}

// v1 of emailArgs had a single "address" field; v2 renamed it "to" and added "subject".
type emailV1 struct {
	Address string `json:"address"`
}

func TestDecodeVersions(t *testing.T) {
	t.Parallel()
	reg := generics.NewRegistry()
	_, err := generics.Register[emailArgs](reg, generics.WithUpgrader(
		generics.Upgrade(1, func(old emailV1) (emailArgs, error) { return emailArgs{To: old.Address}, nil })))
	require.NoError(t, err)

	got, err := generics.Decode[emailArgs](reg, []byte(`{"address":"old@x.y"}`), 1)
	require.NoError(t, err)
	require.Equal(t, emailArgs{To: "old@x.y"}, got)

	_, err = generics.Decode[emailArgs](reg, []byte(`{"to":"a@b.c"}`), 3)
	require.ErrorIs(t, err, generics.ErrUnsupportedVersion, "newer than the code")
	_, err = generics.Decode[emailArgs](generics.NewRegistry(), []byte(`{"address":"a@b"}`), 1)
	require.ErrorIs(t, err, generics.ErrUnsupportedVersion, "no upgrader path")
	_, err = generics.Decode[emailArgs](reg, []byte(`{"to":"a@b.c","cc":"x"}`), 2)
	require.ErrorIs(t, err, generics.ErrInvalidPayload, "unknown field")
	_, err = generics.Decode[emailArgs](reg, []byte(`{"to":"a@b.c"} {}`), 2)
	require.ErrorIs(t, err, generics.ErrInvalidPayload, "trailing data")
	_, err = generics.Decode[emailArgs](reg, []byte(`{"to":"nope"}`), 2)
	require.ErrorIs(t, err, generics.ErrInvalidPayload, "fails Validate")
	_, err = generics.Decode[emailArgs](reg, []byte(`{"address":"nope"}`), 1)
	require.ErrorIs(t, err, generics.ErrInvalidPayload, "upgraded payload is validated too")

	// an upgrader must sit below the current version
	_, err = generics.Register[emailArgs](generics.NewRegistry(), generics.WithUpgrader(generics.UpgradeJSON(2, func(r json.RawMessage) (json.RawMessage, error) { return r, nil })))
	require.ErrorIs(t, err, generics.ErrUnsupportedVersion)

	type other struct{ emailArgs }
	_, err = generics.Register[other](reg)
	require.ErrorIs(t, err, generics.ErrDuplicateKind)
	require.True(t, errors.Is(err, generics.ErrDuplicateKind))
}

func TestListPagingAndPurge(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	params := make([]jobs.InsertManyParams, 25)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: "x"}}
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	seen := 0
	var after int64
	for {
		page, err := c.List(ctx, jobs.ListParams{Kind: "blob", Limit: 10, AfterID: after})
		require.NoError(t, err)
		seen += len(page.Jobs)
		if page.NextAfterID == 0 {
			break
		}
		after = page.NextAfterID
	}
	require.Equal(t, 25, seen)
	_, err = c.List(ctx, jobs.ListParams{State: "sleeping"})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)

	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state='succeeded', attempts=1, attempted_at=now(), claim_token=gen_random_uuid(), finished_at=now() - interval '2 days' WHERE id % 2 = 0`)
	require.NoError(t, err)
	n, err := c.Purge(ctx, jobs.Action{Actor: "ops", Reason: "disk"}, jobs.PurgeParams{State: generics.JobStateSucceeded, Before: time.Now().Add(-24 * time.Hour)})
	require.NoError(t, err)
	require.EqualValues(t, 12, n)
	audit, err := c.Audit(ctx, 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "purge", audit[0].Action)

	st, err := c.Stats(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, st.Bands, 1)
	require.EqualValues(t, 13, st.Bands[0].Ready)
}
