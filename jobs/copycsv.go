package jobs

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// InsertManyFast sends its rows to COPY as CSV text, not in COPY's binary format (pgx's
// CopyFrom): for the job table's rows the server's binary path cost about 40 % more per batch
// than its CSV path (1,000 rows, 240-byte payloads: 12.0 ms against 8.4 ms, the same bytes
// pre-encoded and sent through pgconn, PostgreSQL 15; the server-side INSERT ... SELECT of the
// same rows took 7.0 ms). docs/design.md, "Bulk enqueue", has the measurement.
//
// The encoding below is COPY's CSV format with its defaults (delimiter ',', quote and escape
// '"', NULL the unquoted empty field). Every text field is quoted, so no value — whatever
// commas, quotes, newlines, backslashes or a "\." line it holds — can be read as a NULL, a
// delimiter or the end of the data. Numbers are written as decimal digits, times as ISO 8601 in
// UTC with microseconds (the server's precision; the fraction is truncated, as pgx's binary
// encoding truncates it), text arrays as array literals with every element quoted. The
// connection's client_encoding is UTF8 (pgx sets it), and prepare has already refused text
// PostgreSQL cannot store (invalid UTF-8, NUL).

// appendCSVText appends s as one quoted CSV field: quotes doubled, everything else as is.
func appendCSVText[T string | []byte](buf []byte, s T) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			buf = append(buf, s[start:i+1]...) // the quote itself, then once more below
			buf = append(buf, '"')
			start = i + 1
		}
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// appendCSVInt appends n as an unquoted decimal field.
func appendCSVInt(buf []byte, n int64) []byte {
	return strconv.AppendInt(buf, n, 10)
}

// csvTimeLayout is a timestamptz literal PostgreSQL reads whatever its DateStyle: ISO 8601,
// microseconds, an explicit UTC offset.
const csvTimeLayout = "2006-01-02T15:04:05.999999Z07:00"

// appendCSVTime appends t as an unquoted ISO 8601 timestamptz in UTC.
func appendCSVTime(buf []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(buf, csvTimeLayout)
}

// appendCSVTextArray appends a text[] literal ({"a","b"}: every element quoted, its quotes and
// backslashes escaped with a backslash) as one quoted CSV field.
func appendCSVTextArray(buf, scratch []byte, elems []string) ([]byte, []byte) {
	lit := append(scratch[:0], '{')
	for i, e := range elems {
		if i > 0 {
			lit = append(lit, ',')
		}
		lit = append(lit, '"')
		for j := 0; j < len(e); j++ {
			if e[j] == '"' || e[j] == '\\' {
				lit = append(lit, '\\')
			}
			lit = append(lit, e[j])
		}
		lit = append(lit, '"')
	}
	lit = append(lit, '}')
	return appendCSVText(buf, lit), lit
}

// csvRows is an io.Reader of the CSV rows of all, encoded as they are read: each Read fills p
// with whole rows (a row longer than p waits in spill and is handed out across Reads), so
// encoding needs no buffer of its own beyond the longest row and runs while the connection
// sends what came before. runAts is nil, or each row's run_at; extras says whether metadata
// and tags follow.
//
// With encode set, a row whose payload is not encoded yet is encoded first (Client.encodePayload);
// its error, or panic, ends the data: Read returns the error (pgconn then abandons the COPY) and
// keeps it in err or panicked for the caller, since the server's error only says the COPY failed.
// Read runs on pgconn's sending goroutine, so a panic must not escape it.
type csvRows struct {
	all     []prepared
	runAts  []time.Time
	extras  bool
	encode  func(*prepared) error
	next    int
	spill   []byte // encoded but not yet read (a row that did not fit)
	scratch []byte

	err      error
	panicked any
}

// encodeNext encodes the next row's payload when that is still to do.
func (r *csvRows) encodeNext() (err error) {
	p := &r.all[r.next]
	if r.encode == nil || p.payload != nil {
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			r.panicked = v
			err = fmt.Errorf("job %d of %d: panic while encoding its args: %v", r.next, len(r.all), v)
		}
	}()
	if err := r.encode(p); err != nil {
		r.err = fmt.Errorf("job %d of %d: %w", r.next, len(r.all), err)
		return r.err
	}
	return nil
}

func (r *csvRows) Read(p []byte) (int, error) {
	n := 0
	if len(r.spill) > 0 {
		n = copy(p, r.spill)
		r.spill = r.spill[n:]
		if len(r.spill) > 0 {
			return n, nil
		}
	}
	if r.err != nil || r.panicked != nil {
		return 0, errors.New("jobs: COPY data abandoned")
	}
	for r.next < len(r.all) {
		if err := r.encodeNext(); err != nil {
			return n, err
		}
		// Encode into p's free space; append moves the row elsewhere only when it does not fit.
		buf := r.appendRow(p[n:n:len(p)], r.next)
		if len(buf) > len(p)-n {
			// It did not fit: hand out what does, keep the rest for the next Read.
			k := copy(p[n:], buf)
			r.spill = append(r.spill[:0], buf[k:]...)
			r.next++
			return n + k, nil
		}
		n += len(buf)
		r.next++
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// appendRow appends row i's fields, in the COPY's column order, and its newline.
func (r *csvRows) appendRow(buf []byte, i int) []byte {
	p := &r.all[i]
	buf = appendCSVText(buf, p.queue)
	buf = append(buf, ',')
	buf = appendCSVText(buf, p.kind)
	buf = append(buf, ',')
	buf = appendCSVText(buf, p.payload)
	buf = append(buf, ',')
	buf = appendCSVInt(buf, int64(p.version))
	buf = append(buf, ',')
	buf = appendCSVInt(buf, int64(p.priority))
	buf = append(buf, ',')
	buf = appendCSVInt(buf, int64(p.maxAttempts))
	buf = append(buf, ',')
	buf = appendCSVInt(buf, int64(p.leaseMs))
	if r.runAts != nil {
		buf = append(buf, ',')
		buf = appendCSVTime(buf, r.runAts[i])
	}
	if r.extras {
		buf = append(buf, ',')
		if len(p.metadata) == 0 {
			buf = appendCSVText(buf, emptyMetadata)
		} else {
			buf = appendCSVText(buf, p.metadata)
		}
		buf = append(buf, ',')
		buf, r.scratch = appendCSVTextArray(buf, r.scratch, p.tags)
	}
	return append(buf, '\n')
}
