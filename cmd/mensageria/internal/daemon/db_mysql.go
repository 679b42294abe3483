package daemon

import (
	"strings"

	"github.com/xadm/mensageria/driver/mysql"
)

// IsMySQL reports whether database is a MariaDB or MySQL URL.
func IsMySQL(database string) bool {
	return strings.HasPrefix(database, "mysql://") || strings.HasPrefix(database, "mariadb://")
}

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

// CheckMySQLURL is the config's rule for a mysql:// or mariadb:// URL: it
// names a host and one database, and its parameters are the Go driver's.
// It says what is wrong, or "".
func CheckMySQLURL(database string) string {
	if _, err := mysql.DSNFromURL(database); err != nil {
		return "not a valid MariaDB/MySQL URL (mysql://user:password@host:3306/db): " + strings.TrimPrefix(err.Error(), "mensageria/mysql: config url: ")
	}
	return ""
}
