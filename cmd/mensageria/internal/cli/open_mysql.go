package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/xadm/mensageria/driver/mysql"
)

// openMySQL opens the MariaDB or MySQL database of a mysql:// or
// mariadb:// URL. Unlike PostgreSQL's pool it connects at once: the driver
// checks the server's version (MariaDB 10.6, MySQL 8.0 at least) before
// anything runs.
func openMySQL(database, schema string) (*backend, error) {
	drv, err := mysql.Open(database, &mysql.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &backend{drv: drv, sqlDB: drv.DB(), close: func() { _ = drv.Close() }}, nil
}

// setupMySQL points the demo at a database of its own on the server of
// --db, created here and dropped at the end unless --keep.
func (d *demo) setupMySQL() error {
	u, err := url.Parse(d.opt.db)
	if err != nil {
		return usageErr("--db: not a URL")
	}
	admin, err := mysql.Open(d.opt.db, nil)
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	d.closers = append(d.closers, func() { _ = admin.Close() })
	name := fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
	if _, err := admin.DB().Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	if d.opt.keep {
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
	d.newConn = func() (*backend, error) { return openMySQL(db, d.schema) }
	return nil
}
