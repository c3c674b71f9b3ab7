// Package compiletest is generated into a temporary copy by TestGeneratedCodeCompilesAndRuns,
// which then vets, builds and tests it against PostgreSQL.
package compiletest

// Greet greets someone a few times.
//
//tenure:job kind=compile.greet version=2 queue=greetings priority=3 max_attempts=4 lease=5s timeout=3s retry_base=10ms retry_cap=50ms
type Greet struct {
	Name  string `json:"name" tenure:"required,max=10"`
	Lang  string `json:"lang" tenure:"oneof=en|ko"`
	Times int    `json:"times" tenure:"min=1,max=3"`
}

// GreetV1 is what version 1 stored.
type GreetV1 struct {
	Name string `json:"name"`
}

//tenure:upgrade kind=compile.greet from=1
func greetV1(old GreetV1) (Greet, error) {
	return Greet{Name: old.Name, Lang: "en", Times: 1}, nil
}

// Count counts.
//
//tenure:job kind=compile.count
type Count struct {
	N int `json:"n" tenure:"min=0"`
}

// Sweep leaves no row once it succeeded (delete on success, docs/guide.md §28).
//
//tenure:job kind=compile.sweep delete_on_success=true
type Sweep struct {
	Dir string `json:"dir" tenure:"required"`
}
