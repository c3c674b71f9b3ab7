package worker

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.skipDeregister = true }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand

// RunPermitAllocate is the engine's allocation (its statements, in one pipeline).
var RunPermitAllocate = runPermitAllocate

// ClaimBatchStats returns the batched claim statements w ran and the requests they carried.
func ClaimBatchStats(w *Worker) (statements, requests int64) {
	return w.m.claimBatches.Load(), w.m.claimBatchRequests.Load()
}
