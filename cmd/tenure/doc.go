// Command tenure is Tenure's command-line tool.
//
// Usage:
//
//	tenure <command> [arguments]
//
// Commands:
//
//	migrate up|down|status   apply, roll back or list the schema migrations
//
// Run "tenure <command> -h" for a command's flags. Commands that talk to PostgreSQL take
// the connection URL from -database-url, else from $DATABASE_URL.
//
// Exit codes: 0 on success, 1 when the command failed, 2 on a usage error.
package main
