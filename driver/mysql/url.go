package mysql

import (
	"net"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// DSNFromURL turns a mysql:// or mariadb:// URL
// (mysql://user:password@host:3306/dbname?param=value) into the DSN of
// go-sql-driver/mysql. The port defaults to 3306; query parameters are
// the driver's DSN parameters (tls=true, timeout=5s, ...) and pass as
// they are. The path names the database, which holds the tables.
func DSNFromURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", &ConfigError{Field: "url", Reason: "not a URL: " + redactedErr(err)}
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return "", &ConfigError{Field: "url", Reason: "scheme " + u.Scheme + ": want mysql:// or mariadb://"}
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", &ConfigError{Field: "url", Reason: "name one database in the path: mysql://user@host:3306/dbname"}
	}
	c := gomysql.NewConfig()
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.Net = "tcp"
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	c.Addr = net.JoinHostPort(host, port)
	c.DBName = db
	dsn := c.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	if _, err := gomysql.ParseDSN(dsn); err != nil {
		return "", &ConfigError{Field: "url", Reason: err.Error()}
	}
	return dsn, nil
}

// redactedErr is a URL parse error without the URL, which may hold a
// password.
func redactedErr(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return "malformed"
}
