package kinds

import "encoding/json"

//tenure:job kind=dup
type First struct{}

//tenure:job kind=dup
type Second struct{}

//tenure:job kind=versioned version=4
type Versioned struct{}

type old struct{}

//tenure:upgrade kind=versioned from=4
func tooNew(o old) (Versioned, error) { return Versioned{}, nil }

//tenure:upgrade kind=versioned from=0
func tooOld(o old) (Versioned, error) { return Versioned{}, nil }

//tenure:upgrade kind=nope from=1
func unknownKind(o old) (Versioned, error) { return Versioned{}, nil }

//tenure:upgrade kind=versioned from=1
func v1(o old) (old, error) { return o, nil }

//tenure:upgrade kind=versioned from=1
func v1again(o old) (old, error) { return o, nil }

//tenure:upgrade kind=versioned from=3
func v3(o old) (Versioned, error) { return Versioned{}, nil }

//tenure:upgrade kind=versioned
func noFrom(o old) (old, error) { return o, nil }

//tenure:upgrade kind=versioned from=2
func (old) method(o old) (old, error) { return o, nil }

//tenure:upgrade kind=versioned from=2
func twoArgs(a, b old) (old, error) { return a, nil }

//tenure:upgrade kind=versioned from=2
func noError(a old) (old, bool) { return a, true }

//tenure:upgrade kind=versioned from=2
func mixed(a json.RawMessage) (old, error) { return old{}, nil }

//tenure:upgrade kind=versioned from=2
func generic[T any](a T) (T, error) { return a, nil }

//tenure:upgrade kind=versioned from=2
func chans(a chan int) (old, error) { return old{}, nil }
