//go:build unix

package serverproc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xadm/mensageria/mensageriatest/serverproc"
)

// The test binary stands in for a database server when its first argument
// is "serverproc-helper": "listen PORT" accepts connections on PORT until
// SIGTERM, "fail" exits at once complaining, "deaf" never listens.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "serverproc-helper" {
		os.Exit(helper(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func helper(args []string) int {
	fmt.Printf("pid %d\n", os.Getpid())
	switch args[0] {
	case "fail":
		fmt.Fprintln(os.Stderr, "unknown setting bogus")
		return 2
	case "deaf":
		time.Sleep(time.Hour)
		return 0
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fmt.Println("up")
	<-term
	fmt.Println("terminated")
	return 0
}

func command(t *testing.T, p *serverproc.Proc, port int, mode ...string) serverproc.Command {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(p.Dir, "server.log")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return serverproc.Command{
		Path: exe, Args: append([]string{"serverproc-helper"}, mode...),
		ParentDeath: syscall.SIGKILL, Output: log, Log: log,
		Ready: func(ctx context.Context) error {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			return err
		},
	}
}

func newProc(t *testing.T) *serverproc.Proc {
	p, err := serverproc.New("serverproc-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(syscall.SIGKILL, nil) })
	return p
}

func gone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }

// A server is started, killed, started again on the same port, stopped
// cleanly, and closed for good; each state refuses what it should.
func TestStartKillStartStopClose(t *testing.T) {
	ctx := context.Background()
	p := newProc(t)
	port, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := command(t, p, port, "listen", strconv.Itoa(port))
	if err := p.Start(ctx, c); err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if !p.Running() || p.Starts() != 1 || pid == 0 {
		t.Fatalf("running %v, starts %d, pid %d after Start", p.Running(), p.Starts(), pid)
	}
	if err := p.Start(ctx, c); err != nil || p.Starts() != 1 || p.Pid() != pid {
		t.Fatalf("Start of a running server: %v, starts %d, pid %d; want nothing done", err, p.Starts(), p.Pid())
	}
	ran := false
	if err := p.WhileRunning(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("WhileRunning on a running server: %v, ran %v", err, ran)
	}

	calls := 0
	if err := p.Stop(syscall.SIGKILL, func() { calls++ }); err != nil || calls != 1 {
		t.Fatalf("Stop: %v, meanwhile ran %d times; want nil and once", err, calls)
	}
	if p.Running() || p.Pid() != 0 || !gone(pid) {
		t.Fatalf("running %v, pid %d, process %d gone %v after Stop", p.Running(), p.Pid(), pid, gone(pid))
	}
	if err := p.Stop(syscall.SIGKILL, nil); !errors.Is(err, serverproc.ErrDown) {
		t.Fatalf("Stop of a stopped server: %v, want ErrDown", err)
	}
	if err := p.WhileRunning(func() error { t.Fatal("ran while down"); return nil }); !errors.Is(err, serverproc.ErrDown) {
		t.Fatalf("WhileRunning on a stopped server: %v, want ErrDown", err)
	}

	if err := p.Start(ctx, c); err != nil {
		t.Fatal(err)
	}
	if p.Starts() != 2 || p.Pid() == pid {
		t.Fatalf("starts %d, pid %d after the second Start", p.Starts(), p.Pid())
	}
	if err := p.Stop(syscall.SIGTERM, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(c.Output)
	if err != nil {
		t.Fatal(err)
	}
	if out := string(b); strings.Count(out, "up\n") != 2 || !strings.HasSuffix(out, "terminated\n") {
		t.Fatalf("output of both starts, the second ended by SIGTERM; got:\n%s", out)
	}

	if err := p.Close(syscall.SIGTERM, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", p.Dir, err)
	}
	if err := p.Start(ctx, c); err == nil || !strings.Contains(err.Error(), "stopped for good") {
		t.Fatalf("Start after Close: %v", err)
	}
}

// A server that exits at start is reported with its log; one that never
// gets ready is killed when ctx is done; neither is left running.
func TestStartFails(t *testing.T) {
	p := newProc(t)
	err := p.Start(context.Background(), command(t, p, 1, "fail"))
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "unknown setting bogus") {
		t.Fatalf("a server that exits at start: %v; want its log in the error", err)
	}
	if p.Running() || p.Starts() != 0 {
		t.Fatalf("running %v, starts %d after a failed start", p.Running(), p.Starts())
	}

	port, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c := command(t, p, port, "deaf")
	if err := p.Start(ctx, c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a server that never listens: %v, want ctx's error", err)
	}
	b, err := os.ReadFile(c.Output)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for line := range strings.Lines(string(b)) {
		_, _ = fmt.Sscanf(line, "pid %d", &pid)
	}
	if pid == 0 || !gone(pid) || p.Running() {
		t.Fatalf("process %d gone %v, running %v after ctx ended its start; output:\n%s", pid, gone(pid), p.Running(), b)
	}
}
