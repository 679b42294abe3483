package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
)

// The stress scenario runs its relay in a child process, so that the crash
// phase can SIGKILL it as a real deployment's relay dies. The child is the
// current executable started again with StressRelayEnv set to a JSON
// StressRelaySpec: a test binary hands over to RunStressRelay from its
// TestMain, the mensageria command from `bench --stress-relay`. The child
// writes one line to stdout per Send, before Send returns:
//
//	d <key> <unix nanoseconds at Send's start>
//
// so a record reaches the pipe before the relay can settle the message, and
// a SIGKILL never loses the record of a delivery that happened; "ready" when
// its relay runs. It stops gracefully when its stdin closes or on SIGTERM.

// StressRelayEnv names the variable that carries a StressRelaySpec to the
// child process.
const StressRelayEnv = "MENSAGERIA_STRESS_RELAY"

// StressRelaySpec is what the relay child runs.
type StressRelaySpec struct {
	// Database is a PostgreSQL URL, or sqlite:<path>.
	Database string `json:"database"`
	Schema   string `json:"schema"`
	App      string `json:"app"`
	Type     string `json:"type"`
	// Lease, PollInterval and BatchSize are the relay's (0: its defaults).
	Lease        time.Duration `json:"lease"`
	PollInterval time.Duration `json:"poll_interval"`
	BatchSize    int           `json:"batch_size"`
	// SendDelay makes every Send last this long after its record is
	// written: the harness's own test uses it to keep batches in flight.
	// The scenario's figures use none.
	SendDelay time.Duration `json:"send_delay,omitempty"`
}

// ErrStressSpec is the error class of a StressRelaySpec the child refuses.
var ErrStressSpec = errors.New("bench: stress relay spec")

// decodeStressRelaySpec reads and checks a spec.
func decodeStressRelaySpec(b []byte) (StressRelaySpec, error) {
	var s StressRelaySpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: %v", ErrStressSpec, err)
	}
	if dec.More() {
		return s, fmt.Errorf("%w: trailing data after the object", ErrStressSpec)
	}
	switch {
	case s.Database == "":
		return s, fmt.Errorf("%w: no database", ErrStressSpec)
	case s.App == "" || s.Type == "":
		return s, fmt.Errorf("%w: app and type are required", ErrStressSpec)
	case s.Lease < 0 || s.PollInterval < 0 || s.BatchSize < 0 || s.SendDelay < 0:
		return s, fmt.Errorf("%w: negative lease, poll interval, batch size or send delay", ErrStressSpec)
	}
	return s, nil
}

// The child's protocol besides the delivery records: "ready" once its
// relay runs; "held" once it obeyed holdCommand, a line on its stdin
// after which every Send it records blocks until the relay stops. The
// crash phase holds the relay and kills it at the next Send recorded, so
// that the kill lands inside a batch whatever the scheduling delays:
// that Send's message was delivered and its row is still leased.
const (
	readyLine   = "ready"
	heldLine    = "held"
	holdCommand = "hold"
)

// StressRelayRequested reports whether this process was started as a
// stress relay child.
func StressRelayRequested() bool { return os.Getenv(StressRelayEnv) != "" }

// RunStressRelay is the child's main: it runs the relay of spec (the JSON
// that StressRelayEnv carries), recording each Send on stdout, until stdin
// closes, ctx ends or a SIGTERM arrives, then stops it gracefully.
func RunStressRelay(ctx context.Context, specJSON string, stdin io.Reader, stdout, stderr io.Writer) error {
	spec, err := decodeStressRelaySpec([]byte(specJSON))
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer cancel()
	rec := &lineRecorder{w: stdout, delay: spec.SendDelay}
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if sc.Text() == holdCommand {
				rec.hold()
			}
		}
		cancel()
	}()
	drv, closeDrv, err := openStressDriver(ctx, spec.Database, spec.Schema)
	if err != nil {
		return err
	}
	defer closeDrv()
	c, err := mensageria.New(drv, &mensageria.Config{
		App:          spec.App,
		Registry:     mensageria.NewRegistry().MustRegister(spec.Type, rec),
		Lease:        spec.Lease,
		PollInterval: spec.PollInterval,
		BatchSize:    spec.BatchSize,
		Logger:       slogTo(stderr),
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	_, _ = rec.line(readyLine)
	<-ctx.Done()
	stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	return c.Stop(stopCtx)
}

// openStressDriver opens the backend of a spec's database.
func openStressDriver(ctx context.Context, database, schema string) (driver.Driver, func(), error) {
	if path, ok := strings.CutPrefix(database, "sqlite:"); ok {
		d, err := sqlite.Open(path, &sqlite.Config{Schema: schema})
		if err != nil {
			return nil, nil, err
		}
		return d, func() { _ = d.Close() }, nil
	}
	pool, err := pgxpool.New(ctx, database)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: database: %v", ErrStressSpec, err)
	}
	d, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return d, pool.Close, nil
}

// lineRecorder is the child's Sender: it writes a delivery's record to the
// pipe, one write each, before it returns.
type lineRecorder struct {
	mu    sync.Mutex
	w     io.Writer
	delay time.Duration
	held  bool // every Send recorded from now on blocks
}

func (l *lineRecorder) Send(ctx context.Context, d *mensageria.Delivery) error {
	at := time.Now().UnixNano()
	held, err := l.line("d " + d.Key + " " + strconv.FormatInt(at, 10))
	switch {
	case err != nil:
		return err
	case held:
		// Delivered, never answered: the row stays leased until the
		// parent's kill, and is redelivered after the lease.
		<-ctx.Done()
		return ctx.Err()
	case l.delay > 0:
		sleep(ctx, l.delay)
	}
	return nil
}

// hold makes every Send recorded after the held line block. The flag and
// the line change under the lock that orders the records, so a record the
// parent reads after "held" is of a Send that blocks.
func (l *lineRecorder) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = true
	_, _ = io.WriteString(l.w, heldLine+"\n")
}

// line writes s as one line, and says whether the relay was held when it
// was written (a Send recorded then must block).
func (l *lineRecorder) line(s string) (held bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = io.WriteString(l.w, s+"\n")
	return l.held, err
}

// ErrStressRecord is the error class of a line the parent cannot read.
var ErrStressRecord = errors.New("bench: stress relay record")

// parseStressRecord reads one delivery line of the child: the message's
// sequence number (its key is "s-<seq>") and when its Send began.
func parseStressRecord(line string) (seq int64, at time.Time, err error) {
	f := strings.Split(line, " ")
	if len(f) != 3 || f[0] != "d" {
		return 0, time.Time{}, fmt.Errorf("%w: %q is not \"d <key> <unix ns>\"", ErrStressRecord, line)
	}
	seq, err = stressSeq(f[1])
	if err != nil {
		return 0, time.Time{}, err
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || ns <= 0 || strconv.FormatInt(ns, 10) != f[2] {
		return 0, time.Time{}, fmt.Errorf("%w: %q: bad time %q", ErrStressRecord, line, f[2])
	}
	return seq, time.Unix(0, ns), nil
}

// stressKey is the key of the message of business transaction seq.
func stressKey(seq int64) string { return "s-" + strconv.FormatInt(seq, 10) }

// stressSeq is the inverse of stressKey.
func stressSeq(key string) (int64, error) {
	n, ok := strings.CutPrefix(key, "s-")
	seq, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || seq <= 0 || strconv.FormatInt(seq, 10) != n {
		return 0, fmt.Errorf("%w: key %q is not s-<seq>", ErrStressRecord, key)
	}
	return seq, nil
}

// relayRunner is the relay under test: a child process or, for the
// embedded backend's clean phases, a client in this process.
type relayRunner interface {
	start(ctx context.Context) error
	// hold returns once every Send the relay records from then on blocks
	// until kill; only a child can.
	hold(ctx context.Context) error
	// kill ends the relay without warning (SIGKILL); only a child can.
	kill() error
	stop() error
}

// childRelay runs the relay as a child process of the current executable.
type childRelay struct {
	spec    StressRelaySpec
	command func() *exec.Cmd
	record  func(seq int64, at time.Time)

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{} // closed once stdout is read to its end and the process reaped
	held   chan struct{} // closed when the child says it holds its Sends
	stderr *tailBuffer
	bad    error // the first unreadable line
}

func (c *childRelay) start(ctx context.Context) error {
	spec, err := json.Marshal(c.spec)
	if err != nil {
		return err
	}
	cmd := c.command()
	cmd.Env = append(os.Environ(), StressRelayEnv+"="+string(spec))
	c.stderr = &tailBuffer{max: 64 << 10}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start the relay process: %w", err)
	}
	c.cmd = cmd
	c.done = make(chan struct{})
	c.held = make(chan struct{})
	ready, held := make(chan struct{}), c.held
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		var readyOnce, heldOnce sync.Once
		for sc.Scan() {
			line := sc.Text()
			switch line {
			case readyLine:
				readyOnce.Do(func() { close(ready) })
				continue
			case heldLine:
				// Every record before this line is recorded already.
				heldOnce.Do(func() { close(held) })
				continue
			}
			seq, at, err := parseStressRecord(line)
			if err != nil {
				if c.bad == nil {
					c.bad = err
				}
				continue
			}
			c.record(seq, at)
		}
		_ = cmd.Wait()
	}()
	select {
	case <-ready:
		return nil
	case <-c.done:
		return fmt.Errorf("bench: the relay process exited before it was ready: %v; its log: %s", cmd.ProcessState, c.stderr.String())
	case <-ctx.Done():
		_ = c.kill()
		return ctx.Err()
	}
}

func (c *childRelay) hold(ctx context.Context) error {
	if c.cmd == nil {
		return errors.New("bench: no relay process")
	}
	if _, err := io.WriteString(c.stdin, holdCommand+"\n"); err != nil {
		return fmt.Errorf("bench: hold the relay process: %w", err)
	}
	select {
	case <-c.held:
		return nil
	case <-c.done:
		return fmt.Errorf("bench: the relay process exited before it held its Sends: %v; its log: %s", c.cmd.ProcessState, c.stderr.String())
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *childRelay) kill() error {
	if c.cmd == nil {
		return errors.New("bench: no relay process")
	}
	err := c.cmd.Process.Kill() // SIGKILL
	<-c.done                    // every record it wrote is read
	c.cmd = nil
	return err
}

func (c *childRelay) stop() error {
	if c.cmd == nil {
		return nil
	}
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(45 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("bench: the relay process did not stop; its log: %s", c.stderr.String())
	}
	st := c.cmd.ProcessState
	c.cmd = nil
	if c.bad != nil {
		return c.bad
	}
	if !st.Success() {
		return fmt.Errorf("bench: the relay process ended with %v; its log: %s", st, c.stderr.String())
	}
	return nil
}

// inProcessRelay is a relay client in this process, whose Sender records
// straight into the book.
type inProcessRelay struct {
	drv    driver.Driver
	spec   StressRelaySpec
	record func(seq int64, at time.Time)
	c      *mensageria.Client
}

func (r *inProcessRelay) start(ctx context.Context) error {
	s := mensageria.SenderFunc(func(_ context.Context, d *mensageria.Delivery) error {
		at := time.Now()
		seq, err := stressSeq(d.Key)
		if err != nil {
			return mensageria.Permanent(err)
		}
		r.record(seq, at)
		return nil
	})
	c, err := mensageria.New(r.drv, &mensageria.Config{
		App:          r.spec.App,
		Registry:     mensageria.NewRegistry().MustRegister(r.spec.Type, s),
		Lease:        r.spec.Lease,
		PollInterval: r.spec.PollInterval,
		BatchSize:    r.spec.BatchSize,
		Logger:       quiet(),
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	r.c = c
	return nil
}

func (r *inProcessRelay) hold(context.Context) error {
	return errors.New("bench: an in-process relay cannot be held; the crash phase needs a relay process")
}

func (r *inProcessRelay) kill() error {
	return errors.New("bench: an in-process relay cannot be killed; the crash phase needs a relay process")
}

func (r *inProcessRelay) stop() error {
	if r.c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.c.Stop(ctx)
	r.c = nil
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// slogTo is the child's logger: the relay's warnings go to its stderr,
// which the parent keeps and shows when the child fails.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
