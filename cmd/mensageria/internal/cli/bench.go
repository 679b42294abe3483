package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// benchOptions are the bench command's flags: the scenarios' options, and
// what the command itself does with them.
type benchOptions struct {
	bench.Options
	serveKfake  bool // run as the kafka scenario's kfake cluster process
	stressRelay bool // run as the stress scenario's relay process
	private     bool // a private PostgreSQL server instead of the config's
	keep        bool // keep the scratch schema
	asJSON      bool
}

const benchLong = `bench runs the scenarios behind docs/benchmarks.md against the config's
database, in a scratch schema of its own (<schema>_bench_<random>) that is
dropped afterwards: it never touches the configured schema's rows.

  drain      relay drain of a backlog to a no-op Sender, against the raw
             UPDATE ... SKIP LOCKED drain in the same run (msgs/s, raw-ratio)
  steady     producers commit single-message transactions while the relay
             delivers (enqueue/s, delivered/s, keepup-ratio, p50-ms, p99-ms)
  overhead   a business transaction with and without one enqueue
             (overhead-ratio; NOTIFY's share apart)
  enqueue-check
             what the outbox's insert check (the type's owner, the key,
             type and headers rules) costs: rows/s of a Go enqueue of 1
             and of 100 rows and of a plain SQL INSERT, with the check, with
             it disabled and with only its owner test disabled, --rounds
             alternating rounds of --check-for each (<kind>-ratio: all the
             rules; <kind>-owner-ratio: the ownership check alone; not run
             unless asked for)
  wakeup     what the outbox's wake-up of plain SQL enqueues costs the
             enqueue rate (rows/s with it, without it, and with the designs
             it was chosen over, --rounds alternating rounds of --check-for
             each; <kind>-ratio) and what it buys: commit-to-delivery p50
             and p99 of plain SQL INSERTs paced at 200 a second, with and
             without it (not run unless asked for)
  http       outbox -> relay -> HTTP over loopback -> receiver inbox: the
             library's single and batch delivery, and the daemon's path (this
             command's relay from a config with batch: true) side by side
             (msgs/s, batch-msgs/s, daemon-msgs/s, batch-ratio, daemon-ratio;
             p50-ms, p99-ms at a paced 1,000 msgs/s; slow: run with
             --scenario http)
  backlog    drain rate with a large backlog against a small one (slow:
             not run unless asked for with --scenario backlog)
  kafka      the relay draining the outbox into Kafka, idempotent vs
             transactional at each claim size of --kafka-claims (1, 20, 100,
             500), counted by a read_committed consumer: each mode's msgs/s
             and idem/tx-ratio (target >= 1 at each), on each cluster of
             --kafka-cluster; then, on the first cluster, commit-to-consumer
             latency through the relay at a paced 1,000 msgs/s
             (--paced-for), the drain and the Sender alone at claims of
             --batch, and a sink with the offsets in the database vs plain
             at-least-once. Without --kafka-brokers it runs against
             franz-go's kfake (3 brokers, 6 partitions, no disk) started as
             a process of its own on loopback and in this one
  nats       the JetStream Sender with vs without Nats-Msg-Id, and a sink
             with the stream sequence in the database vs plain at-least-once,
             on scratch streams at --nats-url

  stress     issue #14: --stress-rate single-message business transactions
             a second (8 producers, credited on wall-clock time) through
             the phases warmup (--stress-warmup), clean, idle-in-tx (a
             session holding the xmin horizon for --stress-pinned),
             recovery, active-readers (--stress-readers REPEATABLE READ
             sessions scanning the outbox), high-load (1.5x), recovery-2
             and crash (the relay process SIGKILLed a quarter in, inside
             a Send it holds unanswered, and restarted), each
             --stress-phase long; per phase: offered,
             enqueued and delivered per second, pickup p50/p95/p99 (commit
             to Sender), max depth, the outbox's dead tuples and sizes, and
             a lost/duplicate audit at the end (not run unless asked for)
  tax        the outbox tax: 8 producers run one business transaction as
             fast as they can with and without one enqueue (its own round
             trip, or queued into the business batch; with the outbox's
             insert check disabled; with no relay running), the relay
             delivering to a no-op Sender, --rounds rounds of --tax-run; then pickup
             latency at 80% of the outbox rate for --tax-paced (not run
             unless asked for)
  stress-sqlite
             the stress scenario's warmup, clean and crash phases on the
             embedded SQLite, in a temporary directory (not run unless
             asked for)
  console    the web console's main page over 1,000,000 pending rows of 50
             types: its server time (page-p50-ms, page-p99-ms; target at
             most 200) against the per-type count it keeps out of page
             loads (count-ms), a dead-letter page and a detail (not run
             unless asked for)

kafka, nats, enqueue-check, wakeup and tax run each mode once per round (--rounds),
rotating which goes first, and report medians and ratios.

The stress figures only mean production on a server with production
settings (autovacuum on): --private-server starts a PostgreSQL of its own
(initdb in a temporary directory, a free port of 127.0.0.1, initdb's
defaults; the server programs from $MENSAGERIA_PG_BIN or
/usr/lib/postgresql/*/bin, run as the postgres OS user when bench runs as
root) and runs every PostgreSQL scenario there instead of the config's
database, which is then not needed. The stress result's notes name the
server's settings and say when autovacuum is off.

--peer river runs steady, tax and drain (those of them --scenario names)
(and stress, when named) for mensageria and then for River
(github.com/riverqueue/river, in a schema of its own migrated by
rivermigrate) on the same server in this process, with one harness: the
same business transaction, producers and clock, pickup latency from
commit to the handler's start. River runs at its defaults and with its
documented fetch tuning (FetchCooldown 5ms, FetchPollInterval 50ms) as
peers river and river-tuned (--river-tuning). It prints one table: every
system's figures and mensageria's ratio to each peer (m÷<peer>), with
which way is better. steady runs --duration with --producers, tax
--rounds alternating rounds of --tax-run (tax-ratio: transactions a
second with one message over without), drain a backlog of --messages;
rss-mb is the process's peak resident set during the system's run,
alloc-kb/msg what the run allocated per message. stress runs its phases
for River too, River's client in this process in place of the relay and
without the crash phase (River takes a killed client's jobs back after
an hour, not a lease), and prints a table of the phases side by side
(stress-peer). Other scenarios run for mensageria alone.

--json prints one JSON object per scenario.`

func (a *app) benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the project's benchmark scenarios against the configured PostgreSQL",
		Long:  benchLong,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return a.runBenchCommand(cmd, o)
		}),
	}
	benchFlags(cmd, &o)
	return cmd
}

// benchFlags binds the bench command's flags to o, with bench's defaults.
func benchFlags(cmd *cobra.Command, o *benchOptions) {
	d := bench.DefaultOptions()
	f := cmd.Flags()
	f.StringSliceVar(&o.Scenarios, "scenario", d.Scenarios, "scenarios to run: "+strings.Join(bench.Scenarios, ", "))
	f.IntVar(&o.Messages, "messages", d.Messages, "drain: backlog size")
	f.DurationVar(&o.SteadyFor, "duration", d.SteadyFor, "steady: how long the producers run")
	f.DurationVar(&o.OverheadFor, "overhead-duration", d.OverheadFor, "overhead: how long each variant runs")
	f.IntVar(&o.Producers, "producers", d.Producers, "steady: concurrent producers")
	f.IntVar(&o.BacklogLarge, "backlog-large", d.BacklogLarge, "backlog: the large backlog (the small one is 10,000)")
	f.IntVar(&o.BrokerMessages, "broker-messages", d.BrokerMessages, "kafka, nats: messages per run")
	f.IntVar(&o.Batch, "batch", d.Batch, "kafka: the relay's claim size")
	f.IntVar(&o.Rounds, "rounds", d.Rounds, "kafka, nats, enqueue-check, wakeup: rounds of alternating modes")
	f.DurationVar(&o.PacedFor, "paced-for", d.PacedFor, "kafka, http: how long each mode's latency phase paces 1,000 msgs/s (http: 10s unless given)")
	f.DurationVar(&o.CheckFor, "check-for", d.CheckFor, "enqueue-check, wakeup: how long each mode enqueues per round")
	f.StringSliceVar(&o.KafkaBrokers, "kafka-brokers", d.KafkaBrokers, "kafka: seed brokers (default: kfake clusters, see --kafka-cluster)")
	f.StringSliceVar(&o.KafkaClusters, "kafka-cluster", d.KafkaClusters, "kafka, without --kafka-brokers: kfake run as a process of its own on loopback (process), in this one (in-process), or both")
	f.IntSliceVar(&o.KafkaClaims, "kafka-claims", d.KafkaClaims, "kafka: the claim sizes the idempotent and transactional drains are compared at (none: skip)")
	f.BoolVar(&o.serveKfake, "serve-kfake", false, "internal: run as the kafka scenario's kfake cluster process")
	_ = f.MarkHidden("serve-kfake")
	f.StringVar(&o.NatsURL, "nats-url", d.NatsURL, "nats: the server")
	f.IntVar(&o.StressRate, "stress-rate", d.StressRate, "stress: base offered rate, business transactions a second")
	f.DurationVar(&o.StressWarmup, "stress-warmup", d.StressWarmup, "stress: the warmup phase")
	f.DurationVar(&o.StressPhase, "stress-phase", d.StressPhase, "stress: every other phase but idle-in-tx")
	f.DurationVar(&o.StressPinned, "stress-pinned", d.StressPinned, "stress: how long idle-in-tx holds the xmin horizon")
	f.DurationVar(&o.StressLease, "stress-lease", d.StressLease, "stress: the relay's lease (0: its default, 30s)")
	f.IntVar(&o.StressReaders, "stress-readers", d.StressReaders, "stress: REPEATABLE READ sessions of the active-readers phase")
	f.StringSliceVar(&o.StressOutbox, "stress-outbox-set", d.StressOutbox, "stress: storage parameters set on the scratch outbox first (name=value,...), to measure a table setting")
	f.DurationVar(&o.TaxRun, "tax-run", d.TaxRun, "tax: each mode's run per round")
	f.DurationVar(&o.TaxPaced, "tax-paced", d.TaxPaced, "tax: the paced run at 80% of the outbox rate")
	f.BoolVar(&o.private, "private-server", false, "run the PostgreSQL scenarios on a private server with production defaults, started and removed by bench")
	f.BoolVar(&o.stressRelay, "stress-relay", false, "internal: run as the stress scenario's relay process")
	_ = f.MarkHidden("stress-relay")
	f.StringVar(&o.Peer, "peer", d.Peer, "run steady, tax and drain for mensageria and for this peer (river), one table of ratios")
	f.StringVar(&o.RiverTuning, "river-tuning", d.RiverTuning, "--peer river: River at its defaults (default), with its fetch tuning (tuned), or both")
	f.BoolVar(&o.keep, "keep", false, "keep the scratch schema")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object per scenario")
}

// runBenchCommand runs the scenarios o names, or the process a scenario
// starts of itself.
func (a *app) runBenchCommand(cmd *cobra.Command, o benchOptions) error {
	if o.stressRelay {
		spec, _ := a.io.Env(bench.StressRelayEnv)
		return bench.RunStressRelay(cmd.Context(), spec, a.io.In, a.io.Out, a.io.Err)
	}
	if o.serveKfake {
		return bench.ServeKfake(a.io.In, a.io.Out)
	}
	if err := o.Validate(); err != nil {
		return daemon.Usage("%v", err)
	}
	if o.private || o.OwnDatabase() {
		return a.runBenchPrivate(cmd.Context(), o)
	}
	if cmd.Flags().Changed("paced-for") {
		o.HTTPPacedFor = o.PacedFor
	}
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	if c.Backend() != "postgres" {
		return daemon.Usage("bench runs on PostgreSQL; the config's database is %s", c.Backend())
	}
	return a.runBench(cmd.Context(), c, o)
}

// runBenchPrivate runs the scenarios on a private PostgreSQL server (when
// any needs PostgreSQL), started here and removed afterwards.
func (a *app) runBenchPrivate(ctx context.Context, o benchOptions) error {
	if o.OwnDatabase() {
		return a.runScenarios(ctx, nil, bench.Env{}, o)
	}
	if !o.asJSON {
		fmt.Fprintln(a.io.Err, "bench: starting a private PostgreSQL server")
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{})
	if err != nil {
		return daemon.Fail("--private-server: %v", err)
	}
	defer func() { _ = srv.Stop() }()
	if !o.asJSON {
		fmt.Fprintf(a.io.Err, "bench: private server at %s (%s)\n", srv.URL, srv.Dir)
	}
	return a.runBench(ctx, &config.Config{Database: srv.URL, Schema: "mensageria"}, o)
}

func (a *app) runBench(ctx context.Context, c *config.Config, o benchOptions) error {
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, true)
	if err != nil {
		return err
	}
	defer b.Close()
	schema := fmt.Sprintf("%s_bench_%08x", c.Schema, rand.Uint32())
	if len(schema) > 63 {
		schema = fmt.Sprintf("mensageria_bench_%08x", rand.Uint32())
	}
	if _, err := b.Pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("bench: create scratch schema: %w", err)
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, _ = b.Pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		}()
	}
	if !o.asJSON {
		fmt.Fprintf(a.io.Err, "bench: scratch schema %s\n", schema)
	}
	return a.runScenarios(ctx, c, bench.Env{Pool: b.Pool, Schema: schema}, o)
}

// runScenarios runs the scenarios asked for, in bench.Scenarios' order,
// in env (a zero env and no config when only scenarios that bring their
// own database run).
func (a *app) runScenarios(ctx context.Context, c *config.Config, env bench.Env, o benchOptions) error {
	r := &bench.Runner{Options: o.Options, Env: env, Daemon: daemonRelay(c), RelayCommand: stressRelayCommand,
		KfakeArgs: []string{"bench", "--serve-kfake"}, Errors: a.io.Err,
		Write: func(r bench.Result) error { return a.writeBench(r, o.asJSON) }}
	if !o.asJSON {
		r.Log = a.io.Err
	}
	err := r.Run(ctx)
	if errors.Is(err, bench.ErrScenarioFailed) {
		return silentExit(ExitFailure)
	}
	return err
}

// daemonRelay runs the relay command itself, in process, from a config
// file like an operator's with batch: true on its one HTTP route: the
// daemon's whole path (config, registry, Sender, hooks, election)
// measured beside the library's.
func daemonRelay(c *config.Config) bench.DaemonRelay {
	return func(ctx context.Context, t bench.DaemonTarget) (func() error, error) {
		dir, err := os.MkdirTemp("", "mensageria-bench-daemon-")
		if err != nil {
			return nil, err
		}
		// Values are written as JSON strings (valid YAML), with $ doubled
		// so that the parser does not expand them again.
		q := func(s string) string {
			b, _ := json.Marshal(strings.ReplaceAll(s, "$", "$$"))
			return string(b)
		}
		path := filepath.Join(dir, "relay.yaml")
		conf := fmt.Sprintf(`database: %s
schema: %s
app: %s
routes:
  - type: %s
    http: {url: %s, token: ${BENCH_TOKEN}, batch: true, max_batch_items: %d, max_concurrent: %d}
relay: {batch: %d, concurrency: %d}
`, q(c.Database), q(t.Schema), q(t.App), q(t.Type), q(t.URL), t.BatchItems, t.Concurrency, t.Claim, t.Concurrency)
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		var log syncWriter
		done := make(chan int, 1)
		go func() {
			done <- Run(rctx, []string{"relay", "--config", path, "--listen", ""}, IO{Err: &log, Out: io.Discard,
				Env: func(k string) (string, bool) { return t.Token, k == "BENCH_TOKEN" }})
		}()
		stop := func() error {
			cancel()
			code := <-done
			_ = os.RemoveAll(dir)
			if code != 0 {
				return fmt.Errorf("the relay exited %d: %s", code, log.String())
			}
			return nil
		}
		for !strings.Contains(log.String(), "relay started") {
			select {
			case code := <-done:
				_ = os.RemoveAll(dir)
				cancel()
				return nil, fmt.Errorf("the relay exited %d: %s", code, log.String())
			case <-time.After(5 * time.Millisecond):
			}
		}
		return stop, nil
	}
}

// syncWriter collects a relay's log lines for the bench to read while it
// runs.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// stressRelayCommand starts this executable again as the stress scenario's
// relay process.
func stressRelayCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, "bench", "--stress-relay")
}

func (a *app) writeBench(r bench.Result, asJSON bool) error {
	if asJSON {
		return r.WriteJSON(a.io.Out)
	}
	writeBenchResult(a, r)
	return nil
}

func writeBenchResult(a *app, r bench.Result) {
	names := make([]string, 0, len(r.Metrics))
	for k := range r.Metrics {
		names = append(names, k)
	}
	slices.Sort(names)
	width := 0
	for _, k := range names {
		width = max(width, len(k))
	}
	fmt.Fprintf(a.io.Out, "%s\n", r.Scenario)
	if r.Scenario == "peer" || r.Scenario == "stress-peer" {
		// The table in the notes is the result; --json has every figure.
		names = nil
	}
	for _, k := range names {
		fmt.Fprintf(a.io.Out, "  %-*s %12.2f\n", width, k, r.Metrics[k])
	}
	if r.Notes != "" {
		for _, line := range strings.Split(r.Notes, "\n") {
			fmt.Fprintf(a.io.Out, "  %s\n", line)
		}
	}
}
