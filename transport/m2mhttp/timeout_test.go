package m2mhttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

// A request timeout must fit the relay's delivery window (its lease less
// the settle margin): an explicit one longer is refused at Start, naming
// Timeout, because the relay would cut every request there; a default one
// is shortened to the window; the probe's timeout follows the same rule.
func TestTimeoutMustFitTheDeliveryWindow(t *testing.T) {
	settings := func(lease time.Duration) mensageria.RelaySettings {
		return mensageria.RelaySettings{Lease: lease, DeliveryWindow: mensageria.DeliveryWindow(lease)}
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		lease   time.Duration
		want    time.Duration // 0: refused
	}{
		{"the defaults", 0, mensageria.DefaultLease, DefaultTimeout},
		{"a default longer than the window is shortened", 0, 2 * time.Second, 1500 * time.Millisecond},
		{"explicit, inside the window", 20 * time.Second, 30 * time.Second, 20 * time.Second},
		{"explicit, the whole window", 27 * time.Second, 30 * time.Second, 27 * time.Second},
		{"explicit, in the settle margin", 28 * time.Second, 30 * time.Second, 0},
		{"explicit, longer than the lease", time.Minute, 30 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSender(t, "http://127.0.0.1:1/m2m", SenderConfig{Timeout: tc.timeout})
			b, err := NewBatchSender(SenderConfig{URL: "http://127.0.0.1:1/m2m", Token: "t", Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewProbe(ProbeConfig{URL: "http://127.0.0.1:1/{key}", Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			for name, ra := range map[string]mensageria.RelayAware{"Timeout": s, "Timeout ": b, "Probe.Timeout": p} {
				err := ra.UseRelaySettings(settings(tc.lease))
				if tc.want == 0 {
					var ce *mensageria.ConfigError
					if !errors.As(err, &ce) || ce.Field != strings.TrimSpace(name) || !strings.Contains(ce.Reason, "delivery window") {
						t.Fatalf("%T: want a *ConfigError naming %s, got %v", ra, name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%T: %v", ra, err)
				}
			}
			if tc.want != 0 && (s.timeout.get() != tc.want || b.timeout.get() != tc.want || p.timeout.get() != tc.want) {
				t.Fatalf("timeouts %s %s %s, want %s", s.timeout.get(), b.timeout.get(), p.timeout.get(), tc.want)
			}
		})
	}
}

// A request cut by the relay's delivery deadline, before its own timeout,
// says so instead of blaming a timeout it never reached.
func TestTimeoutErrorNamesTheDeadlineThatCutIt(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	s := newTestSender(t, srv.URL, SenderConfig{Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, testDelivery())
	if err == nil || !strings.Contains(err.Error(), "before the relay's delivery deadline") || strings.Contains(err.Error(), "no answer within 30s") {
		t.Fatalf("cut by the caller's deadline: %v", err)
	}
	s = newTestSender(t, srv.URL, SenderConfig{Timeout: 100 * time.Millisecond})
	if err := s.Send(context.Background(), testDelivery()); err == nil || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("its own timeout: %v", err)
	}
}

// Start refuses a Sender whose timeout the relay's lease cannot hold, with
// the Sender's refusal naming the field, before anything is claimed.
func TestStartRefusesATimeoutLongerThanTheDeliveryWindow(t *testing.T) {
	drv, _, _ := pg(t)
	s := newTestSender(t, "http://127.0.0.1:1/m2m", SenderConfig{Timeout: 5 * time.Second})
	c, err := mensageria.New(drv, &mensageria.Config{App: "orders", Lease: 5 * time.Second, Logger: quietLogger(),
		Registry: mensageria.NewRegistry().MustRegister("order.closed", s)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	var ce *mensageria.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Timeout" || !strings.Contains(err.Error(), "4.5s") {
		_ = c.Stop(context.Background())
		t.Fatalf("Start: want the Sender's *ConfigError naming Timeout, got %v", err)
	}
}
