package migrations

// Test hooks: run the runner on a given set of migrations, and parse a file system.
var (
	UpWith     = defaultRunner.upConn
	DownWith   = defaultRunner.downConn
	StatusWith = defaultRunner.statusConn
	Parse      = parse
)
