package cli

import (
	"strings"

	"github.com/xadm/mensageria/driver/mysql"
)

// isMySQL reports whether database is a MariaDB or MySQL URL.
func isMySQL(database string) bool {
	return strings.HasPrefix(database, "mysql://") || strings.HasPrefix(database, "mariadb://")
}

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

// checkMySQLURL is the config's rule for a mysql:// or mariadb:// URL: it
// names a host and one database, and its parameters are the Go driver's.
func checkMySQLURL(database string) string {
	if _, err := mysql.DSNFromURL(database); err != nil {
		return "not a valid MariaDB/MySQL URL (mysql://user:password@host:3306/db): " + strings.TrimPrefix(err.Error(), "mensageria/mysql: config url: ")
	}
	return ""
}
