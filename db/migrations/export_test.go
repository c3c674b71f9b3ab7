package migrations

// Test hooks: run the runner on a given set of migrations, and parse a file system.
var (
	UpWith     = upConn
	DownWith   = downConn
	StatusWith = statusConn
	Parse      = parse
)
