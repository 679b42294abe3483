package mensageria

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	c, err := (&Config{App: "pedidos"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 500 || c.Concurrency != 16 || c.BatchesInFlight != 2 || c.Lease != 30*time.Second ||
		c.MaxAttempts != 20 || c.Election != ElectionLeader || c.Registry == nil || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	// The exported constants are the defaults, not a copy of them.
	if c.BatchSize != DefaultBatchSize || c.Concurrency != DefaultConcurrency || c.BatchesInFlight != DefaultBatchesInFlight ||
		c.Lease != DefaultLease || c.MaxAttempts != DefaultMaxAttempts || c.BackoffBase != DefaultBackoffBase ||
		c.BackoffMax != DefaultBackoffMax || c.PollInterval != DefaultPollInterval || c.NotifyDebounce != DefaultNotifyDebounce ||
		c.PurgeInterval != DefaultPurgeInterval {
		t.Fatalf("defaults differ from the Default constants: %+v", c)
	}
	for field, cfg := range map[string]*Config{
		"App":                {App: ""},
		"BatchSize":          {App: "a", BatchSize: -1},
		"Concurrency":        {App: "a", Concurrency: -2},
		"BatchesInFlight":    {App: "a", BatchesInFlight: 65},
		"Lease":              {App: "a", Lease: time.Millisecond},
		"BackoffMax":         {App: "a", BackoffBase: time.Minute, BackoffMax: time.Second},
		"Election":           {App: "a", Election: "raft"},
		"PurgeInterval":      {App: "a", PurgeInterval: -time.Second},
		"DeliveredRetention": {App: "a", DeliveredRetention: -time.Second},
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

// retryHorizon is what RelaySettings.RetryHorizon carries: a lease per
// attempt and every backoff delay between them at its full (unjittered)
// length.
func TestRetryHorizon(t *testing.T) {
	def, err := (&Config{App: "a"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want time.Duration
	}{
		// 20 leases of 30s; delays 1s, 2s, ... 512s (1023s), then 9 of 10m.
		"defaults":                 {def, 20*30*time.Second + 1023*time.Second + 9*10*time.Minute},
		"one attempt is one lease": {Config{Lease: time.Minute, MaxAttempts: 1, BackoffBase: time.Second, BackoffMax: time.Hour}, time.Minute},
		"capped at once":           {Config{Lease: time.Second, MaxAttempts: 4, BackoffBase: time.Minute, BackoffMax: time.Minute}, 4*time.Second + 3*time.Minute},
		"no backoff":               {Config{Lease: time.Second, MaxAttempts: 5, BackoffMax: time.Minute}, 5 * time.Second},
		"doubling then capped":     {Config{Lease: time.Second, MaxAttempts: 5, BackoffBase: time.Second, BackoffMax: 3 * time.Second}, 5*time.Second + (1+2+3+3)*time.Second},
		// An attempt limit no message reaches in practice saturates
		// instead of wrapping around to a negative horizon.
		"huge": {Config{Lease: time.Hour, MaxAttempts: math.MaxInt, BackoffBase: time.Second, BackoffMax: 24 * time.Hour}, math.MaxInt64},
	} {
		if got := retryHorizon(&tc.cfg); got != tc.want {
			t.Errorf("%s: retryHorizon = %s, want %s", name, got, tc.want)
		}
	}
}

// A hook that implements no hook interface would never be called: New
// refuses it, naming where it is and what it is.
func TestHooksImplementingNothingAreRefused(t *testing.T) {
	type notAHook struct{ name string }
	_, err := (&Config{App: "a", Hooks: []Hook{hookFunc(nil), notAHook{"x"}}}).withDefaults()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Hooks[1]" || !strings.Contains(err.Error(), "mensageria.notAHook") || !errors.Is(err, ErrConfig) {
		t.Fatalf("want a *ConfigError naming Hooks[1] and its type, got %v", err)
	}
	_, err = (&Config{App: "a", Hooks: []Hook{nil}}).withDefaults()
	if !errors.As(err, &ce) || ce.Field != "Hooks[0]" {
		t.Fatalf("a nil hook: want a *ConfigError naming Hooks[0], got %v", err)
	}
}

type hookFunc func(DeliveryEvent)

func (f hookFunc) OnDelivery(ev DeliveryEvent) { f(ev) }
