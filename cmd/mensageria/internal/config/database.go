package config

import (
	"strings"

	"github.com/xadm/mensageria/driver/mysql"
)

// IsMySQL reports whether database is a MariaDB or MySQL URL (mysql:// or
// mariadb://).
func IsMySQL(database string) bool {
	return strings.HasPrefix(database, "mysql://") || strings.HasPrefix(database, "mariadb://")
}

// checkMySQLURL is the config's rule for a mysql:// or mariadb:// URL: it
// names a host and one database, and its parameters are the Go driver's.
// It only translates the URL (mysql.DSNFromURL): nothing connects.
func checkMySQLURL(database string) string {
	if _, err := mysql.DSNFromURL(database); err != nil {
		return "not a valid MariaDB/MySQL URL (mysql://user:password@host:3306/db): " + strings.TrimPrefix(err.Error(), "mensageria/mysql: config url: ")
	}
	return ""
}
