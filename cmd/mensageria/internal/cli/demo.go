package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The demo's cast: two apps on one shared schema exchanging messages, and
// a third whose rows sit in the same table and must stay untouched.
const (
	typPedido    = "pedido.criado"    // pedidos -> faturamento
	typCancelado = "pedido.cancelado" // pedidos -> faturamento, which has no handler for it
	typFatura    = "fatura.emitida"   // faturamento -> pedidos, enqueued inside the inbox effect
	typForeign   = "estoque.reservado"
	typNoSender  = "nota.fiscal.emitida"
	demoToken    = "demo-token"
)

type demoOptions struct {
	db       string
	messages int
	timeout  time.Duration
	keep     bool
	seed     uint64
}

func (a *app) demoCommand() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch two apps exchange messages under injected faults, with nothing lost and nothing applied twice",
		Long: `demo needs no config and no set-up. On embedded SQLite in a temporary
directory, two apps exchange a few thousand messages over real HTTP on
loopback while faults are injected:

  - a relay is killed mid-batch (its database connections cut, its leases
    left behind) and a new one started; the leader of the other app is
    killed too and its standby takes over;
  - the receivers answer 5xx, time out, and lose acks (apply, then drop
    the response);
  - two relays of one app run overlapping cycles (election none);
  - rows of a third app's type sit in the shared table, and a fourth app
    whose config routes that type tries to start its relay;
  - an enqueue of a type with no sender is attempted.

It ends with a table (sent, delivered, redeliveries, duplicates absorbed,
dead with reasons, lost, duplicate effects, foreign rows untouched, the
refusals) and exits 1 if anything was lost or applied twice, or a refusal
did not happen.

--db postgres://... runs the same on PostgreSQL, in a schema of its own
that is dropped afterwards.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.messages < 50 || o.messages > 200000 {
				return usageErr("--messages must be 50..200000")
			}
			if o.seed == 0 {
				o.seed = rand.Uint64()
			}
			d := &demo{opt: o, out: a.io.Out, tty: isTerminal(a.io.Out)}
			ok, err := d.run(cmd.Context())
			if err != nil {
				return err
			}
			if !ok {
				return silentExit(ExitFailure)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", "run on this PostgreSQL (postgres://...) instead of embedded SQLite")
	f.IntVar(&o.messages, "messages", 2000, "orders to create")
	f.DurationVar(&o.timeout, "timeout", 90*time.Second, "give up after this long")
	f.BoolVar(&o.keep, "keep", false, "keep the database afterwards (SQLite file or PostgreSQL schema)")
	f.Uint64Var(&o.seed, "seed", 0, "fault injection seed (default random)")
	_ = f.MarkHidden("seed")
	return cmd
}

// demo is one run.
type demo struct {
	opt   demoOptions
	out   io.Writer
	tty   bool
	start time.Time

	pg      bool
	schema  string
	effects string // qualified name of the effects table
	orders  string
	newConn func() (*backend, error) // another connection set to the same database
	main    *backend
	closers []func()

	rngMu sync.Mutex
	rng   *rand.Rand

	fat, ped *faultServer
	// inboxes are each app's receivers: registered with its relays, so
	// the catalog gives each consumer to its app with its window.
	inboxes map[string]*mensageria.Inbox

	// committed keys of pedido.criado; rolled back keys
	mu         sync.Mutex
	committed  map[string]bool
	rolledBack map[string]bool
	failed     map[string]error

	produced atomic.Int64
	events   []string
	evMu     sync.Mutex
}

func (d *demo) logf(format string, args ...any) {
	line := fmt.Sprintf("[%5.1fs] ", time.Since(d.start).Seconds()) + fmt.Sprintf(format, args...)
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.tty {
		fmt.Fprint(d.out, "\r\x1b[K")
	}
	fmt.Fprintln(d.out, line)
}

func (d *demo) chance(p float64) bool {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.Float64() < p
}

func (d *demo) cleanup() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// setup opens the database and creates the demo's own tables.
func (d *demo) setup(ctx context.Context) error {
	if d.opt.db == "" {
		dir, err := os.MkdirTemp("", "mensageria-demo-")
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "demo.db")
		if d.opt.keep {
			d.logf("database: SQLite %s (kept)", path)
		} else {
			d.closers = append(d.closers, func() { _ = os.RemoveAll(dir) })
			d.logf("database: embedded SQLite in %s", dir)
		}
		d.schema = "mensageria"
		d.effects, d.orders = "demo_effects", "demo_orders"
		d.newConn = func() (*backend, error) { return openSQLite(path, d.schema) }
	} else {
		if !strings.HasPrefix(d.opt.db, "postgres://") && !strings.HasPrefix(d.opt.db, "postgresql://") {
			return usageErr("--db must be a postgres:// URL")
		}
		d.pg = true
		d.schema = fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
		d.effects, d.orders = d.schema+".demo_effects", d.schema+".demo_orders"
		admin, err := pgxpool.New(ctx, d.opt.db)
		if err != nil {
			return usageErr("--db: %v", err)
		}
		d.closers = append(d.closers, admin.Close)
		if err := admin.Ping(ctx); err != nil {
			return fmt.Errorf("--db: database unreachable: %w", err)
		}
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+d.schema); err != nil {
			return err
		}
		if d.opt.keep {
			d.logf("database: PostgreSQL, schema %s (kept)", d.schema)
		} else {
			d.closers = append(d.closers, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+d.schema+" CASCADE")
			})
			d.logf("database: PostgreSQL, schema %s (dropped at the end)", d.schema)
		}
		d.newConn = func() (*backend, error) {
			pool, err := pgxpool.New(ctx, d.opt.db)
			if err != nil {
				return nil, err
			}
			drv, err := postgres.New(pool, &postgres.Config{Schema: d.schema})
			if err != nil {
				pool.Close()
				return nil, err
			}
			return &backend{drv: drv, pool: pool, close: func() { _ = drv.Close(); pool.Close() }}, nil
		}
	}
	var err error
	if d.main, err = d.newConn(); err != nil {
		return err
	}
	d.closers = append(d.closers, d.main.Close)
	if _, err := d.main.drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// The effects table has no unique key on purpose: a duplicate effect
	// must be visible, not turned into an error.
	return d.main.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		if err := execRaw(ctx, tx.Raw(), "CREATE TABLE "+d.effects+" (consumer TEXT NOT NULL, key TEXT NOT NULL, message_id TEXT NOT NULL)"); err != nil {
			return err
		}
		return execRaw(ctx, tx.Raw(), "CREATE TABLE "+d.orders+" (key TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL)")
	})
}

var dollarN = regexp.MustCompile(`\$\d+`)

// execRaw runs a statement in the backend's own transaction type.
func execRaw(ctx context.Context, tx any, q string, args ...any) error {
	switch t := tx.(type) {
	case pgx.Tx:
		_, err := t.Exec(ctx, q, args...)
		return err
	case *sql.Tx:
		_, err := t.ExecContext(ctx, dollarN.ReplaceAllString(q, "?"), args...)
		return err
	}
	return fmt.Errorf("demo: unexpected transaction type %T", tx)
}

// query reads outside any transaction: on SQLite a transaction would take
// the write lock (immediate mode) and queue behind the apps' writers.
func (d *demo) query(ctx context.Context, q string, args []any, scan func(func(...any) error) error) error {
	if d.main.pool != nil {
		rows, err := d.main.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows.Scan); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	rows, err := d.main.sqlDB.QueryContext(ctx, dollarN.ReplaceAllString(q, "?"), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

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
		http.Error(w, "injected: receiver overloaded", http.StatusServiceUnavailable)
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
	conn     *backend
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
	p := &relayProc{name: name, conn: &backend{drv: d.main.drv}}
	switch {
	case own && d.pg:
		// Killing it closes its pool: its sessions end, and with them its
		// advisory lock, as when a process dies.
		conn, err := d.newConn()
		if err != nil {
			return nil, err
		}
		p.conn = conn
	case own:
		// On SQLite the kill is a driver that fails every call from then
		// on; sharing the one handle keeps writers queueing in process
		// rather than polling the file lock.
		p.conn = &backend{drv: crashDriver{Driver: d.main.drv, crashed: &p.crashed}}
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
	if !d.pg {
		// One SQLite file has one write lock: fewer deliveries at once
		// keep the receivers' inbox transactions from queueing on it.
		cfg.Concurrency = 8
	}
	if p.client, err = mensageria.New(p.conn.drv, cfg); err != nil {
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

func (d *demo) run(ctx context.Context) (bool, error) {
	d.start = time.Now()
	d.rng = rand.New(rand.NewPCG(d.opt.seed, d.opt.seed^0x9e3779b97f4a7c15))
	d.committed, d.rolledBack, d.failed = map[string]bool{}, map[string]bool{}, map[string]error{}
	defer d.cleanup()
	ctx, cancel := context.WithTimeout(ctx, d.opt.timeout)
	defer cancel()
	if err := d.setup(ctx); err != nil {
		return false, err
	}

	// Receivers: each app's inbox, on the shared database.
	inboxFat, err := mensageria.NewInbox(d.main.drv, mensageria.InboxConfig{Consumer: "faturamento/pedidos"})
	if err != nil {
		return false, err
	}
	inboxPed, err := mensageria.NewInbox(d.main.drv, mensageria.InboxConfig{Consumer: "pedidos/faturas"})
	if err != nil {
		return false, err
	}
	d.inboxes = map[string]*mensageria.Inbox{"faturamento": inboxFat, "pedidos": inboxPed}
	// faturamento enqueues its answer inside the inbox transaction: the
	// invoice row, the dedup record and the reply commit together.
	faturaReg := mensageria.NewRegistry().MustRegister(typFatura, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	fatEnq, err := mensageria.New(d.main.drv, demoClientConfig("faturamento", mensageria.ElectionLeader, faturaReg))
	if err != nil {
		return false, err
	}
	// Its types are recorded as faturamento's before the first effect
	// enqueues one inside an inbox transaction.
	if _, err := fatEnq.Register(ctx); err != nil {
		return false, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fatRecv, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{demoToken}, Logger: quiet, Handlers: map[string]m2mhttp.Handler{
		typPedido: {Inbox: inboxFat, Effect: func(ctx context.Context, tx mensageria.Tx, dl *mensageria.Delivery) error {
			var p struct {
				Blocked bool `json:"blocked"`
			}
			_ = json.Unmarshal(dl.Payload, &p)
			if p.Blocked {
				return mensageria.Permanent(errors.New("customer blocked: invoice refused"))
			}
			if d.chance(0.01) {
				return errors.New("injected: effect failed, rolled back")
			}
			if err := execRaw(ctx, tx.Raw(), "INSERT INTO "+d.effects+" (consumer, key, message_id) VALUES ($1, $2, $3)", inboxFat.Consumer(), dl.Key, dl.ID.String()); err != nil {
				return err
			}
			_, err := fatEnq.EnqueueTx(ctx, tx.Raw(), mensageria.Message{Type: typFatura, Key: dl.Key, Payload: json.RawMessage(`{"invoice":"` + dl.Key + `"}`)})
			return err
		}},
	}})
	if err != nil {
		return false, err
	}
	pedRecv, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{demoToken}, Logger: quiet, Handlers: map[string]m2mhttp.Handler{
		typFatura: {Inbox: inboxPed, Effect: func(ctx context.Context, tx mensageria.Tx, dl *mensageria.Delivery) error {
			return execRaw(ctx, tx.Raw(), "INSERT INTO "+d.effects+" (consumer, key, message_id) VALUES ($1, $2, $3)", inboxPed.Consumer(), dl.Key, dl.ID.String())
		}},
	}})
	if err != nil {
		return false, err
	}
	d.fat = newFaultServer(d, "faturamento", fatRecv, demoSendTimeout)
	d.ped = newFaultServer(d, "pedidos", pedRecv, demoSendTimeout)
	d.closers = append(d.closers, d.fat.srv.Close, d.ped.srv.Close)
	d.logf("apps: pedidos -> %s -> faturamento (receiver %s); faturamento -> %s -> pedidos (receiver %s)", typPedido, d.fat.srv.URL, typFatura, d.ped.srv.URL)

	// A third app's rows in the same outbox: no relay here may touch them.
	const foreignRows = 25
	estoqueReg := mensageria.NewRegistry().MustRegister(typForeign, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
		return errors.New("estoque's sender must never run in this demo")
	}))
	estoque, err := mensageria.New(d.main.drv, demoClientConfig("estoque", mensageria.ElectionLeader, estoqueReg))
	if err != nil {
		return false, err
	}
	for i := range foreignRows {
		if _, err := estoque.Enqueue(ctx, mensageria.Message{Type: typForeign, Key: fmt.Sprintf("sku-%03d", i), Payload: json.RawMessage(`{"qty":1}`)}); err != nil {
			return false, err
		}
	}
	d.logf("foreign: %d rows of %s (app estoque, no relay running) put in the shared outbox", foreignRows, typForeign)

	// The sending side of pedidos, as the business code would hold it.
	pedReg := mensageria.NewRegistry()
	for _, t := range []string{typPedido, typCancelado} {
		pedReg.MustRegister(t, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	}
	pedidos, err := mensageria.New(d.main.drv, demoClientConfig("pedidos", mensageria.ElectionNone, pedReg))
	if err != nil {
		return false, err
	}
	_, nsErr := pedidos.Enqueue(ctx, mensageria.Message{Type: typNoSender, Key: "nf-1", Payload: json.RawMessage(`{}`)})
	noSenderOK := errors.Is(nsErr, mensageria.ErrNoSender)
	if noSenderOK {
		d.logf("refused: enqueue of %s (no sender in app pedidos) failed at once: %v", typNoSender, nsErr)
	} else {
		d.logf("UNEXPECTED: enqueue of %s without a sender returned %v", typNoSender, nsErr)
	}
	if _, err := pedidos.Register(ctx); err != nil {
		return false, err
	}
	// A copy-pasted config: a third app routes estoque's type. Its relay
	// must refuse to start, claiming nothing.
	intruderReg := mensageria.NewRegistry().MustRegister(typForeign, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
		return errors.New("the intruder's sender must never run")
	}))
	intruder, err := mensageria.New(d.main.drv, demoClientConfig("relatorios", mensageria.ElectionNone, intruderReg))
	if err != nil {
		return false, err
	}
	intruderErr := intruder.Start(ctx)
	intruderOK := errors.Is(intruderErr, mensageria.ErrOwnerConflict)
	if intruderOK {
		d.logf("refused: a relay of app relatorios routing %s did not start: %v", typForeign, intruderErr)
	} else {
		if intruderErr == nil {
			_ = intruder.Stop(context.WithoutCancel(ctx))
		}
		d.logf("UNEXPECTED: a relay of app relatorios routing estoque's type started: %v", intruderErr)
	}

	// Relays: pedidos runs two at once with election none (overlapping
	// cycles); faturamento runs a leader and a standby.
	a1, err := d.startRelay(ctx, "pedidos#1", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, true)
	if err != nil {
		return false, err
	}
	if _, err := d.startRelay(ctx, "pedidos#2", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, false); err != nil {
		return false, err
	}
	b1, err := d.startRelay(ctx, "faturamento#1", "faturamento", mensageria.ElectionLeader, []string{typFatura}, true)
	if err != nil {
		return false, err
	}
	for !b1.client.IsLeader() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	b2, err := d.startRelay(ctx, "faturamento#2", "faturamento", mensageria.ElectionLeader, []string{typFatura}, true)
	if err != nil {
		return false, err
	}
	d.logf("relays: pedidos#1 + pedidos#2 concurrently (election none); faturamento#1 leads, faturamento#2 stands by")
	d.logf("faults: 5%% of requests answer 503, 2%% answer after the sender's %s timeout, 5%% of acks are lost, 1%% of effects fail", demoSendTimeout)

	// Producers: business transactions that write an order and enqueue in
	// the same transaction; 1% roll back.
	n := d.opt.messages
	blockedEvery := 97
	var prodWG sync.WaitGroup
	next := atomic.Int64{}
	for range 4 {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			for {
				i := int(next.Add(1))
				if i > n || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("pedido-%05d", i)
				payload := fmt.Sprintf(`{"order":%q,"amount_cents":%d}`, key, 100+i)
				if i%blockedEvery == 0 {
					payload = fmt.Sprintf(`{"order":%q,"blocked":true}`, key)
				}
				rollback := d.chance(0.01)
				errRollback := errors.New("rollback")
				var err error
				// A business transaction that fails (a busy database) is
				// retried like an app would; it commits whole or not at all.
				for try := 0; try < 5; try++ {
					err = d.main.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
						if err := execRaw(ctx, tx.Raw(), "INSERT INTO "+d.orders+" (key, amount_cents) VALUES ($1, $2)", key, 100+i); err != nil {
							return err
						}
						if _, err := pedidos.EnqueueTx(ctx, tx.Raw(), mensageria.Message{Type: typPedido, Key: key, Payload: json.RawMessage(payload)}); err != nil {
							return err
						}
						if rollback {
							return errRollback
						}
						return nil
					})
					if err == nil || errors.Is(err, errRollback) || ctx.Err() != nil {
						break
					}
					time.Sleep(time.Duration(try+1) * 20 * time.Millisecond)
				}
				d.mu.Lock()
				switch {
				case err == nil:
					d.committed[key] = true
				case errors.Is(err, errRollback):
					d.rolledBack[key] = true
				default:
					d.failed[key] = err
				}
				d.mu.Unlock()
				d.produced.Add(1)
			}
		}()
	}
	const cancelled = 5
	for i := range cancelled {
		if _, err := pedidos.Enqueue(ctx, mensageria.Message{Type: typCancelado, Key: fmt.Sprintf("cancel-%d", i), Payload: json.RawMessage(`{}`)}); err != nil {
			return false, err
		}
	}

	// The run: progress, and the kills at their moments.
	var a1Killed, a3Started, b1Killed bool
	var a1KilledAt time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Time{}
	prodDone := make(chan struct{})
	go func() { prodWG.Wait(); close(prodDone) }()
	producing := true
	for {
		select {
		case <-ctx.Done():
			d.logf("TIMEOUT after %s: reporting what was reached", d.opt.timeout)
		case <-prodDone:
			if producing {
				producing = false
				prodDone = nil
				d.mu.Lock()
				d.logf("producers done: %d orders committed, %d rolled back", len(d.committed), len(d.rolledBack))
				d.mu.Unlock()
				if len(d.failed) > 0 {
					for k, err := range d.failed {
						d.logf("%d business transactions failed and were not committed (as an app would see them), e.g. %s: %v", len(d.failed), k, err)
						break
					}
				}
			}
			continue
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
		p, err := d.progress(ctx)
		if err != nil {
			// A busy database only delays the next snapshot.
			continue
		}
		switch {
		case !a1Killed && p.pedApplied >= n/4:
			a1Killed, a1KilledAt = true, time.Now()
			inflight := d.kill(a1)
			d.logf("KILL pedidos#1 mid-batch: %d deliveries in flight, connections cut, leases left to expire", inflight)
		case a1Killed && !a3Started && time.Since(a1KilledAt) > 500*time.Millisecond:
			a3Started = true
			if _, err := d.startRelay(ctx, "pedidos#3", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, false); err != nil {
				return false, err
			}
			d.logf("START pedidos#3 in its place; pedidos#1's batch comes back when its leases expire")
		case !b1Killed && p.fatApplied >= n/2:
			b1Killed = true
			leader, standby := b1, b2
			if b2.client.IsLeader() {
				leader, standby = b2, b1
			}
			inflight := d.kill(leader)
			d.logf("KILL %s (the leader) mid-batch: %d deliveries in flight; %s takes over when the lease expires", leader.name, inflight, standby.name)
		}
		if d.tty {
			d.evMu.Lock()
			// Short enough for an 80-column terminal: a wrapped line
			// could not be redrawn in place.
			faults := d.fat.fault5xx.Load() + d.ped.fault5xx.Load() + d.fat.faultSlow.Load() + d.ped.faultSlow.Load() + d.fat.faultAck.Load() + d.ped.faultAck.Load()
			fmt.Fprintf(d.out, "\r\x1b[K[%5.1fs] orders %d/%d  applied %d+%d  pending %d  dead %d  faults %d",
				time.Since(d.start).Seconds(), d.produced.Load(), n, p.pedApplied, p.fatApplied, p.pending, p.dead, faults)
			d.evMu.Unlock()
		} else if time.Since(lastLine) >= 2*time.Second {
			lastLine = time.Now()
			d.logf("%s", p.line(d, n))
		}
		if !producing && p.settled() {
			break
		}
	}
	if d.tty {
		fmt.Fprint(d.out, "\r\x1b[K")
	}
	elapsed := time.Since(d.start)
	// Let in-flight requests (late answers) finish before counting.
	d.fat.srv.Close()
	d.ped.srv.Close()
	rep, err := d.report(context.WithoutCancel(ctx), foreignRows, cancelled, noSenderOK)
	rep.intruderOK = intruderOK
	if err != nil {
		return false, err
	}
	rep.elapsed = elapsed
	rep.write(d)
	return rep.ok(), nil
}

// progress is a snapshot while running.
type progress struct {
	pending, inflight, dead int64
	pedApplied, fatApplied  int
}

func (p progress) settled() bool { return p.pending == 0 && p.inflight == 0 }

func (p progress) line(d *demo, n int) string {
	return fmt.Sprintf("orders %d/%d  applied: orders %d, invoices %d  outbox: pending %d, in flight %d, dead %d  faults: 503 %d, slow %d, lost acks %d",
		d.produced.Load(), n, p.pedApplied, p.fatApplied, p.pending, p.inflight, p.dead,
		d.fat.fault5xx.Load()+d.ped.fault5xx.Load(), d.fat.faultSlow.Load()+d.ped.faultSlow.Load(), d.fat.faultAck.Load()+d.ped.faultAck.Load())
}

func (d *demo) progress(ctx context.Context) (progress, error) {
	var p progress
	stats, err := d.main.drv.Stats(ctx)
	if err != nil {
		return p, err
	}
	for _, s := range stats {
		if s.Type == typForeign {
			continue
		}
		p.pending += s.Pending
		p.inflight += s.InFlight
		p.dead += s.Dead
	}
	err = d.query(ctx, "SELECT consumer, count(DISTINCT key) FROM "+d.effects+" GROUP BY consumer", nil, func(scan func(...any) error) error {
		var c string
		var k int
		if err := scan(&c, &k); err != nil {
			return err
		}
		if strings.HasPrefix(c, "faturamento") {
			p.pedApplied = k
		} else {
			p.fatApplied = k
		}
		return nil
	})
	return p, err
}

// demoReport is the final count.
type demoReport struct {
	elapsed time.Duration
	cols    []string
	rows    map[string]map[string]int
	reasons map[string]int

	lost, dupEffects   int
	rolledBackLeaked   int
	foreignUntouched   int
	foreignTotal       int
	noSenderOK         bool
	intruderOK         bool
	noSenderRows       int
	faults             [3]int64
	fenced             int64
	expectedDeadBlocks int
}

func (d *demo) report(ctx context.Context, foreignRows, cancelled int, noSenderOK bool) (*demoReport, error) {
	r := &demoReport{cols: []string{typPedido, typFatura, typCancelado}, rows: map[string]map[string]int{}, reasons: map[string]int{}, foreignTotal: foreignRows, noSenderOK: noSenderOK}
	set := func(row, col string, v int) {
		if r.rows[row] == nil {
			r.rows[row] = map[string]int{}
		}
		r.rows[row][col] = v
	}
	stats, err := d.main.drv.Stats(ctx)
	if err != nil {
		return nil, err
	}
	total := map[string]int{}
	for _, s := range stats {
		total[s.Type] = int(s.Pending + s.Dead + s.DeliveredLastHr)
		set("delivered", s.Type, int(s.DeliveredLastHr))
		set("dead", s.Type, int(s.Dead))
	}
	// Dead rows with their reasons and keys.
	deadKeys := map[string]map[string]bool{}
	var after int64
	for {
		jobs, err := d.main.drv.ListMessages(ctx, driver.ListFilter{State: driver.StateDead, AfterID: after, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if deadKeys[j.Type] == nil {
				deadKeys[j.Type] = map[string]bool{}
			}
			deadKeys[j.Type][j.Key] = true
			r.reasons[oneLine(j.Type+": "+deadReason(j.LastError), 70)]++
		}
		if len(jobs) < 500 {
			break
		}
		after = jobs[len(jobs)-1].ID
	}
	// Effects: key -> count, per consumer.
	applied := map[string]map[string]int{"faturamento/pedidos": {}, "pedidos/faturas": {}}
	err = d.query(ctx, "SELECT consumer, key, count(*) FROM "+d.effects+" GROUP BY consumer, key", nil, func(scan func(...any) error) error {
		var c, k string
		var n int
		if err := scan(&c, &k, &n); err != nil {
			return err
		}
		if applied[c] == nil {
			applied[c] = map[string]int{}
		}
		applied[c][k] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	committed := d.committed
	rolledBack := d.rolledBack
	d.mu.Unlock()
	lostOf := func(keys map[string]bool, consumer, typ string) int {
		lost := 0
		for k := range keys {
			if applied[consumer][k] == 0 && !deadKeys[typ][k] {
				lost++
			}
		}
		return lost
	}
	dupOf := func(consumer string) int {
		n := 0
		for _, c := range applied[consumer] {
			n += c - 1
		}
		return n
	}
	// Invoices are sent by faturamento's effect: one per applied order.
	invoices := map[string]bool{}
	for k := range applied["faturamento/pedidos"] {
		invoices[k] = true
	}
	set("sent", typPedido, len(committed))
	set("sent", typFatura, total[typFatura])
	set("sent", typCancelado, cancelled)
	set("applied once", typPedido, len(applied["faturamento/pedidos"]))
	set("applied once", typFatura, len(applied["pedidos/faturas"]))
	lp, lf := lostOf(committed, "faturamento/pedidos", typPedido), lostOf(invoices, "pedidos/faturas", typFatura)
	lc := cancelled - len(deadKeys[typCancelado]) - r.rows["delivered"][typCancelado]
	set("lost", typPedido, lp)
	set("lost", typFatura, lf)
	set("lost", typCancelado, lc)
	dp, df := dupOf("faturamento/pedidos"), dupOf("pedidos/faturas")
	set("duplicate effects", typPedido, dp)
	set("duplicate effects", typFatura, df)
	r.lost, r.dupEffects = lp+lf+lc, dp+df
	if total[typFatura] != len(invoices) {
		// An invoice enqueued without its effect, or the reverse, would
		// break the one-transaction promise.
		r.dupEffects += abs(total[typFatura] - len(invoices))
	}
	for _, fs := range []*faultServer{d.fat, d.ped} {
		fs.mu.Lock()
		for t, v := range fs.redeliv {
			set("redeliveries", t, r.rows["redeliveries"][t]+v)
		}
		for t, v := range fs.dupes {
			set("duplicates absorbed", t, r.rows["duplicates absorbed"][t]+v)
		}
		fs.mu.Unlock()
		r.faults[0] += fs.fault5xx.Load()
		r.faults[1] += fs.faultSlow.Load()
		r.faults[2] += fs.faultAck.Load()
	}
	for k := range rolledBack {
		if applied["faturamento/pedidos"][k] > 0 {
			r.rolledBackLeaked++
		}
	}
	set("rolled back (never sent)", typPedido, len(rolledBack))
	// Foreign rows: still pending, never attempted.
	fj, err := d.main.drv.ListMessages(ctx, driver.ListFilter{Types: []string{typForeign}, Limit: 1000})
	if err != nil {
		return nil, err
	}
	for _, j := range fj {
		if j.State == driver.StatePending && j.Attempt == 0 && j.LastError == "" {
			r.foreignUntouched++
		}
	}
	nj, err := d.main.drv.ListMessages(ctx, driver.ListFilter{Types: []string{typNoSender}, Limit: 10})
	if err != nil {
		return nil, err
	}
	r.noSenderRows = len(nj)
	return r, nil
}

var (
	requestRef = regexp.MustCompile(` \(request [^)]*\)`)
	statusText = regexp.MustCompile(`http (\d{3}) [A-Za-z ]+: `)
)

// deadReason groups dead letters by cause: request ids make every text
// unique, so they are left out.
func deadReason(s string) string {
	s = requestRef.ReplaceAllString(strings.TrimPrefix(s, "permanent: "), "")
	return statusText.ReplaceAllString(s, "$1 ")
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func (r *demoReport) ok() bool {
	return r.lost == 0 && r.dupEffects == 0 && r.rolledBackLeaked == 0 && r.foreignUntouched == r.foreignTotal && r.noSenderOK && r.noSenderRows == 0 && r.intruderOK
}

func (r *demoReport) write(d *demo) {
	w := d.out
	fmt.Fprintf(w, "\nfinished in %.1fs on %s\n\n", r.elapsed.Seconds(), map[bool]string{false: "SQLite", true: "PostgreSQL"}[d.pg])
	// Under 80 columns, so the table survives a narrow terminal.
	rows := []struct{ key, label string }{
		{"sent", "sent"}, {"rolled back (never sent)", "rolled back"}, {"delivered", "delivered"},
		{"redeliveries", "redeliveries"}, {"duplicates absorbed", "duplicates absorbed"}, {"applied once", "applied once"},
		{"dead", "dead"}, {"lost", "lost"}, {"duplicate effects", "duplicate effects"},
	}
	fmt.Fprintf(w, "  %-19s", "")
	for _, c := range r.cols {
		fmt.Fprintf(w, "%17s", c)
	}
	fmt.Fprintf(w, "%7s\n", "total")
	for _, row := range rows {
		fmt.Fprintf(w, "  %-19s", row.label)
		sum := 0
		for _, c := range r.cols {
			v := r.rows[row.key][c]
			sum += v
			fmt.Fprintf(w, "%17d", v)
		}
		mark := ""
		if (row.key == "lost" || row.key == "duplicate effects") && sum != 0 {
			mark = "  <- FAIL"
		}
		fmt.Fprintf(w, "%7d%s\n", sum, mark)
	}
	if len(r.reasons) > 0 {
		fmt.Fprintln(w, "\n  dead, with reasons:")
		keys := make([]string, 0, len(r.reasons))
		for k := range r.reasons {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %5d  %s\n", r.reasons[k], k)
		}
	}
	check := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAIL"
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  foreign rows untouched  %d/%d %s (%s: pending, never tried)\n", r.foreignUntouched, r.foreignTotal, check(r.foreignUntouched == r.foreignTotal), typForeign)
	fmt.Fprintf(w, "  enqueue, no sender      %s (typed error, %d rows written)\n", check(r.noSenderOK && r.noSenderRows == 0), r.noSenderRows)
	fmt.Fprintf(w, "  another app's type      %s (a relay routing it refused to start)\n", check(r.intruderOK))
	fmt.Fprintf(w, "  rolled back, applied    %d %s\n", r.rolledBackLeaked, check(r.rolledBackLeaked == 0))
	fmt.Fprintf(w, "  faults injected         %d x 503, %d past the timeout, %d lost acks,\n", r.faults[0], r.faults[1], r.faults[2])
	fmt.Fprintf(w, "                          2 relays killed mid-batch\n")
	fmt.Fprintln(w)
	if r.ok() {
		fmt.Fprintln(w, "PASS: every committed message was applied once or parked as dead with its")
		fmt.Fprintln(w, "      reason; the inboxes absorbed every redelivery; nothing else was touched.")
	} else {
		fmt.Fprintln(w, "FAIL: see the rows marked above.")
	}
}
