package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
)

// setupMySQL points the demo at a database of its own on the server of
// --db, created here and dropped at the end unless --keep.
func (d *demo) setupMySQL(ctx context.Context) error {
	u, err := url.Parse(d.opt.DB)
	if err != nil {
		return daemon.Usage("--db: not a URL")
	}
	admin, err := daemon.Open(ctx, d.opt.DB, "", true)
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	d.closers = append(d.closers, admin.Close)
	name := fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
	if _, err := admin.SQL.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	if d.opt.Keep {
		d.logf("database: MariaDB/MySQL, database %s (kept)", name)
	} else {
		d.closers = append(d.closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = admin.SQL.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		})
		d.logf("database: MariaDB/MySQL, database %s (dropped at the end)", name)
	}
	u.Path = "/" + name
	db := u.String()
	d.remote, d.label = true, "MariaDB/MySQL"
	d.schema = "mensageria"
	d.effects, d.orders = "demo_effects", "demo_orders"
	d.newConn = func() (*daemon.DB, error) { return daemon.Open(ctx, db, d.schema, true) }
	return nil
}
