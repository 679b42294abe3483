package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scenarios are the scenarios `mensageria bench` knows, in run order.
var Scenarios = []string{"drain", "steady", "overhead", "enqueue-check", "wakeup", "http", "backlog", "kafka", "nats", "stress", "tax", "stress-sqlite", "console"}

// Options are one run of `mensageria bench`: the scenarios asked for and
// the figures they run with, each field one flag of the command (named in
// its comment). Validate checks them, in the flags' words; a Runner runs
// them.
type Options struct {
	Scenarios      []string      // --scenario: of Scenarios
	Messages       int           // --messages: drain's backlog (http sends half of it, peer drains it)
	SteadyFor      time.Duration // --duration: how long steady's producers run
	OverheadFor    time.Duration // --overhead-duration: each overhead variant's run
	Producers      int           // --producers: steady's (and peer's) concurrent producers
	BacklogLarge   int           // --backlog-large: backlog's large backlog
	BrokerMessages int           // --broker-messages: kafka, nats: messages per run
	Batch          int           // --batch: kafka: the relay's claim size
	Rounds         int           // --rounds: rounds of alternating modes
	PacedFor       time.Duration // --paced-for: kafka's latency phase
	// HTTPPacedFor is http's latency phase: --paced-for when given, else
	// 0 (the scenario's own default).
	HTTPPacedFor  time.Duration
	CheckFor      time.Duration // --check-for: enqueue-check, wakeup: each mode's run per round
	KafkaBrokers  []string      // --kafka-brokers: none: kfake clusters (KafkaClusters)
	KafkaClusters []string      // --kafka-cluster: KafkaProcess, KafkaInProcess
	KafkaClaims   []int         // --kafka-claims: claim sizes of the modes' comparison (none: skip)
	NatsURL       string        // --nats-url

	StressRate    int           // --stress-rate: business transactions a second
	StressWarmup  time.Duration // --stress-warmup
	StressPhase   time.Duration // --stress-phase
	StressPinned  time.Duration // --stress-pinned: how long idle-in-tx holds the xmin horizon
	StressLease   time.Duration // --stress-lease: 0: the relay's default
	StressReaders int           // --stress-readers
	StressOutbox  []string      // --stress-outbox-set: name=value storage parameters
	TaxRun        time.Duration // --tax-run
	TaxPaced      time.Duration // --tax-paced

	Peer        string // --peer: "" or PeerRiver
	RiverTuning string // --river-tuning: both, default or tuned
}

// DefaultOptions are the command's defaults: drain, steady and overhead
// at the sizes of docs/benchmarks.md.
func DefaultOptions() Options {
	return Options{
		Scenarios:      []string{"drain", "steady", "overhead"},
		Messages:       100000,
		SteadyFor:      20 * time.Second,
		OverheadFor:    10 * time.Second,
		Producers:      8,
		BacklogLarge:   1000000,
		BrokerMessages: 30000,
		Batch:          100,
		Rounds:         3,
		PacedFor:       5 * time.Second,
		CheckFor:       2 * time.Second,
		KafkaClusters:  []string{KafkaProcess, KafkaInProcess},
		KafkaClaims:    slices.Clone(KafkaClaims),
		NatsURL:        "nats://127.0.0.1:4222",
		StressRate:     800,
		StressWarmup:   30 * time.Second,
		StressPhase:    90 * time.Second,
		StressPinned:   2 * time.Minute,
		StressReaders:  3,
		TaxRun:         10 * time.Second,
		TaxPaced:       30 * time.Second,
		RiverTuning:    "both",
	}
}

// Validate returns the first option the scenarios cannot run with, in the
// words of the command's flags; nil when they can.
func (o Options) Validate() error {
	for _, k := range o.KafkaClusters {
		if k != KafkaProcess && k != KafkaInProcess {
			return fmt.Errorf("--kafka-cluster %q: use %s or %s", k, KafkaProcess, KafkaInProcess)
		}
	}
	if len(o.KafkaClusters) == 0 {
		return fmt.Errorf("--kafka-cluster: name at least one of %s, %s", KafkaProcess, KafkaInProcess)
	}
	for _, c := range o.KafkaClaims {
		if c < 1 || c > 10000 {
			return fmt.Errorf("--kafka-claims %d: 1..10000", c)
		}
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("--scenario %q: use %s", s, strings.Join(Scenarios, ", "))
		}
	}
	switch {
	case o.BrokerMessages < 100:
		return fmt.Errorf("--broker-messages %d: at least 100", o.BrokerMessages)
	case o.Batch < 1 || o.Batch > o.BrokerMessages:
		return fmt.Errorf("--batch %d: 1..--broker-messages", o.Batch)
	case o.Rounds < 1:
		return fmt.Errorf("--rounds %d: at least 1", o.Rounds)
	case o.PacedFor < 100*time.Millisecond:
		return fmt.Errorf("--paced-for %s: at least 100ms", o.PacedFor)
	case o.CheckFor < 100*time.Millisecond:
		return fmt.Errorf("--check-for %s: at least 100ms", o.CheckFor)
	case o.StressRate < 1 || o.StressReaders < 1:
		return fmt.Errorf("--stress-rate %d and --stress-readers %d: at least 1", o.StressRate, o.StressReaders)
	case o.StressWarmup < 100*time.Millisecond || o.StressPhase < 100*time.Millisecond || o.StressPinned < 100*time.Millisecond:
		return fmt.Errorf("--stress-warmup %s, --stress-phase %s, --stress-pinned %s: at least 100ms each", o.StressWarmup, o.StressPhase, o.StressPinned)
	case o.StressLease != 0 && o.StressLease < time.Second:
		return fmt.Errorf("--stress-lease %s: at least 1s (0: the relay's default)", o.StressLease)
	case o.TaxRun < 100*time.Millisecond || o.TaxPaced < 100*time.Millisecond:
		return fmt.Errorf("--tax-run %s, --tax-paced %s: at least 100ms each", o.TaxRun, o.TaxPaced)
	}
	if _, err := o.Peers(); err != nil {
		return err
	}
	if err := CheckOutboxSettings(o.StressOutbox); err != nil {
		return fmt.Errorf("--stress-outbox-set: %v", err)
	}
	return nil
}

// Peers are the peer variants Peer and RiverTuning ask for (none without
// Peer).
func (o Options) Peers() ([]string, error) {
	if o.Peer == "" {
		return nil, nil
	}
	if o.Peer != PeerRiver {
		return nil, fmt.Errorf("--peer %q: the peer is river", o.Peer)
	}
	switch o.RiverTuning {
	case "both":
		return []string{PeerRiver, PeerRiverTuned}, nil
	case "default":
		return []string{PeerRiver}, nil
	case "tuned":
		return []string{PeerRiverTuned}, nil
	}
	return nil, fmt.Errorf("--river-tuning %q: use both, default or tuned", o.RiverTuning)
}

// OwnDatabase reports whether every scenario asked for brings its own
// database (stress-sqlite), so that no PostgreSQL and no config is needed.
func (o Options) OwnDatabase() bool {
	for _, s := range o.Scenarios {
		if s != "stress-sqlite" {
			return false
		}
	}
	return true
}

// peerScenarios are the scenarios of the peer comparison among those
// asked for.
func (o Options) peerScenarios() []string {
	var out []string
	for _, s := range PeerScenarios {
		if slices.Contains(o.Scenarios, s) {
			out = append(out, s)
		}
	}
	return out
}
