package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDonePayloads(t *testing.T) {
	require.Empty(t, DonePayloads(nil))
	require.Equal(t, []string{"7,s8,9223372036854775807"},
		DonePayloads([]DoneID{{ID: 7}, {ID: 8, Deleted: true}, {ID: 9223372036854775807}}))
	var ids []DoneID
	for i := range 2*DoneEntriesPerPayload + 1 {
		ids = append(ids, DoneID{ID: int64(i), Deleted: i%2 == 1})
	}
	p := DonePayloads(ids)
	require.Len(t, p, 3)
	for i, s := range p {
		require.Less(t, len(s), 8000, "payload %d under PostgreSQL's limit", i)
	}
	require.Len(t, strings.Split(p[0], ","), DoneEntriesPerPayload)
	require.True(t, strings.HasPrefix(p[0], "0,s1,2,s3"))
	require.Equal(t, "700", p[2])
}

// TestDoneNotifierSendsEverythingOnce: entries added while sends run go out in later sends, and
// what is pending when the context ends goes out in the last one; nothing twice, nothing lost.
func TestDoneNotifierSendsEverythingOnce(t *testing.T) {
	n := NewDoneNotifier()
	var mu sync.Mutex
	seen := map[int64]int{}
	sends := 0
	send := func(_ context.Context, e []DoneID) error {
		mu.Lock()
		defer mu.Unlock()
		sends++
		for _, d := range e {
			seen[d.ID]++
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		n.Run(ctx, time.Second, send, func(err error) { t.Error(err) })
		close(done)
	}()
	const total = 5000
	for i := range total {
		n.Add([]DoneID{{ID: int64(i)}})
	}
	cancel()
	<-done
	require.Len(t, seen, total)
	for id, c := range seen {
		require.Equal(t, 1, c, "id %d", id)
	}
	require.Less(t, sends, total, "sends coalesce")
}
