package directives

//tenure:job
type NoKind struct{}

//tenure:job kind=a bogus=1
type UnknownKey struct{}

//tenure:job kind=b kind=c
type DupKey struct{}

//tenure:job kind=d lease=abc priority=12 max_attempts=0 queue=-bad version=0 timeout=0s
type BadValues struct{}

//tenure:job kind=e noequals
type NoEquals struct{}

//tenure:job kind=f retry_base=2s retry_cap=1s lease=500ms
type BadRetry struct{}

//tenure:job kind=g
type NotStruct int

//tenure:job kind=h
type Alias = struct{}

//tenure:job kind=i
type Generic[T any] struct{ V T }

//tenure:job kind=j
func notAType() {}

//tenure:upgrade kind=k from=1
type UpgradeOnType struct{}

//tenure:frobnicate
var x int

func f() {
	//tenure:job kind=z
	_ = x
}

//tenure:job kind=l
//tenure:job kind=m
type TwoJobs struct{}

//tenure:job kind=bad!char
type BadKind struct{}

//tenure:job kind=n
type (
	// InGroup has its directive on the group, not on the type.
	InGroup struct{}
)
