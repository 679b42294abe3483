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

// Every knob of Config that cannot work as written is refused (New) with
// a *ConfigError naming it, never clamped: negative values, the lease's
// bounds (the longest the election's PostgreSQL session can be given),
// attempts beyond a 32-bit count, and pairs that contradict each other.
// The bounds themselves are accepted.
func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // "" : accepted
		says  string
	}{
		{"negative batch", Config{BatchSize: -1}, "BatchSize", "1..10000"},
		{"batch too large", Config{BatchSize: 10001}, "BatchSize", "1..10000"},
		{"negative concurrency", Config{Concurrency: -1}, "Concurrency", "at least 1"},
		{"batches in flight", Config{BatchesInFlight: 65}, "BatchesInFlight", "1..64"},
		{"negative attempts", Config{MaxAttempts: -1}, "MaxAttempts", "32-bit"},
		{"attempts beyond 32 bits", Config{MaxAttempts: math.MaxInt32 + 1}, "MaxAttempts", "32-bit"},
		{"attempts at 32 bits", Config{MaxAttempts: math.MaxInt32}, "", ""},
		{"lease under a second", Config{Lease: 999 * time.Millisecond}, "Lease", "at least 1s"},
		{"negative lease", Config{Lease: -time.Second}, "Lease", "at least 1s"},
		{"lease of 600h", Config{Lease: 600 * time.Hour}, "Lease", "holds its claimed messages"},
		{"lease just past the bound", Config{Lease: MaxLease + time.Millisecond}, "Lease", "holds its claimed messages"},
		{"lease at the bound", Config{Lease: MaxLease, PollInterval: time.Second}, "", ""},
		{"lease at its floor", Config{Lease: MinLease}, "", ""},
		{"negative backoff base", Config{BackoffBase: -time.Second}, "BackoffBase", "negative"},
		{"backoff max under base", Config{BackoffBase: time.Minute, BackoffMax: time.Second}, "BackoffMax", "at least BackoffBase (1m0s)"},
		{"backoff base over the default max", Config{BackoffBase: time.Hour}, "BackoffMax", "at least BackoffBase"},
		{"negative poll", Config{PollInterval: -time.Second}, "PollInterval", "at least 1ms"},
		{"poll longer than the lease", Config{Lease: 5 * time.Second, PollInterval: 6 * time.Second}, "PollInterval", "longer than the Lease"},
		{"poll equal to the lease", Config{Lease: 5 * time.Second, PollInterval: 5 * time.Second}, "", ""},
		{"negative debounce", Config{NotifyDebounce: -time.Millisecond}, "NotifyDebounce", "negative"},
		{"unknown election", Config{Election: "raft"}, "Election", "unknown policy"},
		{"negative retention", Config{DeliveredRetention: -time.Second}, "DeliveredRetention", "negative"},
		{"negative purge", Config{PurgeInterval: -time.Second}, "PurgeInterval", "negative"},
		{"negative reconcile", Config{ReconcileInterval: -time.Second}, "ReconcileInterval", "at least 1ms"},
		{"retry-after ceiling under a second", Config{RetryAfterCeiling: time.Millisecond}, "RetryAfterCeiling", "at least 1s"},
		{"negative threshold", Config{RouteFailureThreshold: -1}, "RouteFailureThreshold", "at least 1"},
		{"negative route pause", Config{RoutePause: -time.Second}, "RoutePause", "at least 1ms"},
		{"route pause max under the pause", Config{RoutePause: time.Minute, RoutePauseMax: time.Second}, "RoutePauseMax", "at least RoutePause"},
		{"route pause over the default max", Config{RoutePause: time.Hour}, "RoutePauseMax", "at least RoutePause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.App = "a"
			_, err := tc.cfg.withDefaults()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrConfig) || !strings.Contains(ce.Reason, tc.says) {
				t.Fatalf("want a *ConfigError naming %s and saying %q, got %v", tc.field, tc.says, err)
			}
		})
	}
}

// The delivery window is the lease less its settle margin, the deadline
// claiming gives every batch.
func TestDeliveryWindowIsTheBatchDeadline(t *testing.T) {
	start := time.Now()
	for lease, margin := range map[time.Duration]time.Duration{
		time.Second:      250 * time.Millisecond,
		2 * time.Second:  500 * time.Millisecond,
		30 * time.Second: 3 * time.Second,
		time.Hour:        6 * time.Minute,
	} {
		if SettleMargin(lease) != margin || DeliveryWindow(lease) != lease-margin {
			t.Errorf("lease %s: margin %s, window %s; want %s, %s", lease, SettleMargin(lease), DeliveryWindow(lease), margin, lease-margin)
		}
		if b := leased(1, start, lease, nil); !b.deadline.Equal(start.Add(DeliveryWindow(lease))) {
			t.Errorf("lease %s: the batch's deadline is %s after its claim, the window %s", lease, b.deadline.Sub(start), DeliveryWindow(lease))
		}
	}
}

// Doubling the pause toward an enormous RoutePauseMax never wraps around
// to a negative pause.
func TestRoutePauseDoesNotOverflow(t *testing.T) {
	b := newBreaker(breakerConfig{threshold: 1, pause: time.Second, pauseMax: time.Duration(math.MaxInt64), ceiling: time.Hour}, time.Now())
	for n := range 80 {
		if d := b.pauseOf(n); d <= 0 {
			t.Fatalf("pause after %d probes: %s", n, d)
		}
	}
}
