package generics

import (
	"encoding/json"
	"testing"
)

type benchArgs struct {
	UserID   int64    `json:"user_id"`
	Email    string   `json:"email"`
	Template string   `json:"template"`
	Locale   string   `json:"locale"`
	Items    []int    `json:"items"`
	Note     string   `json:"note"`
	Tags     []string `json:"tags"`
}

func (benchArgs) Kind() string        { return "bench" }
func (benchArgs) PayloadVersion() int { return 1 }

var benchValue = benchArgs{UserID: 123456789, Email: "user123@example.com", Template: "welcome", Locale: "en-US",
	Items: []int{1, 2, 3, 4, 5}, Note: "Hello <world> & \"friends\"", Tags: []string{"a", "b"}}

// BenchmarkEncode is one insert's client-side payload work: validation, JSON, text checks and
// the database's size measure.
func BenchmarkEncode(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		if _, err := Encode(benchValue, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONSize is the measure alone, on the same payload.
func BenchmarkJSONSize(b *testing.B) {
	raw, _ := json.Marshal(benchValue)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for range b.N {
		if _, err := JSONSize(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is one handler's payload decoding (Decode: strict JSON, then Validate).
func BenchmarkDecode(b *testing.B) {
	raw, _ := json.Marshal(benchValue)
	r := NewRegistry()
	b.ReportAllocs()
	for range b.N {
		if _, err := Decode[benchArgs](r, raw, 1); err != nil {
			b.Fatal(err)
		}
	}
}
