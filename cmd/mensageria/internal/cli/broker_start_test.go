package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/kafka"
)

// 'mensageria relay' checks each Kafka route's topic at start: a topic
// that does not exist (the brokers not creating topics) or that the
// client may not use stops it with exit 2, naming the route, the topic and
// Kafka's answer, before it touches the database; on both producers.
func TestRelayRefusesAMissingKafkaTopic(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pedidos", "proibido"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cluster.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		m, ok := req.(*kmsg.MetadataRequest)
		if !ok {
			return nil, nil, false
		}
		// "proibido" is there, but not for this client.
		resp := m.ResponseKind().(*kmsg.MetadataResponse)
		for _, rt := range m.Topics {
			if rt.Topic != nil && *rt.Topic == "proibido" {
				t := kmsg.NewMetadataResponseTopic()
				t.Topic = rt.Topic
				t.ErrorCode = kerr.TopicAuthorizationFailed.Code
				resp.Topics = append(resp.Topics, t)
				return resp, nil, true
			}
		}
		return nil, nil, false
	})
	brokers := strings.Join(cluster.ListenAddrs(), ", ")
	// No database behind it: the check comes first.
	db := "sqlite:" + filepath.Join(t.TempDir(), "never", "outbox.db")
	for _, c := range []struct {
		name, topic, extra string
		want               []string
	}{
		{"idempotent, missing", "faltando", "", []string{`route pedido.criado (line 4)`, "topic faltando on", "the topic is missing", `topic "faltando"`, "UNKNOWN_TOPIC_OR_PARTITION", "create it"}},
		{"transactional, missing", "faltando", ", transactional_id: mensageria-relay-pedidos", []string{`route pedido.criado (line 4)`, `topic "faltando"`, "UNKNOWN_TOPIC_OR_PARTITION"}},
		{"idempotent, refused", "proibido", "", []string{`route pedido.criado (line 4)`, `topic "proibido"`, "the topic is not this client's to use", "TOPIC_AUTHORIZATION_FAILED", "grant"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, fmt.Sprintf("database: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    kafka: {brokers: [%s], topic: %s%s}\n", db, brokers, c.topic, c.extra))
			must(t, "relay", run(t, "", nil, "relay", "--config", p, "--listen", ""), ExitUsage, c.want...)
		})
	}
	// The topic that exists passes the check: the relay goes on to the
	// database, which here cannot be opened, and fails on that (exit 1).
	p := writeFile(t, fmt.Sprintf("database: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    kafka: {brokers: [%s], topic: pedidos}\n", db, brokers))
	r := run(t, "", nil, "relay", "--config", p, "--listen", "")
	if r.code != ExitFailure || !strings.Contains(r.err, "mensageria/sqlite: open") || strings.Contains(r.err, "UNKNOWN_TOPIC") {
		t.Fatalf("with the topic there the relay should fail on the database only: %+v", r)
	}
}

// A NATS route whose stream does not exist, or whose subject no stream
// holds, stops 'mensageria relay' with exit 2 naming the route and the
// stream or subject.
func TestRelayRefusesAMissingNATSStream(t *testing.T) {
	nc, err := natsgo.Connect(testdb.NatsURL(), natsgo.Timeout(2*time.Second))
	if err != nil {
		testdb.Unavailable(t, "NATS at "+testdb.NatsURL(), err)
	}
	nc.Close()
	tag := fmt.Sprintf("%08x", rand.Uint32())
	db := "sqlite:" + filepath.Join(t.TempDir(), "never", "outbox.db")
	for _, c := range []struct {
		name, nats string
		want       []string
	}{
		{"configured stream missing", fmt.Sprintf("{url: %s, subject: ms.none.%s, stream: MS_NONE_%s}", testdb.NatsURL(), tag, tag),
			[]string{"route pedido.criado (line 4)", "the stream is missing", fmt.Sprintf(`stream "MS_NONE_%s"`, tag)}},
		{"no stream holds the subject", fmt.Sprintf("{url: %s, subject: ms.none.%s}", testdb.NatsURL(), tag),
			[]string{"route pedido.criado (line 4)", "the stream is missing", fmt.Sprintf(`no stream holds subject "ms.none.%s"`, tag)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, fmt.Sprintf("database: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    nats: %s\n", db, c.nats))
			must(t, "relay", run(t, "", nil, "relay", "--config", p, "--listen", ""), ExitUsage, c.want...)
		})
	}
}

// The built relay starts with its Kafka cluster down: it says so once and
// starts; the backlog pauses the route (one line) and spends no attempt
// (max_attempts 3); the cluster comes up on its address, the route resumes
// (one line) and every message reaches the topic, none dead, each row
// delivered on its first counted attempt.
func TestRelayKafkaBrokerDownAtStartAndBack(t *testing.T) {
	testdb.Long(t, "kafka down at start")
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	port := freePort(t)
	broker := fmt.Sprintf("127.0.0.1:%d", port)
	p := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    kafka: {brokers: [%s], topic: pedidos}
relay: {batch: 20, lease: 2s, poll_interval: 50ms, max_attempts: 3, route_pause: 100ms, route_pause_max: 1s}
`, testdb.URL(), schema, broker))
	if r := runBin(t, bin, nil, "", "migrate", "up", "--config", p); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	relay := startProc(t, bin, nil, "relay", "--config", p, "--log-format", "json", "--listen", "127.0.0.1:0")
	defer func() { _ = relay.cmd.Process.Kill() }()
	waitAddr(t, relay.stderr, relay.done)
	ctx := context.Background()
	const n = 100
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
		SELECT 'pedido.criado', 'p-' || g, '{}' FROM generate_series(1, %d) g`, schema, n)); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(relay.stderr.String(), "route paused:") }, "the route to pause")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, "pedidos"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seen := map[string]bool{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("pedidos"), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(90 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if d, err := kafka.DeliveryOf(r); err == nil {
				seen[d.ID.String()] = true
			}
		})
		cancel()
	}
	if len(seen) != n {
		t.Fatalf("%d of %d messages reached the topic:\n%s", len(seen), n, relay.stderr.String())
	}
	waitDrained(t, pool, schema, "the outbox drained", 30*time.Second)
	stopProc(t, relay)
	var dead, maxAttempts int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'dead'), coalesce(max(attempts), 0) FROM "+schema+".outbox").Scan(&dead, &maxAttempts); err != nil {
		t.Fatal(err)
	}
	log := relay.stderr.String()
	if dead != 0 || maxAttempts > 1 {
		t.Fatalf("%d dead, up to %d attempts counted, want none dead and one attempt each:\n%s", dead, maxAttempts, log)
	}
	for line, want := range map[string]int{"could not be checked at start": 1, "route paused:": 1, "route resumed": 1, "lease expired": 0, "another relay": 0, "parked as dead": 0} {
		if got := strings.Count(log, line); got != want {
			t.Errorf("%q logged %d times, want %d:\n%s", line, got, want, log)
		}
	}
}
