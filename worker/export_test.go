package worker

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.skipDeregister = true }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand

// RunPermitAllocate is the engine's allocation (its statements, in one pipeline).
var RunPermitAllocate = runPermitAllocate

// EngineUUIDEncodePlan is the encode plan (its Go type) a connection of w's engine pool uses
// for a uuid.UUID parameter.
func EngineUUIDEncodePlan(ctx context.Context, w *Worker) (string, error) {
	c, err := w.eng.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer c.Release()
	return fmt.Sprintf("%T", c.Conn().TypeMap().PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.UUID{})), nil
}

// PlainUUIDEncodePlan is EngineUUIDEncodePlan for any connection.
func PlainUUIDEncodePlan(c *pgx.Conn) string {
	return fmt.Sprintf("%T", c.TypeMap().PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.UUID{}))
}
