// Package mysqltest gives tests a real MariaDB or MySQL: a fresh database
// per test, dropped when the test ends.
//
// The server is read from MENSAGERIA_TEST_MYSQL_URL (default: the local
// server, root without a password, database test). When it cannot be
// reached a test skips, except when CI is set: there a missing service is
// a failure.
package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver/mysql"
)

// EnvURL names the variable that points tests at MariaDB or MySQL.
const EnvURL = "MENSAGERIA_TEST_MYSQL_URL"

// DefaultURL is used when EnvURL is unset.
const DefaultURL = "mysql://root@127.0.0.1:3306/test"

// URL returns the configured server URL.
func URL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

var (
	once     sync.Once
	admin    *sql.DB
	adminErr error
)

// Admin returns a shared pool on the configured database, or skips the
// test (fails it under CI) when the server is down.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	once.Do(func() {
		dsn, err := mysql.DSNFromURL(URL())
		if err != nil {
			adminErr = err
			return
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			adminErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			adminErr = err
			return
		}
		admin = db
	})
	if adminErr != nil {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("MariaDB/MySQL at %s is required when CI is set: %v", URL(), adminErr)
		}
		t.Skipf("MariaDB/MySQL at %s not reachable (%v); set CI=1 to make this a failure", URL(), adminErr)
	}
	return admin
}

// Database creates an empty, uniquely named database for t, dropped when
// t ends, and returns its mysql:// URL.
func Database(t testing.TB) string {
	t.Helper()
	db := Admin(t)
	name := fmt.Sprintf("mt_%s_%08x", sanitize(t.Name()), rand.Uint32())
	if _, err := db.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// DSN is Database's URL as a go-sql-driver DSN.
func DSN(t testing.TB) string {
	t.Helper()
	dsn, err := mysql.DSNFromURL(Database(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return c.FormatDSN()
}

// Open returns a pool on url, a mysql:// URL, closed when t ends.
func Open(t testing.TB, url string) *sql.DB {
	t.Helper()
	dsn, err := mysql.DSNFromURL(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sanitize keeps a database name within MySQL's 64 characters.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return out
}
