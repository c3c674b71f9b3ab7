// Package gen is sqlc's output for the statements of Tenure's core (db/queries.sql over
// db/schema.sql; make generate writes it, make check-generated checks it). This file is not
// generated: sqlc leaves it alone.
//
// The package is internal to Tenure's core: the generics, jobs, worker and db packages and
// their tests. It carries no compatibility promise: a statement, a row type or a parameter
// struct changes, moves or goes whenever the core's SQL does, in any release. Applications
// use the public packages (jobs, worker, generics, tenuretest); the other modules of this
// repository (tenureui, tenureprom, tenurenats, tenureotel, the CLI, the examples and the
// benchmarks) do too, and a statement of their own lives in their own sqlc package (such as
// tenureui/internal/uidb; see sqlc.yaml). The root package's TestOnlyTheCoreImportsDBGen
// fails when a package of another module imports this one.
package gen
