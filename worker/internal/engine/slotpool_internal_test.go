package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The pool's rules, driven by hand (the loops' calls, without loops): free + held = Slots after
// every call; a queue takes free slots at once when nobody waits; slots freed while others
// wait go to them in turn, whole grants of at most chunk, and the queue that freed them joins
// the end of the line; fresh grants are kept for the next claim; a remainder too small for a
// whole grant is granted after poolLinger; leave gives everything back.
func TestSlotPoolTurns(t *testing.T) {
	p := newSlotPool(16) // chunk 2
	require.Equal(t, 2, p.chunk)
	mk := func() *queue { return &queue{poolCh: make(chan struct{}, 1)} }
	a, b, c := mk(), mk(), mk()
	all := []*queue{a, b, c}
	inv := func() {
		t.Helper()
		sum, slots := p.check(all)
		require.Equal(t, slots, sum, "free + held")
	}
	// a alone: takes all it wants at once.
	held, waiting := p.sync(a, 0, 16, 0)
	require.Equal(t, 16, held)
	require.False(t, waiting)
	inv()
	// b and c want 4 each: nothing free, they wait in line.
	held, waiting = p.sync(b, 0, 4, 0)
	require.Zero(t, held)
	require.True(t, waiting)
	_, _ = p.sync(c, 0, 4, 0)
	inv()
	// 3 of a's handlers returned (use 13) and a wants them again: the 3 idle slots go back,
	// b gets a whole grant of 2 (signalled), 1 is left, too few for c's whole grant of 2.
	held, waiting = p.sync(a, 13, 3, 16)
	require.Equal(t, 13, held)
	require.True(t, waiting, "a joins the line")
	require.Equal(t, 2, b.pm.held)
	require.Zero(t, c.pm.held)
	require.Len(t, b.poolCh, 1)
	inv()
	// b keeps its fresh grant (known 0) even though others wait.
	held, _ = p.sync(b, 0, 4, 0)
	require.Equal(t, 2, held)
	inv()
	// The remainder is granted after poolLinger to c, the head of the line.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return c.pm.held == 1
	}, 10*time.Second, time.Millisecond)
	inv()
	// The line, round-robin: a (waiting since it gave its slots back), then b (back at the end
	// after its grant, wanting 2 more), then c (after its partial grant, wanting 3 more).
	p.mu.Lock()
	require.Equal(t, []*queue{a, b, c}, p.waiters)
	p.mu.Unlock()
	// a stops wanting (its claimers busy): leaves the line; then a's loop returns: everything
	// it held is granted in turn, b first.
	_, waiting = p.sync(a, 13, 0, 13)
	require.False(t, waiting)
	p.leave(a)
	inv()
	require.Equal(t, 4, b.pm.held)
	require.Equal(t, 4, c.pm.held)
	require.Empty(t, p.waiters)
	// Surplus over use+want goes back.
	held, _ = p.sync(b, 1, 0, 4)
	require.Equal(t, 1, held)
	inv()
	p.leave(b)
	p.leave(c)
	inv()
	require.Equal(t, 16, p.free)
}
