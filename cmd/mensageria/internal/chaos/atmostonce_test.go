package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/cli"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// The at-most-once suite: one relay of an at-most-once route, run as a
// real process, delivering to a receiver that is not idempotent (every
// POST inserts a row into amo_effects, no dedup), while the suite kills
// the relay with SIGKILL between mark and send, during a request and
// after the receiver applied but before the settle, and the receiver
// times out, drops answers after applying, cuts connections before
// applying, answers a gateway's 503 and refuses connections. The checker
// reads the outcome from the database: every committed message applied 0
// or 1 times, never 2; every message with 0 effects pending, dead or in
// doubt, and every message in doubt visible to 'mensageria doubt list'
// (ListMessages) and to the metric (Stats). Then the relay restarts with
// the reconcile probe, and every message must end applied exactly once
// with none in doubt.

// Fault kinds of the at-most-once suite, by the key prefix that draws them.
const (
	amoKillMarked   = "sigkill-after-mark-before-send" // hold-
	amoKillRequest  = "sigkill-during-request"         // killreq-
	amoKillApplied  = "sigkill-after-apply-before-settle"
	amoTimeout      = "receiver-timeout-after-apply" // timeout-
	amoLost         = "response-lost-after-apply"    // lost-
	amoCutBefore    = "connection-cut-before-apply"  // cut-
	amoGateway      = "gateway-503-not-applied"      // gw-
	amoRefused      = "connections-refused-window"
	amoNotSentRetry = "retried-as-never-sent" // counted from the relay's reports
)

var amoKinds = []struct{ prefix, kind string }{
	{"hold-", amoKillMarked}, {"killreq-", amoKillRequest}, {"killapp-", amoKillApplied},
	{"timeout-", amoTimeout}, {"lost-", amoLost}, {"cut-", amoCutBefore}, {"gw-", amoGateway},
}

type amoRun struct {
	t      *testing.T
	bin    string
	dbURL  string
	schema string
	pool   *pgxpool.Pool
	drv    *postgres.Driver
	front  *refusingFront
	logDir string

	mu      sync.Mutex
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	probe   string // "" in phase 1
	faults  map[string]int
	seen    map[string]int // requests per key the receiver got
	killReq chan chan struct{}
	notSent atomic.Int64
}

func (r *amoRun) fault(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

// startRelay starts the relay process and waits for it to be ready.
func (r *amoRun) startRelay() {
	r.t.Helper()
	args := []string{"-mode", "relay", "-db", r.dbURL, "-schema", r.schema, "-run", "amo", "-app", "amo", "-label", "amo/0",
		"-types", "amo.lancamento", "-url", "http://" + r.front.addr + "/lancamentos", "-lease", "2s", "-timeout", "400ms",
		"-once", "-not-applied", "503", "-hold-prefix", "hold-", "-hold-for", "30s", "-reconcile", "200ms"}
	if r.probe != "" {
		args = append(args, "-probe", r.probe)
	}
	cmd := exec.Command(r.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(r.logDir, "relay.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = logf
	stdout, _ := cmd.StdoutPipe()
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 0:
			case f[0] == "ready":
				once.Do(func() { close(ready) })
			case f[0] == "notsent":
				r.notSent.Add(1)
			case f[0] == "holding":
				// Marked and not sent: kill it now.
				go func() {
					ack := make(chan struct{})
					r.killReq <- ack
					<-ack
					r.fault(amoKillMarked)
				}()
			}
		}
		once.Do(func() { close(ready) })
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		r.t.Fatal("relay did not start")
	}
	r.mu.Lock()
	r.cmd, r.stdin, r.done = cmd, stdin, done
	r.mu.Unlock()
}

// killRelay SIGKILLs the relay and waits for it to be gone.
func (r *amoRun) killRelay() {
	r.mu.Lock()
	cmd, stdin, done := r.cmd, r.stdin, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = stdin.Close()
	<-done
}

// killer serves kill requests (from the receiver and the hold reports):
// SIGKILL, then a new relay, one at a time.
func (r *amoRun) killer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ack := <-r.killReq:
			r.killRelay()
			close(ack)
			if ctx.Err() == nil {
				r.startRelay()
			}
		}
	}
}

// receiver is the non-idempotent receiver. Faults strike only a key's
// first request, as a flaky network would strike one attempt.
func (r *amoRun) receiver() http.Handler {
	apply := func(key string) {
		if _, err := r.pool.Exec(context.Background(), "INSERT INTO "+r.schema+".amo_effects (key) VALUES ($1)", key); err != nil {
			panic(err)
		}
	}
	kill := func() {
		ack := make(chan struct{})
		r.killReq <- ack
		<-ack
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet { // the reconcile probe
			key := strings.TrimPrefix(req.URL.Path, "/lancamentos/")
			var n int
			if err := r.pool.QueryRow(req.Context(), "SELECT count(*) FROM "+r.schema+".amo_effects WHERE key = $1", key).Scan(&n); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			if n > 0 {
				w.WriteHeader(http.StatusOK)
			} else {
				w.WriteHeader(http.StatusNotFound)
			}
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		key := req.Header.Get("Idempotency-Key")
		r.mu.Lock()
		r.seen[key]++
		first := r.seen[key] == 1
		r.mu.Unlock()
		prefix, _, _ := strings.Cut(key, "-")
		if !first {
			prefix = "ok"
		}
		switch prefix {
		case "gw":
			r.fault(amoGateway)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case "cut":
			r.fault(amoCutBefore)
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		case "killreq":
			kill() // the request arrived whole; its relay dies; the receiver goes on
			r.fault(amoKillRequest)
			apply(key)
			w.WriteHeader(http.StatusCreated)
			return
		}
		apply(key)
		switch prefix {
		case "timeout":
			r.fault(amoTimeout)
			time.Sleep(time.Second) // past the relay's 400ms
		case "lost":
			r.fault(amoLost)
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		case "killapp":
			kill()
			r.fault(amoKillApplied)
		}
		w.WriteHeader(http.StatusCreated)
	})
}

// refusingFront forwards TCP to the receiver, and for a while refuses
// connections: its listener is closed (and its connections cut).
type refusingFront struct {
	addr, to string
	mu       sync.Mutex
	l        net.Listener
	conns    map[net.Conn]bool
}

func newFront(t *testing.T, to string) *refusingFront {
	f := &refusingFront{to: to, conns: map[net.Conn]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	f.serve(l)
	return f
}

func (f *refusingFront) serve(l net.Listener) {
	f.mu.Lock()
	f.l = l
	f.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.pipe(c)
		}
	}()
}

func (f *refusingFront) pipe(c net.Conn) {
	up, err := net.Dial("tcp", f.to)
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	f.conns[c], f.conns[up] = true, true
	f.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, up)
	f.mu.Unlock()
}

// refuse closes the listener for d: new connections are refused.
func (f *refusingFront) refuse(d time.Duration) error {
	f.mu.Lock()
	_ = f.l.Close()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	time.Sleep(d)
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	f.serve(l)
	return nil
}

// amoOutcome is the checked state of the run.
type amoOutcome struct {
	committed, applied0, applied1, applied2, inDoubt, pending, dead int
}

func (r *amoRun) check(keys []string) (amoOutcome, []string) {
	ctx := context.Background()
	var o amoOutcome
	var bad []string
	effects := map[string]int{}
	rows, err := r.pool.Query(ctx, "SELECT key, count(*) FROM "+r.schema+".amo_effects GROUP BY key")
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			r.t.Fatal(err)
		}
		effects[k] = n
	}
	rows.Close()
	state := map[string]driver.State{}
	for after := int64(0); ; {
		jobs, err := r.drv.ListMessages(ctx, driver.ListFilter{Types: []string{"amo.lancamento"}, AfterID: after, Limit: 1000})
		if err != nil {
			r.t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			state[j.Key] = j.State
		}
		after = jobs[len(jobs)-1].ID
	}
	listed, err := r.drv.ListMessages(ctx, driver.ListFilter{State: driver.StateInDoubt, Types: []string{"amo.lancamento"}, Limit: 10000})
	if err != nil {
		r.t.Fatal(err)
	}
	o.committed = len(keys)
	for _, k := range keys {
		st, present := state[k]
		switch effects[k] {
		case 0:
			o.applied0++
			if !present || (st != driver.StatePending && st != driver.StateDead && st != driver.StateInDoubt) {
				bad = append(bad, fmt.Sprintf("lost: %s has no effect and is %v (present %v)", k, st, present))
			}
		case 1:
			o.applied1++
		default:
			o.applied2++
			bad = append(bad, fmt.Sprintf("duplicate: %s applied %d times", k, effects[k]))
		}
		switch st {
		case driver.StateInDoubt:
			o.inDoubt++
		case driver.StatePending:
			o.pending++
		case driver.StateDead:
			o.dead++
		}
	}
	if len(listed) != o.inDoubt {
		bad = append(bad, fmt.Sprintf("visibility: ListMessages shows %d in doubt, the rows say %d", len(listed), o.inDoubt))
	}
	// The command itself, as an operator runs it.
	if n, err := r.doubtList(); err != nil {
		bad = append(bad, "mensageria doubt list: "+err.Error())
	} else if n != o.inDoubt {
		bad = append(bad, fmt.Sprintf("visibility: 'mensageria doubt list' shows %d in doubt, the rows say %d", n, o.inDoubt))
	}
	var stat int64
	all, err := r.drv.Stats(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, s := range all {
		if s.Type == "amo.lancamento" {
			stat = s.InDoubt
		}
	}
	if stat != int64(o.inDoubt) {
		bad = append(bad, fmt.Sprintf("visibility: the in-doubt metric (Stats) says %d, the rows say %d", stat, o.inDoubt))
	}
	return o, bad
}

func (r *amoRun) settled() bool {
	all, err := r.drv.Stats(context.Background())
	if err != nil {
		return false
	}
	for _, s := range all {
		if s.Type == "amo.lancamento" && (s.Pending > 0 || s.InFlight > 0) {
			return false
		}
	}
	return true
}

func TestAtMostOnceChaos(t *testing.T) {
	testdb.Long(t, "at-most-once fault injection")
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "amo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".amo_effects (key text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &amoRun{t: t, bin: buildWorker(t, dir), dbURL: testdb.URL(), schema: schema, pool: pool, drv: drv, logDir: dir,
		faults: map[string]int{}, seen: map[string]int{}, killReq: make(chan chan struct{})}
	srv := &http.Server{Handler: r.receiver()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	r.front = newFront(t, l.Addr().String())

	messages := 400
	if testing.Short() {
		messages = 150
	}
	// The producer: an enqueue-only client of the app, a message every few
	// milliseconds; about one in four draws a fault by its key.
	reg := mensageria.NewRegistry().MustRegister("amo.lancamento", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
		return mensageria.Permanent(fmt.Errorf("enqueue only"))
	}), mensageria.Mode(mensageria.AtMostOnce))
	producer, err := mensageria.New(drv, &mensageria.Config{App: "amo", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Register(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	r.startRelay()
	go r.killer(runCtx)
	rng := rand.New(rand.NewPCG(7, 12))
	var keys []string
	start := time.Now()
	for i := range messages {
		prefix := "ok-"
		if rng.IntN(4) == 0 {
			prefix = amoKinds[rng.IntN(len(amoKinds))].prefix
		}
		key := fmt.Sprintf("%s%d", prefix, i)
		if _, err := producer.Enqueue(ctx, mensageria.Message{Type: "amo.lancamento", Key: key, Payload: []byte(`{"valor":1}`)}); err != nil {
			t.Fatalf("enqueue %s: %v", key, err)
		}
		keys = append(keys, key)
		if i%100 == 50 {
			if err := r.front.refuse(300 * time.Millisecond); err != nil {
				t.Fatalf("front: %v", err)
			}
			r.fault(amoRefused)
		}
		time.Sleep(10 * time.Millisecond) // the producer's pace, spreading enqueues over the faults
	}
	mensageriatest.Eventually(t, 90*time.Second, r.settled, "phase 1 to settle: messages still pending or in flight")
	phase1 := time.Since(start)
	before, bad := r.check(keys)
	for _, b := range bad {
		t.Error(b)
	}
	r.mu.Lock()
	faults1, notSent1 := maps(r.faults), r.notSent.Load()
	r.faults = map[string]int{}
	r.mu.Unlock()

	// Phase 2: the same relay with the reconcile probe.
	start2 := time.Now()
	stop()
	r.killRelay()
	r.probe = "http://" + r.front.addr + "/lancamentos/{key}"
	runCtx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	r.startRelay()
	go r.killer(runCtx2)
	var after amoOutcome
	deadline := time.Now().Add(90 * time.Second)
	for {
		after, bad = r.check(keys)
		if after.applied1 == len(keys) && after.inDoubt == 0 && r.settled() {
			// Nothing pending or in flight now, but a row whose lease
			// ran out after the check read it (its relay killed) may be
			// in doubt until the probe resolves it, and the check's
			// later reads (the doubt command, Stats) saw it so. Once a
			// second check finds none in doubt, nothing moves any more,
			// and its reads agree.
			if again, againBad := r.check(keys); again.applied1 == len(keys) && again.inDoubt == 0 {
				after, bad = again, againBad
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("phase 2 did not converge: %+v", after)
		}
		// A loop of its own, not Eventually: each round is a full audit
		// (every row, the doubt command, Stats) run while the killer is
		// still at work, at the pace the run was tuned with.
		time.Sleep(200 * time.Millisecond)
	}
	for _, b := range bad {
		t.Error(b)
	}
	stop2()
	r.killRelay()
	r.mu.Lock()
	faults2 := maps(r.faults)
	r.mu.Unlock()
	t.Logf("at-most-once chaos: %d messages committed; phase 1 (%s, no probe): faults %s, retried as never sent %d; effects 0: %d, 1: %d, 2 or more: %d; in doubt %d, pending %d, dead %d",
		before.committed, phase1.Round(time.Second), faults1, notSent1, before.applied0, before.applied1, before.applied2, before.inDoubt, before.pending, before.dead)
	t.Logf("at-most-once chaos: phase 2 (%s, reconcile probe): faults on first requests sent only now %s; effects 1: %d of %d, 2 or more: %d; in doubt %d",
		time.Since(start2).Round(time.Second), cellOrNone(faults2), after.applied1, after.committed, after.applied2, after.inDoubt)
	if before.applied2 > 0 || after.applied2 > 0 {
		t.Fatal("a message's effect was applied twice")
	}
	if before.inDoubt == 0 {
		t.Fatal("no message ended in doubt: the faults did not bite, and the run proves nothing")
	}
}

func maps(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

func cellOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// doubtList runs 'mensageria doubt list --json' on the run's schema and
// returns how many messages it lists.
func (r *amoRun) doubtList() (int, error) {
	cfg := filepath.Join(r.logDir, "mensageria.yaml")
	body := fmt.Sprintf("database: %s\nschema: %s\napp: amo\nroutes:\n  - type: amo.lancamento\n    delivery: at_most_once\n    http: {url: 'http://%s/lancamentos', token: chaos}\n", r.dbURL, r.schema, r.front.addr)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		return 0, err
	}
	var out, errb strings.Builder
	code := cli.Run(context.Background(), []string{"doubt", "list", "--json", "--limit", "10000", "--config", cfg},
		cli.IO{In: strings.NewReader(""), Out: &out, Err: &errb, Env: func(string) (string, bool) { return "", false }})
	if code != 0 {
		return 0, fmt.Errorf("exit %d: %s", code, errb.String())
	}
	var listed cli.DoubtPage
	if err := json.Unmarshal([]byte(out.String()), &listed); err != nil {
		return 0, err
	}
	if listed.Truncated {
		return 0, fmt.Errorf("doubt list: more than one page in doubt")
	}
	return len(listed.Messages), nil
}
