package demo

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/sqlite"
)

// conn is one connection set to the demo's database: a relay that is to
// be killed has its own.
type conn struct {
	drv   driver.Driver
	pool  *pgxpool.Pool // nil on SQLite and MySQL
	sqlDB *sql.DB       // SQLite's or MySQL's handle, for reads outside the driver
	close func()
}

func (c *conn) Close() {
	if c != nil && c.close != nil {
		c.close()
	}
}

// openSQLite opens the SQLite database at path, creating it if need be.
func openSQLite(path, schema string) (*conn, error) {
	drv, err := sqlite.Open(path, &sqlite.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &conn{drv: drv, sqlDB: drv.DB(), close: func() { _ = drv.Close() }}, nil
}

// openMySQL opens the MariaDB or MySQL database of a mysql:// or
// mariadb:// URL.
func openMySQL(database, schema string) (*conn, error) {
	drv, err := mysql.Open(database, &mysql.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &conn{drv: drv, sqlDB: drv.DB(), close: func() { _ = drv.Close() }}, nil
}

// isMySQL reports whether database is a MariaDB or MySQL URL.
func isMySQL(database string) bool {
	return strings.HasPrefix(database, "mysql://") || strings.HasPrefix(database, "mariadb://")
}

// setupMySQL points the demo at a database of its own on the server of
// --db, created here and dropped at the end unless --keep.
func (d *demo) setupMySQL() error {
	u, err := url.Parse(d.opt.DB)
	if err != nil {
		return usageErr("--db: not a URL")
	}
	admin, err := mysql.Open(d.opt.DB, nil)
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	d.closers = append(d.closers, func() { _ = admin.Close() })
	name := fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
	if _, err := admin.DB().Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	if d.opt.Keep {
		d.logf("database: MariaDB/MySQL, database %s (kept)", name)
	} else {
		d.closers = append(d.closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = admin.DB().ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		})
		d.logf("database: MariaDB/MySQL, database %s (dropped at the end)", name)
	}
	u.Path = "/" + name
	db := u.String()
	d.remote, d.label = true, "MariaDB/MySQL"
	d.schema = "mensageria"
	d.effects, d.orders = "demo_effects", "demo_orders"
	d.newConn = func() (*conn, error) { return openMySQL(db, d.schema) }
	return nil
}
