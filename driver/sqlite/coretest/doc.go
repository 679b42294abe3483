// Package coretest holds the tests of the root package and of
// mensageriatest that run on the embedded database, SQLite, besides
// PostgreSQL: the client's contract on every backend, and the properties
// checked on SQLite for speed. They live in this module, not beside the
// packages they test, so that the core module's go.mod does not require
// SQLite. The package itself is empty.
package coretest
