package faults_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

// tickArgs is the job of the children's periodic schedule (handler mode "periodic").
type tickArgs struct {
	AtUs   int64 `json:"at_us"` // the tick, microseconds since the epoch
	Missed int   `json:"missed"`
}

func (tickArgs) Kind() string        { return "fault_tick" }
func (tickArgs) PayloadVersion() int { return 1 }

// TestPeriodicAcrossKilledWorkers (scenario 13): four worker processes share a 1-second
// schedule for 60 s. 20 s in, one is SIGKILLed while it holds the schedule's row inside the
// enqueueing transaction (next tick written, job not inserted yet), and a replacement starts
// 5 s later. Asserted: every tick from the first to the last has exactly one job (no duplicate,
// no gap; a catch-up job would count its missed ticks, and there must be none: three workers
// were always up), the tick the killed worker was enqueueing got its job from another worker,
// and the schedule's row names the last job.
func TestPeriodicAcrossKilledWorkers(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	url := pool.Config().ConnString()
	const runFor = 60 * time.Second
	spawn := func(id string) *childProc {
		return startChild(t, childOpts{DB: url, Handler: "periodic", Concurrency: 2, ID: id})
	}
	kids := []*childProc{spawn("tick-1"), spawn("tick-2"), spawn("tick-3"), spawn("tick-4")}
	for _, k := range kids {
		k.waitLine(t, 20*time.Second, "ready", time.Time{}, nil)
	}
	start := time.Now()

	time.Sleep(20 * time.Second)
	victim := kids[1]
	l := victim.waitLine(t, 30*time.Second, "enqueuing", time.Now(), nil)
	victim.killAndWait(t) // inside its 100 ms nap in the enqueueing transaction
	killedTick, _ := strconv.ParseInt(l.Fields[1], 10, 64)
	killedAfter := time.Since(l.At)
	time.Sleep(5 * time.Second)
	kids = append(kids, spawn("tick-2b"))
	time.Sleep(time.Until(start.Add(runFor)))
	for _, k := range kids {
		if k != victim {
			k.signal(syscall.SIGTERM)
		}
	}
	for _, k := range kids {
		if k != victim {
			k.waitLine(t, 20*time.Second, "final-stats", time.Time{}, nil)
		}
	}

	rows, err := pool.Query(ctx, `SELECT id, (payload->>'at_us')::bigint, (payload->>'missed')::int, state::text
		FROM tenure.jobs WHERE kind = 'fault_tick' ORDER BY 2, 1`)
	require.NoError(t, err)
	type tick struct {
		id, atUs int64
		missed   int
		state    string
	}
	var ticks []tick
	for rows.Next() {
		var k tick
		require.NoError(t, rows.Scan(&k.id, &k.atUs, &k.missed, &k.state))
		ticks = append(ticks, k)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(ticks), 55, "ticks in %v", runFor)

	dups, gaps, missed, notDone := 0, 0, 0, 0
	killedJobs := 0
	for i, k := range ticks {
		missed += k.missed
		if k.atUs%1_000_000 != 0 {
			t.Errorf("tick %d is not a whole second", k.atUs)
		}
		if k.atUs == killedTick {
			killedJobs++
		}
		if k.state != "succeeded" && k.state != "ready" && k.state != "running" {
			notDone++
		}
		if i == 0 {
			continue
		}
		switch d := k.atUs - ticks[i-1].atUs; {
		case d == 0:
			dups++
			t.Errorf("tick %d has two jobs (%d, %d)", k.atUs, ticks[i-1].id, k.id)
		case d != int64(1+k.missed)*1_000_000:
			gaps++
			t.Errorf("gap: tick %d follows %d (missed=%d)", k.atUs, ticks[i-1].atUs, k.missed)
		}
	}
	require.Zero(t, missed, "no catch-up: three workers were always up")
	require.Equal(t, 1, killedJobs, "the tick the killed worker was enqueueing (%d) has exactly one job", killedTick)
	var lastJob int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT last_job_id FROM tenure.periodic WHERE name = 'every-second'").Scan(&lastJob))
	require.Equal(t, ticks[len(ticks)-1].id, lastJob)
	first, last := time.UnixMicro(ticks[0].atUs).UTC(), time.UnixMicro(ticks[len(ticks)-1].atUs).UTC()
	t.Logf("RESULT scenario=periodic-kill processes=4+1 ticks=%d first=%s last=%s duplicates=%d gaps=%d missed=%d killed_in_tx_tick=%s (killed %v after it printed) not_final=%d",
		len(ticks), first.Format(time.TimeOnly), last.Format(time.TimeOnly), dups, gaps, missed,
		time.UnixMicro(killedTick).UTC().Format(time.TimeOnly), killedAfter.Round(time.Millisecond), notDone)
	require.Equal(t, int64(last.Sub(first)/time.Second)+1, int64(len(ticks)), "one job per tick from first to last")
}
