package clienttest_test

import (
	"context"
	"database/sql"
	"regexp"
	"testing"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
)

// mysqlBackend is a fresh MariaDB (or MySQL) database per test; every
// driver opened on it is another connection pool, like another process.
func mysqlBackend(t *testing.T) *backend {
	url := mysqltest.Database(t)
	ctx := context.Background()
	open := func() driver.Driver {
		d, err := mysql.Open(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	first := open().(*mysql.Driver)
	if _, err := first.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	db := first.DB()
	return &backend{
		name: "mysql",
		open: open,
		exec: func(q string, args ...any) error { _, err := db.ExecContext(ctx, mysqlDialect(q), args...); return err },
		insertID: func(q string) (id int64, err error) {
			return id, db.QueryRowContext(ctx, mysqlDialect(q)+" RETURNING id").Scan(&id)
		},
		count: func(q string, args ...any) int {
			var n int
			if err := db.QueryRowContext(ctx, mysqlDialect(q), args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
		table: first.Table,
		execTx: func(tx mensageria.Tx, q string, args ...any) error {
			_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, mysqlDialect(q), args...)
			return err
		},
		begin: func() (any, func() error, func() error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit, tx.Rollback
		},
	}
}

// mysqlDialect rewrites the tests' SQL for MySQL. keyColumn finds the column key where the tests' SQL names it bare: MySQL
// reserves the word, so every MySQL client writes it quoted
// (docs/mysql.md).
var keyColumn = regexp.MustCompile("([(,\\s])key([,)\\s=])")

// placeholder finds PostgreSQL's numbered parameters, which the tests
// write in their order of use; MySQL's are question marks.
var placeholder = regexp.MustCompile(`\$[0-9]+`)

func mysqlDialect(q string) string {
	return placeholder.ReplaceAllString(keyColumn.ReplaceAllString(q, "$1`key`$2"), "?")
}
