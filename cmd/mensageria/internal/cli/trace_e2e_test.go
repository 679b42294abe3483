package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// otlpSpan is one span as an OTLP/HTTP collector got it.
type otlpSpan struct {
	service string
	span    *tracepb.Span
}

// otlpCollector is an OTLP/HTTP trace receiver: it decodes each export's
// protobuf body as a collector does and keeps the spans.
type otlpCollector struct {
	mu    sync.Mutex
	spans []otlpSpan
	paths []string
	srv   *httptest.Server
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.paths = append(c.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, otlpSpan{service: service, span: s})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *otlpCollector) named(name string) []otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []otlpSpan
	for _, s := range c.spans {
		if s.span.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			default:
				return fmt.Sprint(v.GetIntValue())
			}
		}
	}
	return ""
}

// TestRelayExportsTracesOverOTLP: 'mensageria relay --trace' with the
// standard OTLP variables pointing at a collector in the test. A message
// enqueued with the traceparent of a business transaction (as an app in
// any language stores it) is delivered in a "send" span of that trace, a
// child of and linked to it; the destination gets the attempt's
// traceparent; the latency histogram's exemplar names the trace; the spans
// still queued at SIGTERM are flushed.
func TestRelayExportsTracesOverOTLP(t *testing.T) {
	testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	col := newOTLPCollector(t)

	var mu sync.Mutex
	var wire []string
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		wire = append(wire, r.Header.Get("traceparent"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"applied"}`))
	}))
	defer dest.Close()

	p := writeConfig(t, testdb.URL(), schema, dest.URL+"/m2m")
	env := []string{"TEST_TOKEN=tok", "OTEL_EXPORTER_OTLP_ENDPOINT=" + col.srv.URL, "OTEL_SERVICE_NAME=pedidos-relay",
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_TRACES_SAMPLER=parentbased_always_on"}
	c := func(args ...string) result {
		t.Helper()
		return runBin(t, bin, env, "", append(args, "--config", p)...)
	}
	if r := c("migrate", "up"); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	if r := c("owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if r := c("enqueue", "-t", "pedido.criado", "-k", "traced-1", "-H", "traceparent=00-"+traceID+"-"+parentID+"-01"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	relay := startProc(t, bin, env, "relay", "--trace", "--log-format", "json", "--listen", "127.0.0.1:0", "--config", p)
	addr := waitAddr(t, relay.stderr, relay.done)
	if !strings.Contains(relay.stderr.String(), "exporting traces over OTLP/HTTP") {
		t.Errorf("the relay did not say where it exports: %s", relay.stderr.String())
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(col.named("send pedido.criado")) > 0 }, "the send span at the collector")

	s := col.named("send pedido.criado")[0]
	if got := fmt.Sprintf("%x", s.span.TraceId); got != traceID {
		t.Errorf("send span's trace %s, want the enqueued %s", got, traceID)
	}
	if got := fmt.Sprintf("%x", s.span.ParentSpanId); got != parentID {
		t.Errorf("send span's parent %s, want the enqueued span %s", got, parentID)
	}
	if len(s.span.Links) != 1 || fmt.Sprintf("%x", s.span.Links[0].SpanId) != parentID {
		t.Errorf("send span's links %v, want one to %s", s.span.Links, parentID)
	}
	if s.span.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.service != "pedidos-relay" {
		t.Errorf("send span kind %v service %q", s.span.Kind, s.service)
	}
	for k, want := range map[string]string{
		"messaging.system": "mensageria", "messaging.operation.type": "send", "messaging.destination.name": "pedido.criado",
		"messaging.mensageria.message.key": "traced-1", "messaging.mensageria.attempt": "1", "messaging.mensageria.outcome": "delivered",
		"messaging.mensageria.app": "pedidos",
	} {
		if got := spanAttr(s.span, k); got != want {
			t.Errorf("send span %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(spanAttr(s.span, "messaging.mensageria.route"), "pedidos → http") {
		t.Errorf("send span route %q", spanAttr(s.span, "messaging.mensageria.route"))
	}
	mu.Lock()
	want := "00-" + traceID + "-" + fmt.Sprintf("%x", s.span.SpanId) + "-01"
	if len(wire) != 1 || wire[0] != want {
		t.Errorf("the destination got traceparent %v, want [%s]", wire, want)
	}
	mu.Unlock()

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	exemplar := false
	for _, line := range bytes.Split(body, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("mensageria_delivery_latency_seconds_bucket")) && bytes.Contains(line, []byte(`trace_id="`+traceID+`"`)) {
			exemplar = true
		}
	}
	if !exemplar {
		t.Errorf("no latency bucket has the trace's exemplar:\n%s", body)
	}

	// A span ended just before SIGTERM is flushed by the stop.
	if r := c("enqueue", "-t", "pedido.criado", "-k", "traced-2", "-H", "traceparent=00-"+traceID+"-"+parentID+"-01"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(wire) == 2 }, "the second delivery")
	_ = relay.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-relay.done:
		if code != 0 {
			t.Fatalf("relay exit %d:\n%s", code, relay.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay ignored SIGTERM")
	}
	if n := len(col.named("send pedido.criado")); n != 2 {
		t.Errorf("%d send spans at the collector after the stop, want 2", n)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, p := range col.paths {
		if p != "/v1/traces" {
			t.Errorf("export to %s, want /v1/traces", p)
		}
	}
}

// TestTraceRefusesOTLPSettingsItCannotFollow: a malformed endpoint or a
// protocol this build lacks stops the daemon with a usage error naming the
// variable, instead of exporting nowhere.
func TestTraceRefusesOTLPSettingsItCannotFollow(t *testing.T) {
	testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	p := writeConfig(t, testdb.URL(), schema, "http://127.0.0.1:1/m2m")
	for _, tc := range []struct{ env, want string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4318", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=ftp://collector/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "http/protobuf"},
	} {
		r := runBin(t, bin, []string{"TEST_TOKEN=tok", tc.env}, "", "relay", "--trace", "--migrate", "--listen", "", "--config", p)
		if r.code != ExitUsage || !strings.Contains(r.err, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a usage error naming %s", tc.env, r.code, r.err, tc.want)
		}
	}
}

// TestReceiveContinuesTracesOverOTLP: 'mensageria relay --trace' into
// 'mensageria receive --trace', both exporting to one collector. The
// message enqueued by SQL with a business transaction's traceparent is one
// trace: the relay's "send" span under it, the receive daemon's "process"
// span under the send, and the inbox queue row keeps the process span's
// traceparent for the app that applies it by SQL.
func TestReceiveContinuesTracesOverOTLP(t *testing.T) {
	pool := testdb.Pool(t)
	sender, receiverSchema := testdb.Schema(t), testdb.Schema(t)
	bin := binary(t)
	col := newOTLPCollector(t)
	addr := freeAddr(t)
	relayCfg := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    http: {url: http://%s/m2m, token: ${TEST_TOKEN}, timeout: 1500ms}
relay: {batch: 10, lease: 2s, poll_interval: 50ms, backoff_base: 20ms, backoff_max: 200ms}
`, testdb.URL(), sender, addr))
	receiveCfg := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: faturamento
receive:
  listen: %s
  path: /m2m
  tokens: ["${TEST_TOKEN}"]
consumers:
  - name: fat
    types: [pedido.criado]
    window: 1h
`, testdb.URL(), receiverSchema, addr))
	env := []string{"TEST_TOKEN=tok-e2e-0123456789", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + col.srv.URL + "/v1/traces", "OTEL_BSP_SCHEDULE_DELAY=50"}
	must(t, "migrate up", runBin(t, bin, env, "", "migrate", "up", "--config", relayCfg), 0)
	must(t, "owners register", runBin(t, bin, env, "", "owners", "register", "--config", relayCfg), 0)
	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload, headers)
		VALUES ('pedido.criado', 'sql-traced', '{"order":1}', '{"traceparent":"00-%s-%s-01"}')`, sender, traceID, parentID)); err != nil {
		t.Fatal(err)
	}
	rcv := startProc(t, bin, env, "receive", "--trace", "--config", receiveCfg, "--migrate", "--log-format", "json")
	waitReceiving(t, rcv)
	relay := startProc(t, bin, env, "relay", "--trace", "--config", relayCfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return len(col.named("send pedido.criado")) == 1 && len(col.named("process pedido.criado")) == 1
	}, "the send and process spans at the collector")
	send, proc := col.named("send pedido.criado")[0], col.named("process pedido.criado")[0]
	if send.service != "mensageria-relay" || proc.service != "mensageria-receive" {
		t.Errorf("services %q and %q, want each daemon's default", send.service, proc.service)
	}
	for _, s := range []otlpSpan{send, proc} {
		if got := fmt.Sprintf("%x", s.span.TraceId); got != traceID {
			t.Errorf("%s: trace %s, want the enqueued %s", s.span.Name, got, traceID)
		}
	}
	if got := fmt.Sprintf("%x", send.span.ParentSpanId); got != parentID {
		t.Errorf("send span's parent %s, want %s", got, parentID)
	}
	if !bytes.Equal(proc.span.ParentSpanId, send.span.SpanId) || proc.span.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("process span: parent %x kind %v, want the send span %x, consumer", proc.span.ParentSpanId, proc.span.Kind, send.span.SpanId)
	}
	if got := spanAttr(proc.span, "messaging.mensageria.message.key"); got != "sql-traced" {
		t.Errorf("process span key %q", got)
	}
	var stored string
	if err := pool.QueryRow(context.Background(), "SELECT headers->>'traceparent' FROM "+receiverSchema+".inbox_queue WHERE key = 'sql-traced'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("00-%s-%x-01", traceID, proc.span.SpanId); stored != want {
		t.Errorf("the inbox queue row's traceparent %q, want the process span's %q", stored, want)
	}
	stopProc(t, relay)
	_ = rcv.cmd.Process.Signal(syscall.SIGTERM)
	<-rcv.done
}
