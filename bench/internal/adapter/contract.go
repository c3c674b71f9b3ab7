package adapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Tick is one sampling instant: every metric's value at time T.
type Tick struct {
	T      time.Time
	Values map[string]float64
}

// Stream is a validated telemetry stream.
type Stream struct {
	Descriptor map[string]any
	Ticks      []Tick
}

var qualifiedTable = regexp.MustCompile(`^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$`)

// Validate checks a complete stdout stream against the adapter contract: only JSON lines;
// first a descriptor with every field and the right types; then, per tick, exactly one record
// of each required metric with the same wall-clock-aligned t, the contract's window_s, and a
// finite non-negative value; ticks strictly increasing by whole sampling periods; claim
// percentiles ordered.
func Validate(r io.Reader, system string, sampleEveryS int) (*Stream, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines [][]byte
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("empty stream")
	}
	decode := func(i int) (map[string]any, error) {
		dec := json.NewDecoder(bytes.NewReader(lines[i]))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("line %d is not a JSON object: %v: %q", i+1, err, lines[i])
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d has trailing data: %q", i+1, lines[i])
		}
		return m, nil
	}
	st := &Stream{}
	d, err := decode(0)
	if err != nil {
		return nil, err
	}
	if err := checkDescriptor(d, system); err != nil {
		return nil, fmt.Errorf("line 1 (descriptor): %w", err)
	}
	st.Descriptor = d

	byT := map[time.Time]map[string]float64{}
	period := time.Duration(sampleEveryS) * time.Second
	for i := 1; i < len(lines); i++ {
		m, err := decode(i)
		if err != nil {
			return nil, err
		}
		t, metric, v, err := checkSample(m, system, sampleEveryS)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %s", i+1, err, lines[i])
		}
		if t.UnixNano()%int64(period) != 0 {
			return nil, fmt.Errorf("line %d: t %s is not aligned to a %ds wall-clock boundary", i+1, t.Format(TimeFormat), sampleEveryS)
		}
		vals := byT[t]
		if vals == nil {
			vals = map[string]float64{}
			byT[t] = vals
		}
		if _, dup := vals[metric]; dup {
			return nil, fmt.Errorf("line %d: metric %s emitted twice for t %s", i+1, metric, t.Format(TimeFormat))
		}
		vals[metric] = v
	}
	for t, vals := range byT {
		st.Ticks = append(st.Ticks, Tick{T: t, Values: vals})
	}
	sort.Slice(st.Ticks, func(i, j int) bool { return st.Ticks[i].T.Before(st.Ticks[j].T) })
	for i, tk := range st.Ticks {
		for _, m := range Metrics {
			if _, ok := tk.Values[m]; !ok {
				return nil, fmt.Errorf("tick %s: metric %s missing", tk.T.Format(TimeFormat), m)
			}
		}
		if p50, p95, p99 := tk.Values["claim_p50_ms"], tk.Values["claim_p95_ms"], tk.Values["claim_p99_ms"]; p50 > p95 || p95 > p99 {
			return nil, fmt.Errorf("tick %s: claim percentiles out of order: p50 %v p95 %v p99 %v", tk.T.Format(TimeFormat), p50, p95, p99)
		}
		if i > 0 {
			gap := tk.T.Sub(st.Ticks[i-1].T)
			if gap%period != 0 {
				return nil, fmt.Errorf("tick %s: %s after the previous tick, not a multiple of %s", tk.T.Format(TimeFormat), gap, period)
			}
		}
	}
	return st, nil
}

func checkDescriptor(d map[string]any, system string) error {
	want := map[string]string{
		"kind": "string", "system": "string", "event_tables": "array", "extensions": "array",
		"version": "string", "schema_version": "string", "db_name": "string", "started_at": "string",
	}
	for k, typ := range want {
		v, ok := d[k]
		if !ok {
			return fmt.Errorf("field %q missing", k)
		}
		if typeOf(v) != typ {
			return fmt.Errorf("field %q is %s, want %s", k, typeOf(v), typ)
		}
	}
	if d["kind"] != "descriptor" {
		return fmt.Errorf("kind = %v, want descriptor", d["kind"])
	}
	if d["system"] != system {
		return fmt.Errorf("system = %v, want %s", d["system"], system)
	}
	tables := d["event_tables"].([]any)
	if len(tables) == 0 {
		return fmt.Errorf("event_tables is empty")
	}
	for _, tb := range tables {
		s, ok := tb.(string)
		if !ok || !qualifiedTable.MatchString(s) {
			return fmt.Errorf("event_tables entry %v is not a schema.table string", tb)
		}
	}
	for _, e := range d["extensions"].([]any) {
		if _, ok := e.(string); !ok {
			return fmt.Errorf("extensions entry %v is not a string", e)
		}
	}
	for _, k := range []string{"version", "schema_version", "db_name"} {
		if strings.TrimSpace(d[k].(string)) == "" {
			return fmt.Errorf("%s is empty", k)
		}
	}
	if _, err := time.Parse(TimeFormat, d["started_at"].(string)); err != nil {
		return fmt.Errorf("started_at: %v", err)
	}
	return nil
}

func checkSample(m map[string]any, system string, sampleEveryS int) (time.Time, string, float64, error) {
	want := map[string]string{
		"t": "string", "system": "string", "kind": "string", "subject_kind": "string",
		"subject": "string", "metric": "string", "value": "number", "window_s": "number",
	}
	for k, typ := range want {
		v, ok := m[k]
		if !ok {
			return time.Time{}, "", 0, fmt.Errorf("field %q missing", k)
		}
		if typeOf(v) != typ {
			return time.Time{}, "", 0, fmt.Errorf("field %q is %s, want %s", k, typeOf(v), typ)
		}
	}
	switch {
	case m["system"] != system:
		return time.Time{}, "", 0, fmt.Errorf("system = %v, want %s", m["system"], system)
	case m["kind"] != "adapter":
		return time.Time{}, "", 0, fmt.Errorf("kind = %v, want adapter", m["kind"])
	case m["subject_kind"] != "adapter":
		return time.Time{}, "", 0, fmt.Errorf("subject_kind = %v, want adapter", m["subject_kind"])
	case m["subject"] != "":
		return time.Time{}, "", 0, fmt.Errorf("subject = %v, want empty", m["subject"])
	}
	t, err := time.Parse(TimeFormat, m["t"].(string))
	if err != nil {
		return time.Time{}, "", 0, fmt.Errorf("t: %v", err)
	}
	metric := m["metric"].(string)
	var wantWindow float64
	switch metric {
	case "claim_p50_ms", "claim_p95_ms", "claim_p99_ms":
		wantWindow = ClaimWindowS
	case "enqueue_rate", "completion_rate":
		wantWindow = float64(sampleEveryS)
	case "queue_depth":
		wantWindow = 0
	default:
		return time.Time{}, "", 0, fmt.Errorf("unknown metric %q", metric)
	}
	value, err := m["value"].(json.Number).Float64()
	if err != nil || math.IsNaN(value) || math.IsInf(value, 0) || value < 0 {
		return time.Time{}, "", 0, fmt.Errorf("value %v is not a finite non-negative number", m["value"])
	}
	window, err := m["window_s"].(json.Number).Float64()
	if err != nil || window != wantWindow {
		return time.Time{}, "", 0, fmt.Errorf("window_s = %v, want %v for %s", m["window_s"], wantWindow, metric)
	}
	return t, metric, value, nil
}

func typeOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
