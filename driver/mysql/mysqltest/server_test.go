//go:build linux

package mysqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"syscall"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver/mysql/mysqltest"
)

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A committed row survives a kill -9 and a normal stop; the server comes
// back on the same port, and Close removes everything.
func TestServerSurvivesKillAndRestart(t *testing.T) {
	ctx := context.Background()
	// PrivateServer fails, never skips, without MariaDB when CI is set.
	s := mysqltest.PrivateServer(t, mysqltest.Config{ExtraPort: true, Settings: map[string]string{"max_connections": "5"}})
	db := mysqltest.Open(t, s.URL())
	var version string
	if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("MariaDB %s on port %d (extra port %d), in %s", version, s.Port, s.ExtraPort, s.Dir)
	if _, err := db.Exec("CREATE TABLE kept (id INT PRIMARY KEY) ENGINE = InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO kept VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	pid, port := s.Pid(), s.Port

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.Pid() != 0 {
		t.Fatal("running after Kill")
	}
	if err := syscallAlive(pid); err == nil {
		t.Fatalf("process %d still there after Kill", pid)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("a ping got through while the server was down")
	}
	if err := s.Kill(); !errors.Is(err, mysqltest.ErrDown) {
		t.Fatalf("Kill of a stopped server: %v, want ErrDown", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Port != port || s.Starts() != 2 {
		t.Fatalf("port %d starts %d after the restart, want %d and 2", s.Port, s.Starts(), port)
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("%d rows after kill -9 and restart, want 2", n)
	}

	if _, err := db.Exec("INSERT INTO kept VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db); n != 3 {
		t.Fatalf("%d rows after a restart, want 3", n)
	}

	// The extra port lets root in when max_connections are all taken.
	hogs := mysqltest.Open(t, s.URLFor("root", "test"))
	var conns []*sql.Conn
	for range 20 {
		c, err := hogs.Conn(ctx)
		var me *gomysql.MySQLError
		if errors.As(err, &me) && me.Number == 1040 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if len(conns) == 0 || len(conns) == 20 {
		t.Fatalf("%d connections before the server refused one, want between 1 and 19", len(conns))
	}
	extra := mysqltest.Open(t, s.ExtraURLFor("root", "test"))
	if n := count(t, extra); n != 3 {
		t.Fatalf("%d rows through the extra port, want 3", n)
	}
	for _, c := range conns {
		_ = c.Close()
	}

	dir := s.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", dir, err)
	}
	if err := s.Start(ctx); err == nil {
		t.Fatal("Start after Close worked")
	}
}

// syscallAlive reports nil when process pid exists.
func syscallAlive(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Signal(syscall.Signal(0))
}
