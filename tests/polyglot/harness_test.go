package polyglot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// root is the repository's top directory, seen from this package.
const root = "../.."

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds cmd/mensageria once per test binary: the daemons under
// test are the real program.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mensageria-polyglot-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "mensageria")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/xadm/mensageria/cmd/mensageria").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// need finds a tool scripts/polyglot.sh installs: a test without it skips,
// or fails when CI is set.
func need(t *testing.T, what, path string) string {
	t.Helper()
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			testdb.Unavailable(t, what+" (run scripts/polyglot.sh)", err)
		}
		return p
	}
	if _, err := os.Stat(path); err != nil {
		testdb.Unavailable(t, what+" (run scripts/polyglot.sh)", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a program run by a test, in a process group of its own so that
// a kill reaches whatever it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{}
	code int
}

// lines keeps what a program printed.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func start(t *testing.T, name, dir string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &lines{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s printed:\n%s", name, tail(p.out.String(), 4000))
		}
	})
	return p
}

// kill sends SIGKILL to the program's process group and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// wait waits for the program to end by itself and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		t.Fatalf("%s still running after %s; it printed:\n%s", p.name, within, tail(p.out.String(), 4000))
		return -1
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// urls are the test database's address for node-pg (a postgres:// URL as
// it is) and for JDBC (jdbc:postgresql://host/db?user=...).
func jdbcURL(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if pw, ok := u.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	if m := u.Query().Get("sslmode"); m != "" {
		q.Set("sslmode", m)
	}
	return "jdbc:postgresql://" + u.Host + u.Path + "?" + q.Encode()
}

// ready polls an HTTP endpoint until it answers 200.
func ready(t *testing.T, what, u string, within time.Duration, p *proc) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	mensageriatest.Eventually(t, within, func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s exited with %d before it was ready:\n%s", what, p.code, tail(p.out.String(), 4000))
		default:
		}
		resp, err := c.Get(u)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, what+" to answer "+u)
}

// lastLine returns the last line of s that starts with prefix.
func lastLine(s, prefix string) (string, error) {
	var found string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			found = sc.Text()
		}
	}
	if found == "" {
		return "", errors.New("no line starting with " + prefix)
	}
	return found, nil
}
