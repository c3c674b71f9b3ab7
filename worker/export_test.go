package worker

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand
