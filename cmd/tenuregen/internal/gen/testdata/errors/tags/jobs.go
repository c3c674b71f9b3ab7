package tags

import (
	"time"
)

type inner struct{ X []int }

// Embedded is embedded below.
type Embedded struct{ E int }

//tenure:job kind=tags
type Tags struct {
	Map        map[string]int `json:"map" tenure:"min=1"`
	Chan       chan int       `json:"chan"`
	Complex    complex128     `json:"complex"`
	Func       func()         `json:"func"`
	Unknown    string         `json:"unknown" tenure:"required,frob"`
	Dup        string         `json:"dup" tenure:"max=3,max=4"`
	Bool       bool           `json:"bool" tenure:"required"`
	MinMax     int            `json:"minmax" tenure:"min=5,max=1"`
	NaN        int            `json:"nan" tenure:"min=abc"`
	Small      int8           `json:"small" tenure:"max=300"`
	Float      float64        `json:"float" tenure:"oneof=1|2"`
	EmptyOne   string         `json:"empty_one" tenure:"oneof=a||b"`
	DupOne     string         `json:"dup_one" tenure:"oneof=a|a"`
	Both       string         `json:"both" tenure:"required,omitempty"`
	OnlyOmit   string         `json:"only_omit" tenure:"omitempty"`
	PtrOmit    *string        `json:"ptr_omit" tenure:"omitempty,min=1"`
	unexported string         `tenure:"required"`
	Skipped    string         `json:"-" tenure:"required"`
	Embedded   `tenure:"required"`
	NonComp    inner             `json:"non_comp" tenure:"required"`
	StructMin  inner             `json:"struct_min" tenure:"min=1"`
	PtrPtr     **int             `json:"ptr_ptr" tenure:"min=1"`
	Array      [3]int            `json:"array" tenure:"max=2"`
	Empty      string            `json:"empty" tenure:""`
	ReqValue   string            `json:"req_value" tenure:"required=1"`
	NoValue    string            `json:"no_value" tenure:"min"`
	Undefined  Nowhere           `json:"undefined" tenure:"required"`
	Negative   []int             `json:"negative" tenure:"min=-1"`
	Unsigned   uint              `json:"unsigned" tenure:"min=-1"`
	BadDur     time.Duration     `json:"bad_dur" tenure:"min=soon"`
	ChanSlice  []chan int        `json:"chan_slice"`
	Fine       map[string][]byte `json:"fine" tenure:"required"`
}

//tenure:job kind=conflicts
type Conflicts struct {
	Kind string `json:"kind"`
}

// Validate is generated; declaring it is an error.
func (Conflicts) Validate() error { return nil }
