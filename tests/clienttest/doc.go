// Package clienttest holds the Client's contract tests and mensageriatest's
// tests, run on every backend: PostgreSQL, SQLite and MariaDB, besides the
// properties checked on SQLite for speed. They live in the tests module,
// not beside the root package, so that the core module's go.mod requires
// neither SQLite nor MySQL. The package itself is empty.
package clienttest
