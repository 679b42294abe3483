package chaos

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// The two apps, their types and which are ordered. Each app's relay
// claims only its own types; both enqueue in the same business
// transactions, into one shared outbox.
var (
	appTypes   = map[string][]string{"a": {"a.poke", "a.seq"}, "b": {"b.poke", "b.seq"}}
	orderedSet = map[string]bool{"a.seq": true, "b.seq": true}
	allTypes   = []string{"a.poke", "a.seq", "b.poke", "b.seq"}
	apps       = []string{"a", "b"}
)

// Fault kinds the nemesis injects.
const (
	FaultKill      = "sigkill-relay"
	FaultPause     = "sigstop-relay"
	FaultPGKill    = "pg-terminate-backend"
	FaultReceiver  = "restart-receiver"
	FaultLatency   = "proxy-latency"
	FaultReset     = "proxy-reset-peer"
	FaultTimeout   = "proxy-timeout"
	FaultAckDrop   = "receiver-drop-ack" // counted from the history
	FaultPGBackend = "pg-backends-terminated"
	// A destination outage: the receiver answers every request 401 (a
	// rotated token) or 503 (a failed dependency) for several seconds.
	// Its route pauses and probes; no attempt is spent and nothing dies.
	FaultOutage401 = "receiver-outage-401"
	FaultOutage503 = "receiver-outage-503"
	FaultRefused   = "requests-refused-by-outage" // counted from the receivers' reports
)

var nemesisKinds = []string{FaultKill, FaultLatency, FaultPause, FaultOutage401, FaultReset, FaultPGKill, FaultTimeout, FaultReceiver, FaultOutage503}

// outageFor is how long one destination outage lasts: longer than a
// lease, so batches claimed before it meet it whole.
const outageFor = 4 * time.Second

// profile sizes a run.
type profile struct {
	messages int
	// minProduce stretches production over at least this long, so the
	// nemesis's faults land on traffic; 0 produces as fast as the relays
	// drain.
	minProduce time.Duration
	lease      time.Duration
	gap        time.Duration // between two nemesis steps
	converge   time.Duration // after the last fault, for every message to settle
	backlog    int           // producers wait while more rows than this are pending
	producers  int
	perTx      int // messages per business transaction: 1 to perTx
	dropAcks   float64
	rollback   float64
	poison     float64
	// produceFor, when set, ends production early: the run then checks
	// what was enqueued so far.
	produceFor time.Duration
}

type harness struct {
	t       testing.TB
	p       profile
	ctx     context.Context
	be      backend
	run     string
	appName map[string]string // "a" -> mensageria app name, unique per run
	bin     string
	logDir  string
	dbs     dbState

	relays    map[string][]*proc
	receivers map[string]*proc
	proxies   map[string]*toxiproxy.Proxy

	faultsMu sync.Mutex
	faults   map[string]int
	fenced   atomic.Int64
	refused  atomic.Int64
	backlog  atomic.Int64

	nextN    atomic.Int64
	started  time.Time
	cutShort atomic.Bool
	histMu   sync.Mutex
	hist     History
}

func (h *harness) fault(kind string, n int) {
	h.faultsMu.Lock()
	h.faults[kind] += n
	h.faultsMu.Unlock()
}

func (h *harness) logf(format string, a ...any) {
	h.t.Logf(time.Now().Format("15:04:05.000 ")+format, a...)
}

// buildWorker compiles the worker binary once per test.
func buildWorker(t testing.TB, dir string) string {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(dir, "chaosworker")
	cmd := exec.Command(gobin, "build", "-o", out, "github.com/xadm/mensageria/cmd/mensageria/internal/chaos/cmd/chaosworker")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build worker: %v\n%s", err, b)
	}
	return out
}

// proc is one worker process, restartable under the same name.
type proc struct {
	h      *harness
	name   string // "a/0" for relays, "a" for receivers
	args   func(label string) []string
	extra  []*os.File
	mu     sync.Mutex
	inc    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	leader atomic.Bool
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inc++
	label := fmt.Sprintf("%s#%d", p.name, p.inc)
	cmd := exec.Command(p.h.bin, p.args(label)...)
	cmd.ExtraFiles = p.extra
	// A harness that dies without cleaning up takes its workers along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(p.h.logDir, strings.ReplaceAll(p.name, "/", "-")+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- %s started %s\n", label, time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 0:
			case f[0] == "ready":
				once.Do(func() { close(ready) })
			case f[0] == "fenced":
				p.h.fenced.Add(1)
			case f[0] == "refused":
				p.h.refused.Add(1)
			case f[0] == "unready":
				p.h.fault(figUnready, 1)
			case f[0] == "leader" && len(f) > 1:
				p.leader.Store(f[1] == "true")
				if epoch, err := strconv.ParseInt(f[len(f)-1], 10, 64); err == nil && f[1] == "true" {
					p.h.histMu.Lock()
					p.h.hist.Elections = append(p.h.hist.Elections, Election{Relay: label, Epoch: epoch})
					p.h.histMu.Unlock()
				}
			}
		}
		once.Do(func() { close(ready) })
		_ = cmd.Wait()
		_ = logf.Close()
		p.leader.Store(false)
		close(done)
	}()
	p.cmd, p.stdin, p.done = cmd, stdin, done
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
	}
	return nil
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) signal(s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

// command writes one line to the process's stdin (see chaosworker).
func (p *proc) command(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil {
		if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
			p.h.logf("command %q to %s: %v", line, p.name, err)
		}
	}
}

// kill ends the process at once (SIGKILL works on a stopped one too) and
// waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done, stdin := p.cmd, p.done, p.stdin
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = stdin.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// runID is a short random name that keeps this run's apps and backends
// apart from other tests on the same server.
func runID() string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newHarness(t *testing.T, p profile, be backend) *harness {
	dir := t.TempDir()
	h := &harness{
		t: t, p: p, ctx: context.Background(), be: be, run: runID(),
		appName:   map[string]string{},
		relays:    map[string][]*proc{},
		receivers: map[string]*proc{},
		proxies:   map[string]*toxiproxy.Proxy{},
		faults:    map[string]int{},
		logDir:    dir,
	}
	for _, a := range apps {
		h.appName[a] = "chaos-" + h.run + "-" + a
	}
	h.hist.Owner = map[string]string{}
	for a, ts := range appTypes {
		for _, typ := range ts {
			h.hist.Owner[typ] = a
		}
	}
	h.hist.Ordered = orderedSet
	h.bin = buildWorker(t, dir)
	if os.Getenv("MENSAGERIA_CHAOS_KEEP_LOGS") != "" {
		t.Logf("worker logs in %s", dir)
	}
	if _, err := be.newDriver(t).Migrate(h.ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	be.setup(h)
	return h
}

// startAll starts a receiver and a fault proxy per app, then two relay
// replicas per app pointed at the proxy.
func (h *harness) startAll() {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for _, a := range apps {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.t.Fatal(err)
		}
		// The harness keeps the listening socket across receiver
		// restarts, so the port never changes hands.
		lf, err := ln.(*net.TCPListener).File()
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { _ = ln.Close(); _ = lf.Close() })
		rcv := &proc{h: h, name: a, extra: []*os.File{lf}, args: func(label string) []string {
			return []string{"-mode", "receiver", "-db", h.be.workerURL(roleReceiver), "-schema", chaosSchema, "-run", h.run, "-label", label,
				"-types", strings.Join(appTypes[a], ","), "-drop-acks", strconv.FormatFloat(h.p.dropAcks, 'f', -1, 64), "-conns", "4"}
		}}
		h.receivers[a] = rcv
		h.t.Cleanup(rcv.kill)
		if err := rcv.start(); err != nil {
			h.t.Fatal(err)
		}
		px := toxiproxy.NewProxy(srv, "chaos-"+a, "127.0.0.1:0", ln.Addr().String())
		if err := px.Start(); err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(px.Stop)
		h.proxies[a] = px
	}
	for _, a := range apps {
		for r := range 2 {
			url := "http://" + h.proxies[a].Listen + "/" + a
			rl := &proc{h: h, name: fmt.Sprintf("%s/%d", a, r), args: func(label string) []string {
				ordered := []string{}
				for _, t := range appTypes[a] {
					if orderedSet[t] {
						ordered = append(ordered, t)
					}
				}
				return []string{"-mode", "relay", "-db", h.be.workerURL(relayRole(a)), "-schema", chaosSchema, "-run", h.run, "-label", label,
					"-app", h.appName[a], "-types", strings.Join(appTypes[a], ","), "-ordered", strings.Join(ordered, ","),
					"-url", url, "-lease", h.p.lease.String(), "-conns", "3"}
			}}
			h.relays[a] = append(h.relays[a], rl)
			h.t.Cleanup(rl.kill)
			if err := rl.start(); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

// msgID hides the message number in the low 48 bits of a version-7
// shaped UUID, so every table of the history can name it as a number.
func msgID(run string, n int64) uuid.UUID {
	var id uuid.UUID
	copy(id[:6], run)
	id[6] = 0x70
	id[8] = 0x80
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	copy(id[10:], b[2:])
	return id
}

type producerLog struct {
	enq       []Enqueued
	rolled    []int64
	committed int64
}

// produce runs one producer until the run has enqueued its messages. Each
// transaction bumps the producer's business row and enqueues 1-8
// messages of both apps; some are rolled back on purpose.
func (h *harness) produce(p int, clients map[string]*mensageria.Client, deadline time.Time, out *producerLog) error {
	rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
	index := map[string]int{}
	if err := h.be.exec(h.ctx, "INSERT INTO "+h.be.table("chaos_business")+" VALUES ($1, 0)", p); err != nil {
		return err
	}
	total := int64(h.p.messages)
	start := time.Now()
	for {
		for h.backlog.Load() > int64(h.p.backlog) {
			time.Sleep(20 * time.Millisecond) // throttled: the producer's pace, not a wait for a test state
		}
		k := int64(1 + rng.IntN(h.p.perTx))
		last := h.nextN.Add(k)
		first := last - k + 1
		if first > total {
			return nil
		}
		if h.p.produceFor > 0 && time.Since(h.started) > h.p.produceFor {
			h.cutShort.Store(true)
			return nil
		}
		last = min(last, total)
		if h.p.minProduce > 0 {
			// Pace: message n is due at n/total of minProduce.
			due := start.Add(time.Duration(float64(h.p.minProduce) * float64(first) / float64(total)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("producer %d: still producing at the deadline", p)
		}
		byApp := map[string][]mensageria.Message{}
		var batch []Enqueued
		for n := first; n <= last; n++ {
			typ := allTypes[rng.IntN(len(allTypes))]
			key := fmt.Sprintf("u%d", n)
			if orderedSet[typ] {
				// A producer owns its ordered keys, so their commit order
				// is the order it enqueues them in.
				key = fmt.Sprintf("p%d-k%d", p, rng.IntN(40))
			}
			poison := rng.Float64() < h.p.poison
			payload := fmt.Sprintf(`{"n":%d,"poison":%v}`, n, poison)
			byApp[h.hist.Owner[typ]] = append(byApp[h.hist.Owner[typ]], mensageria.Message{ID: msgID(h.run, n), Type: typ, Key: key, Payload: []byte(payload)})
			batch = append(batch, Enqueued{N: n, Type: typ, Key: key, Poison: poison})
		}
		rollback := rng.Float64() < h.p.rollback
		h.dbs.producers.RLock()
		committed, err := h.businessTx(p, clients, byApp, rollback, out.committed)
		h.dbs.producers.RUnlock()
		if err != nil {
			return err
		}
		if !committed {
			for _, m := range batch {
				out.rolled = append(out.rolled, m.N)
			}
			continue
		}
		out.committed++
		for _, m := range batch {
			k := m.Type + "/" + m.Key
			m.Index = index[k]
			index[k]++
			out.enq = append(out.enq, m)
		}
	}
}

// businessTx reports whether the transaction committed. A commit whose
// answer was lost is resolved by reading the business row, which only
// this producer writes.
func (h *harness) businessTx(p int, clients map[string]*mensageria.Client, byApp map[string][]mensageria.Message, rollback bool, committedSoFar int64) (bool, error) {
	for attempt := 0; ; attempt++ {
		uncertain := false
		ok, err := func() (bool, error) {
			tx, err := h.be.begin(h.ctx)
			if err != nil {
				return false, err
			}
			defer func() { _ = tx.rollback(h.ctx) }()
			if err := tx.exec(h.ctx, "UPDATE "+h.be.table("chaos_business")+" SET value = value + 1 WHERE producer = $1", p); err != nil {
				return false, err
			}
			for _, a := range apps {
				if len(byApp[a]) == 0 {
					continue
				}
				if _, err := clients[a].EnqueueTx(h.ctx, tx.raw(), byApp[a]...); err != nil {
					return false, err
				}
			}
			if rollback {
				return false, tx.rollback(h.ctx)
			}
			if err := tx.commit(h.ctx); err != nil {
				uncertain = true
				h.fault(figCommitUnknown, 1)
				for range 120 {
					var v int64
					// FOR SHARE waits for the commit, should its
					// backend still be finishing it, and then reads its
					// outcome.
					qerr := h.be.queryRow(h.ctx, "SELECT value FROM "+h.be.table("chaos_business")+" WHERE producer = $1"+h.be.lockShared(), p).Scan(&v)
					if qerr == nil {
						return v == committedSoFar+1, nil
					}
					time.Sleep(500 * time.Millisecond) // the database may be down for the fault; retry the read
				}
				return false, fmt.Errorf("commit: %v; and its outcome stayed unknown", err)
			}
			return true, nil
		}()
		// Retrying is safe only when the transaction surely did not
		// commit.
		if err == nil || uncertain || attempt == 300 {
			return ok, err
		}
		// The transaction failed before commit (a busy server, no free
		// connection slot, a server restarting): nothing was written.
		// Back off before the retry, as an app would.
		time.Sleep(200 * time.Millisecond)
	}
}

// monitor keeps the backlog figure the producers throttle on.
func (h *harness) monitor(ctx context.Context) {
	for ctx.Err() == nil {
		var n int64
		if err := h.be.queryRow(ctx, "SELECT count(*) FROM "+h.be.table("outbox")+" WHERE state = 'pending'").Scan(&n); err == nil {
			h.backlog.Store(n)
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// leaderOf returns the relay process that currently leads app: the
// election table names the holder's pid.
func (h *harness) leaderOf(a string) *proc {
	var holder string
	_ = h.be.queryRow(h.ctx, "SELECT holder FROM "+h.be.table("leader")+" WHERE app = $1", h.appName[a]).Scan(&holder)
	parts := strings.Split(holder, "/")
	if len(parts) == 3 {
		if pid, err := strconv.Atoi(parts[1]); err == nil {
			for _, r := range h.relays[a] {
				if r.pid() == pid {
					return r
				}
			}
		}
	}
	for _, r := range h.relays[a] {
		if r.leader.Load() {
			return r
		}
	}
	return h.relays[a][rand.IntN(len(h.relays[a]))]
}

func (h *harness) toxic(a, name, json string, d time.Duration, ctx context.Context) {
	px := h.proxies[a]
	if _, err := px.Toxics.AddToxicJson(strings.NewReader(json)); err != nil {
		h.t.Errorf("toxic %s: %v", name, err)
		return
	}
	sleepCtx(ctx, d)
	_ = px.Toxics.RemoveToxic(context.Background(), name)
}

// nemesis injects every kind of fault in turn, alternating the app, until
// stop is closed and at least one full round is done.
func (h *harness) nemesis(ctx context.Context, stop <-chan struct{}) {
	lease := h.p.lease
	for round := 0; ; round++ {
		select {
		case <-stop:
			if round > 0 {
				return
			}
		default:
		}
		a := apps[round%2]
		other := apps[(round+1)%2]
		for _, kind := range nemesisKinds {
			if ctx.Err() != nil {
				return
			}
			if h.skips(kind) {
				continue
			}
			switch kind {
			case FaultKill:
				p := h.leaderOf(a)
				h.logf("nemesis: SIGKILL relay %s (pid %d)", p.name, p.pid())
				p.kill()
				sleepCtx(ctx, 500*time.Millisecond)
				if err := p.start(); err != nil {
					h.t.Errorf("restart %s: %v", p.name, err)
				}
			case FaultPause:
				p := h.leaderOf(other)
				h.logf("nemesis: SIGSTOP relay %s (pid %d) for %s", p.name, p.pid(), lease+lease/2)
				p.signal(syscall.SIGSTOP)
				sleepCtx(ctx, lease+lease/2)
				p.signal(syscall.SIGCONT)
			case FaultPGKill:
				n, err := h.be.killSessions(h.ctx, h, a)
				if err != nil {
					h.t.Errorf("%s: %v", h.be.faultName(FaultPGKill), err)
				}
				h.logf("nemesis: %s on %d sessions of app %s's relays", h.be.faultName(FaultPGKill), n, a)
				h.fault(h.be.faultName(FaultPGBackend), n)
			case FaultOutage401, FaultOutage503:
				p := h.receivers[a]
				st := map[string]int{FaultOutage401: 401, FaultOutage503: 503}[kind]
				h.logf("nemesis: receiver %s answers %d to everything for %s", p.name, st, outageFor)
				p.command(fmt.Sprintf("outage %d %d", st, outageFor.Milliseconds()))
				sleepCtx(ctx, outageFor)
			case FaultReceiver:
				p := h.receivers[other]
				h.logf("nemesis: SIGKILL receiver %s and restart it", p.name)
				p.kill()
				sleepCtx(ctx, 300*time.Millisecond)
				if err := p.start(); err != nil {
					h.t.Errorf("restart %s: %v", p.name, err)
				}
			case FaultLatency:
				h.logf("nemesis: latency on both proxies")
				var wg sync.WaitGroup
				for _, x := range apps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						h.toxic(x, "lat", `{"name":"lat","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":200,"jitter":150}}`, 2*time.Second, ctx)
					}()
				}
				wg.Wait()
			case FaultReset:
				h.logf("nemesis: connection resets on proxy %s", a)
				h.toxic(a, "reset", `{"name":"reset","type":"reset_peer","stream":"upstream","toxicity":0.5,"attributes":{"timeout":5}}`, 1500*time.Millisecond, ctx)
			case FaultTimeout:
				// Requests go through and are applied; their answers
				// vanish until the sender times out: lost acks.
				h.logf("nemesis: answers swallowed on proxy %s", other)
				h.toxic(other, "timeout", `{"name":"timeout","type":"timeout","stream":"downstream","toxicity":0.5,"attributes":{"timeout":0}}`, 2*time.Second, ctx)
			default:
				h.dbFault(ctx, kind, a)
			}
			h.fault(h.be.faultName(kind), 1)
			sleepCtx(ctx, h.p.gap)
		}
	}
}

// heal removes every toxic and makes sure every process runs.
func (h *harness) heal() {
	for _, px := range h.proxies {
		px.Toxics.ResetToxics(context.Background())
	}
	for _, a := range apps {
		for _, r := range h.relays[a] {
			r.signal(syscall.SIGCONT)
		}
	}
}

// converge polls at its own pace rather than through Eventually: not
// converging is a finding the run reports with its history, not a test
// failure at that point, and the poll shares the database with the
// relays being measured.
func (h *harness) converge(deadline time.Time) error {
	var pending int64 = -1
	for time.Now().Before(deadline) {
		if err := h.be.queryRow(h.ctx, "SELECT count(*) FROM "+h.be.table("outbox")+" WHERE state = 'pending'").Scan(&pending); err == nil && pending == 0 {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("%d messages still pending at the deadline", pending)
}

// load reads what the processes recorded into h.hist.
func (h *harness) load() error {
	tb := h.be.table
	q := func(sql string, scan func(rowsScanner) error) error {
		rows, err := h.be.query(h.ctx, sql)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	err := q("SELECT id, n, type, attempt, route, relay, ack_dropped FROM "+tb("chaos_arrivals")+" ORDER BY id", func(r rowsScanner) error {
		var a Arrival
		err := r.Scan(&a.ID, &a.N, &a.Type, &a.Attempt, &a.Route, &a.Relay, &a.AckDropped)
		h.hist.Arrivals = append(h.hist.Arrivals, a)
		return err
	})
	if err != nil {
		return err
	}
	err = q("SELECT seq, n, arrival_id FROM "+tb("chaos_effects")+" ORDER BY seq", func(r rowsScanner) error {
		var e Effect
		err := r.Scan(&e.Seq, &e.N, &e.ArrivalID)
		h.hist.Effects = append(h.hist.Effects, e)
		return err
	})
	if err != nil {
		return err
	}
	prefix := "chaos " + h.run + " "
	err = q("SELECT seq, row_id, n, type, kind, token, "+h.be.micros("until")+", "+h.be.micros("at")+", app_name FROM "+tb("chaos_leases")+" ORDER BY seq", func(r rowsScanner) error {
		var l LeaseEvent
		var name string
		var until, at int64
		err := r.Scan(&l.Seq, &l.Row, &l.N, &l.Type, &l.Kind, &l.Token, &until, &at, &name)
		l.Until, l.At = time.UnixMicro(until), time.UnixMicro(at)
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			l.Relay = rest
		}
		h.hist.Leases = append(h.hist.Leases, l)
		return err
	})
	if err != nil {
		return err
	}
	err = q("SELECT message_id, state FROM "+tb("outbox")+" WHERE state IN ('dead', 'pending')", func(r rowsScanner) error {
		var id uuid.UUID
		var state string
		err := r.Scan(&id, &state)
		n := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, id[10:]...)))
		if state == "dead" {
			h.hist.Dead = append(h.hist.Dead, n)
		} else {
			h.hist.Pending = append(h.hist.Pending, n)
		}
		return err
	})
	if err != nil {
		return err
	}
	for i := range h.hist.Business {
		b := &h.hist.Business[i]
		if err := h.be.queryRow(h.ctx, "SELECT value FROM "+tb("chaos_business")+" WHERE producer = $1", b.Producer).Scan(&b.Value); err != nil {
			return err
		}
	}
	return nil
}

// runChaos is one whole run: start, produce under faults, heal, converge,
// stop, check.
func runChaos(t *testing.T, p profile, be backend) *Report {
	h := newHarness(t, p, be)
	h.startAll()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.monitor(ctx)

	clients := map[string]*mensageria.Client{}
	for _, a := range apps {
		reg := mensageria.NewRegistry()
		for _, typ := range appTypes[a] {
			// Producers only enqueue; the registry is what allows it.
			reg.MustRegister(typ, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
		}
		c, err := mensageria.New(be.newDriver(t), &mensageria.Config{App: h.appName[a], Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		clients[a] = c
	}

	start := time.Now()
	h.started = start
	stopNemesis := make(chan struct{})
	nemesisDone := make(chan struct{})
	go func() { defer close(nemesisDone); h.nemesis(ctx, stopNemesis) }()

	logs := make([]producerLog, p.producers)
	errs := make([]error, p.producers)
	var wg sync.WaitGroup
	// Generous: a loaded machine may drain at a few hundred messages a
	// second; the run fails only if production stalls outright.
	deadline := time.Now().Add(p.minProduce + p.converge + time.Duration(p.messages)*10*time.Millisecond)
	for i := range p.producers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = h.produce(i, clients, deadline, &logs[i]) }()
	}
	progress := time.NewTicker(10 * time.Second)
	prodDone := make(chan struct{})
	go func() { wg.Wait(); close(prodDone) }()
wait:
	for {
		select {
		case <-prodDone:
			break wait
		case <-progress.C:
			h.logf("progress: %d messages handed to producers, %d pending in the outbox", min(h.nextN.Load(), int64(p.messages)), h.backlog.Load())
		}
	}
	progress.Stop()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
	}
	h.logf("production done in %s", time.Since(start).Round(time.Millisecond))
	if h.cutShort.Load() {
		h.logf("production stopped by the %s time limit before %d messages", p.produceFor, p.messages)
	}
	close(stopNemesis)
	<-nemesisDone
	h.heal()
	h.logf("nemesis done; converging")
	convErr := h.converge(time.Now().Add(p.converge))
	h.logf("converged in %s since start (err %v)", time.Since(start).Round(time.Millisecond), convErr)
	// Let in-flight stragglers (a zombie's late request) land before the
	// history is read, then stop every process.
	time.Sleep(p.lease)
	for _, a := range apps {
		for _, r := range h.relays[a] {
			r.kill()
		}
		h.receivers[a].kill()
	}

	for i, l := range logs {
		h.hist.Enqueued = append(h.hist.Enqueued, l.enq...)
		h.hist.RolledBack = append(h.hist.RolledBack, l.rolled...)
		h.hist.Business = append(h.hist.Business, Business{Producer: i, Committed: l.committed})
	}
	if err := h.load(); err != nil {
		t.Fatalf("load history: %v", err)
	}
	be.checkHistory(h)
	h.faultsMu.Lock()
	h.hist.Faults = h.faults
	h.faultsMu.Unlock()
	h.hist.Fenced = int(h.fenced.Load())
	r := Check(&h.hist)
	r.Faults[FaultAckDrop] = r.AckDrops
	r.Faults[FaultRefused] = int(h.refused.Load())
	t.Logf("chaos run %s on %s in %s:\n%s", h.run, be.kind(), time.Since(start).Round(time.Second), r.Summary())
	if convErr != nil {
		t.Errorf("did not converge: %v", convErr)
	}
	for _, k := range nemesisKinds {
		if !h.skips(k) && h.faults[be.faultName(k)] == 0 {
			t.Errorf("fault %s was never injected", be.faultName(k))
		}
	}
	// The outages met traffic, and the dead letters are only the poison
	// messages (the checker's unexpected-dead): a 401 that was still
	// permanent would have parked every message it answered.
	if h.refused.Load() == 0 {
		t.Errorf("the destination outages refused no request: they never met traffic")
	}
	if !r.OK() {
		t.Errorf("the history broke %d promises (see above)", len(r.Violations))
	}
	return r
}
