// Package cron parses 5-field cron expressions and computes their next tick in a time zone.
//
// Syntax (one line, five fields separated by blanks):
//
//	minute        0-59
//	hour          0-23
//	day of month  1-31
//	month         1-12 or JAN-DEC
//	day of week   0-7 or SUN-SAT (0 and 7 are Sunday)
//
// Each field is a comma-separated list of items; an item is "*", a value "v", a range "a-b",
// or one of those followed by a step "/n" ("*/15", "10-50/20", "5/10" = 5-max/10). Names
// are case-insensitive. The macros @yearly (@annually), @monthly, @weekly, @daily
// (@midnight) and @hourly stand for "0 0 1 1 *", "0 0 1 * *", "0 0 * * 0", "0 0 * * *" and
// "0 * * * *". Like Vixie cron, when both day of month and day of week are restricted (neither
// starts with "*"), a day matches when either matches; otherwise both must.
//
// Ticks are whole minutes of the schedule's location (wall clock). Daylight-saving
// transitions follow Vixie cron's rule, decided by the hour field:
//   - hour field "*" (the schedule runs every hour): ticks follow elapsed time. Minutes that a
//     spring-forward gap skips do not exist and do not fire; the minutes of a repeated
//     fall-back hour fire in both occurrences.
//   - hour field restricted (fixed times of day): each matching wall time fires exactly
//     once per day. A time inside a spring-forward gap (02:30 when clocks jump from 02:00 to
//     03:00) fires at the first instant after the gap; a time in a repeated fall-back hour
//     fires at its first occurrence only.
//
// A Schedule is immutable and safe for concurrent use.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidSpec is returned (wrapped, with the offending field) by Parse for an expression
// that is not a valid 5-field cron expression, or that can never fire (such as "0 0 30 2 *").
// Test for it with errors.Is.
var ErrInvalidSpec = errors.New("cron: invalid expression")

// ErrUnknownTimeZone is returned (wrapped) by ParseIn for a time zone name the IANA database
// of this process does not know. Test for it with errors.Is.
var ErrUnknownTimeZone = errors.New("cron: unknown time zone")

// Schedule is a parsed cron expression bound to a location.
type Schedule struct {
	expr string
	loc  *time.Location
	// bit sets of allowed values
	minute, hour, dom, month, dow uint64
	domStar, dowStar, hourStar    bool
}

type field struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	fMinute = field{"minute", 0, 59, nil}
	fHour   = field{"hour", 0, 23, nil}
	fDom    = field{"day of month", 1, 31, nil}
	fMonth  = field{"month", 1, 12, map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
		"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}}
	fDow = field{"day of week", 0, 7, map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}}
)

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// Parse parses expr in UTC. See the package documentation for the syntax.
func Parse(expr string) (*Schedule, error) { return parse(expr, time.UTC) }

// ParseIn parses expr in the IANA time zone tz ("Europe/Berlin"; "" and "UTC" mean UTC,
// "Local" the process's local zone). An unknown zone returns an error wrapping
// ErrUnknownTimeZone; a bad expression one wrapping ErrInvalidSpec.
func ParseIn(expr, tz string) (*Schedule, error) {
	loc := time.UTC
	if tz != "" && tz != "UTC" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrUnknownTimeZone, tz, err)
		}
		loc = l
	}
	return parse(expr, loc)
}

// ParseLocation parses expr in loc (nil means UTC).
func ParseLocation(expr string, loc *time.Location) (*Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	return parse(expr, loc)
}

func parse(expr string, loc *time.Location) (*Schedule, error) {
	s := &Schedule{expr: strings.TrimSpace(expr), loc: loc}
	body := s.expr
	if strings.HasPrefix(body, "@") {
		m, ok := macros[strings.ToLower(body)]
		if !ok {
			return nil, fmt.Errorf("%w %q: unknown macro (know @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)", ErrInvalidSpec, expr)
		}
		body = m
	}
	fs := strings.Fields(body)
	if len(fs) != 5 {
		return nil, fmt.Errorf("%w %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", ErrInvalidSpec, expr, len(fs))
	}
	var err error
	if s.minute, _, err = parseField(fs[0], fMinute); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, expr, err)
	}
	if s.hour, s.hourStar, err = parseField(fs[1], fHour); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, expr, err)
	}
	if s.dom, s.domStar, err = parseField(fs[2], fDom); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, expr, err)
	}
	if s.month, _, err = parseField(fs[3], fMonth); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, expr, err)
	}
	if s.dow, s.dowStar, err = parseField(fs[4], fDow); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, expr, err)
	}
	if s.dow&(1<<7) != 0 { // 7 is Sunday too
		s.dow = s.dow&^(1<<7) | 1
	}
	// A restricted day of month with an unrestricted day of week must name a day some
	// selected month has, or the schedule never fires ("0 0 30 2 *", "0 0 31 4,6 *").
	if !s.domStar && s.dowStar {
		maxDays := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
		ok := false
		for m := 1; m <= 12 && !ok; m++ {
			if s.month&(1<<m) == 0 {
				continue
			}
			for d := 1; d <= maxDays[m]; d++ {
				if s.dom&(1<<d) != 0 {
					ok = true
					break
				}
			}
		}
		if !ok {
			return nil, fmt.Errorf("%w %q: the days of month never occur in the selected months", ErrInvalidSpec, expr)
		}
	}
	return s, nil
}

// parseField returns the bit set of a field and whether it starts with "*".
func parseField(s string, f field) (uint64, bool, error) {
	var bits uint64
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return 0, false, fmt.Errorf("%s field %q: empty list item", f.name, s)
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > f.max-f.min+1 {
				return 0, false, fmt.Errorf("%s field %q: step %q must be an integer in 1..%d", f.name, s, stepStr, f.max-f.min+1)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*":
			lo, hi = f.min, f.max
			if f.name == fDow.name {
				hi = 6 // "*" is every day once; 7 only exists as an alias of 0
			}
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = value(a, f); err != nil {
				return 0, false, fmt.Errorf("%s field %q: %v", f.name, s, err)
			}
			if hi, err = value(b, f); err != nil {
				return 0, false, fmt.Errorf("%s field %q: %v", f.name, s, err)
			}
			if lo > hi {
				return 0, false, fmt.Errorf("%s field %q: range %q runs backwards", f.name, s, rng)
			}
		default:
			v, err := value(rng, f)
			if err != nil {
				return 0, false, fmt.Errorf("%s field %q: %v", f.name, s, err)
			}
			lo, hi = v, v
			if hasStep { // "5/10": from 5 to the maximum, every 10
				hi = f.max
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, strings.HasPrefix(s, "*"), nil
}

func value(s string, f field) (int, error) {
	if f.names != nil {
		if v, ok := f.names[strings.ToUpper(s)]; ok {
			return v, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number or a name", s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%d outside %d..%d", v, f.min, f.max)
	}
	return v, nil
}

// String returns the expression as given.
func (s *Schedule) String() string { return s.expr }

// Location returns the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// searchYears bounds Next's search (a Feb 29 schedule can wait 8 years around 2100).
const searchYears = 9

// Next returns the first tick strictly after t, in the schedule's location, or the zero time
// if there is none within 9 years (only possible for day-of-week/day-of-month combinations
// that Parse could not rule out statically, which do not exist for valid expressions).
func (s *Schedule) Next(t time.Time) time.Time {
	// Start at the next whole minute after t.
	u := t.In(s.loc).Truncate(time.Minute).Add(time.Minute)
	limit := u.AddDate(searchYears, 0, 0)
	for u.Before(limit) {
		w := u.In(s.loc)
		prev := u.Add(-time.Minute).In(s.loc)
		// A spring-forward gap ends at u: fixed-time schedules fire at u for a skipped wall time.
		if !s.hourStar && naive(w).Sub(naive(prev)) > time.Minute && s.gapMatches(prev, w) {
			return u
		}
		if s.month&(1<<int(w.Month())) == 0 {
			u = s.advance(u, time.Date(w.Year(), w.Month()+1, 1, 0, 0, 0, 0, s.loc))
			continue
		}
		if !s.dayMatches(w) {
			u = s.advance(u, time.Date(w.Year(), w.Month(), w.Day()+1, 0, 0, 0, 0, s.loc))
			continue
		}
		if s.hour&(1<<w.Hour()) == 0 {
			u = s.advance(u, time.Date(w.Year(), w.Month(), w.Day(), w.Hour()+1, 0, 0, 0, s.loc))
			continue
		}
		if s.minute&(1<<w.Minute()) == 0 {
			u = u.Add(time.Minute)
			continue
		}
		if !s.hourStar && s.repeated(u, w) {
			u = u.Add(time.Minute) // the second occurrence of a fixed wall time
			continue
		}
		return u
	}
	return time.Time{}
}

// advance moves the search from u to target, a local wall-clock boundary built with
// time.Date, which may fall in a DST gap (Go then picks an instant on either side) or in a
// repeated hour (Go picks either occurrence). It returns the earliest instant showing the
// target's wall time, or, in a gap, the instant the gap ends (so the gap check sees it); and
// always something after u.
func (s *Schedule) advance(u, target time.Time) time.Time {
	want := time.Date(target.Year(), target.Month(), target.Day(), target.Hour(), target.Minute(), 0, 0, time.UTC)
	if w := target.In(s.loc); !naive(w).Equal(want) {
		// In a gap: the gap ends where the zone containing target starts (Go chose the later
		// side) or ends (the earlier side).
		start, end := w.ZoneBounds()
		if naive(w).After(want) {
			target = start
		} else {
			target = end
		}
	} else {
		for _, d := range []time.Duration{2 * time.Hour, time.Hour, 30 * time.Minute} {
			if e := target.Add(-d); sameWall(e.In(s.loc), w) {
				target = e
				break
			}
		}
	}
	if !target.After(u) {
		return u.Add(time.Minute)
	}
	return target
}

// naive returns t's wall clock as the same wall clock in UTC (a calendar without gaps).
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// sameWall reports whether a and b show the same wall-clock minute.
func sameWall(a, b time.Time) bool {
	return a.Year() == b.Year() && a.YearDay() == b.YearDay() && a.Hour() == b.Hour() && a.Minute() == b.Minute()
}

// gapMatches reports whether a wall minute strictly between prev and w (the minutes a
// spring-forward gap skipped) matches the schedule.
func (s *Schedule) gapMatches(prev, w time.Time) bool {
	// Walk the skipped wall minutes as naive wall times (UTC is a calendar without gaps).
	a, b := naive(prev).Add(time.Minute), naive(w)
	for n := 0; a.Before(b) && n < 48*60; a, n = a.Add(time.Minute), n+1 {
		if s.month&(1<<int(a.Month())) != 0 && s.dayMatches(a) && s.hour&(1<<a.Hour()) != 0 && s.minute&(1<<a.Minute()) != 0 {
			return true
		}
	}
	return false
}

// repeated reports whether u is the second (or later) occurrence of its wall time w
// (a fall-back transition repeats wall times).
func (s *Schedule) repeated(u, w time.Time) bool {
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if sameWall(u.Add(-d).In(s.loc), w) {
			return true
		}
	}
	return false
}

func (s *Schedule) dayMatches(w time.Time) bool {
	dom := s.dom&(1<<w.Day()) != 0
	dow := s.dow&(1<<int(w.Weekday())) != 0
	if !s.domStar && !s.dowStar {
		return dom || dow
	}
	return dom && dow
}
