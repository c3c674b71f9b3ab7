package jobs

import (
	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/jobrow"
)

// rowFromGen converts a stored job (jobrow.FromGen). A column it cannot decode is an
// ErrCorruptRow error, never a silently emptied field.
func rowFromGen(j gen.TenureJob) (*generics.JobRow, error) { return jobrow.FromGen(j, ErrCorruptRow) }
