package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// Runner runs the scenarios of its Options one after the other, in
// Scenarios' order, as `mensageria bench` does. What only the command
// knows (its relay, how it starts itself again, where it prints) comes in
// the other fields.
type Runner struct {
	Options
	// Env is the scratch schema the PostgreSQL scenarios run in: zero when
	// every scenario asked for brings its own database (OwnDatabase).
	Env Env
	// Daemon runs the command's relay for the http scenario's daemon path.
	Daemon DaemonRelay
	// RelayCommand starts this program again as the stress scenarios'
	// relay process (StressConfig.RelayCommand).
	RelayCommand func() *exec.Cmd
	// KfakeArgs are the arguments that make this program (os.Executable)
	// serve the kafka scenario's kfake cluster as a process of its own.
	KfakeArgs []string
	// Write prints one result.
	Write func(Result) error
	// Log, when not nil, is told which scenario starts; Errors is told
	// each scenario that failed.
	Log    io.Writer
	Errors io.Writer
}

// ErrScenarioFailed is Run's error when a scenario failed: each failure
// was written to Errors, and the other scenarios ran.
var ErrScenarioFailed = errors.New("bench: a scenario failed")

// Run runs the scenarios asked for (Options.Validate holds), writing each
// result as it comes.
func (r *Runner) Run(ctx context.Context) error {
	var err error
	failed := 0
	peers, _ := r.Peers() // checked by Validate
	peerRan := false
	for _, s := range Scenarios {
		if !slices.Contains(r.Scenarios, s) {
			continue
		}
		if peers != nil && slices.Contains(PeerScenarios, s) {
			// One comparison runs every peer scenario asked for, at the
			// first of them.
			if peerRan {
				continue
			}
			peerRan = true
			s = "peer"
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.logf("bench: running %s...\n", s)
		var res Result
		env, o := r.Env, r.Options
		switch s {
		case "peer":
			res, err = PeerCompare(ctx, env, PeerConfig{Peers: peers, Producers: o.Producers, SteadyFor: o.SteadyFor,
				TaxRun: o.TaxRun, TaxRounds: o.Rounds, Messages: o.Messages, Scenarios: o.peerScenarios()})
		case "drain":
			res, err = Drain(ctx, env, o.Messages)
		case "steady":
			res, err = SteadyState(ctx, env, o.Producers, o.SteadyFor)
		case "overhead":
			res, err = EnqueueOverhead(ctx, env, o.OverheadFor)
		case "enqueue-check":
			res, err = EnqueueCheck(ctx, env, EnqueueCheckConfig{Rounds: o.Rounds, Run: o.CheckFor})
		case "wakeup":
			res, err = Wakeup(ctx, env, WakeupConfig{Rounds: o.Rounds, Run: o.CheckFor})
		case "http":
			res, err = HTTPEndToEnd(ctx, HTTPEndToEndConfig{Env: env, Messages: o.Messages / 2, PacedFor: o.HTTPPacedFor, Daemon: r.Daemon})
		case "backlog":
			res, err = Backlog(ctx, env, 10000, o.BacklogLarge, 10000)
		case "kafka":
			var rs []Result
			rs, err = r.kafka(ctx)
			if err == nil {
				res = rs[len(rs)-1]
				for _, extra := range rs[:len(rs)-1] {
					if err := r.Write(extra); err != nil {
						return err
					}
				}
			}
		case "nats":
			res, err = r.nats(ctx)
		case "stress":
			cfg := StressConfig{Rate: o.StressRate, Lease: o.StressLease, ReaderSessions: o.StressReaders, OutboxSettings: o.StressOutbox,
				Phases: StandardStressPhases(o.StressWarmup, o.StressPhase, o.StressPinned), RelayCommand: r.RelayCommand}
			res, err = Stress(ctx, env, cfg)
			if err == nil && peers != nil {
				res, err = r.stressPeers(ctx, cfg, res, peers)
			}
		case "tax":
			res, err = OutboxTax(ctx, env, OutboxTaxConfig{Run: o.TaxRun, Rounds: o.Rounds, PacedFor: o.TaxPaced})
		case "stress-sqlite":
			res, err = r.stressSQLite(ctx)
		case "console":
			res, err = Console(ctx, env, ConsoleConfig{})
		}
		if err != nil {
			failed++
			fmt.Fprintf(r.Errors, "bench: %s failed: %v\n", s, err)
			continue
		}
		if err := r.Write(res); err != nil {
			return err
		}
	}
	if failed > 0 {
		return ErrScenarioFailed
	}
	return nil
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, format, args...)
	}
}

// stressPeers runs the stress scenario for each peer after mensageria's
// run m, writes m and each peer's result, and returns the table of them
// side by side.
func (r *Runner) stressPeers(ctx context.Context, cfg StressConfig, m Result, peers []string) (Result, error) {
	if err := r.Write(m); err != nil {
		return Result{}, err
	}
	var rs []Result
	for _, p := range peers {
		r.logf("bench: running stress for %s...\n", p)
		res, err := RiverStress(ctx, r.Env, cfg, p)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", p, err)
		}
		if err := r.Write(res); err != nil {
			return Result{}, err
		}
		rs = append(rs, res)
	}
	return StressPeerCompare(m, rs, cfg.Phases), nil
}

// stressSQLite runs the SQLite phases in a temporary directory.
func (r *Runner) stressSQLite(ctx context.Context) (Result, error) {
	dir, err := os.MkdirTemp("", "mensageria-stress-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	o := r.Options
	return StressSQLite(ctx, dir, StressConfig{Rate: o.StressRate, Lease: o.StressLease, RelayCommand: r.RelayCommand,
		Phases: SQLiteStressPhases(o.StressWarmup, o.StressPhase)})
}

// kafka compares the Kafka modes' drains at each of KafkaClaims on each
// cluster (KafkaBrokers, or kfake as a process of its own and in this
// one), then runs the relay comparison at Batch and the sink comparison
// on the first cluster.
func (r *Runner) kafka(ctx context.Context) ([]Result, error) {
	type cluster struct {
		kind    string
		brokers []string
	}
	o := r.Options
	var clusters []cluster
	if len(o.KafkaBrokers) > 0 {
		clusters = append(clusters, cluster{"given", o.KafkaBrokers})
	}
	for _, kind := range o.KafkaClusters {
		if len(o.KafkaBrokers) > 0 {
			break
		}
		switch kind {
		case KafkaInProcess:
			c, err := NewKfakeCluster()
			if err != nil {
				return nil, fmt.Errorf("in-process Kafka cluster: %w", err)
			}
			defer c.Close()
			clusters = append(clusters, cluster{kind, c.ListenAddrs()})
		case KafkaProcess:
			exe, err := os.Executable()
			if err != nil {
				return nil, err
			}
			p, err := StartKfakeProcess(ctx, exe, r.KfakeArgs...)
			if err != nil {
				return nil, err
			}
			defer p.Stop()
			clusters = append(clusters, cluster{kind, p.Brokers})
		}
	}
	var out []Result
	if len(o.KafkaClaims) > 0 {
		for _, c := range clusters {
			res, err := KafkaClaimsCompare(ctx, r.Env, c.brokers, c.kind, o.KafkaClaims, o.Rounds)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
	}
	brokers := clusters[0].brokers
	relay, err := KafkaCompare(ctx, r.Env, KafkaCompareConfig{Brokers: brokers, Batch: o.Batch,
		Messages: o.BrokerMessages, Rounds: o.Rounds, PacedFor: o.PacedFor})
	if err != nil {
		return nil, err
	}
	relay.Notes += "; on the " + clusters[0].kind + " cluster"
	sink, err := KafkaSinkCompare(ctx, r.Env, brokers, o.BrokerMessages, o.Rounds)
	if err != nil {
		return nil, err
	}
	return append(out, relay, sink), nil
}

func (r *Runner) nats(ctx context.Context) (Result, error) {
	nc, err := natsgo.Connect(r.NatsURL, natsgo.Timeout(5*time.Second))
	if err != nil {
		return Result{}, fmt.Errorf("connect to NATS at %s: %w", r.NatsURL, err)
	}
	defer nc.Close()
	return NatsCompare(ctx, r.Env, nc, r.BrokerMessages, r.Rounds)
}
