package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/kafka"
)

// Two replicas of `mensageria relay` with a transactional Kafka route: the
// second starting must not stop the first (both build a sender with the
// same transactional id), and when the first is killed in the middle of a
// backlog, with batches committed to Kafka but not settled, the second
// takes over, commits hundreds of batches before those leases run out, and
// still does not produce them again. A read_committed consumer sees every
// message exactly once.
func TestRelayKafkaTransactionalReplicas(t *testing.T) {
	testdb.Long(t, "relay replicas")
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "pedidos"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	p := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    kafka: {brokers: [%s], topic: pedidos, transactional_id: mensageria-relay-pedidos}
relay: {batch: 50, lease: 2s, poll_interval: 50ms}
`, testdb.URL(), schema, strings.Join(cluster.ListenAddrs(), ", ")))
	if r := runBin(t, bin, nil, "", "migrate", "up", "--config", p); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	if r := runBin(t, bin, nil, "", "owners", "register", "--config", p); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	ctx := context.Background()
	enqueue := func(from, n int) {
		t.Helper()
		if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
			SELECT 'pedido.criado', 'p-' || g, '{}' FROM generate_series(%d, %d) g`, schema, from, from+n-1)); err != nil {
			t.Fatal(err)
		}
	}

	// The consumer: every committed record, by message id.
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("pedidos"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	go func() {
		for consumeCtx.Err() == nil {
			cl.PollFetches(consumeCtx).EachRecord(func(r *kgo.Record) {
				d, err := kafka.DeliveryOf(r)
				if err != nil {
					t.Errorf("record at offset %d: %v", r.Offset, err)
					return
				}
				mu.Lock()
				seen[d.ID.String()]++
				mu.Unlock()
			})
		}
	}()
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	args := []string{"relay", "--config", p, "--log-format", "json", "--listen", "127.0.0.1:0"}
	first := startProc(t, bin, nil, args...)
	defer func() { _ = first.cmd.Process.Kill() }()
	enqueue(1, 200)
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return distinct() == 200 }, "the first replica to deliver")

	second := startProc(t, bin, nil, args...)
	defer func() { _ = second.cmd.Process.Kill() }()
	secondAddr := waitAddr(t, second.stderr, second.done) // the standby is up and has built its sender
	enqueue(201, 200)
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return distinct() == 400 }, "the first replica to keep delivering with a standby up")

	// A backlog, and the leader killed in the middle of it: batches it
	// committed to Kafka but never settled come back only when their lease
	// runs out, after the new leader has committed many more of its own.
	const backlog = 20000
	enqueue(401, backlog)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return distinct() >= 400+backlog/5 }, "the leader into the backlog")
	// Hold the settles back: the batches in flight commit to Kafka and
	// then wait on the table, and the leader dies right there.
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE "+schema+".outbox IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	// A sleep, not a wait: the half second lets whatever batches the
	// leader has in flight reach Kafka and block on their settle, and how
	// many there are is the scenario's draw (none is a valid run, logged
	// below), so no state marks the end of it.
	time.Sleep(500 * time.Millisecond)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	// The dead relay's settles still wait on the lock, and would complete
	// once it is released: PostgreSQL notices a vanished client only when
	// it answers. End them, as a real crash ends its transactions. (The
	// standby's claims waiting there go too; it retries.)
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT message_id::text FROM "+schema+".outbox WHERE lease_until > now()")
	if err != nil {
		t.Fatal(err)
	}
	leased, committed := 0, 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		leased++
		mu.Lock()
		if seen[id] > 0 {
			committed++
		}
		mu.Unlock()
	}
	// Usually a batch or two: those are the ones a successor must not
	// produce again when their lease runs out.
	t.Logf("the leader died with %d rows leased, %d of them already committed to Kafka", leased, committed)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	total := 400 + backlog
	mensageriatest.Eventually(t, 90*time.Second, func() bool { return distinct() >= total },
		"the second replica to take over: %s of %d delivered\n%s", func() string { return fmt.Sprint(distinct()) }, total, second.stderr)

	// Every record is in Kafka once the dead leader's last batch is, but
	// its rows stay pending until their lease runs out and the new leader
	// claims them, finds them in the position record and settles them
	// without producing: the outbox drained is the end of the takeover,
	// however slow the machine.
	waitDrained(t, pool, schema, "the dead leader's leased rows to be settled by the new one", 60*time.Second)
	time.Sleep(time.Second) // a record produced again by the takeover would show up by now
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s read %d times", id, n)
		}
	}
	// The batches the first leader left committed and unsettled were
	// answered from the positions, and the metrics say so.
	metrics, err := getWithClient("http://" + secondAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var reconciled, commits float64
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, `mensageria_kafka_reconciled_total{app="pedidos",transactional_id="mensageria-relay-pedidos"} `); ok {
			_, _ = fmt.Sscan(v, &reconciled)
		}
		if v, ok := strings.CutPrefix(line, `mensageria_kafka_transactions_committed_total{app="pedidos",transactional_id="mensageria-relay-pedidos"} `); ok {
			_, _ = fmt.Sscan(v, &commits)
		}
	}
	if int(reconciled) < committed || commits == 0 {
		t.Errorf("metrics: %v reconciled (want at least the %d rows left committed), %v commits", reconciled, committed, commits)
	}
	if !strings.Contains(second.stderr.String(), "transactional ids registered") {
		t.Errorf("the second replica never registered the ids:\n%s", second.stderr.String())
	}
}

// Two apps given the same Kafka transactional id on one schema: the id is
// the first app's in the catalog once its relay starts, and the second
// app's relay refuses to start, exit 2, naming both apps and the id.
func TestRelayKafkaTransactionalIDOwned(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pedidos", "faturas"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ", ")
	eachBackend(t, func(t *testing.T, s *shared) {
		cfg := func(app, typ, topic string) string {
			return writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: %s\nroutes:\n  - type: %s\n    kafka: {brokers: [%s], topic: %s, transactional_id: mensageria-relay-shared}\n"+
				"relay: {lease: 2s, poll_interval: 50ms}\n", s.db, s.schema, app, typ, brokers, topic))
		}
		pedidos, faturamento := cfg("pedidos", "pedido.criado", "pedidos"), cfg("faturamento", "fatura.emitida", "faturas")
		must(t, "migrate up", run(t, "", nil, "migrate", "up", "--config", pedidos), 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Run(ctx, []string{"relay", "--config", pedidos, "--listen", "127.0.0.1:0", "--log-format", "json"}, IO{Err: &errb})
		}()
		waitAddr(t, &errb, done)
		must(t, "the second app's relay", run(t, "", nil, "relay", "--config", faturamento, "--listen", ""), ExitUsage,
			`app "faturamento" cannot start its relay`, `Kafka transactional id "mensageria-relay-shared" is owned by app "pedidos"`)
		if owner, _ := ownerOf(catalogOf(t, func(stdin string, args ...string) result {
			return run(t, stdin, nil, append(args, "--config", pedidos)...)
		}), "type", "fatura.emitida"); owner != "" {
			t.Fatalf("the refused relay recorded its type for %q", owner)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("relay exit %d:\n%s", code, errb.String())
		}
	})
}
