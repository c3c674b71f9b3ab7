package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestParseInts(t *testing.T) {
	got, err := parseInts("10k, 100000,1M,5M")
	if err != nil || !slices.Equal(got, []int{10_000, 100_000, 1_000_000, 5_000_000}) {
		t.Fatalf("parseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "-3", "1G"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q) accepted", bad)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	t.Setenv("BENCH_QUICK", "")
	t.Setenv("BENCH_SWEEPS", "")
	t.Setenv("BENCH_ADMIN_URL", "")
	t.Setenv("BENCH_SERVER", "")
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.quick || c.server != "own" || !slices.Equal(c.sweeps, AllSweeps) {
		t.Errorf("defaults: quick=%v server=%q sweeps=%v", c.quick, c.server, c.sweeps)
	}
	if !slices.Equal(c.backlogs, []int{10_000, 100_000, 1_000_000, 5_000_000}) ||
		!slices.Equal(c.finished, []int{0, 100_000, 1_000_000, 10_000_000}) ||
		!slices.Equal(c.queues, []int{1, 10, 100, 1000}) ||
		!slices.Equal(c.workers, []int{8, 32, 128, 512, 2000}) {
		t.Errorf("default points %v %v %v %v", c.backlogs, c.finished, c.queues, c.workers)
	}
	if c.slice != 100_000 || c.fixedReady != 150_000 || c.soakDur != 30*time.Minute || c.soakLoad != 0.7 {
		t.Errorf("defaults slice=%d ready=%d soak=%v load=%v", c.slice, c.fixedReady, c.soakDur, c.soakLoad)
	}
}

func TestParseConfigQuickAndOverrides(t *testing.T) {
	t.Setenv("BENCH_QUICK", "1")
	t.Setenv("BENCH_SWEEPS", "")
	t.Setenv("BENCH_ADMIN_URL", "")
	t.Setenv("BENCH_SERVER", "")
	c, err := parseConfig([]string{"-sweeps", "workers, soak,workers", "-workers", "8,2k", "-soak-duration", "1m", "-slice", "700"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.quick {
		t.Error("BENCH_QUICK=1 must select quick mode")
	}
	if !slices.Equal(c.sweeps, []string{SweepWorkers, SweepSoak}) {
		t.Errorf("sweeps %v", c.sweeps)
	}
	if !slices.Equal(c.workers, []int{8, 2000}) || !slices.Equal(c.backlogs, []int{1_000, 20_000}) {
		t.Errorf("points workers=%v backlogs=%v", c.workers, c.backlogs)
	}
	if c.soakDur != time.Minute || c.sampleEvery != 3*time.Second || c.slice != 700 || c.fixedReady != 10_000 {
		t.Errorf("quick soak=%v sample=%v slice=%d ready=%d", c.soakDur, c.sampleEvery, c.slice, c.fixedReady)
	}
	c, err = parseConfig([]string{"-admin-url", "postgres://x@h/postgres"}, io.Discard)
	if err != nil || c.server != "url" {
		t.Errorf("-admin-url must select -server url: %q %v", c.server, err)
	}
}

func TestParseConfigRejects(t *testing.T) {
	t.Setenv("BENCH_QUICK", "")
	t.Setenv("BENCH_SWEEPS", "")
	for _, args := range [][]string{
		{"-sweeps", "nope"},
		{"-sweeps", ","},
		{"-soak-load", "1.5"},
		{"-queues", "0"},
		{"-workers", "20000"},
		{"-slice", "200000"}, // above the fixed ready backlog
		{"-server", "theirs"},
		{"stray"},
	} {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) accepted", args)
		}
	}
}
