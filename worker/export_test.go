package worker

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.skipDeregister = true }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand
