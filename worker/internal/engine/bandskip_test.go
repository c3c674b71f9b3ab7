package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// allBands are a plain ordered claim's segments (the default policy): bands 9 down to 1.
func allBands() []ClaimSeg {
	var segs []ClaimSeg
	for p := MaxPriority; p >= MinPriority; p-- {
		segs = append(segs, ClaimSeg{Priority: int16(p)})
	}
	return segs
}

func bandsOf(segs []ClaimSeg) []int16 {
	var out []int16
	for _, s := range segs {
		out = append(out, s.Priority)
	}
	return out
}

// What a queue's batched claims learn about empty bands, and when they stop skipping them.
func TestBandSkipFilterAndRecord(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	row := func(prio int16) ClaimRow { return ClaimRow{Priority: &prio} }
	var b BandSkip
	segs := allBands()
	require.Equal(t, segs, b.Filter(segs, t0, false), "nothing known: every band")

	// A claim of 1 job found it in band 2: bands 9..3 were probed empty, band 1 was not probed.
	b.Record(segs, 1, []ClaimRow{row(2)}, nil, t0)
	require.Equal(t, []int16{2, 1}, bandsOf(b.Filter(segs, t0.Add(time.Millisecond), false)))
	// Not while a NOTIFY without a hint is unaccounted for.
	require.Equal(t, segs, b.Filter(segs, t0.Add(time.Millisecond), true))
	// Not past BandSkipFor, nor when the clock went back.
	require.Equal(t, segs, b.Filter(segs, t0.Add(BandSkipFor), false))
	require.Equal(t, segs, b.Filter(segs, t0.Add(-time.Millisecond), false))
	// A hint for band 7 that arrived after the claim started: band 7 is probed again.
	b.Hinted(7, t0.Add(time.Millisecond))
	require.Equal(t, []int16{7, 2, 1}, bandsOf(b.Filter(segs, t0.Add(2*time.Millisecond), false)))
	// A hint that arrived before the claim that found the band empty started does not.
	b.Record(segs, 1, []ClaimRow{row(2)}, nil, t0.Add(3*time.Millisecond))
	require.Equal(t, []int16{2, 1}, bandsOf(b.Filter(segs, t0.Add(4*time.Millisecond), false)))

	// A short claim (the queue is not busy): every band next time, and what it saw is kept.
	b.Record([]ClaimSeg{{Priority: 2}, {Priority: 1}}, 5, []ClaimRow{row(2)}, nil, t0.Add(5*time.Millisecond))
	require.Equal(t, segs, b.Filter(segs, t0.Add(6*time.Millisecond), false))
	require.NotZero(t, b.emptyAt[1].Load(), "a short claim probed band 1 and found it empty")
	// A failed claim likewise.
	b.Record(segs, 1, []ClaimRow{row(2)}, nil, t0.Add(7*time.Millisecond))
	require.Len(t, b.Filter(segs, t0.Add(8*time.Millisecond), false), 1)
	b.Record(segs, 1, nil, errors.New("boom"), t0.Add(9*time.Millisecond))
	require.Equal(t, segs, b.Filter(segs, t0.Add(10*time.Millisecond), false))
	// A band that served a claim is not empty; every band skippable: none is skipped.
	b.Record(segs, 1, []ClaimRow{row(9)}, nil, t0.Add(11*time.Millisecond))
	require.Zero(t, b.emptyAt[9].Load())
	two := []ClaimSeg{{Priority: 5}, {Priority: 4}} // both known empty
	require.Equal(t, two, b.Filter(two, t0.Add(12*time.Millisecond), false))
	// Aging windows (a band in several segments): nothing is learnt or skipped.
	aged := []ClaimSeg{{Priority: 3}, {Priority: 2}, {Priority: 3}}
	require.Equal(t, aged, b.Filter(aged, t0.Add(12*time.Millisecond), false))
}
