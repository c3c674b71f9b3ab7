package worker

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.skipDeregister = true }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand

// RunPermitAllocate is the engine's allocation (its statements, in one pipeline).
var RunPermitAllocate = runPermitAllocate
