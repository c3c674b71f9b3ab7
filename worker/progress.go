package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// This file is a running job's progress (Progress). The handler's call only stores the latest
// value in its execution (engine.Execution.SetProgress; the engine's progress.go keeps it); the queue loop's heartbeat (heartbeat.go) carries it to the database
// in the heartbeat statement of the queue's due jobs, fenced like the lease (id, running, claim
// token): a stale attempt's progress is never written. A job whose heartbeat is far off is
// made due by its unsent progress once ProgressEvery has passed since its last progress write,
// so progress costs at most one heartbeat statement per queue per ProgressEvery, shared by
// every job of the queue with progress to write, and nothing when the heartbeat is due anyway.
// The finish writes the last value too (with the success, or into the failed attempt's entry
// of the error history).

// ProgressEvery is the most often a job's progress is written on its own account: a Progress
// call is written with the job's next heartbeat, or at most ProgressEvery after the previous
// progress write (plus the heartbeat loop's 50 ms tick), whichever comes first.
const ProgressEvery = time.Second

// MaxProgressMsgChars bounds Progress's message, in characters.
const MaxProgressMsgChars = 200

// ErrInvalidProgress means Progress was given values that are not kept: a negative count, done
// above a non-zero total, or a message over MaxProgressMsgChars characters, not valid UTF-8 or
// holding a NUL character. Nothing was recorded.
var ErrInvalidProgress = errors.New("tenure: invalid job progress")

// Progress records the running job's progress: done of total units (total 0 when unknown) and
// a short message. Only the latest value is kept; it is written with the job's heartbeat,
// at most ProgressEvery after the previous progress write when the heartbeat is further off,
// fenced like the lease (a stale attempt's progress is never written), and with the
// attempt's finish. Readers see it in generics.JobRow.Progress (jobs.Client.Get, the
// dashboard, `tenure jobs get`); a failed attempt's last progress is kept in its entry of the
// error history (generics.AttemptError.Progress), and the next attempt starts without.
//
// It costs the handler no statement: a call only stores the value. It returns
// ErrNotInHandler outside a handler and ErrInvalidProgress for values it does not keep.
func Progress(ctx context.Context, done, total int64, msg string) error {
	e := engine.ExecutionFrom(ctx)
	if e == nil {
		return ErrNotInHandler
	}
	if err := checkProgress(done, total, msg); err != nil {
		return err
	}
	b, err := json.Marshal(generics.Progress{Done: done, Total: total, Msg: msg, At: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidProgress, err)
	}
	e.SetProgress(b)
	return nil
}

func checkProgress(done, total int64, msg string) error {
	switch {
	case done < 0 || total < 0:
		return fmt.Errorf("%w: negative count (done %d, total %d)", ErrInvalidProgress, done, total)
	case total > 0 && done > total:
		return fmt.Errorf("%w: done %d above total %d", ErrInvalidProgress, done, total)
	case !utf8.ValidString(msg):
		return fmt.Errorf("%w: message is not valid UTF-8", ErrInvalidProgress)
	case strings.IndexByte(msg, 0) >= 0:
		return fmt.Errorf("%w: message holds a NUL character", ErrInvalidProgress)
	case utf8.RuneCountInString(msg) > MaxProgressMsgChars:
		return fmt.Errorf("%w: message over %d characters", ErrInvalidProgress, MaxProgressMsgChars)
	}
	return nil
}
