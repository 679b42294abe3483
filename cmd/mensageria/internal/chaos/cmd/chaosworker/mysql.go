package main

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver/mysql"
)

// clockRead is the driver's first statement in each of its transactions:
// it reads the database clock that the transaction's lease guards
// (lease_until > now) compare with. driver/mysql's nowExpr.
const clockRead = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// openMySQL opens a pool on MariaDB whose sessions tell the harness's
// outbox triggers who they are and what time their transaction works at:
// @chaos_name is the process's name (PostgreSQL's application_name), and
// @chaos_now the clock the driver read at the start of its transaction,
// which is the time its settle guard compares leases with (PostgreSQL's
// now()). Should the driver read its clock otherwise, @chaos_now stays
// unset and the triggers take the statement's time, which is later: the
// checker's lease check then only gets stricter.
func openMySQL(ctx context.Context, f *flags, name string) (*sql.DB, *mysql.Driver, error) {
	dsn, err := mysql.DSNFromURL(f.db)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.ParseTime = false
	cfg.InterpolateParams = true
	inner, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(&namedConnector{inner: inner, name: name})
	db.SetMaxOpenConns(f.conns)
	db.SetMaxIdleConns(f.conns)
	// New reads the server's version: while the server is down, full or
	// refusing this user, try again, as a supervisor would restart the
	// process.
	for deadline := time.Now().Add(time.Minute); ; {
		drv, err := mysql.New(db, &mysql.Config{Schema: f.schema})
		if err == nil {
			return db, drv, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			_ = db.Close()
			return nil, nil, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quote is a MariaDB string literal of s.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

type namedConnector struct {
	inner sqldriver.Connector
	name  string
}

func (c *namedConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(sqldriver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("chaosworker: the MySQL connection runs no statements")
	}
	if _, err := ex.ExecContext(ctx, "SET @chaos_name = "+quote(c.name), nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &clockConn{Conn: conn}, nil
}

func (c *namedConnector) Driver() sqldriver.Driver { return c.inner.Driver() }

// clockConn is go-sql-driver's connection, with the driver's clock read
// kept in @chaos_now.
type clockConn struct {
	sqldriver.Conn
}

var (
	_ sqldriver.QueryerContext     = (*clockConn)(nil)
	_ sqldriver.ExecerContext      = (*clockConn)(nil)
	_ sqldriver.ConnBeginTx        = (*clockConn)(nil)
	_ sqldriver.ConnPrepareContext = (*clockConn)(nil)
	_ sqldriver.Pinger             = (*clockConn)(nil)
	_ sqldriver.SessionResetter    = (*clockConn)(nil)
	_ sqldriver.Validator          = (*clockConn)(nil)
	_ sqldriver.NamedValueChecker  = (*clockConn)(nil)
)

// statementOf is query without its comment lines and final semicolon:
// driver/mysql sends its named statements as their queries/*.sql files
// hold them, each under a header of comments.
func statementOf(query string) string {
	var b strings.Builder
	for line := range strings.Lines(query) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}

func (c *clockConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	if statementOf(query) == clockRead {
		query = "SELECT @chaos_now := " + strings.TrimPrefix(clockRead, "SELECT ")
	}
	q, ok := c.Conn.(sqldriver.QueryerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	return q.QueryContext(ctx, query, args)
}

func (c *clockConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	e, ok := c.Conn.(sqldriver.ExecerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	return e.ExecContext(ctx, query, args)
}

func (c *clockConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if b, ok := c.Conn.(sqldriver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin()
}

func (c *clockConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	if p, ok := c.Conn.(sqldriver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *clockConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(sqldriver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *clockConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(sqldriver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *clockConn) IsValid() bool {
	if v, ok := c.Conn.(sqldriver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *clockConn) CheckNamedValue(nv *sqldriver.NamedValue) error {
	if n, ok := c.Conn.(sqldriver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return sqldriver.ErrSkip
}
