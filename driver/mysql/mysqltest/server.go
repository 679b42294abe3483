//go:build linux

package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/mensageriatest/serverport"
)

// ErrNoMariaDB means the MariaDB server programs were not found.
var ErrNoMariaDB = errors.New("mysqltest: MariaDB server programs (mariadb-install-db, mariadbd) not found")

// ErrDown is returned by the methods that need a running server.
var ErrDown = errors.New("mysqltest: the server is not running")

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

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	removed bool
	starts  int
}

// Start installs a server into a new temporary directory and starts it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	mysqld, install, err := programs(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mensageria-mysqltest-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	s := &Server{Dir: dir, mysqld: mysqld, data: filepath.Join(dir, "data"), settings: cfg.Settings}
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
	var lastErr error
	for range 5 { // another process may take a port first
		if s.Port, err = serverport.Free(); err != nil {
			return nil, err
		}
		if cfg.ExtraPort {
			if s.ExtraPort, err = serverport.Free(); err != nil {
				return nil, err
			}
			if s.ExtraPort == s.Port {
				continue
			}
		}
		if lastErr = s.Start(ctx); lastErr == nil {
			ok = true
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return errors.New("mysqltest: the server was closed for good")
	}
	if s.cmd != nil {
		return nil
	}
	args := []string{"--no-defaults", "--datadir=" + s.data, "--port=" + strconv.Itoa(s.Port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.Dir, "mysqld.sock"), "--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"),
		"--log-error=" + s.LogPath(), "--tmpdir=" + s.Dir, "--skip-name-resolve", "--init-file=" + filepath.Join(s.Dir, "init.sql")}
	if s.ExtraPort != 0 {
		args = append(args, "--extra-port="+strconv.Itoa(s.ExtraPort), "--extra-max-connections=64")
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	names := make([]string, 0, len(s.settings))
	for k := range s.settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		args = append(args, "--"+k+"="+s.settings[k])
	}
	cmd := exec.Command(s.mysqld, args...)
	// Its own process group, so a terminal's signals do not reach it; and
	// it dies with the process that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(filepath.Join(s.Dir, "stdout.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	fail := func(why error) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return why
	}
	dsn, err := DSNFor(s.URL())
	if err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // crash recovery comes first
	for {
		err := ping(ctx, dsn)
		if err == nil {
			s.cmd, s.done = cmd, done
			s.starts++
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("mysqltest: the server exited at start; its log: %s", tail(s.LogPath(), 2000))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("mysqltest: the server did not accept connections within 2 minutes: %v", err))
		}
	}
}

func ping(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(cctx)
}

// DSNFor turns one of the server's URLs into a go-sql-driver DSN.
func DSNFor(url string) (string, error) {
	rest, ok := strings.CutPrefix(url, "mysql://")
	if !ok {
		return "", fmt.Errorf("mysqltest: %q is not a mysql:// URL", url)
	}
	userHost, db, _ := strings.Cut(rest, "/")
	user, host, ok := strings.Cut(userHost, "@")
	if !ok {
		return "", fmt.Errorf("mysqltest: %q names no user", url)
	}
	c := gomysql.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = user, "tcp", host, db
	return c.FormatDSN(), nil
}

// Kill ends the server at once (SIGKILL): a crash. Every session is cut
// and nothing is flushed; Start recovers. It returns once the server is
// gone.
func (s *Server) Kill() error { return s.down(syscall.SIGKILL) }

// Stop shuts the server down normally (SIGTERM): sessions are ended, the
// buffer pool flushed, nothing committed is lost. The data directory
// stays, and Start starts it again.
func (s *Server) Stop() error { return s.down(syscall.SIGTERM) }

// Restart is Stop and Start.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Running reports whether the server is up (as far as this process knows).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Starts counts how many times the server was started.
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Pid is the server process's id, 0 when it is down.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) down(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return ErrDown
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(pid, sig)
	var err error
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
		err = fmt.Errorf("mysqltest: the server did not stop on %v within 2 minutes and was killed", sig)
	}
	s.cmd, s.done = nil, nil
	return err
}

// Close stops the server and removes its directory. The server cannot be
// started again.
func (s *Server) Close() error {
	err := s.Stop()
	if errors.Is(err, ErrDown) {
		err = nil
	}
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
	if rerr := os.RemoveAll(s.Dir); err == nil {
		err = rerr
	}
	return err
}

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

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
