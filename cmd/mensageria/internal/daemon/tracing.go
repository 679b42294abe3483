package daemon

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/xadm/mensageria/mensageriaotel"
)

// TraceFlagHelp is the --trace flag's help, the same on both daemons.
const TraceFlagHelp = "export OpenTelemetry traces over OTLP/HTTP, to where the standard OTEL_EXPORTER_OTLP_* variables say (default http://localhost:4318)"

// Tracing is the daemon's OpenTelemetry set-up: nil Tracer when off.
type Tracing struct {
	Tracer *mensageriaotel.Tracer
	tp     *sdktrace.TracerProvider
}

// StartTracing builds the OTLP/HTTP exporter and the SDK from the standard
// environment (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_*,
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*), when on. Variables the exporter would
// quietly ignore are refused instead: a URL that is not one, a protocol
// other than http/protobuf.
func StartTracing(ctx context.Context, on bool, service, app string, lookup func(string) (string, bool), log *slog.Logger) (*Tracing, error) {
	if !on {
		return &Tracing{}, nil
	}
	env := func(k string) string { v, _ := lookup(k); return v }
	if err := checkOTLPEnv(env); err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, Usage("--trace: %v", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", service),
			attribute.String("messaging.mensageria.app", app),
		),
		resource.WithTelemetrySDK(),
		// Last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, Usage("--trace: OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// An exporter that cannot reach its collector says so in the log, not
	// on a bare stderr line.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("OpenTelemetry export failed", "err", err) }))
	log.Info("exporting traces over OTLP/HTTP", "endpoint", otlpEndpoint(env), "resource", res.Attributes())
	return &Tracing{Tracer: mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp}), tp: tp}, nil
}

// Stop flushes the spans still queued, within timeout.
func (t *Tracing) Stop(timeout time.Duration, log *slog.Logger) {
	if t == nil || t.tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		log.Warn("OpenTelemetry: spans not exported at stop", "err", err)
	}
}

// checkOTLPEnv refuses OTLP variables this build cannot follow.
func checkOTLPEnv(env func(string) string) error {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		v := env(k)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Usage("--trace: %s=%q is not an http:// or https:// URL", k, v)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := env(k); v != "" && v != "http/protobuf" {
			return Usage("--trace: %s=%q: this build exports OTLP over HTTP only (http/protobuf)", k, v)
		}
	}
	return nil
}

// otlpEndpoint is where the exporter sends, for the start-up log line.
func otlpEndpoint(env func(string) string) string {
	if v := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	if v := env("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		return strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	return "http://localhost:4318/v1/traces"
}
