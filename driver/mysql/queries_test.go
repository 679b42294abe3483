package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver/mysql"
)

// Every statement of queries/ prepares on the server, against the tables
// the migrations make: a misspelt column or table, or a clause one server
// lacks, fails here rather than when the statement first runs.
func TestEveryStatementPrepares(t *testing.T) {
	d, _ := migrated(t)
	ctx := t.Context()
	c, err := d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stmts := mysql.Queries(d)
	for _, name := range slices.Sorted(maps.Keys(stmts)) {
		st, err := c.PrepareContext(ctx, stmts[name])
		var me *gomysql.MySQLError
		if errors.As(err, &me) && me.Number == 1295 {
			// A statement the server does not prepare (MariaDB prepares
			// a savepoint's, a MySQL may not), which the driver sends as
			// text anyway: run instead, in a transaction that holds the
			// savepoint the savepoint statements name.
			err = runInSavepoint(ctx, d.DB(), stmts["savepoint"], stmts[name])
		} else if err == nil {
			err = st.Close()
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, stmts[name])
		}
	}
}

func runInSavepoint(ctx context.Context, db *sql.DB, savepoint, q string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, savepoint); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q)
	return err
}
