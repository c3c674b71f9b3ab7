// Package pguuid makes pgx encode github.com/google/uuid.UUID values and scan into them in
// PostgreSQL's binary format.
//
// uuid.UUID implements driver.Valuer and sql.Scanner, and pgx honours those over the type's
// underlying [16]byte: every token the engine sends goes out as a 36-character string the
// server parses, and every token it reads comes back as text to parse. At peak burn-down that
// was 11 % of the engine process's CPU (encodePlanDriverValuer and scanPlanCodecSQLScanner in
// the bench's CPU profile, 2026-12-02). Register replaces the connection's uuid and uuid[]
// types with a codec that handles uuid.UUID as 16 bytes and defers everything else to pgx's
// own UUIDCodec.
package pguuid

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Register installs the codec in m (a connection's TypeMap, e.g. from an AfterConnect hook).
func Register(m *pgtype.Map) {
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: codec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
	// Where the server does not say a parameter's type (the simple protocol), these say it.
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// codec is pgtype.UUIDCodec plus uuid.UUID values and *uuid.UUID targets.
type codec struct{ pgtype.UUIDCodec }

func (c codec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok {
		if next := c.UUIDCodec.PlanEncode(m, oid, format, pgtype.UUID{}); next != nil {
			return encodePlan{next}
		}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

func (c codec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok {
		if next := c.UUIDCodec.PlanScan(m, oid, format, &pgtype.UUID{}); next != nil {
			return scanPlan{next}
		}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodePlan struct{ next pgtype.EncodePlan }

func (p encodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}

type scanPlan struct{ next pgtype.ScanPlan }

func (p scanPlan) Scan(src []byte, target any) error {
	var v pgtype.UUID
	if err := p.next.Scan(src, &v); err != nil {
		return err
	}
	if v.Valid { // NULL leaves the target as it was, as uuid.UUID's own Scan does
		*target.(*uuid.UUID) = v.Bytes
	}
	return nil
}
