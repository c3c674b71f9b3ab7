package names

//tenure:job kind=foo
type Foo struct{}

//tenure:job kind=foo_lower
type foo struct{}

//tenure:job kind=bar
type Bar struct{}

// Handlers is a name the generated file declares.
type Handlers struct{}

// EnqueueBar is a name the generated file declares.
func EnqueueBar() {}

var errors = 1

// Handler code may refer to generated names before they exist: that is not an error.
func use() { _ = KindBar }
