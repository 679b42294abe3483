// Package mysql is the mensageria driver for MariaDB 10.6+ and MySQL 8.0+,
// through database/sql and github.com/go-sql-driver/mysql.
//
// Tables carry a name prefix in the connection's database (Config.Schema
// "mensageria" gives mensageria_outbox, mensageria_inbox, ...). Times are
// BIGINT unix microseconds of the database clock (UTC_TIMESTAMP(6)), so
// replicas with skewed clocks agree on leases.
//
// Claims take rows with SELECT … FOR UPDATE SKIP LOCKED, which is why the
// server must be MariaDB 10.6 or MySQL 8.0 at least: Open and New check
// and return a *VersionError naming the version found. The driver's
// transactions run at READ COMMITTED, so a claim locks only the rows it
// takes. There is no LISTEN/NOTIFY: Listen wakes the listeners of the same
// *Driver, and relays in other processes find new rows by polling.
//
// The relay election is a lease row per app (docs/adr/0028-mysql-driver.md):
// GET_LOCK would tie leadership to one connection, which a pool may drop
// and a proxy may move.
//
// Any program may enqueue with a plain
//
//	INSERT INTO mensageria_outbox (type, `key`, payload) VALUES ('order.created', 'order-1', '{"id":1}')
//
// (headers, a JSON object of strings, optional; `key` is a reserved word,
// so it is quoted). Triggers hold such an INSERT to the Go API's rules and
// refuse it with SIGNAL SQLSTATE '45000' (error 1644) and a message
// starting "mensageria: ": the type must have an owner in <prefix>owners,
// type and key non-empty without NUL, the payload JSON, headers NULL or an
// object of strings, message_id a UUID. Insert and InsertTx report a
// refused row as a *driver.UnownedTypeError or a *RefusedError.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver"
)

// Config configures the driver.
type Config struct {
	// Schema prefixes every table name: "<Schema>_outbox" and so on.
	// Default "mensageria". Letters, digits and underscores, at most 32
	// (MySQL's identifiers stop at 64 characters, and the longest name the
	// driver derives adds 25).
	Schema string
}

// ConfigError names the setting that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("mensageria/mysql: config %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, mensageria.ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == driver.ErrConfig }

// ErrVersion is wrapped by *VersionError.
var ErrVersion = errors.New("mensageria/mysql: server version too old")

// VersionError is returned by Open and New for a server without SELECT …
// FOR UPDATE SKIP LOCKED: MariaDB before 10.6, MySQL before 8.0.
type VersionError struct {
	// Server is what SELECT VERSION() said, e.g. "10.5.23-MariaDB".
	Server string
}

func (e *VersionError) Error() string {
	return "mensageria/mysql: the server is " + e.Server + "; the driver needs MariaDB 10.6 or later, or MySQL 8.0 or later (claims use FOR UPDATE SKIP LOCKED)"
}

// Is makes errors.Is(err, ErrVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// checkVersion accepts MariaDB >= 10.6 and MySQL >= 8.0.
func checkVersion(v string) error {
	num, _, _ := strings.Cut(v, "-")
	parts := strings.SplitN(num, ".", 3)
	if len(parts) < 2 {
		return &VersionError{Server: v}
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return &VersionError{Server: v}
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		if major > 10 || (major == 10 && minor >= 6) {
			return nil
		}
		return &VersionError{Server: v}
	}
	if major >= 8 {
		return nil
	}
	return &VersionError{Server: v}
}

// Driver is the MySQL backend. It is safe for concurrent use.
type Driver struct {
	db     *sql.DB
	ownsDB bool
	prefix string
	q      queries

	mu        sync.Mutex
	listeners map[*listener]struct{}
	closed    bool
}

var _ driver.Driver = (*Driver)(nil)

// Open connects with dsn, a go-sql-driver DSN ("user:pass@tcp(host:3306)/db")
// or a mysql:// or mariadb:// URL (DSNFromURL), checks the server version
// and returns the driver; Close closes the pool.
func Open(dsn string, cfg *Config) (*Driver, error) {
	if strings.HasPrefix(dsn, "mysql://") || strings.HasPrefix(dsn, "mariadb://") {
		var err error
		if dsn, err = DSNFromURL(dsn); err != nil {
			return nil, err
		}
	}
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, &ConfigError{Field: "dsn", Reason: err.Error()}
	}
	if c.DBName == "" {
		return nil, &ConfigError{Field: "dsn", Reason: "no database named: the tables live in the connection's database (…/dbname)"}
	}
	c.ParseTime = false
	c.MultiStatements = false
	// Arguments are interpolated client-side: one round trip a statement
	// instead of prepare, execute and close. go-sql-driver refuses it for
	// the charsets where that would be unsafe.
	c.InterpolateParams = true
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("mensageria/mysql: open: %w", err)
	}
	d, err := newDriver(context.Background(), db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	d.ownsDB = true
	return d, nil
}

// New wraps the caller's *sql.DB, opened with the "mysql" driver of
// github.com/go-sql-driver/mysql without parseTime (times are integers).
// Close does not close db.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Reason: "nil *sql.DB"}
	}
	return newDriver(context.Background(), db, cfg)
}

var schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,31}$`)

func newDriver(ctx context.Context, db *sql.DB, cfg *Config) (*Driver, error) {
	schema := "mensageria"
	if cfg != nil && cfg.Schema != "" {
		schema = cfg.Schema
	}
	if !schemaRE.MatchString(schema) {
		return nil, &ConfigError{Field: "Schema", Reason: fmt.Sprintf("%q: use at most 32 letters, digits and underscores, starting with a letter or underscore", schema)}
	}
	p := schema + "_"
	q := queriesFor(p)
	var v string
	if err := db.QueryRowContext(ctx, q.version).Scan(&v); err != nil {
		return nil, fmt.Errorf("mensageria/mysql: connect: %w", err)
	}
	if err := checkVersion(v); err != nil {
		return nil, err
	}
	return &Driver{db: db, prefix: p, q: q, listeners: map[*listener]struct{}{}}, nil
}

// DB returns the database handle.
func (d *Driver) DB() *sql.DB { return d.db }

// Table returns the full name of one of the driver's tables ("outbox",
// "inbox", "inbox_queue", "offsets", "leader", "migrations", "owners",
// "identity") or triggers.
func (d *Driver) Table(name string) string { return d.prefix + name }

// Close ends every listener and, when Open created the pool, closes it.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	for l := range d.listeners {
		l.closeLocked()
	}
	d.mu.Unlock()
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

// nowExpr is the database clock in unix microseconds ({{now}} in
// queries/). UTC_TIMESTAMP does not depend on the session's time_zone,
// which UNIX_TIMESTAMP(NOW()) does around a daylight-saving change.
const nowExpr = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// writer runs statements inside one transaction.
type writer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// txOptions: READ COMMITTED takes no gap locks, so a claim locks only the
// rows it takes and an enqueue never waits for a claim's range.
var txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// deadlockRetries bounds how often write runs a transaction again that
// InnoDB chose as a deadlock victim (error 1213): it rolled back whole.
const deadlockRetries = 5

// write runs fn inside one READ COMMITTED transaction, with now read from
// the database clock once at the start, so every comparison in the
// transaction agrees. A deadlock victim runs again; fn must start from
// scratch each time.
func (d *Driver) write(ctx context.Context, fn func(w writer, now int64) error) error {
	for attempt := 0; ; attempt++ {
		err := d.writeOnce(ctx, fn)
		if attempt < deadlockRetries && ctx.Err() == nil && isErrno(err, 1213) {
			continue
		}
		return err
	}
}

func (d *Driver) writeOnce(ctx context.Context, fn func(w writer, now int64) error) error {
	// Begun without the caller's cancellation: database/sql rolls back a
	// transaction whose context ends, and a COMMIT interrupted so leaves
	// its outcome unknown. The statements in it still take ctx.
	tx, err := d.db.BeginTx(context.WithoutCancel(ctx), txOptions)
	if err != nil {
		return wrap("begin", err)
	}
	var now int64
	err = tx.QueryRowContext(ctx, d.q.clock).Scan(&now)
	if err == nil {
		err = fn(tx, now)
	}
	if err == nil {
		if err = tx.Commit(); err != nil {
			err = wrap("commit", err)
		}
		return err
	}
	_ = tx.Rollback()
	return err
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mensageria/mysql: %s: %w", op, err)
}

// isErrno reports whether err is the server's error number n.
func isErrno(err error, n uint16) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == n
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
