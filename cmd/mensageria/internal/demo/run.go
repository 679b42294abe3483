package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

const (
	demoForeignRows = 25 // estoque's rows in the shared outbox
	demoCancelled   = 5  // pedido.cancelado messages, which faturamento cannot apply
)

// refusals are what the demo tried that must be refused.
type refusals struct {
	noSender bool // an enqueue of a type with no sender failed at once
	intruder bool // a relay routing another app's type did not start
}

// demoRelays are the relays the run kills.
type demoRelays struct {
	pedidos1         *relayProc
	fatura1, fatura2 *relayProc // leader and standby, in either role
}

func (d *demo) run(ctx context.Context) (*Report, error) {
	d.start = time.Now()
	d.rng = rand.New(rand.NewPCG(d.opt.Seed, d.opt.Seed^0x9e3779b97f4a7c15))
	d.committed, d.rolledBack, d.failed = map[string]bool{}, map[string]bool{}, map[string]error{}
	defer d.cleanup()
	ctx, cancel := context.WithTimeout(ctx, d.opt.Timeout)
	defer cancel()
	if err := d.setup(ctx); err != nil {
		return nil, err
	}
	if err := d.startReceivers(ctx); err != nil {
		return nil, err
	}
	if err := d.enqueueForeign(ctx); err != nil {
		return nil, err
	}
	var refused refusals
	pedidos, err := d.pedidosApp(ctx, &refused)
	if err != nil {
		return nil, err
	}
	if err := d.startIntruder(ctx, &refused); err != nil {
		return nil, err
	}
	relays, err := d.startRelays(ctx)
	if err != nil {
		return nil, err
	}
	d.logf("faults: 5%% of requests answer 503, 2%% answer after the sender's %s timeout, 5%% of acks are lost, 1%% of effects fail", demoSendTimeout)
	prodDone := d.produce(ctx, pedidos)
	for i := range demoCancelled {
		if _, err := pedidos.Enqueue(ctx, mensageria.Message{Type: typCancelado, Key: fmt.Sprintf("cancel-%d", i), Payload: json.RawMessage(`{}`)}); err != nil {
			return nil, err
		}
	}
	if err := d.watch(ctx, relays, prodDone); err != nil {
		return nil, err
	}
	elapsed := time.Since(d.start)
	// Let in-flight requests (late answers) finish before counting.
	d.fat.srv.Close()
	d.ped.srv.Close()
	rep, err := d.report(context.WithoutCancel(ctx), refused)
	if err != nil {
		return nil, err
	}
	rep.elapsed, rep.label = elapsed, d.label
	return rep, nil
}

// startReceivers puts each app's inbox behind a faulty HTTP server.
// faturamento enqueues its answer inside the inbox transaction: the
// invoice row, the dedup record and the reply commit together.
func (d *demo) startReceivers(ctx context.Context) error {
	inboxFat, err := mensageria.NewInbox(d.main.Driver, mensageria.InboxConfig{Consumer: "faturamento/pedidos"})
	if err != nil {
		return err
	}
	inboxPed, err := mensageria.NewInbox(d.main.Driver, mensageria.InboxConfig{Consumer: "pedidos/faturas"})
	if err != nil {
		return err
	}
	d.inboxes = map[string]*mensageria.Inbox{"faturamento": inboxFat, "pedidos": inboxPed}
	faturaReg := mensageria.NewRegistry().MustRegister(typFatura, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	fatEnq, err := mensageria.New(d.main.Driver, demoClientConfig("faturamento", mensageria.ElectionLeader, faturaReg))
	if err != nil {
		return err
	}
	// Its types are recorded as faturamento's before the first effect
	// enqueues one inside an inbox transaction.
	if _, err := fatEnq.Register(ctx); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fatRecv, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{demoToken}, Logger: quiet, Handlers: map[string]m2mhttp.Handler{
		typPedido: {Inbox: inboxFat, Effect: d.invoiceEffect(inboxFat, fatEnq)},
	}})
	if err != nil {
		return err
	}
	pedRecv, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{demoToken}, Logger: quiet, Handlers: map[string]m2mhttp.Handler{
		typFatura: {Inbox: inboxPed, Effect: func(ctx context.Context, tx mensageria.Tx, dl *mensageria.Delivery) error {
			return execRaw(ctx, tx.Raw(), "INSERT INTO "+d.effects+" (consumer, order_key, message_id) VALUES ($1, $2, $3)", inboxPed.Consumer(), dl.Key, dl.ID.String())
		}},
	}})
	if err != nil {
		return err
	}
	d.fat = newFaultServer(d, "faturamento", fatRecv, demoSendTimeout)
	d.ped = newFaultServer(d, "pedidos", pedRecv, demoSendTimeout)
	d.closers = append(d.closers, d.fat.srv.Close, d.ped.srv.Close)
	d.logf("apps: pedidos -> %s -> faturamento (receiver %s); faturamento -> %s -> pedidos (receiver %s)", typPedido, d.fat.srv.URL, typFatura, d.ped.srv.URL)
	return nil
}

// invoiceEffect is faturamento's effect of an order: refused for good for
// a blocked customer, failing now and then, else recorded and answered
// with an invoice.
func (d *demo) invoiceEffect(in *mensageria.Inbox, fatEnq *mensageria.Client) mensageria.Effect {
	return func(ctx context.Context, tx mensageria.Tx, dl *mensageria.Delivery) error {
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
		if err := execRaw(ctx, tx.Raw(), "INSERT INTO "+d.effects+" (consumer, order_key, message_id) VALUES ($1, $2, $3)", in.Consumer(), dl.Key, dl.ID.String()); err != nil {
			return err
		}
		_, err := fatEnq.EnqueueTx(ctx, tx.Raw(), mensageria.Message{Type: typFatura, Key: dl.Key, Payload: json.RawMessage(`{"invoice":"` + dl.Key + `"}`)})
		return err
	}
}

// enqueueForeign puts a third app's rows in the same outbox: no relay
// here may touch them.
func (d *demo) enqueueForeign(ctx context.Context) error {
	estoqueReg := mensageria.NewRegistry().MustRegister(typForeign, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
		return errors.New("estoque's sender must never run in this demo")
	}))
	estoque, err := mensageria.New(d.main.Driver, demoClientConfig("estoque", mensageria.ElectionLeader, estoqueReg))
	if err != nil {
		return err
	}
	for i := range demoForeignRows {
		if _, err := estoque.Enqueue(ctx, mensageria.Message{Type: typForeign, Key: fmt.Sprintf("sku-%03d", i), Payload: json.RawMessage(`{"qty":1}`)}); err != nil {
			return err
		}
	}
	d.logf("foreign: %d rows of %s (app estoque, no relay running) put in the shared outbox", demoForeignRows, typForeign)
	return nil
}

// pedidosApp is the sending side of pedidos, as the business code would
// hold it; its enqueue of a type with no sender must fail at once.
func (d *demo) pedidosApp(ctx context.Context, refused *refusals) (*mensageria.Client, error) {
	pedReg := mensageria.NewRegistry()
	for _, t := range []string{typPedido, typCancelado} {
		pedReg.MustRegister(t, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	}
	pedidos, err := mensageria.New(d.main.Driver, demoClientConfig("pedidos", mensageria.ElectionNone, pedReg))
	if err != nil {
		return nil, err
	}
	_, nsErr := pedidos.Enqueue(ctx, mensageria.Message{Type: typNoSender, Key: "nf-1", Payload: json.RawMessage(`{}`)})
	refused.noSender = errors.Is(nsErr, mensageria.ErrNoSender)
	if refused.noSender {
		d.logf("refused: enqueue of %s (no sender in app pedidos) failed at once: %v", typNoSender, nsErr)
	} else {
		d.logf("UNEXPECTED: enqueue of %s without a sender returned %v", typNoSender, nsErr)
	}
	if _, err := pedidos.Register(ctx); err != nil {
		return nil, err
	}
	return pedidos, nil
}

// startIntruder tries a copy-pasted config: a third app routes estoque's
// type. Its relay must refuse to start, claiming nothing.
func (d *demo) startIntruder(ctx context.Context, refused *refusals) error {
	intruderReg := mensageria.NewRegistry().MustRegister(typForeign, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
		return errors.New("the intruder's sender must never run")
	}))
	intruder, err := mensageria.New(d.main.Driver, demoClientConfig("relatorios", mensageria.ElectionNone, intruderReg))
	if err != nil {
		return err
	}
	intruderErr := intruder.Start(ctx)
	refused.intruder = errors.Is(intruderErr, mensageria.ErrOwnerConflict)
	if refused.intruder {
		d.logf("refused: a relay of app relatorios routing %s did not start: %v", typForeign, intruderErr)
	} else {
		if intruderErr == nil {
			_ = intruder.Stop(context.WithoutCancel(ctx))
		}
		d.logf("UNEXPECTED: a relay of app relatorios routing estoque's type started: %v", intruderErr)
	}
	return nil
}

// startRelays: pedidos runs two at once with election none (overlapping
// cycles); faturamento runs a leader and a standby.
func (d *demo) startRelays(ctx context.Context) (*demoRelays, error) {
	var rs demoRelays
	var err error
	if rs.pedidos1, err = d.startRelay(ctx, "pedidos#1", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, true); err != nil {
		return nil, err
	}
	if _, err := d.startRelay(ctx, "pedidos#2", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, false); err != nil {
		return nil, err
	}
	if rs.fatura1, err = d.startRelay(ctx, "faturamento#1", "faturamento", mensageria.ElectionLeader, []string{typFatura}, true); err != nil {
		return nil, err
	}
	for !rs.fatura1.client.IsLeader() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if rs.fatura2, err = d.startRelay(ctx, "faturamento#2", "faturamento", mensageria.ElectionLeader, []string{typFatura}, true); err != nil {
		return nil, err
	}
	d.logf("relays: pedidos#1 + pedidos#2 concurrently (election none); faturamento#1 leads, faturamento#2 stands by")
	return &rs, nil
}

// produce runs the producers: business transactions that write an order
// and enqueue in the same transaction; 1% roll back. The channel closes
// when they are done.
func (d *demo) produce(ctx context.Context, pedidos *mensageria.Client) <-chan struct{} {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > d.opt.Messages || ctx.Err() != nil {
					return
				}
				d.order(ctx, pedidos, i)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

var errDemoRollback = errors.New("rollback")

// order is one business transaction, retried like an app would when it
// fails (a busy database); it commits whole or not at all.
func (d *demo) order(ctx context.Context, pedidos *mensageria.Client, i int) {
	const blockedEvery = 97
	key := fmt.Sprintf("pedido-%05d", i)
	payload := fmt.Sprintf(`{"order":%q,"amount_cents":%d}`, key, 100+i)
	if i%blockedEvery == 0 {
		payload = fmt.Sprintf(`{"order":%q,"blocked":true}`, key)
	}
	rollback := d.chance(0.01)
	var err error
	for try := 0; try < 5; try++ {
		err = d.businessTx(ctx, func(tx any) error {
			if err := execRaw(ctx, tx, "INSERT INTO "+d.orders+" (order_key, amount_cents) VALUES ($1, $2)", key, 100+i); err != nil {
				return err
			}
			if _, err := pedidos.EnqueueTx(ctx, tx, mensageria.Message{Type: typPedido, Key: key, Payload: json.RawMessage(payload)}); err != nil {
				return err
			}
			if rollback {
				return errDemoRollback
			}
			return nil
		})
		if err == nil || errors.Is(err, errDemoRollback) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(try+1) * 20 * time.Millisecond)
	}
	d.mu.Lock()
	switch {
	case err == nil:
		d.committed[key] = true
	case errors.Is(err, errDemoRollback):
		d.rolledBack[key] = true
	default:
		d.failed[key] = err
	}
	d.mu.Unlock()
	d.produced.Add(1)
}

// businessTx runs fn in a transaction the demo opens itself on the
// database's own handle, as an app opens the one its business write and
// its EnqueueTx share: a pgx.Tx on PostgreSQL, a *sql.Tx elsewhere.
// MySQL's runs at READ COMMITTED, as the driver's own transactions do: no
// gap locks for the concurrent producers to queue on.
func (d *demo) businessTx(ctx context.Context, fn func(tx any) error) error {
	if d.main.Pool != nil {
		return pgx.BeginFunc(ctx, d.main.Pool, func(tx pgx.Tx) error { return fn(tx) })
	}
	var opts *sql.TxOptions
	if config.IsMySQL(d.opt.DB) {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := d.main.SQL.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// kills is where the run is in its schedule of kills.
type kills struct {
	pedidos1, pedidos3Started, faturaLeader bool
	pedidos1At                              time.Time
}

// watch shows progress and kills the relays at their moments, until the
// producers are done and every message settled, or ctx ends.
func (d *demo) watch(ctx context.Context, rs *demoRelays, prodDone <-chan struct{}) error {
	var k kills
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Time{}
	producing := true
	for {
		select {
		case <-ctx.Done():
			d.logf("TIMEOUT after %s: reporting what was reached", d.opt.Timeout)
		case <-prodDone:
			producing, prodDone = false, nil
			d.producersDone()
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
		if err := d.killOnSchedule(ctx, &k, rs, p); err != nil {
			return err
		}
		d.show(p, &lastLine)
		if !producing && p.settled() {
			break
		}
	}
	if d.tty {
		fmt.Fprint(d.out, "\r\x1b[K")
	}
	return nil
}

func (d *demo) producersDone() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logf("producers done: %d orders committed, %d rolled back", len(d.committed), len(d.rolledBack))
	for k, err := range d.failed {
		d.logf("%d business transactions failed and were not committed (as an app would see them), e.g. %s: %v", len(d.failed), k, err)
		break
	}
}

// killOnSchedule: pedidos#1 dies a quarter of the way and pedidos#3 takes
// its place half a second later; faturamento's leader dies half way.
func (d *demo) killOnSchedule(ctx context.Context, k *kills, rs *demoRelays, p progress) error {
	n := d.opt.Messages
	switch {
	case !k.pedidos1 && p.pedApplied >= n/4:
		k.pedidos1, k.pedidos1At = true, time.Now()
		inflight := d.kill(rs.pedidos1)
		d.logf("KILL pedidos#1 mid-batch: %d deliveries in flight, connections cut, leases left to expire", inflight)
	case k.pedidos1 && !k.pedidos3Started && time.Since(k.pedidos1At) > 500*time.Millisecond:
		k.pedidos3Started = true
		if _, err := d.startRelay(ctx, "pedidos#3", "pedidos", mensageria.ElectionNone, []string{typPedido, typCancelado}, false); err != nil {
			return err
		}
		d.logf("START pedidos#3 in its place; pedidos#1's batch comes back when its leases expire")
	case !k.faturaLeader && p.fatApplied >= n/2:
		k.faturaLeader = true
		leader, standby := rs.fatura1, rs.fatura2
		if rs.fatura2.client.IsLeader() {
			leader, standby = rs.fatura2, rs.fatura1
		}
		inflight := d.kill(leader)
		d.logf("KILL %s (the leader) mid-batch: %d deliveries in flight; %s takes over when the lease expires", leader.name, inflight, standby.name)
	}
	return nil
}

// show draws the progress line in place on a terminal, else logs it
// every two seconds.
func (d *demo) show(p progress, lastLine *time.Time) {
	if d.tty {
		d.evMu.Lock()
		// Short enough for an 80-column terminal: a wrapped line
		// could not be redrawn in place.
		faults := d.fat.fault5xx.Load() + d.ped.fault5xx.Load() + d.fat.faultSlow.Load() + d.ped.faultSlow.Load() + d.fat.faultAck.Load() + d.ped.faultAck.Load()
		fmt.Fprintf(d.out, "\r\x1b[K[%5.1fs] orders %d/%d  applied %d+%d  pending %d  dead %d  faults %d",
			time.Since(d.start).Seconds(), d.produced.Load(), d.opt.Messages, p.pedApplied, p.fatApplied, p.pending, p.dead, faults)
		d.evMu.Unlock()
	} else if time.Since(*lastLine) >= 2*time.Second {
		*lastLine = time.Now()
		d.logf("%s", p.line(d, d.opt.Messages))
	}
}
