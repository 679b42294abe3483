//go:build unix

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A private PostgreSQL server for the benchmarks: initdb into a temporary
// directory, the server on a free port of 127.0.0.1 and a socket in that
// directory, with the settings initdb writes, which are a fresh server's
// production defaults (autovacuum on, fsync on, synchronous commit). The
// machines' shared server runs for tests, with autovacuum off; a benchmark
// of dead tuples and vacuum run there would measure nothing real, and must
// never reconfigure it.

// ErrNoPostgres means the PostgreSQL server programs were not found.
var ErrNoPostgres = errors.New("bench: PostgreSQL server programs (initdb, postgres) not found")

// PostgresServerConfig configures StartPostgres.
type PostgresServerConfig struct {
	// BinDir holds initdb and postgres. Default: $MENSAGERIA_PG_BIN, else
	// the newest /usr/lib/postgresql/*/bin, else the PATH.
	BinDir string
	// Settings are passed as -c name=value on top of initdb's defaults,
	// for experiments; the project's figures use none.
	Settings map[string]string
}

// PostgresServer is a running private server.
type PostgresServer struct {
	// URL connects to its database postgres as the superuser postgres.
	URL string
	// Dir holds the data directory, the socket and the server's log.
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPostgres initdbs and starts a private server. Run as root, the
// server's programs run as the postgres OS user (PostgreSQL refuses root);
// run as any other user, as that user.
func StartPostgres(ctx context.Context, cfg PostgresServerConfig) (*PostgresServer, error) {
	bin, err := postgresBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mensageria-pg-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("bench: private server: hand %s to the postgres user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	// --no-sync only skips flushing the freshly written files; the server
	// itself runs with fsync on.
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: private server: initdb: %w: %s", err, out)
	}
	var lastErr error
	for range 5 { // another process may take the free port first
		s, err := startPostmaster(ctx, bin, dir, data, cred, cfg.Settings)
		if err == nil {
			ok = true
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startPostmaster(ctx context.Context, bin, dir, data string, cred *syscall.Credential, settings map[string]string) (*PostgresServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		args = append(args, "-c", k+"="+settings[k])
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: private server: %w", err)
	}
	s := &PostgresServer{URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	// Ready once it accepts a connection; gone if it exited (a port taken
	// meanwhile, a bad setting).
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URL)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("bench: private server exited at start: %s", strings.TrimSpace(string(log)))
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("bench: private server did not accept connections within a minute: %v", err)
		}
	}
}

func (s *PostgresServer) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop shuts the server down (fast shutdown: sessions are ended) and
// removes its directory.
func (s *PostgresServer) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.kill()
	}
	return os.RemoveAll(s.Dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// postgresBinDir finds initdb and postgres.
func postgresBinDir(dir string) (string, error) {
	has := func(d string) bool {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		return e1 == nil && e2 == nil
	}
	if dir == "" {
		dir = os.Getenv("MENSAGERIA_PG_BIN")
	}
	if dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("%w in %s", ErrNoPostgres, dir)
		}
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(found, func(i, j int) bool { // newest major version first
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(found[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(found[j])))
		return vi > vj
	})
	for _, d := range found {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w (set MENSAGERIA_PG_BIN to their directory)", ErrNoPostgres)
}

// postgresCredential is whom the server runs as: the postgres OS user when
// this process is root, else this process's user (nil).
func postgresCredential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("bench: private server: running as root, and no postgres OS user to run the server as: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, 0, 0, fmt.Errorf("bench: private server: postgres user ids %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}
