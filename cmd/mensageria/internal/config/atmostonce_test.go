package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

// onceConfig is an at_most_once route with its probe beside an
// at_least_once one; relay's TestRegistryOfTheConfig builds it too.
var onceConfig = func() []byte {
	b, err := os.ReadFile("testdata/at_most_once.yaml")
	if err != nil {
		panic(err)
	}
	return b
}()

func TestParseConfigAtMostOnce(t *testing.T) {
	c, err := ParseConfig("m.yaml", onceConfig, envOf("LEGACY_TOKEN", "leg"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	h := r.HTTP
	if r.Delivery != mensageria.AtMostOnce || !h.PayloadOnly || len(h.NotApplied) != 2 || h.NotApplied[1] != 502 {
		t.Fatalf("at-most-once route: %+v %+v", r, h)
	}
	p := h.Reconcile
	if p == nil || p.URL != "https://legado.internal/api/v1/lancamentos/{key}" || p.Token.Reveal() != "leg" || p.Timeout != 3*time.Second || len(p.NotApplied) != 2 || p.Applied != nil {
		t.Fatalf("reconcile: %+v (the token defaults to the route's)", p)
	}
	if c.Routes[1].Delivery != mensageria.AtLeastOnce {
		t.Fatalf("the default delivery is at least once: %+v", c.Routes[1])
	}
	if got := c.ClientConfig().ReconcileInterval; got != 30*time.Second {
		t.Fatalf("reconcile_interval = %s", got)
	}
}

func TestParseConfigAtMostOnceErrors(t *testing.T) {
	head := "database: sqlite:/tmp/x.db\napp: a\nroutes:\n  - type: t\n"
	for name, tc := range map[string]struct{ route, want string }{
		"unknown mode":          {"    delivery: exactly_once\n    http: {url: http://r/m, token: t}\n", "unknown delivery"},
		"kafka":                 {"    delivery: at_most_once\n    kafka: {brokers: [k:9092], topic: x}\n", "needs an http: route"},
		"not_applied at least":  {"    http: {url: http://r/m, token: t, not_applied: [503]}\n", "only applies with delivery: at_most_once"},
		"reconcile at least":    {"    http: {url: http://r/m, token: t, reconcile: {url: 'http://r/{key}'}}\n", "only applies with delivery: at_most_once"},
		"batch":                 {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, batch: true}\n", "idempotent"},
		"2xx not applied":       {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, not_applied: [204]}\n", "not an HTTP status from 300"},
		"probe names nothing":   {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, reconcile: {url: http://r/orders}}\n", "names no message"},
		"probe without url":     {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, reconcile: {timeout: 1s}}\n", "required"},
		"probe status twice":    {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, reconcile: {url: 'http://r/{key}', applied: [200], not_applied: [200]}}\n", "both applied and not applied"},
		"unknown reconcile key": {"    delivery: at_most_once\n    http: {url: http://r/m, token: t, reconcile: {url: 'http://r/{key}', methd: GET}}\n", "unknown key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig("m.yaml", []byte(head+tc.route), envOf())
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a ConfigError saying %q", err, tc.want)
			}
		})
	}
}
