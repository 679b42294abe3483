// Command chaosworker is one process of the fault-injection suite
// (internal/chaos): a relay replica of one app, or the HTTP receiver of
// one app's messages. The harness builds it, starts, kills, pauses and
// restarts it; everything it must remember goes to the database
// (PostgreSQL, or MariaDB for a mysql:// -db), so a SIGKILL loses nothing
// the checker needs.
//
// It ends on SIGTERM, SIGINT, or when its stdin closes (the harness died).
// A receiver also reads commands from stdin: "outage STATUS MILLIS" makes
// it answer every request with STATUS (401 or 503) for that long, as a
// destination with a rotated token or a failed dependency would, and it
// prints "refused STATUS" for each request so refused.
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/chaos/fault"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// HeaderRelay carries the sending relay's name to the receiver, so the
// history knows which app's relay delivered each request.
const HeaderRelay = "X-Chaos-Relay"

type flags struct {
	mode, db, schema, run, app, label, types, ordered, url, token string
	lease, timeout                                                time.Duration
	dropAcks                                                      float64
	conns                                                         int
	// At-most-once routes (the at-most-once suite): statuses declared not
	// applied, the reconcile probe's URL template, the key prefix whose
	// deliveries hold after their mark (for a SIGKILL between mark and
	// send), and how often probes run.
	once               bool
	notApplied, probe  string
	holdPrefix         string
	reconcile, holdFor time.Duration
}

func main() {
	var f flags
	flag.StringVar(&f.mode, "mode", "", "relay or receiver")
	flag.StringVar(&f.db, "db", "", "PostgreSQL URL, or a mysql:// URL of MariaDB")
	flag.StringVar(&f.schema, "schema", "", "schema of the outbox and the history tables")
	flag.StringVar(&f.run, "run", "", "run id, a prefix of every application_name")
	flag.StringVar(&f.app, "app", "", "mensageria app name (relay)")
	flag.StringVar(&f.label, "label", "", "name in the history: app/replica#incarnation (relay) or app#incarnation (receiver)")
	flag.StringVar(&f.types, "types", "", "comma-separated message types")
	flag.StringVar(&f.ordered, "ordered", "", "comma-separated types delivered in per-key order")
	flag.StringVar(&f.url, "url", "", "receiver URL (relay)")
	flag.StringVar(&f.token, "token", "chaos", "bearer token")
	flag.DurationVar(&f.lease, "lease", 3*time.Second, "relay lease")
	flag.DurationVar(&f.timeout, "timeout", 1500*time.Millisecond, "HTTP request timeout (relay)")
	flag.Float64Var(&f.dropAcks, "drop-acks", 0, "probability of applying a message and then dropping the answer (receiver)")
	flag.IntVar(&f.conns, "conns", 4, "database connections")
	flag.BoolVar(&f.once, "once", false, "at-most-once routes (relay)")
	flag.StringVar(&f.notApplied, "not-applied", "", "comma-separated statuses that prove the receiver did not apply a request (relay, -once)")
	flag.StringVar(&f.probe, "probe", "", "reconcile probe URL template with {key} (relay, -once)")
	flag.StringVar(&f.holdPrefix, "hold-prefix", "", "keys with this prefix wait -hold-for after their mark, before their request, printing 'holding KEY' (relay, -once)")
	flag.DurationVar(&f.holdFor, "hold-for", 30*time.Second, "see -hold-prefix")
	flag.DurationVar(&f.reconcile, "reconcile", 200*time.Millisecond, "reconcile interval (relay, -once)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		// The harness holds our stdin open; EOF means it is gone and we
		// must not outlive it.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			command(sc.Text())
		}
		stop()
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var err error
	switch f.mode {
	case "relay":
		err = relay(ctx, &f, log)
	case "receiver":
		err = receiver(ctx, &f, log)
	default:
		err = fmt.Errorf("unknown -mode %q", f.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

// store is the worker's database: the driver over a pool of its own, and
// the history statements, on PostgreSQL or on MariaDB.
type store struct {
	drv   driver.Driver
	close func()
	// arrival records one request and returns its id.
	arrival func(ctx context.Context, n int64, typ string, attempt int, route, relay string, dropped bool) (int64, error)
	// effect records the effect of message n, applied by arrival aid, in
	// the inbox's transaction.
	effect func(ctx context.Context, tx mensageria.Tx, n, aid int64) error
}

// openStore opens the -db database. name is this process's name for the
// history's lease events and for the nemesis (application_name on
// PostgreSQL); params are more PostgreSQL session parameters.
func openStore(ctx context.Context, f *flags, name string, params map[string]string) (*store, error) {
	if config.IsMySQL(f.db) {
		db, drv, err := openMySQL(ctx, f, name)
		if err != nil {
			return nil, err
		}
		table := func(n string) string { return f.schema + "_" + n }
		return &store{drv: drv, close: func() { _ = db.Close() },
			arrival: func(ctx context.Context, n int64, typ string, attempt int, route, relay string, dropped bool) (int64, error) {
				res, err := db.ExecContext(ctx, "INSERT INTO "+table("chaos_arrivals")+" (n, type, attempt, route, relay, ack_dropped) VALUES (?, ?, ?, ?, ?, ?)",
					n, typ, attempt, route, relay, dropped)
				if err != nil {
					return 0, err
				}
				return res.LastInsertId()
			},
			effect: func(ctx context.Context, tx mensageria.Tx, n, aid int64) error {
				_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, "INSERT INTO "+table("chaos_effects")+" (n, arrival_id) VALUES (?, ?)", n, aid)
				return err
			}}, nil
	}
	all := map[string]string{"application_name": name}
	for k, v := range params {
		all[k] = v
	}
	pool, drv, err := openDriver(ctx, f, all)
	if err != nil {
		return nil, err
	}
	table := func(n string) string { return f.schema + "." + n }
	return &store{drv: drv, close: pool.Close,
		arrival: func(ctx context.Context, n int64, typ string, attempt int, route, relay string, dropped bool) (int64, error) {
			var id int64
			err := pool.QueryRow(ctx, "INSERT INTO "+table("chaos_arrivals")+" (n, type, attempt, route, relay, ack_dropped) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
				n, typ, attempt, route, relay, dropped).Scan(&id)
			return id, err
		},
		effect: func(ctx context.Context, tx mensageria.Tx, n, aid int64) error {
			_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+table("chaos_effects")+" (n, arrival_id) VALUES ($1, $2)", n, aid)
			return err
		}}, nil
}

// openDriver opens a pool with the given session parameters and the
// driver over it, in the run's schema; the caller closes the pool.
func openDriver(ctx context.Context, f *flags, params map[string]string) (*pgxpool.Pool, *postgres.Driver, error) {
	cfg, err := pgxpool.ParseConfig(f.db)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = int32(f.conns)
	cfg.MinConns = 0
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	drv, err := postgres.New(pool, &postgres.Config{Schema: f.schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, drv, nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// out serializes the lines the harness reads from stdout.
var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

func emit(format string, a ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Fprintf(out.w, format+"\n", a...)
	_ = out.w.Flush()
}

// outage is the receiver's injected destination failure: the status it
// answers every request with, until the time in unix nanoseconds.
var outage struct {
	status atomic.Int64
	until  atomic.Int64
}

// command runs one line the harness wrote to stdin.
func command(line string) {
	f := strings.Fields(line)
	if len(f) == 3 && f[0] == "outage" {
		st, err1 := strconv.Atoi(f[1])
		ms, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && (st == http.StatusUnauthorized || st == http.StatusServiceUnavailable) {
			outage.status.Store(int64(st))
			outage.until.Store(time.Now().Add(time.Duration(ms) * time.Millisecond).UnixNano())
		}
	}
}

type hook struct{}

// OnDelivery reports the settles the database refused to record because
// the lease was gone: taken by another relay (fenced) or run out (expired).
func (hook) OnDelivery(ev mensageria.DeliveryEvent) {
	if ev.Outcome == mensageria.OutcomeFenced || ev.Outcome == mensageria.OutcomeExpired {
		emit("fenced %s", ev.Type)
	}
	if (ev.Outcome == mensageria.OutcomeRetry || ev.Outcome == mensageria.OutcomePostponed) && mensageria.IsNotSent(ev.Err) {
		emit("notsent %s", ev.Type)
	}
}

func (hook) OnElection(ev mensageria.ElectionEvent) { emit("leader %v %d", ev.Leader, ev.Epoch) }

func relay(ctx context.Context, f *flags, log *slog.Logger) error {
	// The pool's application_name (@chaos_name on MariaDB) names this
	// process in the outbox trigger's history and lets the nemesis find
	// its backends.
	st, err := openStore(ctx, f, "chaos "+f.run+" "+f.label, nil)
	if err != nil {
		return err
	}
	defer st.close()
	send, err := relaySender(f)
	if err != nil {
		return err
	}
	reg, err := relayRegistry(f, send)
	if err != nil {
		return err
	}
	c, err := mensageria.New(st.drv, &mensageria.Config{
		App:          f.app,
		Registry:     reg,
		BatchSize:    50,
		Concurrency:  16,
		Lease:        f.lease,
		MaxAttempts:  1_000_000, // only an injected permanent error may park a message
		BackoffBase:  50 * time.Millisecond,
		BackoffMax:   time.Second,
		PollInterval: 200 * time.Millisecond,
		// An outage of the receiver pauses its route; probes come back
		// within a couple of seconds of its end.
		RoutePause:    200 * time.Millisecond,
		RoutePauseMax: 2 * time.Second,
		Logger:        log,
		Hooks:         []mensageria.Hook{hook{}},

		ReconcileInterval: f.reconcile,
	})
	if err != nil {
		return err
	}
	if !startRelay(ctx, c, log) {
		return nil
	}
	emit("ready")
	go reportReadiness(ctx, c)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Stop(sctx)
	return nil
}

// relaySender sends over HTTP, naming this relay in a header; keys of
// -hold-prefix wait after their mark, for the harness to kill us there.
func relaySender(f *flags) (mensageria.Sender, error) {
	var notApplied []int
	for _, s := range split(f.notApplied) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("-not-applied: %w", err)
		}
		notApplied = append(notApplied, n)
	}
	hs, err := m2mhttp.NewSender(m2mhttp.SenderConfig{URL: f.url, Token: f.token, Timeout: f.timeout, MaxConcurrent: 16, NotApplied: notApplied})
	if err != nil {
		return nil, err
	}
	label := f.label
	return mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
		if f.holdPrefix != "" && strings.HasPrefix(d.Key, f.holdPrefix) && d.Attempt == 1 {
			// Marked, not yet sent: the harness kills us here.
			emit("holding %s", d.Key)
			select {
			case <-time.After(f.holdFor):
			case <-ctx.Done():
				return mensageria.NotSent(ctx.Err())
			}
		}
		dd := *d
		dd.Headers = make(map[string]string, len(d.Headers)+1)
		for k, v := range d.Headers {
			dd.Headers[k] = v
		}
		dd.Headers[HeaderRelay] = label
		return hs.Send(ctx, &dd)
	}), nil
}

// relayRegistry routes every type of -types to send, ordered where
// -ordered says, at most once (with the probe, if any) under -once.
func relayRegistry(f *flags, send mensageria.Sender) (*mensageria.Registry, error) {
	ordered := map[string]bool{}
	for _, t := range split(f.ordered) {
		ordered[t] = true
	}
	var onceOpts []mensageria.RouteOption
	if f.once {
		onceOpts = append(onceOpts, mensageria.Mode(mensageria.AtMostOnce))
		if f.probe != "" {
			p, err := m2mhttp.NewProbe(m2mhttp.ProbeConfig{URL: f.probe, Token: f.token, Timeout: f.timeout})
			if err != nil {
				return nil, err
			}
			onceOpts = append(onceOpts, mensageria.Reconcile(p))
		}
	}
	reg := mensageria.NewRegistry()
	for _, t := range split(f.types) {
		opts := append([]mensageria.RouteOption(nil), onceOpts...)
		if ordered[t] {
			opts = append(opts, mensageria.Ordered())
		}
		if err := reg.Register(t, send, opts...); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// startRelay starts c, which needs the database (it records the app's
// types): while the server is down, full or refusing this role, it tries
// again, as a supervisor restarting the process would. It reports false
// if ctx ended first.
func startRelay(ctx context.Context, c *mensageria.Client, log *slog.Logger) bool {
	for {
		err := c.Start(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("start failed; trying again", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reportReadiness probes readiness as an orchestrator would and reports
// each change, so the harness can count the times a relay said it was
// unfit.
func reportReadiness(ctx context.Context, c *mensageria.Client) {
	unready := false
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Ready(); (err != nil) != unready {
			unready = err != nil
			if unready {
				emit("unready %s", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				emit("ready-again")
			}
		}
	}
}

// N reads the harness's message number out of a message id.
func N(id uuid.UUID) int64 {
	var b [8]byte
	copy(b[2:], id[10:])
	return int64(binary.BigEndian.Uint64(b[:]))
}

type arrivalKey struct{}

func receiver(ctx context.Context, f *flags, log *slog.Logger) error {
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fmt.Errorf("listener from fd 3: %w", err)
	}
	// Asynchronous commit by default, on the server the suite crashes too:
	// the arrivals recorded before the inbox runs are lost in a crash, and
	// the inbox's own transaction (driver InTx) must raise the setting,
	// since a settle made after the restart survives whatever the crash
	// took. An effect committed asynchronously, acknowledged, and lost in
	// a crash before the relay settled on the restarted server was a lost
	// message (TestInTxCommitsDurablyOnAnAsynchronousSession). MariaDB
	// has no such session setting: every commit there is durable.
	st, err := openStore(ctx, f, "chaos "+f.run+" receiver "+f.label, map[string]string{"synchronous_commit": "off"})
	if err != nil {
		return err
	}
	defer st.close()
	rc, err := inboxReceiver(f, st, log)
	if err != nil {
		return err
	}
	route, _, _ := strings.Cut(f.label, "#")
	rec := &recorder{f: f, st: st, inner: rc, route: route}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	emit("ready")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// inboxReceiver applies each type of -types through an inbox: the effect
// records the message and the arrival that applied it, and a poison
// message is refused for good.
func inboxReceiver(f *flags, st *store, log *slog.Logger) (*m2mhttp.Receiver, error) {
	effect := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		var p struct {
			Poison bool `json:"poison"`
		}
		_ = json.Unmarshal(d.Payload, &p)
		if p.Poison {
			return mensageria.Permanent(errors.New("poison message: refused for good"))
		}
		aid, _ := ctx.Value(arrivalKey{}).(int64)
		return st.effect(ctx, tx, N(d.ID), aid)
	}
	handlers := map[string]m2mhttp.Handler{}
	for _, t := range split(f.types) {
		// Many messages share a key (ordered streams), so each message is
		// deduplicated by its id.
		in, err := mensageria.NewInbox(st.drv, mensageria.InboxConfig{Consumer: "chaos " + t, DedupKey: func(d *mensageria.Delivery) string { return d.ID.String() }})
		if err != nil {
			return nil, err
		}
		handlers[t] = m2mhttp.Handler{Inbox: in, Effect: effect}
	}
	return m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{f.token}, Handlers: handlers, Logger: log})
}

// recorder is the receiver's front: it injects the outages the harness
// commands and the lost answers of -drop-acks, and records every request
// it lets through in the history before the inbox runs.
type recorder struct {
	f     *flags
	st    *store
	inner http.Handler
	route string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if time.Now().UnixNano() < outage.until.Load() {
		// The destination is down as a whole: nothing is read,
		// recorded or applied.
		st := int(outage.status.Load())
		emit("refused %d", st)
		retryAfter := time.Second
		if st == http.StatusUnauthorized {
			retryAfter = 0 // a token is not fixed by waiting
		}
		fault.Refuse(w, st, "injected outage", retryAfter)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "body", http.StatusServiceUnavailable)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	env, err := m2mhttp.DecodeEnvelope(body)
	if err != nil {
		rec.inner.ServeHTTP(w, r)
		return
	}
	drop := rec.f.dropAcks > 0 && rand.Float64() < rec.f.dropAcks
	// Recorded before the inbox runs, so every effect has its request
	// in the history even if this process dies right after.
	id, err := rec.st.arrival(r.Context(), N(env.ID), env.Type, env.Attempt, rec.route, env.Headers[HeaderRelay], drop)
	if err != nil {
		http.Error(w, "could not record the arrival", http.StatusServiceUnavailable)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), arrivalKey{}, id))
	if !drop {
		rec.inner.ServeHTTP(w, r)
		return
	}
	// Apply, then lose the answer: the sender sees a broken connection
	// after the effect committed.
	rec.inner.ServeHTTP(fault.Discard{H: http.Header{}}, r)
	fault.LoseAnswer(w)
}
