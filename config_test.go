package mensageria

import (
	"errors"
	"testing"
	"time"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	c, err := (&Config{App: "pedidos"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 500 || c.Concurrency != 16 || c.BatchesInFlight != 2 || c.Lease != 30*time.Second ||
		c.MaxAttempts != 20 || c.Election != ElectionLeader || c.Registry == nil || c.Logger == nil || c.InboxWindow != 7*24*time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
	for field, cfg := range map[string]*Config{
		"App":             {App: ""},
		"BatchSize":       {App: "a", BatchSize: -1},
		"Concurrency":     {App: "a", Concurrency: -2},
		"BatchesInFlight": {App: "a", BatchesInFlight: 65},
		"Lease":           {App: "a", Lease: time.Millisecond},
		"BackoffMax":      {App: "a", BackoffBase: time.Minute, BackoffMax: time.Second},
		"Election":        {App: "a", Election: "raft"},
	} {
		_, err := cfg.withDefaults()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: want a *ConfigError naming it, got %v", field, err)
		}
	}
	if _, err := New(nil, &Config{App: "a"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("New(nil driver): %v", err)
	}
}
