package cron_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenureq/tenure/cron"
)

func mustIn(t *testing.T, expr, tz string) *cron.Schedule {
	t.Helper()
	s, err := cron.ParseIn(expr, tz)
	if err != nil {
		t.Fatalf("ParseIn(%q, %q): %v", expr, tz, err)
	}
	return s
}

// ticks returns the first n ticks after from, formatted in the schedule's zone.
func ticks(s *cron.Schedule, from time.Time, n int) []string {
	var out []string
	t := from
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			out = append(out, "never")
			break
		}
		out = append(out, t.Format("2006-01-02 15:04 MST"))
	}
	return out
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: tick %d: got %q, want %q (all: %v)", what, i, got[i], want[i], got)
		}
	}
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a Thursday

func TestFieldsRangesStepsListsNames(t *testing.T) {
	cases := []struct {
		expr string
		from time.Time
		want []string
	}{
		{"* * * * *", base, []string{"2026-01-01 00:01 UTC", "2026-01-01 00:02 UTC"}},
		{"*/15 * * * *", base.Add(7 * time.Minute), []string{"2026-01-01 00:15 UTC", "2026-01-01 00:30 UTC", "2026-01-01 00:45 UTC", "2026-01-01 01:00 UTC"}},
		{"10-50/20 * * * *", base, []string{"2026-01-01 00:10 UTC", "2026-01-01 00:30 UTC", "2026-01-01 00:50 UTC", "2026-01-01 01:10 UTC"}},
		{"5/20 3 * * *", base, []string{"2026-01-01 03:05 UTC", "2026-01-01 03:25 UTC", "2026-01-01 03:45 UTC", "2026-01-02 03:05 UTC"}},
		{"0 9,17 * * *", base, []string{"2026-01-01 09:00 UTC", "2026-01-01 17:00 UTC", "2026-01-02 09:00 UTC"}},
		{"0 0 1,15 * *", base, []string{"2026-01-15 00:00 UTC", "2026-02-01 00:00 UTC", "2026-02-15 00:00 UTC"}},
		{"30 6 * jan-mar,Dec mon-FRI", base, []string{"2026-01-01 06:30 UTC", "2026-01-02 06:30 UTC", "2026-01-05 06:30 UTC"}},
		{"0 0 * * 7", base, []string{"2026-01-04 00:00 UTC", "2026-01-11 00:00 UTC"}}, // 7 = Sunday
		{"0 0 * * sun", base, []string{"2026-01-04 00:00 UTC"}},
		{"0 0 * * 5-7", base, []string{"2026-01-02 00:00 UTC", "2026-01-03 00:00 UTC", "2026-01-04 00:00 UTC", "2026-01-09 00:00 UTC"}},
		// Day of month OR day of week when both are restricted: the 13th, and every Friday.
		{"0 0 13 * fri", base, []string{"2026-01-02 00:00 UTC", "2026-01-09 00:00 UTC", "2026-01-13 00:00 UTC", "2026-01-16 00:00 UTC"}},
		// Day of month AND day of week when one is "*": Friday the 13th... of any month.
		{"0 0 13 * *", base, []string{"2026-01-13 00:00 UTC", "2026-02-13 00:00 UTC"}},
		{"0 0 29 2 *", base, []string{"2028-02-29 00:00 UTC", "2032-02-29 00:00 UTC"}},
		{"0 12 31 * *", base, []string{"2026-01-31 12:00 UTC", "2026-03-31 12:00 UTC", "2026-05-31 12:00 UTC"}},
		{"@hourly", base, []string{"2026-01-01 01:00 UTC", "2026-01-01 02:00 UTC"}},
		{"@daily", base, []string{"2026-01-02 00:00 UTC"}},
		{"@weekly", base, []string{"2026-01-04 00:00 UTC"}},
		{"@monthly", base, []string{"2026-02-01 00:00 UTC"}},
		{"@YEARLY", base, []string{"2027-01-01 00:00 UTC"}},
		{"@annually", base.Add(-time.Minute), []string{"2026-01-01 00:00 UTC"}},
		// Strictly after: a tick equal to from is not returned; seconds are ignored.
		{"0 * * * *", base.Add(30 * time.Second), []string{"2026-01-01 01:00 UTC"}},
		{"0 0 1 1 *", time.Date(2099, 6, 1, 0, 0, 0, 0, time.UTC), []string{"2100-01-01 00:00 UTC"}},
	}
	for _, c := range cases {
		s, err := cron.Parse(c.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.expr, err)
		}
		eq(t, c.expr, ticks(s, c.from, len(c.want)), c.want)
		if s.String() != c.expr {
			t.Fatalf("String() = %q, want %q", s.String(), c.expr)
		}
	}
}

func TestInvalid(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * 0 *", "* * * * 8", "*/0 * * * *", "*/61 * * * *", "5-1 * * * *",
		"a * * * *", "1,,2 * * * *", "* * * foo *", "* * * * fri-mon", "@every 5m", "@reboot",
		"0 0 30 2 *", "0 0 31 4,6,9,11 *", "-1 * * * *", "1- * * * *",
	} {
		if _, err := cron.Parse(expr); !errors.Is(err, cron.ErrInvalidSpec) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidSpec", expr, err)
		}
	}
	if _, err := cron.ParseIn("* * * * *", "Mars/Olympus_Mons"); !errors.Is(err, cron.ErrUnknownTimeZone) {
		t.Errorf("unknown zone: got %v", err)
	}
	// Feb 30 with a day of week is valid (OR): it fires on the weekday.
	if _, err := cron.Parse("0 0 30 2 mon"); err != nil {
		t.Errorf("0 0 30 2 mon: %v", err)
	}
}

func TestTimeZone(t *testing.T) {
	s := mustIn(t, "0 9 * * *", "Asia/Tokyo")
	got := s.Next(base) // 2026-01-01 00:00 UTC = 09:00 JST: strictly after, so the next day
	if want := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC); !got.Equal(want) || got.Location().String() != "Asia/Tokyo" {
		t.Fatalf("Tokyo: got %v, want %v in Asia/Tokyo", got, want)
	}
	// Nepal is UTC+05:45.
	s = mustIn(t, "0 0 * * *", "Asia/Kathmandu")
	if got, want := s.Next(base), time.Date(2026, 1, 1, 18, 15, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("Kathmandu: got %v, want %v", got, want)
	}
}

// Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (spring forward);
// 2026-10-25 03:00 CEST -> 02:00 CET (fall back).
func TestDSTSpringForward(t *testing.T) {
	from := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	// A fixed time inside the gap fires once, when the gap ends, then normally.
	eq(t, "30 2 daily", ticks(mustIn(t, "30 2 * * *", "Europe/Berlin"), from, 3),
		[]string{"2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST", "2026-03-31 02:30 CEST"})
	// A fixed time that is not in the gap is not disturbed.
	eq(t, "30 3 daily", ticks(mustIn(t, "30 3 * * *", "Europe/Berlin"), from, 2),
		[]string{"2026-03-29 03:30 CEST", "2026-03-30 03:30 CEST"})
	// Every-hour schedules follow elapsed time: skipped minutes do not fire.
	eq(t, "*/30 every hour", ticks(mustIn(t, "*/30 * * * *", "Europe/Berlin"), time.Date(2026, 3, 29, 0, 15, 0, 0, time.UTC), 4),
		[]string{"2026-03-29 01:30 CET", "2026-03-29 03:00 CEST", "2026-03-29 03:30 CEST", "2026-03-29 04:00 CEST"})
	// A gap on a day the schedule does not run is not a catch-up.
	eq(t, "30 2 mondays", ticks(mustIn(t, "30 2 * * mon", "Europe/Berlin"), from, 1), []string{"2026-03-30 02:30 CEST"})
	// America/Sao_Paulo had DST starting at midnight (2018-11-04 00:00 -> 01:00).
	eq(t, "midnight in a midnight gap", ticks(mustIn(t, "0 0 * * *", "America/Sao_Paulo"), time.Date(2018, 11, 3, 12, 0, 0, 0, time.UTC), 2),
		[]string{"2018-11-04 01:00 -02", "2018-11-05 00:00 -02"})
}

func TestDSTFallBack(t *testing.T) {
	from := time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)
	// A fixed time in the repeated hour fires once (first occurrence).
	eq(t, "30 2 daily", ticks(mustIn(t, "30 2 * * *", "Europe/Berlin"), from, 2),
		[]string{"2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"})
	// Every-hour schedules fire in both occurrences of the repeated hour.
	eq(t, "0,30 every hour", ticks(mustIn(t, "0,30 * * * *", "Europe/Berlin"), time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC), 6),
		[]string{"2026-10-25 02:00 CEST", "2026-10-25 02:30 CEST", "2026-10-25 02:00 CET", "2026-10-25 02:30 CET", "2026-10-25 03:00 CET", "2026-10-25 03:30 CET"})
	// Lord Howe Island shifts by 30 minutes (02:00 +11 -> 01:30 +1030 on 2026-04-05).
	eq(t, "45 1 Lord Howe", ticks(mustIn(t, "45 1 * * *", "Australia/Lord_Howe"), time.Date(2026, 4, 4, 10, 0, 0, 0, time.UTC), 2),
		[]string{"2026-04-05 01:45 +11", "2026-04-06 01:45 +1030"})
}

// Consecutive ticks are strictly increasing, whole minutes, and each is the Next of the
// instant just before it (no tick is skipped by starting the search in between).
func TestNextIsConsistent(t *testing.T) {
	for _, c := range []struct{ expr, tz string }{
		{"*/7 * * * *", "Europe/Berlin"}, {"15 1-3 * * *", "America/New_York"}, {"0 */5 * * 1-5", "Australia/Lord_Howe"},
		{"59 23 L * *", ""}, // invalid, skipped below
	} {
		s, err := cron.ParseIn(c.expr, c.tz)
		if err != nil {
			continue
		}
		prev := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		for range 3000 {
			n := s.Next(prev)
			if !n.After(prev) || n.Second() != 0 || n.Nanosecond() != 0 {
				t.Fatalf("%s: Next(%v) = %v", c.expr, prev, n)
			}
			if again := s.Next(n.Add(-time.Nanosecond)); !again.Equal(n) {
				t.Fatalf("%s: Next(%v - 1ns) = %v, want %v", c.expr, n, again, n)
			}
			prev = n
		}
	}
}

// TestNextMatchesBruteForce compares Next with a minute-by-minute search over random
// expressions, in UTC and in a zone without daylight saving (Asia/Kolkata, +05:30).
func TestNextMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	item := func(lo, hi int) string {
		switch rng.IntN(5) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(lo + rng.IntN(hi-lo+1))
		case 2:
			a := lo + rng.IntN(hi-lo+1)
			b := a + rng.IntN(hi-a+1)
			return fmt.Sprintf("%d-%d", a, b)
		case 3:
			return fmt.Sprintf("*/%d", 1+rng.IntN(hi-lo+1))
		default:
			a := lo + rng.IntN(hi-lo+1)
			return fmt.Sprintf("%d,%d", a, lo+rng.IntN(hi-lo+1))
		}
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	const horizon = 60 * 24 * 60 // minutes
	for n := 0; n < 150; n++ {
		expr := strings.Join([]string{item(0, 59), item(0, 23), item(1, 31), item(1, 12), item(0, 7)}, " ")
		loc := time.UTC
		if n%2 == 1 {
			loc = kolkata
		}
		s, err := cron.ParseLocation(expr, loc)
		if err != nil {
			continue // e.g. a day of month no selected month has
		}
		ref := refSchedule(t, expr)
		from := time.Date(2026, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), 0, loc)
		want := time.Time{}
		for m, u := 0, from.Truncate(time.Minute).Add(time.Minute); m < horizon; m, u = m+1, u.Add(time.Minute) {
			if ref(u.In(loc)) {
				want = u
				break
			}
		}
		got := s.Next(from)
		if want.IsZero() {
			if got.Before(from.Add(horizon * time.Minute)) {
				t.Fatalf("%q in %v from %v: Next %v, brute force found none within 60 days", expr, loc, from, got)
			}
			continue
		}
		if !got.Equal(want) {
			t.Fatalf("%q in %v from %v: Next %v, brute force %v", expr, loc, from, got, want)
		}
	}
}

// refSchedule is an independent matcher of expr's fields (ranges, steps, lists; Vixie's
// day-of-month/day-of-week rule), for TestNextMatchesBruteForce.
func refSchedule(t *testing.T, expr string) func(time.Time) bool {
	fs := strings.Fields(expr)
	set := func(f string, lo, hi int) map[int]bool {
		out := map[int]bool{}
		for _, it := range strings.Split(f, ",") {
			r, st, hasStep := strings.Cut(it, "/")
			step := 1
			if hasStep {
				step, _ = strconv.Atoi(st)
			}
			a, b := lo, hi
			if r != "*" {
				x, y, isRange := strings.Cut(r, "-")
				a, _ = strconv.Atoi(x)
				b = a
				if isRange {
					b, _ = strconv.Atoi(y)
				}
			}
			for v := a; v <= b; v += step {
				out[v] = true
			}
		}
		return out
	}
	min, hour, dom, mon, dow := set(fs[0], 0, 59), set(fs[1], 0, 23), set(fs[2], 1, 31), set(fs[3], 1, 12), set(fs[4], 0, 6)
	if set(fs[4], 0, 7)[7] {
		dow[0] = true
	}
	domStar, dowStar := strings.HasPrefix(fs[2], "*"), strings.HasPrefix(fs[4], "*")
	return func(w time.Time) bool {
		day := dom[w.Day()] && dow[int(w.Weekday())]
		if !domStar && !dowStar {
			day = dom[w.Day()] || dow[int(w.Weekday())]
		}
		return min[w.Minute()] && hour[w.Hour()] && mon[int(w.Month())] && day
	}
}
