package polyglot

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// dbKind is the database the programs and the daemons of a test share, as
// the harness sees it: where the tables of one party go, what a table is
// called there, the URL the daemons get and the settings that differ.
type dbKind interface {
	// name is the database's name, for messages.
	name() string
	// namespace is a fresh place for one party's tables: a schema of the
	// shared test database on PostgreSQL; on MariaDB a table-name prefix
	// (mensageria's `schema:`) in the test's own database, named hint.
	namespace(t *testing.T, hint string) string
	// table is the name of table in namespace ns.
	table(ns, name string) string
	// exists says whether table name of ns has been created.
	exists(t *testing.T, ns, name string) bool
	// count runs a query that returns one integer.
	count(t *testing.T, q string) int
	// daemonURL is the database for the `database:` of the daemons' configs.
	daemonURL() string
	// jdbcURL is the same database as MariaDB Connector/J or pgJDBC takes it.
	jdbcURL(t *testing.T) string
	// relaySettings and receiveSettings are the lines of the relay: and
	// receive: sections that this database needs on top of the common ones.
	relaySettings() string
	receiveSettings() string
	// open returns the Go driver on the tables of ns.
	open(t *testing.T, ns string) driver.Driver
	// refusals are the starts of the lines a program's refusals mode
	// prints, one per case, in order.
	refusals() []string
}

// pgKind is the shared PostgreSQL test database, each party in a schema
// of its own (dropped when the test ends).
type pgKind struct{ pool *pgxpool.Pool }

func postgresDB(t *testing.T) dbKind { return pgKind{pool: testdb.Pool(t)} }

func (pgKind) name() string                            { return "PostgreSQL" }
func (pgKind) namespace(t *testing.T, _ string) string { return testdb.Schema(t) }
func (pgKind) table(ns, name string) string            { return ns + "." + name }
func (k pgKind) count(t *testing.T, q string) int      { return count(t, k.pool, q) }
func (pgKind) daemonURL() string                       { return testdb.URL() }
func (pgKind) jdbcURL(t *testing.T) string             { return jdbcURL(t) }
func (pgKind) relaySettings() string                   { return "" }
func (pgKind) receiveSettings() string                 { return "  notify_interval: 10ms\n" }

func (k pgKind) exists(t *testing.T, ns, name string) bool {
	return count(t, k.pool, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2", ns, name) > 0
}

func (k pgKind) open(t *testing.T, ns string) driver.Driver {
	d, err := postgres.New(k.pool, &postgres.Config{Schema: ns})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The README's table of SQLSTATEs: one code per rule.
func (pgKind) refusals() []string {
	return []string{"unowned MS001 ", "empty-key MS002 ", "long-key MS002 ", "empty-type MS003 ", "number-header MS004 "}
}

// mariaKind is a database of its own on the MariaDB server of
// MENSAGERIA_TEST_MYSQL_URL (default driver/mysql's: root on the local
// server), created for the test and dropped when it ends; each party's
// tables have their own prefix in it.
type mariaKind struct {
	url string // mysql://…/<database>
	db  *sql.DB
}

func mariaDB(t *testing.T) dbKind {
	u := mysqltest.Database(t) // fails under CI when the server is down
	// Its cleanup is registered after Database's, so it runs first: the
	// pool is closed before the database is dropped.
	return mariaKind{url: u, db: mysqltest.Open(t, u)}
}

func (mariaKind) name() string { return "MariaDB" }

func (mariaKind) namespace(t *testing.T, hint string) string {
	if len(hint) > 32 || strings.Trim(hint, "abcdefghijklmnopqrstuvwxyz_") != "" {
		t.Fatalf("namespace %q: want a lower-case prefix of at most 32 letters", hint)
	}
	return hint
}

func (mariaKind) table(ns, name string) string { return ns + "_" + name }
func (k mariaKind) daemonURL() string          { return k.url }
func (mariaKind) relaySettings() string {
	// No notification crosses processes: the relay finds the program's
	// INSERTs at its poll (docs/mysql.md).
	return "  poll_interval: 100ms\n"
}
func (mariaKind) receiveSettings() string { return "" }

func (k mariaKind) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := k.db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (k mariaKind) exists(t *testing.T, ns, name string) bool {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	if err := k.db.QueryRowContext(context.Background(), q, k.table(ns, name)).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n > 0
}

// jdbcURL is jdbc:mariadb://host:port/database?user=…&password=….
func (k mariaKind) jdbcURL(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(k.url)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	q := url.Values{}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if pw, ok := u.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	return "jdbc:mariadb://" + host + u.Path + "?" + q.Encode()
}

func (k mariaKind) open(t *testing.T, ns string) driver.Driver {
	t.Helper()
	// Over the kind's own pool: a namespace is a table prefix of the
	// same database.
	d, err := mysql.New(k.db, &mysql.Config{Schema: ns})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The triggers' refusals: one SQLSTATE, 45000, and the rule in the text
// (driver/mysql/migrations/002_catalog.sql), which the program shows
// without Connector/J's "(conn=N) ".
func (mariaKind) refusals() []string {
	return []string{
		"unowned 45000 mensageria: the message type has no owner app in the catalog",
		"empty-key 45000 mensageria: the key is empty",
		"long-key 45000 mensageria: the key is longer than 1000 bytes",
		"empty-type 45000 mensageria: the message type is empty",
		"number-header 45000 mensageria: every header needs a non-empty name and a string value",
	}
}
