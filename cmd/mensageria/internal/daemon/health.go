package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/xadm/mensageria/redact"
)

// HealthMux is a daemon's probes and metrics:
//
//	/healthz  the process is alive
//	/readyz   ready answers nil within 3 s: "ready", then what detail
//	          adds (nil: nothing); else 503 with the reason
//	/metrics  metrics
//
// The /readyz body is unauthenticated: no secret of a URL it quotes.
func HealthMux(ready func(context.Context) error, detail func() string, metrics http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, redact.Text("not ready: "+err.Error()), http.StatusServiceUnavailable)
			return
		}
		more := ""
		if detail != nil {
			more = detail()
		}
		_, _ = w.Write([]byte(redact.Text("ready\n" + more)))
	})
	mux.Handle("GET /metrics", metrics)
	return mux
}

// ServeHealth serves h (a HealthMux) on listen, the --listen flag, unless
// listen is empty (then srv is nil and done never fires); done receives
// the server's end.
func ServeHealth(listen string, h http.Handler, log *slog.Logger) (srv *http.Server, done chan error, err error) {
	done = make(chan error, 1)
	if listen == "" {
		return nil, done, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, nil, Usage("--listen %s: %v", listen, err)
	}
	srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving health and metrics", "addr", ln.Addr().String(), "paths", "/healthz /readyz /metrics")
	go func() { done <- srv.Serve(ln) }()
	return srv, done, nil
}

// Probe GETs url, a daemon's /healthz or /readyz, as the healthcheck
// command does: an answer other than 2xx is a failure naming its status
// and the start of its body (/readyz says why).
func Probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Usage("healthcheck: %v", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Fail("healthcheck %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return Fail("healthcheck %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
