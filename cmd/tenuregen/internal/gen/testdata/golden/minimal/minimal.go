// Package minimal has one job type without options or rules, and no imports.
package minimal

// Hello says hello.
//
//tenure:job kind=hello
type Hello struct {
	Name string `json:"name"`
}
