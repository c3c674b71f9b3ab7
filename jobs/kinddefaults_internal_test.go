package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/tenureq/tenure/generics"
)

// fuzzArgs declares whatever defaults the fuzzer gives it.
type fuzzArgs struct{ d generics.KindDefaults }

func (fuzzArgs) Kind() string                      { return "fuzz_kind" }
func (fuzzArgs) PayloadVersion() int               { return 1 }
func (a fuzzArgs) Defaults() generics.KindDefaults { return a.d }

// FuzzKindDefaultsPrecedence: for any combination of per-insert options, declared defaults and
// registry defaults, each field of the resolved job is the first set (non-zero) of per-insert >
// declared > registry > package default, with or without a registry on the client.
func FuzzKindDefaultsPrecedence(f *testing.F) {
	f.Add("", 0, 0, 0, "periodic", 3, 4, 7, "", 0, 0, 0, false)
	f.Add("", 0, 0, 0, "periodic", 3, 4, 7, "reg", 8, 9, 11, true)
	f.Add("ins", 5, 2, 3, "periodic", 3, 4, 7, "reg", 8, 9, 11, true)
	f.Add("", 0, 0, 0, "", 0, 0, 0, "reg", 8, 9, 11, true)
	f.Add("", 0, 0, 0, "", 0, 0, 0, "", 0, 0, 0, false)
	f.Add("", 6, 0, 5, "", 0, 10, 0, "reg", 0, 0, 11, true)
	f.Fuzz(func(t *testing.T, iq string, ip, ia, il int, dq string, dp, da, dl int, rq string, rp, ra, rl int, withReg bool) {
		// Keep the inputs valid (invalid ones are refused elsewhere): queue names of the
		// fuzzer's choosing map onto a few valid ones, numbers onto their ranges or zero.
		q := func(s string) string {
			if s == "" {
				return ""
			}
			return []string{"a", "b.c", "q-1", "default"}[len(s)%4]
		}
		n := func(v, hi int) int {
			if v <= 0 {
				return 0
			}
			return 1 + v%hi
		}
		ins := &InsertOpts{Queue: q(iq), Priority: n(ip, 9), MaxAttempts: n(ia, 1000), Lease: time.Duration(n(il, 3600)) * time.Second}
		dec := generics.KindDefaults{Queue: q(dq), Priority: n(dp, 9), MaxAttempts: n(da, 1000), Lease: time.Duration(n(dl, 3600)) * time.Second}
		regd := generics.KindDefaults{Queue: q(rq), Priority: n(rp, 9), MaxAttempts: n(ra, 1000), Lease: time.Duration(n(rl, 3600)) * time.Second}
		c := &Client{max: generics.MaxArgsBytes}
		if withReg {
			c.reg = generics.NewRegistry()
			if _, err := generics.Register[fuzzArgs](c.reg, generics.WithDefaults(regd)); err != nil {
				t.Fatal(err)
			}
		} else {
			regd = generics.KindDefaults{}
		}
		p, err := c.prepareOpts(context.Background(), fuzzArgs{d: dec}, ins)
		if err != nil {
			t.Fatal(err)
		}
		first := func(vs ...int) int {
			for _, v := range vs {
				if v != 0 {
					return v
				}
			}
			return 0
		}
		firstS := func(vs ...string) string {
			for _, v := range vs {
				if v != "" {
					return v
				}
			}
			return ""
		}
		if want := firstS(ins.Queue, dec.Queue, regd.Queue, DefaultQueue); p.queue != want {
			t.Errorf("queue %q, want %q", p.queue, want)
		}
		if want := first(ins.Priority, dec.Priority, regd.Priority, DefaultPriority); int(p.priority) != want {
			t.Errorf("priority %d, want %d", p.priority, want)
		}
		if want := first(ins.MaxAttempts, dec.MaxAttempts, regd.MaxAttempts, DefaultMaxAttempts); int(p.maxAttempts) != want {
			t.Errorf("max attempts %d, want %d", p.maxAttempts, want)
		}
		want := time.Duration(first(int(ins.Lease), int(dec.Lease), int(regd.Lease), int(DefaultLease)))
		if time.Duration(p.leaseMs)*time.Millisecond != want {
			t.Errorf("lease %dms, want %v", p.leaseMs, want)
		}
	})
}
