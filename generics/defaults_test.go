package generics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
)

type valDecl struct{}

func (valDecl) Kind() string                    { return "val" }
func (valDecl) PayloadVersion() int             { return 1 }
func (valDecl) Defaults() generics.KindDefaults { return generics.KindDefaults{Queue: "v"} }

type ptrDecl struct{ X int }

func (ptrDecl) Kind() string                     { return "ptr" }
func (ptrDecl) PayloadVersion() int              { return 1 }
func (*ptrDecl) Defaults() generics.KindDefaults { return generics.KindDefaults{Queue: "p"} }

type noDecl struct{}

func (noDecl) Kind() string        { return "none" }
func (noDecl) PayloadVersion() int { return 1 }

func TestDefaultsOf(t *testing.T) {
	for _, c := range []struct {
		args  generics.Args
		queue string
		ok    bool
	}{
		{valDecl{}, "v", true}, {&valDecl{}, "v", true},
		{ptrDecl{}, "p", true}, {&ptrDecl{}, "p", true},
		{noDecl{}, "", false}, {&noDecl{}, "", false}, {nil, "", false},
	} {
		d, ok := generics.DefaultsOf(c.args)
		require.Equal(t, c.ok, ok, "%T", c.args)
		require.Equal(t, c.queue, d.Queue, "%T", c.args)
	}
	d, ok := generics.DefaultsFor[ptrDecl]()
	require.True(t, ok)
	require.Equal(t, "p", d.Queue)
}

func TestKindDefaultsCheckOrConflicts(t *testing.T) {
	require.NoError(t, generics.KindDefaults{}.Check())
	for _, bad := range []generics.KindDefaults{
		{Queue: "bad queue"}, {Priority: 10}, {MaxAttempts: 1001}, {Lease: time.Millisecond}, {Timeout: -1},
		{RetryCap: -1}, {Unique: &generics.UniqueDefaults{States: []string{"ready"}}},
		{Unique: &generics.UniqueDefaults{ByPeriod: time.Millisecond}},
	} {
		require.Error(t, bad.Check(), "%+v", bad)
	}
	d := generics.KindDefaults{Queue: "a", MaxAttempts: 4}
	require.Equal(t, generics.KindDefaults{Queue: "a", Priority: 3, MaxAttempts: 4}, d.Or(generics.KindDefaults{Queue: "b", Priority: 3, MaxAttempts: 9}))
	require.Empty(t, d.Conflicts(generics.KindDefaults{Queue: "a", Priority: 5}))
	require.Len(t, d.Conflicts(generics.KindDefaults{Queue: "b", MaxAttempts: 5}), 2)
	u1 := &generics.UniqueDefaults{Fields: []string{"x"}}
	require.Empty(t, generics.KindDefaults{Unique: u1}.Conflicts(generics.KindDefaults{Unique: &generics.UniqueDefaults{Fields: []string{"x"}}}))
	require.Len(t, generics.KindDefaults{Unique: u1}.Conflicts(generics.KindDefaults{Unique: &generics.UniqueDefaults{ByArgs: true}}), 1)
}

// Delete on success cannot be declared with a unique key held in succeeded: the deleted row
// could not hold it.
func TestDefaultsDeleteOnSuccessWithUniqueSucceeded(t *testing.T) {
	d := generics.KindDefaults{DeleteOnSuccess: true, Unique: &generics.UniqueDefaults{States: []string{"dead"}}}
	if err := d.Check(); err != nil {
		t.Fatalf("unique over dead with delete on success: %v", err)
	}
	d.Unique.States = append(d.Unique.States, "succeeded")
	if err := d.Check(); !errors.Is(err, generics.ErrDeleteOnSuccessUnique) {
		t.Fatalf("got %v, want ErrDeleteOnSuccessUnique", err)
	}
	if got := (generics.KindDefaults{}).Or(generics.KindDefaults{DeleteOnSuccess: true}); !got.DeleteOnSuccess {
		t.Fatal("Or dropped DeleteOnSuccess")
	}
}
