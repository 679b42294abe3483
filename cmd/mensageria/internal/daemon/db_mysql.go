package daemon

import "github.com/xadm/mensageria/driver/mysql"

// openMySQL opens the MariaDB or MySQL database of a mysql:// or
// mariadb:// URL. Unlike PostgreSQL's pool it connects at once: the driver
// checks the server's version (MariaDB 10.6, MySQL 8.0 at least) before
// anything runs.
func openMySQL(database, schema string) (*DB, error) {
	drv, err := mysql.Open(database, &mysql.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &DB{Driver: drv, SQL: drv.DB(), close: func() { _ = drv.Close() }}, nil
}
