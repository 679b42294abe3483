package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The stress scenario run for River (river.go): the same producers,
// schedule, book, phases and audit, River's client in this process in
// place of the relay, its river_job table in place of the outbox. The
// crash phase is left out: it kills a relay process and waits the lease
// and 30 s for the killed one's rows, and River takes a killed client's
// running jobs back after RescueStuckJobsAfter (an hour by default), not
// a lease.

// RiverStress runs cfg's phases but the crash for River, at its defaults
// or tuned, in a schema of its own next to e's (River's tables and the
// scenario's business tables), and names the result stress-<peer>.
func RiverStress(ctx context.Context, e Env, cfg StressConfig, peer string) (Result, error) {
	r := Result{Scenario: "stress-" + peer}
	if peer != PeerRiver && peer != PeerRiverTuned {
		return r, fmt.Errorf("%w: peer %q: use %s", ErrPeerConfig, peer, strings.Join(Peers, ", "))
	}
	var phases []StressPhase
	for _, p := range cfg.Phases {
		if !p.Crash {
			phases = append(phases, p)
		}
	}
	cfg.Phases = phases
	cfg, err := cfg.withDefaults()
	if err != nil {
		return r, err
	}
	pcfg := e.Pool.Config()
	pcfg.MaxConns = int32(cfg.Producers + cfg.ReaderSessions + 10)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	side, drop, err := Env{Pool: pool, Schema: e.Schema}.sideSchema(ctx, peerSchema(e.Schema, "stress_"+peer))
	if err != nil {
		return r, err
	}
	defer drop()
	rp, err := newRiverPeer(ctx, side, peer == PeerRiverTuned)
	if err != nil {
		return r, err
	}
	if err := side.exec(ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.stress_orders (seq bigint PRIMARY KEY, customer int NOT NULL, body jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE %[1]s.stress_customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0);
		INSERT INTO %[1]s.stress_customers (id) SELECT g FROM generate_series(0, 999) g;`, side.Schema)); err != nil {
		return r, err
	}
	s := &stressRun{cfg: cfg, book: newStressBook(len(cfg.Phases))}
	s.relay = &riverRelay{peer: rp, record: s.book.deliver}
	s.db = stressDB{
		name: "River",
		tx: func(ctx context.Context, seq int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := tx.SendBatch(ctx, side.stressBusiness(seq)).Close(); err != nil {
					return err
				}
				return rp.enqueueTx(ctx, tx, seq)
			})
		},
		sample: rp.sample,
		derive: func(pre string, _ float64, g map[string]float64, r *Result) {
			r.Set(pre+"autovacuums", g["autovacuums"])
		},
		committed: side.stressCommitted,
		waiting:   rp.waiting,
		pin:       side.stressPin,
		reader:    side.tableReader(rp.table()),
	}
	notes, err := side.serverNotes(ctx)
	if err != nil {
		return r, err
	}
	r, err = s.run(ctx, "")
	r.Scenario = "stress-" + peer
	r.Notes = strings.TrimSpace(notes + "\n" + peer + ": outbox-mb and the dead tuples are river_job's (completed jobs kept, River's default)\n" + r.Notes)
	return r, err
}

// riverRelay is River's client in this process as the scenario's relay.
type riverRelay struct {
	peer   *riverPeer
	record func(seq int64, at time.Time)
}

func (r *riverRelay) start(ctx context.Context) error {
	return r.peer.start(ctx, func(seq int64) { r.record(seq, time.Now()) })
}

func (r *riverRelay) hold(context.Context) error {
	return errors.New("bench: River runs in this process: it cannot be held for a crash")
}

func (r *riverRelay) kill() error {
	return errors.New("bench: River runs in this process: it cannot be killed")
}

func (r *riverRelay) stop() error { return r.peer.stop() }

// sample is stressDB.sample for river_job: its dead tuples and sizes.
func (r *riverPeer) sample(ctx context.Context) (dbSample, error) {
	var dead, live, av, table, indexes int64
	err := r.env.Pool.QueryRow(ctx, `SELECT n_dead_tup, n_live_tup, autovacuum_count, pg_relation_size(relid), pg_indexes_size(relid)
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'river_job'`, r.env.Schema).Scan(&dead, &live, &av, &table, &indexes)
	if err != nil {
		return dbSample{}, err
	}
	const mb = 1 << 20
	return dbSample{
		gauges: map[string]float64{"dead-tuples": float64(dead), "live-tuples": float64(live),
			"outbox-mb": float64(table) / mb, "indexes-mb": float64(indexes) / mb},
		counters: map[string]float64{"autovacuums": float64(av)},
	}, nil
}

// waiting is stressDB.waiting: the jobs River has not finished.
func (r *riverPeer) waiting(ctx context.Context) ([]int64, error) {
	rows, err := r.env.Pool.Query(ctx, "SELECT (args->>'seq')::bigint FROM "+r.table()+" WHERE state NOT IN ('completed', 'discarded', 'cancelled')")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// StressPeerCompare lays mensageria's stress result (Stress) beside the
// peers' (RiverStress, named stress-<peer>): per phase of phases, the
// delivered rate, pickup p50 and p99, and the queue table's size and dead
// tuples at most, with mensageria's ratio to each peer.
func StressPeerCompare(m Result, peers []Result, phases []StressPhase) Result {
	r := Result{Scenario: "stress-peer"}
	var names []string
	for _, p := range peers {
		names = append(names, strings.TrimPrefix(p.Scenario, "stress-"))
	}
	var figures []peerFigure
	for _, ph := range phases {
		for _, f := range []peerFigure{{figure: "delivered/s", higher: true}, {figure: "p50-ms"}, {figure: "p99-ms"}, {figure: "outbox-mb-max"}, {figure: "dead-tuples-max"}} {
			f.scenario = "stress:" + ph.Name
			figures = append(figures, f)
			from := func(sys string, res Result) {
				if v, ok := res.Metrics[ph.Name+"/"+f.figure]; ok {
					r.Set(f.scenario+"/"+sys+"/"+f.figure, v)
				}
			}
			from("mensageria", m)
			for i, p := range peers {
				from(names[i], p)
			}
		}
	}
	for _, k := range []string{"lost", "duplicates"} {
		r.Set("stress/mensageria/"+k, m.Metrics[k])
		for i, p := range peers {
			r.Set("stress/"+names[i]+"/"+k, p.Metrics[k])
		}
	}
	setPeerRatios(&r, figures, names)
	r.Notes = peerTable(r, figures) + "\n(outbox-mb and dead tuples: mensageria's outbox, River's river_job; River ran no crash phase)"
	return r
}
