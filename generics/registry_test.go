package generics_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
)

type ptrValidated struct {
	N int `json:"n"`
}

func (ptrValidated) Kind() string        { return "ptr_validated" }
func (ptrValidated) PayloadVersion() int { return 1 }
func (p *ptrValidated) Validate() error {
	if p.N < 1 {
		return &generics.FieldError{Field: "n", Rule: "min", Msg: "must be >= 1"}
	}
	return nil
}

func TestPointerReceiverValidateRunsOnEncodeAndDecode(t *testing.T) {
	_, err := generics.Encode(ptrValidated{N: 0}, 0)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)
	var fe *generics.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "n", fe.Field)
	raw, err := generics.Encode(ptrValidated{N: 2}, 0)
	require.NoError(t, err)
	got, err := generics.Decode[ptrValidated](nil, raw, 1)
	require.NoError(t, err)
	require.Equal(t, 2, got.N)
	_, err = generics.Decode[ptrValidated](nil, []byte(`{"n":0}`), 1)
	require.ErrorIs(t, err, generics.ErrInvalidPayload)
}

func TestEffectKeyIsStableAcrossGenerations(t *testing.T) {
	require.Equal(t, "job:42:effect:charge", generics.EffectKey(42, "charge"))
	j := &generics.Job[ptrValidated]{JobRow: &generics.JobRow{ID: 42, Generation: 1}}
	k1 := j.EffectKey("charge")
	j.Generation, j.Attempt = 7, 3
	require.Equal(t, k1, j.EffectKey("charge"), "the key never depends on the attempt or generation")
}

// Lookup hands out a copy: changing it cannot change the registry's kind.
func TestLookupReturnsACopy(t *testing.T) {
	r := generics.NewRegistry()
	_, err := generics.Register[lookupArgs](r, generics.WithDefaults(generics.KindDefaults{Queue: "mail"}))
	if err != nil {
		t.Fatal(err)
	}
	info, ok := r.Lookup("lookup")
	if !ok {
		t.Fatal("not registered")
	}
	info.Defaults.Queue = "hijacked"
	info.Version = 99
	again, _ := r.Lookup("lookup")
	if again.Defaults.Queue != "mail" || again.Version != 1 {
		t.Fatalf("the registry changed through Lookup's result: %+v", again)
	}
}

type lookupArgs struct{}

func (lookupArgs) Kind() string        { return "lookup" }
func (lookupArgs) PayloadVersion() int { return 1 }

// TestDecodeReusedDecoderKeepsNothing: payloads decode alike whatever the payloads decoded
// before them (strictUnmarshal reuses its decoders): a failed payload, trailing data or white
// space, or an unknown field leave nothing to the next one.
func TestDecodeReusedDecoderKeepsNothing(t *testing.T) {
	cases := []struct {
		raw  string
		n    int
		fail string
	}{
		{raw: `{"n":1}`, n: 1},
		{raw: `{"n":2} {"n":3}`, fail: "trailing data"},
		{raw: `{"n":4}`, n: 4},
		{raw: `{"n":5}` + " \n\t ", n: 5},
		{raw: `{"n":6}`, n: 6},
		{raw: `{"n":7,"x":1}`, fail: "unknown field"},
		{raw: `{"n":8}`, n: 8},
		{raw: `{"n":`, fail: "unexpected EOF"},
		{raw: `{"n":9}`, n: 9},
		{raw: `{"n":"ten"}`, fail: "cannot unmarshal"},
		{raw: `  {"n":11}`, n: 11},
		{raw: `{"n":12}}`, fail: "trailing data"},
		{raw: `{"n":13}`, n: 13},
	}
	for round := range 3 {
		for _, c := range cases {
			got, err := generics.Decode[ptrValidated](nil, []byte(c.raw), 1)
			if c.fail != "" {
				require.ErrorContains(t, err, c.fail, "round %d, %q", round, c.raw)
				continue
			}
			require.NoError(t, err, "round %d, %q", round, c.raw)
			require.Equal(t, c.n, got.N, "round %d, %q", round, c.raw)
		}
	}
}

// TestDecodeAllocations: decoding a small payload allocates for the value, not for a decoder:
// 2 allocations here, 9 before strictUnmarshal reused its decoders (the bound leaves room for
// the race detector, under which sync.Pool drops a quarter of what is put back).
func TestDecodeAllocations(t *testing.T) {
	raw := []byte(`{"n":2}`)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := generics.Decode[ptrValidated](nil, raw, 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per Decode: %v", allocs)
	require.LessOrEqual(t, allocs, 5.0)
}
