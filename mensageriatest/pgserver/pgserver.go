//go:build unix

// Package pgserver runs a private PostgreSQL server for tests that must
// crash, restart or reconfigure it: initdb into a temporary directory, the
// server on a free port of 127.0.0.1 (and a socket in that directory),
// never the machine's shared server. Run as root, the server's programs run
// as the postgres OS user, since PostgreSQL refuses root.
//
// The server keeps its data directory and port across Crash, Shutdown and
// Start, so clients reconnect to the same address: a crash is what a crash
// of the database host's PostgreSQL looks like to them.
//
// It is public, beside mensageriatest, because the command's benchmarks
// and chaos suite (a module of their own) start such servers, and an app's
// tests can crash one the same way.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/mensageriatest/serverproc"
)

// ErrNoPostgres means the PostgreSQL server programs were not found.
var ErrNoPostgres = errors.New("pgserver: PostgreSQL server programs (initdb, postgres) not found")

// ErrDown is returned by the methods that need a running server.
var ErrDown = serverproc.ErrDown

// EnvBin names the variable that points at the directory of initdb and
// postgres.
const EnvBin = "MENSAGERIA_PG_BIN"

// Config configures Start.
type Config struct {
	// BinDir holds initdb and postgres. Default: $MENSAGERIA_PG_BIN, else
	// the newest /usr/lib/postgresql/*/bin, else the PATH.
	BinDir string
	// Settings are passed as -c name=value on top of initdb's defaults
	// (which are a fresh server's production defaults: fsync on,
	// synchronous commit, autovacuum).
	Settings map[string]string
}

// Server is a private server. Its methods are safe for concurrent use.
type Server struct {
	// URL connects to database postgres as the superuser postgres.
	URL string
	// Dir holds the data directory (data), the socket and the server's
	// log (server.log).
	Dir string
	// Port is the TCP port on 127.0.0.1, the same for the server's whole
	// life.
	Port int

	bin      string
	data     string
	cred     *syscall.Credential
	settings map[string]string
	proc     *serverproc.Proc
	// walw is the walwriter held by HoldWAL, 0 when none. Only proc's
	// Stop and WhileRunning touch it, as one at a time.
	walw int
}

// Start initdbs a server into a new temporary directory and starts it.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	bin, err := binDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	proc, err := serverproc.New("pgserver")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = proc.Close(syscall.SIGQUIT, nil)
		}
	}()
	dir := proc.Dir
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("pgserver: hand %s to the postgres user: %w", dir, err)
		}
	}
	s := &Server{Dir: dir, bin: bin, data: filepath.Join(dir, "data"), cred: cred, settings: cfg.Settings, proc: proc}
	// --no-sync only skips flushing the files initdb writes; the server
	// itself runs with fsync on unless Settings say otherwise.
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgserver: initdb: %w: %s", err, out)
	}
	err = serverproc.OnFreePorts(ctx, 1, func(ports []int) error {
		s.Port = ports[0]
		s.URL = s.URLFor("postgres", "postgres")
		return s.Start(ctx)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// URLFor connects to database as user (trust authentication).
func (s *Server) URLFor(user, database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, s.Port, database)
}

// LogPath is the server's log, kept across restarts.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "server.log") }

// Start starts the server again after Crash or Shutdown, on the same port
// and data directory (after Crash, PostgreSQL replays its WAL first). It
// returns once the server accepts connections.
func (s *Server) Start(ctx context.Context) error {
	args := []string{"-D", s.data, "-p", strconv.Itoa(s.Port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + s.Dir}
	for _, k := range slices.Sorted(maps.Keys(s.settings)) {
		args = append(args, "-c", k+"="+s.settings[k])
	}
	return s.proc.Start(ctx, serverproc.Command{
		Path: filepath.Join(s.bin, "postgres"), Args: args, Credential: s.cred,
		// An immediate shutdown, should the process that started it die.
		ParentDeath: syscall.SIGQUIT,
		Output:      s.LogPath(), Log: s.LogPath(),
		Ready: func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, s.URL)
			if err == nil {
				_ = conn.Close(ctx)
			}
			return err
		},
	})
}

// Crash stops the server at once (immediate shutdown): every session is
// cut, nothing is checkpointed, and commits whose WAL was not yet written
// out (asynchronous commits of the last moments, up to three times
// wal_writer_delay on a running server; everything since HoldWAL) are
// lost; Start recovers from the WAL. It returns once the server is down.
func (s *Server) Crash() error {
	return s.proc.Stop(syscall.SIGQUIT, s.letWALGo(syscall.SIGQUIT))
}

// Shutdown stops the server the fast way: sessions are ended, a checkpoint
// is written, nothing committed is lost. The data directory stays.
func (s *Server) Shutdown() error {
	return s.proc.Stop(syscall.SIGINT, s.letWALGo(syscall.SIGINT))
}

// Restart is a fast shutdown and a start.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Shutdown(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Running reports whether the server is up (as far as this process knows).
func (s *Server) Running() bool { return s.proc.Running() }

// Starts counts how many times the server was started.
func (s *Server) Starts() int { return s.proc.Starts() }

// letWALGo returns what a stop by sig does to the walwriter HoldWAL
// holds, once the server has the signal.
func (s *Server) letWALGo(sig syscall.Signal) func() {
	return func() {
		if s.walw == 0 {
			return
		}
		if sig == syscall.SIGQUIT {
			// Let go, the held walwriter would write the WAL out on its
			// way down; it never runs again.
			_ = syscall.Kill(s.walw, syscall.SIGKILL)
		} else {
			// A fast shutdown waits for it, and loses nothing.
			_ = syscall.Kill(s.walw, syscall.SIGCONT)
		}
		s.walw = 0
	}
}

// HoldWAL stops the server's WAL writer (SIGSTOP) until release or Crash:
// meanwhile asynchronous commits stay in shared memory, and only a
// synchronous commit (or a full WAL buffer) writes them out. A Crash while
// it is held loses every asynchronous commit made since that was not so
// written: the widest loss a crash can cause, on purpose.
func (s *Server) HoldWAL(ctx context.Context) (release func(), err error) {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var pid int
	err = conn.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'").Scan(&pid)
	if err != nil {
		return nil, fmt.Errorf("pgserver: find the walwriter: %w", err)
	}
	err = s.proc.WhileRunning(func() error { return s.holdWAL(ctx, conn, pid) })
	if err != nil {
		return nil, err
	}
	return func() {
		// Once the server is down, its stop has let the writer go.
		_ = s.proc.WhileRunning(func() error {
			if s.walw == pid {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				s.walw = 0
			}
			return nil
		})
	}, nil
}

// holdWAL stops the walwriter pid, with no stop or start of the server
// meanwhile.
func (s *Server) holdWAL(ctx context.Context, conn *pgx.Conn, pid int) error {
	// A writer stopped in the middle of a write still holds the WAL write
	// lock or the buffer-mapping lock, and every statement that needs it
	// would then wait forever (an LWLock wait no timeout interrupts). So
	// it is stopped while it waits in its main loop, where it holds
	// neither, and a synchronous commit is tried once it is stopped; if it
	// does not get through, the writer resumes, lets it finish, and is
	// stopped again at its next wait.
	for try := 0; ; try++ {
		waitIdle(ctx, conn, pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("pgserver: stop the walwriter: %w", err)
		}
		// kill returns before the writer has stopped: running on, it could
		// take a lock after the probe got through, and hold it stopped.
		waitStopped(pid)
		if s.flushes(ctx) {
			break
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		if try == 20 {
			return errors.New("pgserver: no synchronous commit got through with the walwriter stopped, in 20 tries")
		}
	}
	s.walw = pid
	return nil
}

// waitIdle waits, for two seconds at most, until the WAL writer pid waits
// in its main loop for work (wait event WalWriterMain), as it does
// between rounds, holding no lock.
func waitIdle(ctx context.Context, conn *pgx.Conn, pid int) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		var event string
		err := conn.QueryRow(ctx, "SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1", pid).Scan(&event)
		if err != nil || event == "WalWriterMain" {
			return
		}
	}
}

// waitStopped waits, for a second at most, until the kernel shows process
// pid stopped (state T in /proc/<pid>/stat). Where there is no /proc it
// returns at once, and HoldWAL's probe is all there is.
func waitStopped(pid int) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// The state follows the command's name, which is in parentheses
		// and may hold anything, so it is read after the last ")".
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
	}
}

// flushes reports whether a synchronous commit completes within a few
// seconds. It waits for the commit to end either way, resuming the stopped
// walwriter to let a commit it holds up finish.
func (s *Server) flushes(ctx context.Context) bool {
	done := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		// A record larger than all the WAL buffers, so that the commit needs
		// the buffer-mapping lock as well as the write lock: the writer
		// takes both (the first to write, the second to initialize free
		// buffers ahead of the inserters), and a later statement of the
		// test may need either. A smaller record fits in the buffers the
		// writer initialized before it stopped and passes while the writer
		// holds the mapping lock; the test's next statement then waited
		// forever on WALBufMapping.
		_, err = conn.Exec(ctx, `SET synchronous_commit = on; BEGIN;
			SELECT pg_logical_emit_message(true, 'mensageria.pgserver',
				repeat('x', (pg_size_bytes(current_setting('wal_buffers')) + 262144)::int)); COMMIT`)
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(3 * time.Second):
		return false
	}
}

// Stop shuts the server down and removes its directory. The server cannot
// be started again.
func (s *Server) Stop() error {
	return s.proc.Close(syscall.SIGINT, s.letWALGo(syscall.SIGINT))
}

// binDir finds initdb and postgres.
func binDir(dir string) (string, error) {
	has := func(d string) bool {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		return e1 == nil && e2 == nil
	}
	if dir == "" {
		dir = os.Getenv(EnvBin)
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
	return "", fmt.Errorf("%w (set %s to their directory)", ErrNoPostgres, EnvBin)
}

// credential is whom the server runs as: the postgres OS user when this
// process is root, else this process's user (nil).
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgserver: running as root, and no postgres OS user to run the server as: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, 0, 0, fmt.Errorf("pgserver: postgres user ids %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}
