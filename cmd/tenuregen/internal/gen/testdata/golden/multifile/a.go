// Package multifile spreads its kinds over several files; the output is sorted by type name
// whatever the file order.
package multifile

import "time"

// Zeta is declared first but sorts last.
//
//tenure:job kind=zeta queue=z timeout=1500ms
type Zeta struct {
	Wait time.Duration `json:"wait" tenure:"max=90s"`
}

// helper is not a job.
type helper struct{}
