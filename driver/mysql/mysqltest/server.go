//go:build linux

package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/mensageriatest/serverproc"
)

// ErrNoMariaDB means the MariaDB server programs were not found.
var ErrNoMariaDB = errors.New("mysqltest: MariaDB server programs (mariadb-install-db, mariadbd) not found")

// ErrDown is returned by the methods that need a running server.
var ErrDown = serverproc.ErrDown

// EnvBin names the variable that points at the directory of mariadbd;
// mariadb-install-db is looked for there, beside it in ../bin, and on the
// PATH.
const EnvBin = "MENSAGERIA_MARIADB_BIN"

// Config configures Start.
type Config struct {
	// BinDir holds mariadbd. Default: $MENSAGERIA_MARIADB_BIN, else
	// /usr/sbin (Debian's mariadb-server), else the PATH.
	BinDir string
	// Settings are passed as --name=value on top of a fresh server's
	// defaults (which keep every commit durable:
	// innodb_flush_log_at_trx_commit=1).
	Settings map[string]string
	// ExtraPort also listens on a second port (MariaDB's extra_port),
	// where extra_max_connections more connections are accepted whatever
	// max_connections says: a test that fills the server's slots keeps its
	// own way in (ExtraURLFor).
	ExtraPort bool
}

// Server is a private MariaDB server for tests that must kill, stop or
// restart their server, which they may never do to the machine's shared
// one: mariadb-install-db into a temporary directory, mariadbd on a free
// port of 127.0.0.1 (and a socket in that directory), root without a
// password from 127.0.0.1, a database "test". It keeps its data directory
// and ports across Kill, Stop and Start, so clients reconnect to the same
// address. Run as root, the server runs as root too (--user=root). Its
// methods are safe for concurrent use.
type Server struct {
	// Dir holds the data directory (data), the socket and the server's
	// log (server.log).
	Dir string
	// Port is the TCP port on 127.0.0.1, the same for the server's whole
	// life.
	Port int
	// ExtraPort is the extra_port (Config.ExtraPort), 0 when none.
	ExtraPort int

	mysqld   string
	data     string
	settings map[string]string
	proc     *serverproc.Proc
}

// Start installs a server into a new temporary directory and starts it.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	mysqld, install, err := programs(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	proc, err := serverproc.New("mysqltest")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = proc.Close(syscall.SIGKILL, nil)
		}
	}()
	dir := proc.Dir
	s := &Server{Dir: dir, mysqld: mysqld, data: filepath.Join(dir, "data"), settings: cfg.Settings, proc: proc}
	args := []string{"--no-defaults", "--datadir=" + s.data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve", "--tmpdir=" + dir}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ctx, install, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mysqltest: mariadb-install-db: %w: %s", err, out)
	}
	// Run at every start, as the server's own bootstrap (no privilege
	// checks): root from 127.0.0.1 without a password, whatever the
	// installer made of root@localhost, and the tests' database.
	initSQL := "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\n" +
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n" +
		"CREATE DATABASE IF NOT EXISTS test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;\n"
	if err := os.WriteFile(filepath.Join(dir, "init.sql"), []byte(initSQL), 0o644); err != nil {
		return nil, err
	}
	ports := 1
	if cfg.ExtraPort {
		ports = 2
	}
	err = serverproc.OnFreePorts(ctx, ports, func(p []int) error {
		s.Port = p[0]
		if cfg.ExtraPort {
			s.ExtraPort = p[1]
		}
		return s.Start(ctx)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// PrivateServer starts a private server (Start) for t and removes it when
// t ends. Without the server programs t is skipped, or fails when CI is
// set.
func PrivateServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		if errors.Is(err, ErrNoMariaDB) {
			if os.Getenv("CI") != "" {
				t.Fatalf("the MariaDB server programs are required when CI is set: %v", err)
			}
			t.Skipf("%v; set CI=1 to make this a failure", err)
		}
		t.Fatalf("private MariaDB server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Logf("private MariaDB server: close: %v", err)
		}
	})
	return s
}

// URL connects to database test as root.
func (s *Server) URL() string { return s.URLFor("root", "test") }

// URLFor connects to database as user, without a password.
func (s *Server) URLFor(user, database string) string {
	return fmt.Sprintf("mysql://%s@127.0.0.1:%d/%s", user, s.Port, database)
}

// ExtraURLFor connects through the extra port (Config.ExtraPort), which
// max_connections does not bound; the main port when there is none.
func (s *Server) ExtraURLFor(user, database string) string {
	if s.ExtraPort == 0 {
		return s.URLFor(user, database)
	}
	return fmt.Sprintf("mysql://%s@127.0.0.1:%d/%s", user, s.ExtraPort, database)
}

// LogPath is the server's error log, kept across restarts.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "server.log") }

// Start starts the server again after Kill or Stop, on the same ports and
// data directory (after Kill, InnoDB recovers from its redo log first). It
// returns once the server accepts connections as root.
func (s *Server) Start(ctx context.Context) error {
	args := []string{"--no-defaults", "--datadir=" + s.data, "--port=" + strconv.Itoa(s.Port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.Dir, "mysqld.sock"), "--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"),
		"--log-error=" + s.LogPath(), "--tmpdir=" + s.Dir, "--skip-name-resolve", "--init-file=" + filepath.Join(s.Dir, "init.sql")}
	if s.ExtraPort != 0 {
		args = append(args, "--extra-port="+strconv.Itoa(s.ExtraPort), "--extra-max-connections=64")
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	for _, k := range slices.Sorted(maps.Keys(s.settings)) {
		args = append(args, "--"+k+"="+s.settings[k])
	}
	dsn, err := mysql.DSNFromURL(s.URL())
	if err != nil {
		return err
	}
	return s.proc.Start(ctx, serverproc.Command{
		Path: s.mysqld, Args: args, ParentDeath: syscall.SIGKILL,
		Output: filepath.Join(s.Dir, "stdout.log"), Log: s.LogPath(),
		Ready: func(ctx context.Context) error {
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			return db.PingContext(ctx)
		},
	})
}

// Kill ends the server at once (SIGKILL): a crash. Every session is cut
// and nothing is flushed; Start recovers. It returns once the server is
// gone.
func (s *Server) Kill() error { return s.proc.Stop(syscall.SIGKILL, nil) }

// Stop shuts the server down normally (SIGTERM): sessions are ended, the
// buffer pool flushed, nothing committed is lost. The data directory
// stays, and Start starts it again.
func (s *Server) Stop() error { return s.proc.Stop(syscall.SIGTERM, nil) }

// Restart is Stop and Start.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Running reports whether the server is up (as far as this process knows).
func (s *Server) Running() bool { return s.proc.Running() }

// Starts counts how many times the server was started.
func (s *Server) Starts() int { return s.proc.Starts() }

// Pid is the server process's id, 0 when it is down.
func (s *Server) Pid() int { return s.proc.Pid() }

// Close stops the server and removes its directory. The server cannot be
// started again.
func (s *Server) Close() error { return s.proc.Close(syscall.SIGTERM, nil) }

// programs finds mariadbd and mariadb-install-db.
func programs(dir string) (mysqld, install string, err error) {
	if dir == "" {
		dir = os.Getenv(EnvBin)
	}
	find := func(names []string, dirs ...string) string {
		for _, d := range dirs {
			for _, n := range names {
				p := filepath.Join(d, n)
				if st, err := os.Stat(p); err == nil && !st.IsDir() {
					return p
				}
			}
		}
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
		}
		return ""
	}
	servers, installers := []string{"mariadbd", "mysqld"}, []string{"mariadb-install-db", "mysql_install_db"}
	if dir != "" {
		mysqld = find(servers, dir)
		install = find(installers, dir, filepath.Join(dir, "..", "bin"))
		if mysqld == "" || install == "" {
			return "", "", fmt.Errorf("%w in %s", ErrNoMariaDB, dir)
		}
		return mysqld, install, nil
	}
	mysqld = find(servers, "/usr/sbin", "/usr/libexec", "/usr/local/sbin", "/usr/local/mysql/bin")
	install = find(installers, "/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts")
	if mysqld == "" || install == "" {
		return "", "", fmt.Errorf("%w (set %s to the directory of mariadbd)", ErrNoMariaDB, EnvBin)
	}
	return mysqld, install, nil
}
