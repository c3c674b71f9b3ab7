//go:build ignore

package multifile

// Files excluded by build constraints are not read.
//
//tenure:job kind=alpha
type ignored struct{}
