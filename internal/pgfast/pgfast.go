// Package pgfast adds direct pgx encode and scan plans for the Go types the generated
// statements use (db/gen: sqlc's pointer overrides and github.com/google/uuid) where pgx's
// own plans take a slow path:
//
//   - a uuid.UUID parameter (alone or as an element of a uuid[] parameter): pgx sees a
//     driver.Valuer, formats the UUID as a string, fails to encode the string in binary
//     (building an error with fmt.Errorf), parses the string back and encodes the result. The
//     plan here hands pgx's UUID codec the 16 bytes directly.
//   - a *uuid.UUID scan target (a nullable uuid column): pgx allocates through reflect, decodes
//     the column to a string and calls uuid.Scan, which parses it. The plan here copies the 16
//     bytes. (A uuid.UUID target is a sql.Scanner, which pgx serves before any wrap function.)
//   - a **T scan target (a nullable column with sqlc's pointer override): pgx's generic
//     pointer-to-pointer plan allocates and assigns through reflect on every row. The plans
//     here do the same with typed code: NULL sets nil, anything else a new T scanned by pgx's
//     own plan for *T. The new Ts of one plan come from slabs (slab): pgx makes a scan plan
//     per column per result (baseRows.Scan), so a claim of 100 rows allocated one T per
//     nullable column per row (a dozen allocations per claimed job); it now allocates 7 slabs
//     per column (1, 2, 4, ... 64 values). A plan is used by the goroutine reading its rows
//     only. The cost: a value keeps its slab (at most 64 values) alive.
//
// The results are exactly what pgx's own plans produce; only the work differs. Register adds
// the plans to one connection's type map (the worker's engine pool does it in AfterConnect).
package pgfast

import (
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Register puts the plans in front of m's wrap functions. Call it once per map (a new
// connection's, in AfterConnect).
func Register(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapEncode}, m.TryWrapEncodePlanFuncs...)
	m.TryWrapScanPlanFuncs = append([]pgtype.TryWrapScanPlanFunc{tryWrapScan}, m.TryWrapScanPlanFuncs...)
}

func tryWrapEncode(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, pgtype.UUID{Bytes: u, Valid: true}, true
	}
	return nil, nil, false
}

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}

func tryWrapScan(target any) (pgtype.WrappedScanPlanNextSetter, any, bool) {
	switch target.(type) {
	case **uuid.UUID:
		return &uuidPtrScanPlan{}, uuidScanner{new(uuid.UUID)}, true
	case **int64:
		return &ptrScanPlan[int64]{}, new(int64), true
	case **int32:
		return &ptrScanPlan[int32]{}, new(int32), true
	case **int16:
		return &ptrScanPlan[int16]{}, new(int16), true
	case **string:
		return &ptrScanPlan[string]{}, new(string), true
	case **time.Time:
		return &ptrScanPlan[time.Time]{}, new(time.Time), true
	case **bool:
		return &ptrScanPlan[bool]{}, new(bool), true
	}
	return nil, nil, false
}

// ptrScanPlan scans a nullable column into **T: nil for NULL, else a new T scanned by next
// (pgx's plan for *T).
type ptrScanPlan[T any] struct {
	next pgtype.ScanPlan
	s    slab[T]
}

func (p *ptrScanPlan[T]) SetNext(next pgtype.ScanPlan) { p.next = next }

func (p *ptrScanPlan[T]) Scan(src []byte, target any) error {
	dst := target.(**T)
	if src == nil {
		*dst = nil
		return nil
	}
	v := p.s.peek()
	if err := p.next.Scan(src, v); err != nil {
		var zero T
		*v = zero // not handed out: the next value starts from zero again
		return err
	}
	p.s.take()
	*dst = v
	return nil
}

// maxSlab is the most values one slab holds.
const maxSlab = 64

// slab hands out new zero Ts, allocated in slabs that double from 1 to maxSlab values.
type slab[T any] struct {
	free  []T // not handed out yet
	given int
}

// peek returns the next new T (zero), handed out only once take is called.
func (s *slab[T]) peek() *T {
	if len(s.free) == 0 {
		s.free = make([]T, min(max(s.given, 1), maxSlab))
	}
	return &s.free[0]
}

// take hands out the value peek returned.
func (s *slab[T]) take() {
	s.free = s.free[1:]
	s.given++
}

// uuidScanner is a pgtype.UUIDScanner writing into a uuid.UUID (its callers handle NULL).
type uuidScanner struct{ p *uuid.UUID }

func (s uuidScanner) ScanUUID(v pgtype.UUID) error {
	if v.Valid {
		*s.p = v.Bytes
	}
	return nil
}

type uuidPtrScanPlan struct {
	next pgtype.ScanPlan
	s    slab[uuid.UUID]
}

func (p *uuidPtrScanPlan) SetNext(next pgtype.ScanPlan) { p.next = next }

func (p *uuidPtrScanPlan) Scan(src []byte, target any) error {
	dst := target.(**uuid.UUID)
	if src == nil {
		*dst = nil
		return nil
	}
	v := p.s.peek()
	if err := p.next.Scan(src, uuidScanner{v}); err != nil {
		*v = uuid.UUID{}
		return err
	}
	p.s.take()
	*dst = v
	return nil
}
