package multifile

// Test files are not read: this directive would be a duplicate kind.
//
//tenure:job kind=alpha
type testOnly struct{}
