package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/worker"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// TestEngineConstantsMatchThePublicOnes: the names and values the engine uses on its own
// (worker/internal/engine cannot import worker) are the public API's.
func TestEngineConstantsMatchThePublicOnes(t *testing.T) {
	require.Equal(t, worker.ProgressEvery, engine.ProgressEvery)
	require.Equal(t, worker.RegistryTTLIntervals, engine.RegistryTTLIntervals)
	require.Equal(t, worker.MaxOutcomeAttempt, engine.MaxOutcomeAttempt)
	require.Equal(t,
		[]string{worker.OutcomeSucceeded, worker.OutcomeRetried, worker.OutcomeDead, worker.OutcomeCancelled, worker.OutcomeReleased, worker.OutcomeSnoozed, worker.OutcomeStale, worker.OutcomeAbandoned},
		[]string{engine.OutcomeSucceeded, engine.OutcomeRetried, engine.OutcomeDead, engine.OutcomeCancelled, engine.OutcomeReleased, engine.OutcomeSnoozed, engine.OutcomeStale, engine.OutcomeAbandoned})
	pub := []worker.ErrorCode{worker.CodeHandlerError, worker.CodeTimeout, worker.CodeRateLimit, worker.CodeRemoteError, worker.CodeLeaseExpired,
		worker.CodePanic, worker.CodeUnknownKind, worker.CodeInvalidPayload, worker.CodePermanentRemote, worker.CodePermanent, worker.CodeCancelled,
		worker.CodeSnoozeLimit, worker.CodeDependencyFailed}
	eng := []engine.ErrorCode{engine.CodeHandlerError, engine.CodeTimeout, engine.CodeRateLimit, engine.CodeRemoteError, engine.CodeLeaseExpired,
		engine.CodePanic, engine.CodeUnknownKind, engine.CodeInvalidPayload, engine.CodePermanentRemote, engine.CodePermanent, engine.CodeCancelled,
		engine.CodeSnoozeLimit, engine.CodeDependencyFailed}
	for i := range pub {
		require.Equal(t, string(pub[i]), string(eng[i]))
		require.True(t, pub[i].Valid())
	}
	// The engine produces the public sentinels (worker's init gives them to it).
	require.Same(t, worker.ErrLeaseLost, engine.ErrLeaseLost)
	require.Same(t, worker.ErrWorkerStopping, engine.ErrWorkerStopping)
	require.ErrorIs(t, engine.NewStaleWriteError(1, 2, "heartbeat"), worker.ErrLostOwnership)
}
