package tenurenats

import "errors"

// ErrInvalidSubject means a subject is not a publishable NATS subject: empty, longer than 255
// bytes, containing whitespace or a wildcard token (* or >), or with an empty token.
var ErrInvalidSubject = errors.New("tenurenats: invalid subject")

// ErrInvalidMessage means an outbox message cannot be stored as given: a message id that is
// not 1..200 bytes of valid UTF-8, a payload over MaxPayloadBytes, or headers that are not
// valid (empty or reserved names, NUL characters, over 64 KiB encoded).
var ErrInvalidMessage = errors.New("tenurenats: invalid message")

// ErrInvalidConfig means a Relay, Client or Worker configuration cannot work. The error names
// the field.
var ErrInvalidConfig = errors.New("tenurenats: invalid config")

// ErrDuplicateWindow means the stream's duplicate window (StreamConfig.Duplicates) is shorter
// than the relay needs for exactly-once publication: a row whose publish was not marked sent
// can be published again up to Lease + RetryCap after its first publish, and JetStream only
// drops the repeat inside the window.
var ErrDuplicateWindow = errors.New("tenurenats: stream duplicate window too short")

// ErrKindNotSubjectToken means a job kind cannot be a NATS subject token (it contains '.',
// '*', '>' or whitespace), so it cannot be routed on JetStream as <SubjectPrefix>.<kind>.
var ErrKindNotSubjectToken = errors.New("tenurenats: job kind is not a valid subject token")

// ErrAlreadyRunning means Run was called on a Relay or Worker that is already running.
var ErrAlreadyRunning = errors.New("tenurenats: already running")
