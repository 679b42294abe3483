//go:build unix

package serverproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is the process of one private server, started again and again on
// the same directory. Its methods are safe for concurrent use.
type Proc struct {
	// Dir is the server's own directory: its data, socket and logs.
	Dir string

	name string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	closed bool
}

// New makes the directory of a server: a new temporary one named for
// name ("pgserver"), which also starts its errors' messages.
func New(name string) (*Proc, error) {
	// Not under a test's TempDir: its parents are private to this user,
	// and a server run as another user could not reach its directory.
	dir, err := os.MkdirTemp("", "mensageria-"+name+"-")
	if err != nil {
		return nil, err
	}
	return &Proc{Dir: dir, name: name}, nil
}

// Command is one start of the server.
type Command struct {
	Path string
	Args []string
	// Credential runs the server as another user; nil, as this process's.
	Credential *syscall.Credential
	// ParentDeath is the signal the server gets when the process that
	// started it dies, so that it never outlives its test (on Linux;
	// elsewhere it runs on).
	ParentDeath syscall.Signal
	// Output takes the server's standard output and error, appended across
	// starts.
	Output string
	// Log is the server's log (Output, or another file it writes itself),
	// whose last lines explain a server that exits at start.
	Log string
	// Ready makes one attempt to connect, within ctx, and reports nil once
	// the server accepts connections.
	Ready func(ctx context.Context) error
}

// Start starts the server unless it runs already, and returns once Ready
// reports nil. A server that exits meanwhile, or still refuses after two
// minutes (crash recovery comes first), or ctx done, is an error, and
// leaves no process behind.
func (p *Proc) Start(ctx context.Context, c Command) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%s: the server was stopped for good", p.name)
	}
	if p.cmd != nil {
		return nil
	}
	out, err := os.OpenFile(c.Output, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(c.Path, c.Args...)
	// Its own process group, so that a terminal's signals do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.Credential, Setpgid: true}
	onParentDeath(cmd.SysProcAttr, c.ParentDeath)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	fail := func(why error) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return why
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Ready(cctx)
		cancel()
		if err == nil {
			p.cmd, p.done = cmd, done
			p.starts++
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s: the server exited at start; its log: %s", p.name, tail(c.Log, 2000))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("%s: the server did not accept connections within 2 minutes: %v", p.name, err))
		}
	}
}

// Stop sends sig to the server and returns once it is gone; meanwhile, if
// not nil, runs right after the signal, as no other method of p does (the
// server's helpers that a test holds can be let go there). A server that
// is still there two minutes later is killed with its whole process
// group, and Stop reports it. It returns ErrDown when the server is not
// running.
func (p *Proc) Stop(sig syscall.Signal, meanwhile func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return ErrDown
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, sig)
	if meanwhile != nil {
		meanwhile()
	}
	var err error
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s: the server did not stop on %v within 2 minutes and was killed", p.name, sig)
	}
	p.cmd, p.done = nil, nil
	return err
}

// Close stops the server as Stop does, if it runs, and removes Dir: the
// server cannot be started again.
func (p *Proc) Close(sig syscall.Signal, meanwhile func()) error {
	err := p.Stop(sig, meanwhile)
	if errors.Is(err, ErrDown) {
		err = nil
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if rerr := os.RemoveAll(p.Dir); err == nil {
		err = rerr
	}
	return err
}

// WhileRunning runs f while the server runs, as no Start or Stop does;
// ErrDown, without running f, when it is not running.
func (p *Proc) WhileRunning(f func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return ErrDown
	}
	return f()
}

// Running reports whether the server is up (as far as this process knows).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Starts counts how many times the server was started.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Pid is the server process's id, 0 when it is down.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// tail is the last n bytes of the file at path, or what there is of it.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
