// Package polyglot holds black-box tests of mensageria as apps in other
// languages use it: the Java (JDBC) and Node.js (node-pg) programs of
// examples/ enqueue by plain SQL and apply the inbox queue by SQL, between
// the built `mensageria relay` and `mensageria receive` daemons, which are
// SIGKILLed and restarted mid-way, on PostgreSQL, and the Java one over
// MariaDB Connector/J on MariaDB too (dbkind_test.go); and Prism, an
// independent contract tool, checks the Go Sender's and Receiver's real
// exchanges against docs/openapi.yaml. scripts/polyglot.sh installs what
// they need; with CI set, a missing JDK, JDBC driver, Node.js or npm
// package, or a MariaDB that does not answer, fails them.
package polyglot
