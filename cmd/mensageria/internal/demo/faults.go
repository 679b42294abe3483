package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/chaos/fault"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The demo's faults. A flaky receiver's refusal is the fault-injection
// suite's (package fault); its lost answer and killing a relay are the
// demo's own: the suite resets connections and SIGKILLs real processes,
// the demo aborts a handler and crashes a relay in its one process.

// faultServer puts a receiver behind loopback HTTP and injects faults in
// front of it, counting what it saw.
type faultServer struct {
	d       *demo
	name    string
	inner   http.Handler
	srv     *httptest.Server
	timeout time.Duration // the senders' timeout, to exceed on purpose

	mu        sync.Mutex
	seen      map[string]bool
	redeliv   map[string]int // by type
	dupes     map[string]int
	requests  atomic.Int64
	fault5xx  atomic.Int64
	faultSlow atomic.Int64
	faultAck  atomic.Int64
}

func newFaultServer(d *demo, name string, inner http.Handler, timeout time.Duration) *faultServer {
	f := &faultServer{d: d, name: name, inner: inner, timeout: timeout, seen: map[string]bool{}, redeliv: map[string]int{}, dupes: map[string]int{}}
	f.srv = httptest.NewServer(f)
	// httptest logs aborted handlers; a lost ack is aborted on purpose.
	f.srv.Config.ErrorLog = nil
	return f
}

func (f *faultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	var env struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &env)
	f.mu.Lock()
	if f.seen[env.ID] {
		f.redeliv[env.Type]++
	}
	f.seen[env.ID] = true
	f.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))

	switch {
	case f.d.chance(0.05):
		f.fault5xx.Add(1)
		fault.Refuse(w, http.StatusServiceUnavailable, "injected: receiver overloaded", 0)
		return
	case f.d.chance(0.02):
		// Answer after the sender gave up: the message may be applied
		// late, and the sender retries it anyway.
		f.faultSlow.Add(1)
		t := time.NewTimer(f.timeout + 50*time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	rec := httptest.NewRecorder()
	f.inner.ServeHTTP(rec, r)
	if rec.Code == http.StatusOK && bytes.Contains(rec.Body.Bytes(), []byte(`"duplicate"`)) {
		f.mu.Lock()
		f.dupes[env.Type]++
		f.mu.Unlock()
	}
	if rec.Code == http.StatusOK && f.d.chance(0.05) {
		// Lost ack: the effect committed, the sender never hears of it.
		f.faultAck.Add(1)
		// Aborted, not fault.LoseAnswer's reset: a keep-alive connection
		// that closes before any answer byte is one net/http re-sends on
		// (m2mhttp.Sender's doc), and the inbox answers the resend as a
		// duplicate, as the demo always had it. A reset reaches the relay
		// as the destination's failure and pauses the route: the demo in
		// process under -race took 52s instead of 20s.
		panic(http.ErrAbortHandler)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// crashable wraps a relay's Senders so that, once crashed, deliveries in
// flight hang like those of a frozen process and never settle.
type crashable struct {
	inner    mensageria.Sender
	crashed  *atomic.Bool
	inflight *atomic.Int64
}

func (c crashable) Send(ctx context.Context, dl *mensageria.Delivery) error {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	if c.crashed.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	err := c.inner.Send(ctx, dl)
	if c.crashed.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

var errKilled = errors.New("demo: the process was killed")

// crashDriver is a relay's view of the database once its process is dead:
// nothing it sends arrives.
type crashDriver struct {
	driver.Driver
	crashed *atomic.Bool
}

func (c crashDriver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	if c.crashed.Load() {
		return nil, errKilled
	}
	return c.Driver.Claim(ctx, p)
}

func (c crashDriver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	if c.crashed.Load() {
		return driver.SettleResult{}, errKilled
	}
	return c.Driver.Settle(ctx, p)
}

func (c crashDriver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	if c.crashed.Load() {
		return driver.PurgeResult{}, errKilled
	}
	return c.Driver.Purge(ctx, p)
}

func (c crashDriver) Elector(app string, lease time.Duration) (driver.Elector, error) {
	el, err := c.Driver.Elector(app, lease)
	if err != nil {
		return nil, err
	}
	return crashElector{Elector: el, crashed: c.crashed}, nil
}

type crashElector struct {
	driver.Elector
	crashed *atomic.Bool
}

func (c crashElector) Acquire(ctx context.Context) (int64, bool, error) {
	if c.crashed.Load() {
		return 0, false, errKilled
	}
	return c.Elector.Acquire(ctx)
}

func (c crashElector) Release(ctx context.Context) error {
	if c.crashed.Load() {
		return errKilled
	}
	return c.Elector.Release(ctx)
}

// relayProc is one relay "process": its own connections, its own client.
type relayProc struct {
	name     string
	conn     *daemon.DB
	client   *mensageria.Client
	crashed  atomic.Bool
	inflight atomic.Int64
	fenced   atomic.Int64
	stopped  bool
}

func (p *relayProc) OnDelivery(ev mensageria.DeliveryEvent) {
	if ev.Outcome == mensageria.OutcomeFenced {
		p.fenced.Add(1)
	}
}

func (d *demo) senders() (map[string]mensageria.Sender, error) {
	mk := func(url string) (mensageria.Sender, error) {
		return m2mhttp.NewSender(m2mhttp.SenderConfig{URL: url, Token: demoToken, Timeout: demoSendTimeout})
	}
	pedido, err := mk(d.fat.srv.URL + "/m2m/pedido")
	if err != nil {
		return nil, err
	}
	fatura, err := mk(d.ped.srv.URL + "/m2m/fatura")
	if err != nil {
		return nil, err
	}
	return map[string]mensageria.Sender{typPedido: pedido, typCancelado: pedido, typFatura: fatura}, nil
}

const demoSendTimeout = time.Second

func demoClientConfig(app string, election mensageria.Election, reg *mensageria.Registry, hooks ...mensageria.Hook) *mensageria.Config {
	return &mensageria.Config{
		App: app, Registry: reg, Election: election,
		BatchSize: 50, Concurrency: 16, Lease: 3 * time.Second, MaxAttempts: 25,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 400 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, PurgeInterval: time.Hour,
		// The demo's receivers fail on purpose (503s, answers past the
		// timeout): a route they pause must come back on the demo's scale,
		// not after the production default's minute.
		RoutePause: 200 * time.Millisecond, RoutePauseMax: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: hooks,
	}
}

// startRelay starts a relay of app. One that is to be killed gets its own
// connections, to cut; the others share the main ones, as SQLite writers
// of one handle queue in process instead of polling the file lock.
func (d *demo) startRelay(ctx context.Context, name, app string, election mensageria.Election, types []string, own bool) (*relayProc, error) {
	p := &relayProc{name: name, conn: &daemon.DB{Driver: d.main.Driver}}
	switch {
	case own && d.remote:
		// Killing it closes its pool: its sessions end and its election
		// lease runs out, as when a process dies.
		conn, err := d.newConn()
		if err != nil {
			return nil, err
		}
		p.conn = conn
	case own:
		// On SQLite the kill is a driver that fails every call from then
		// on; sharing the one handle keeps writers queueing in process
		// rather than polling the file lock.
		p.conn = &daemon.DB{Driver: crashDriver{Driver: d.main.Driver, crashed: &p.crashed}}
	}
	snd, err := d.senders()
	if err != nil {
		p.conn.Close()
		return nil, err
	}
	reg := mensageria.NewRegistry()
	for _, t := range types {
		if err := reg.Register(t, crashable{inner: snd[t], crashed: &p.crashed, inflight: &p.inflight}); err != nil {
			p.conn.Close()
			return nil, err
		}
	}
	if in := d.inboxes[app]; in != nil {
		if err := reg.RegisterInbox(in); err != nil {
			p.conn.Close()
			return nil, err
		}
	}
	cfg := demoClientConfig(app, election, reg, p)
	if !d.remote {
		// One SQLite file has one write lock: fewer deliveries at once
		// keep the receivers' inbox transactions from queueing on it.
		cfg.Concurrency = 8
	}
	if p.client, err = mensageria.New(p.conn.Driver, cfg); err != nil {
		p.conn.Close()
		return nil, err
	}
	if err := p.client.Start(ctx); err != nil {
		p.conn.Close()
		return nil, err
	}
	d.closers = append(d.closers, func() { p.stop() })
	return p, nil
}

func (p *relayProc) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.client.Stop(ctx)
	p.conn.Close()
}

// kill simulates kill -9 mid-batch: deliveries in flight hang, the
// process's database connections are cut, and a Stop whose context is
// already cancelled abandons the rest. Its leases stay behind until they
// expire; nothing it held is settled.
func (d *demo) kill(p *relayProc) int64 {
	// Wait (briefly) for a batch to be in flight, so the kill lands mid-batch.
	deadline := time.Now().Add(2 * time.Second)
	for p.inflight.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	n := p.inflight.Load()
	p.crashed.Store(true)
	p.stopped = true
	done := make(chan struct{})
	go func() {
		p.conn.Close()
		close(done)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.client.Stop(ctx)
	<-done
	return n
}
