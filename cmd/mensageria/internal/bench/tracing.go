package bench

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
)

// TracedDrain measures what tracing costs the relay: the drain of a
// backlog of n messages, each stored with a traceparent as a traced
// enqueue leaves it, to a no-op Sender, with the mensageriaotel hook
// (every span sampled, through the SDK's batch processor to an exporter
// that drops them) and without, alternating over rounds, in one run.
func TracedDrain(ctx context.Context, e Env, n, rounds int) (Result, error) {
	r := Result{Scenario: "traced-drain"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	const typ = "bench.traced"
	if err := e.own(ctx, relayApp(typ), typ); err != nil {
		return r, err
	}
	res, err := Alternate(rounds, []string{"traced", "untraced"}, func(mode string) (Result, error) {
		out := Result{Scenario: "traced-drain-" + mode}
		if err := e.exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload, headers)
			SELECT $1, 'k-' || g, $2::json,
			       json_build_object('traceparent', '00-' || md5('t' || g) || '-' || substr(md5('s' || g), 1, 16) || '-01')
			FROM generate_series(1, $3) g`, e.Schema), typ, Payload, n); err != nil {
			return out, err
		}
		var hooks []mensageria.Hook
		if mode == "traced" {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
			hooks = append(hooks, mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp}))
		}
		rate, err := relayDrainTo(ctx, d, typ, noop, 0, n, hooks...)
		if err != nil {
			return out, err
		}
		out.Set("msgs/s", rate)
		return out, e.exec(ctx, "DELETE FROM "+e.Schema+".outbox WHERE type = $1", typ)
	})
	if err != nil {
		return r, err
	}
	r.Set("msgs", float64(n))
	r.Set("rounds", float64(rounds))
	r.Set("traced-msgs/s", res["traced"]["msgs/s"])
	r.Set("untraced-msgs/s", res["untraced"]["msgs/s"])
	r.Set("traced/untraced-ratio", res["traced"]["msgs/s"]/res["untraced"]["msgs/s"])
	return r, nil
}
