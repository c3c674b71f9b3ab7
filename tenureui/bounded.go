package tenureui

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenureq/tenure/tenureui/internal/uidb"
)

// Budgets of the dashboard (issue 29, item 6): what a page costs, whatever the stored data.
// The database sends a page at most the first ValueChars characters of each stored JSON value
// (args, output, error history, metadata, an effect's result, an audit entry's detail) and a
// list page a ListPreviewChars preview of each job's args; the page shows a depth-limited,
// size-limited rendering of that and links to the raw value when it is cut. So a page's bytes
// are bounded by the constants below and the work and memory of a request by the heads it
// reads, linear in them, never by the stored values' size or nesting.
const (
	// MaxJobPageBytes bounds a job page, and its live part, in bytes of HTML.
	MaxJobPageBytes = 256 << 10
	// ListPageBaseBytes and ListRowBytes bound a list page: at most ListPageBaseBytes plus
	// ListRowBytes per job listed (MaxListPageBytes).
	ListPageBaseBytes = 24 << 10
	ListRowBytes      = 3 << 10
	// ValueChars is how many characters of a stored JSON value's text a page reads from the
	// database at most.
	ValueChars = 64 << 10
	// MaxIndentDepth is the nesting depth down to which the job page indents JSON values one
	// line per member; deeper levels are printed compactly on their parent's line, so a
	// rendering is at most a constant factor larger than its input (indenting every level
	// made args nested 9,000 levels a 162 MB page).
	MaxIndentDepth = 16
	// ListPreviewChars is the length, in characters, of the args preview on a list page.
	// Args stored in over ListPreviewMaxStored bytes (pg_column_size: compressed when large)
	// get no preview, so a page of jobs with huge args does not serialize them.
	ListPreviewChars     = 160
	ListPreviewMaxStored = 64 << 10
	// SearchChars and SearchMaxStored bound the list's "args contain" search (?q=): it looks
	// at the first SearchChars characters of each job's args text, and only at args stored in
	// at most SearchMaxStored bytes (pg_column_size); larger args never match.
	SearchChars     = 64 << 10
	SearchMaxStored = 256 << 10
	// DefaultMaxRawBytes is the default Config.MaxRawBytes: the largest value the raw
	// download serves.
	DefaultMaxRawBytes = 8 << 20
	// DefaultQueryTimeout is the default Config.QueryTimeout: the statement timeout of the
	// dashboard's job and list statements.
	DefaultQueryTimeout = 5 * time.Second
)

// MaxListPageBytes is the byte budget of a list page of pageSize jobs.
func MaxListPageBytes(pageSize int) int { return ListPageBaseBytes + pageSize*ListRowBytes }

// What the job page spends on each part, in bytes of escaped HTML text. Their sum, with the
// page's markup, stays under MaxJobPageBytes (TestPagesStayWithinBudget checks it).
const (
	shownArgs         = 48 << 10
	shownOutput       = 16 << 10
	shownRaw          = 8 << 10 // an error history or metadata shown as text (cut or not decodable)
	shownText         = 256     // a name, an actor, a worker id
	textChars         = 300     // characters of such a text the statements read
	errorsShown       = 10      // the newest entries of the error history
	errorCodeBytes    = 64
	errorMsgBytes     = 1024
	metadataShown     = 32
	metadataKeyBytes  = 128
	metadataValBytes  = 512
	effectsShown      = 50
	effectResultBytes = 256
	auditShown        = 50
	auditReasonBytes  = 512
	auditDetailBytes  = 256
	previewBytes      = 320 // the args preview of a list row
)

// escWidth is how many bytes html/template's HTML text escaper writes for c (one byte of a
// UTF-8 string: the escaped characters are ASCII, and a NUL becomes U+FFFD).
func escWidth(c byte) int {
	switch c {
	case '"', '\'', '&', '+':
		return 5 // &#34; &#39; &amp; &#43;
	case '<', '>':
		return 4
	case 0:
		return 3
	}
	return 1
}

// clip returns s, or its longest prefix (whole runes) whose escaped HTML is at most max
// bytes with "…" appended when s is longer. It reads at most what it returns.
func clip(s string, max int) string {
	w := 0
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		rw := 0
		for k := range n {
			rw += escWidth(s[i+k])
		}
		if w+rw > max-3 && !fits(s[i:], max-w) {
			return s[:i] + "…"
		}
		w += rw
		i += n
	}
	return s
}

// fits reports whether the rest of a string escapes into at most room bytes (used once, at
// the point where clip would cut, so clip stays linear).
func fits(rest string, room int) bool {
	w := 0
	for i := 0; i < len(rest); i++ {
		if w += escWidth(rest[i]); w > room {
			return false
		}
	}
	return true
}

// renderJSON indents JSON text for display, levels deeper than MaxIndentDepth compactly, and
// stops before its escaped HTML would exceed max bytes (cut reports it). It is lexical (it
// needs no valid JSON: a cut head renders as far as it goes), makes one pass over src and
// writes at most max bytes.
func renderJSON(src string, max int) (out string, cut bool) {
	var b strings.Builder
	b.Grow(min(2*len(src), max) + 64)
	esc := 0
	// put writes s if its escaped form fits, else as many whole runes of it as fit.
	put := func(s string) bool {
		w := 0
		for i := 0; i < len(s); i++ {
			w += escWidth(s[i])
		}
		if esc+w <= max {
			esc += w
			b.WriteString(s)
			return true
		}
		for i := 0; i < len(s); {
			_, n := utf8.DecodeRuneInString(s[i:])
			rw := 0
			for k := range n {
				rw += escWidth(s[i+k])
			}
			if esc+rw > max {
				break
			}
			esc += rw
			b.WriteString(s[i : i+n])
			i += n
		}
		return false
	}
	const spaces = "\n                                  " // newline and 2*MaxIndentDepth+ spaces
	newline := func(depth int) bool { return put(spaces[:1+2*min(max0(depth), MaxIndentDepth)]) }
	depth := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(src))
			if !put(src[i:end]) {
				return b.String(), true
			}
			i = end - 1
			continue
		case '{', '[':
			depth++
			k := i + 1
			for k < len(src) && (src[k] == ' ' || src[k] == '\t' || src[k] == '\n' || src[k] == '\r') {
				k++
			}
			if k < len(src) && (c == '{' && src[k] == '}' || c == '[' && src[k] == ']') {
				depth--
				if !put(string([]byte{c, src[k]})) {
					return b.String(), true
				}
				i = k
				continue
			}
			if !put(src[i:i+1]) || depth <= MaxIndentDepth && !newline(depth) {
				return b.String(), true
			}
			continue
		case '}', ']':
			depth--
			if depth < MaxIndentDepth && !newline(depth) || !put(src[i:i+1]) {
				return b.String(), true
			}
			continue
		case ',':
			ok := put(",")
			if depth >= 1 && depth <= MaxIndentDepth {
				ok = ok && newline(depth)
			} else {
				ok = ok && put(" ")
			}
			if !ok {
				return b.String(), true
			}
			continue
		case ':':
			if !put(": ") {
				return b.String(), true
			}
			continue
		}
		// A run of anything else (numbers, literals, stray bytes) up to the next structural byte.
		j := i + 1
		for j < len(src) && !strings.ContainsRune(" \t\n\r\"{}[],:", rune(src[j])) {
			j++
		}
		if !put(src[i:j]) {
			return b.String(), true
		}
		i = j - 1
	}
	return b.String(), false
}

func max0(n int) int { return max(n, 0) }

// shownValue is a stored JSON value as a page shows it.
type shownValue struct {
	// Text is what the page shows: the value's JSON text, indented (levels deeper than
	// MaxIndentDepth compactly), cut to its part of the page's budget.
	Text string
	// Cut: Text is only the beginning of the value; Raw downloads all of it.
	Cut bool
	// Stored is the value's size in the database (pg_column_size: compressed when large).
	Stored int
	Raw    string
}

// headCut reports whether a head read as "the first ValueChars + 1 characters" was cut.
func headCut(head string) bool {
	return len(head) > ValueChars && utf8.RuneCountInString(head) > ValueChars
}

func showValue(head string, stored int32, max int, raw string) shownValue {
	text, cut := renderJSON(head, max)
	return shownValue{Text: text, Cut: cut || headCut(head), Stored: int(stored), Raw: raw}
}

// shownError is one entry of a job's error history, every field cut to its budget.
type shownError struct {
	Attempt, Generation, Code, Message, At string
	// Progress and Output are what the failed attempt recorded (worker.Progress,
	// worker.SetOutput), as text cut to errorMsgBytes; empty when none.
	Progress, Output string
}

// shownProgress is a job's progress (worker.Progress) as the page shows it.
type shownProgress struct {
	Done, Total int64
	Msg, At     string
	// Percent is Done of Total (0 when Total is unknown).
	Percent int
}

// Progress is the job's progress, nil when none (or not what the engine writes).
func (j jobRow) Progress() *shownProgress {
	if j.ProgressHead == "" || headCut(j.ProgressHead) {
		return nil
	}
	var p struct {
		Done, Total int64
		Msg         string
		At          time.Time
	}
	if json.Unmarshal([]byte(j.ProgressHead), &p) != nil {
		return nil
	}
	sp := &shownProgress{Done: p.Done, Total: p.Total, Msg: clip(p.Msg, shownText), At: p.At.UTC().Format("2006-01-02 15:04:05Z")}
	if p.Total > 0 && p.Done >= 0 && p.Done <= p.Total {
		sp.Percent = int(p.Done * 100 / p.Total)
	}
	return sp
}

// Elapsed is how long the current (running) or last (final) attempt ran; 0 before any.
func (j jobRow) Elapsed() time.Duration {
	if j.AttemptedAt == nil {
		return 0
	}
	end := time.Now()
	if j.State != uidb.TenureJobStateRunning {
		if j.FinishedAt == nil {
			return 0
		}
		end = *j.FinishedAt
	}
	return end.Sub(*j.AttemptedAt).Round(time.Second)
}

// Timeout is the handler timeout its worker declared for the job's kind; 0 when unknown.
func (j jobRow) Timeout() time.Duration { return time.Duration(j.TimeoutMs) * time.Millisecond }

// EarlierError reports whether the job's last error code belongs to an earlier attempt than
// the one that ended it (a job that succeeded after failures): the page must not show it as
// the job's error.
func (j jobRow) EarlierError() bool {
	return j.State == uidb.TenureJobStateSucceeded && j.LastErrorCode != nil
}

type shownPair struct{ Key, Value string }

// jobRow is the job page's job: the bounded columns UIJob read.
type jobRow struct{ uidb.UIJobRow }

// Lease is the job's lease.
func (j jobRow) Lease() time.Duration { return time.Duration(j.LeaseMs) * time.Millisecond }

// showErrors decodes an error history head into its newest errorsShown entries (with the
// number of older ones left out); ok is false when the head is cut or not an array of
// objects, and the page shows it as text instead.
func showErrors(head string) (out []shownError, omitted int, ok bool) {
	if headCut(head) {
		return nil, 0, false
	}
	var list []map[string]any
	if json.Unmarshal([]byte(head), &list) != nil {
		return nil, 0, false
	}
	if len(list) > errorsShown {
		omitted = len(list) - errorsShown
		list = list[omitted:]
	}
	for _, e := range list {
		at := field(e, "at", shownText)
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			at = t.UTC().Format("2006-01-02 15:04:05Z")
		}
		out = append(out, shownError{Attempt: field(e, "attempt", shownText), Generation: field(e, "generation", shownText),
			Code: field(e, "code", errorCodeBytes), Message: field(e, "message", errorMsgBytes), At: at,
			Progress: progressText(e["progress"]), Output: field(e, "output", errorMsgBytes)})
	}
	return out, omitted, true
}

// progressText is a history entry's progress as "done/total msg", cut to errorMsgBytes.
func progressText(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	t := field(m, "done", shownText)
	if tot := field(m, "total", shownText); tot != "" && tot != "0" {
		t += "/" + tot
	}
	if msg := field(m, "msg", errorMsgBytes); msg != "" {
		t += " " + msg
	}
	return clip(t, errorMsgBytes)
}

// field is m[k] as text (a string as it is, anything else as JSON), cut to max bytes.
func field(m map[string]any, k string, max int) string {
	switch v := m[k].(type) {
	case nil:
		return ""
	case string:
		return clip(v, max)
	case float64:
		return clip(fmt.Sprint(v), max)
	default:
		b, _ := json.Marshal(v)
		return clip(string(b), max)
	}
}

// showMetadata decodes a metadata head into its first metadataShown pairs by key (with the
// number left out); ok is false when the head is cut or not an object of strings.
func showMetadata(head string) (out []shownPair, omitted int, ok bool) {
	if headCut(head) {
		return nil, 0, false
	}
	var m map[string]string
	if json.Unmarshal([]byte(head), &m) != nil {
		return nil, 0, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > metadataShown {
		omitted = len(keys) - metadataShown
		keys = keys[:metadataShown]
	}
	for _, k := range keys {
		out = append(out, shownPair{Key: clip(k, metadataKeyBytes), Value: clip(m[k], metadataValBytes)})
	}
	return out, omitted, true
}

// listPreview is a list row's args preview, cut to previewBytes; a note when the args are
// too large to preview.
func listPreview(r uidb.UIListWindowRow) string {
	if r.ArgsPreview == "" {
		return fmt.Sprintf("(args stored in %s: open the job)", fmtBytes(int64(r.ArgsStored)))
	}
	s := clip(r.ArgsPreview, previewBytes)
	if !strings.HasSuffix(s, "…") && utf8.RuneCountInString(r.ArgsPreview) >= ListPreviewChars {
		s += "…"
	}
	return s
}

func fmtBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
