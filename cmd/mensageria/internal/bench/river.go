package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

// The two systems of the peer comparison (peer.go). This file is the only
// one of the project that imports River.

// peerType is the message type (mensageria) of the comparison.
const peerType = "bench.peer"

// mensageriaPeer is mensageria at its defaults: one client that enqueues
// and whose relay delivers to a Sender, the outbox in the bench's schema.
type mensageriaPeer struct {
	env Env
	d   *postgres.Driver
	c   *mensageria.Client
}

func newMensageriaPeer(ctx context.Context, e Env) (*mensageriaPeer, error) {
	d, err := e.driver()
	if err != nil {
		return nil, err
	}
	return &mensageriaPeer{env: e, d: d}, e.own(ctx, relayApp(peerType), peerType)
}

func (m *mensageriaPeer) name() string  { return "mensageria" }
func (m *mensageriaPeer) table() string { return m.env.Schema + ".outbox" }

func (m *mensageriaPeer) start(ctx context.Context, deliver func(int64)) error {
	send := mensageria.SenderFunc(func(_ context.Context, dl *mensageria.Delivery) error {
		seq, err := stressSeq(dl.Key)
		if err != nil {
			return err
		}
		deliver(seq)
		return nil
	})
	c, err := newRelay(m.d, peerType, send, 0)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	m.c = c
	return nil
}

func (m *mensageriaPeer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.c.Stop(ctx)
}

func (m *mensageriaPeer) enqueueTx(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := m.c.EnqueueTx(ctx, tx, mensageria.Message{Type: peerType, Key: stressKey(seq), Payload: []byte(Payload)})
	return err
}

// fill is the outbox's bulk path: one INSERT ... SELECT, as Env.fill.
func (m *mensageriaPeer) fill(ctx context.Context, n int) error {
	return m.env.exec(ctx, fmt.Sprintf(`INSERT INTO %s (type, key, payload)
		SELECT $1, 's-' || g, $2::json FROM generate_series(1, $3) g`, m.table()), peerType, Payload, n)
}

func (m *mensageriaPeer) pending(ctx context.Context) (bool, error) {
	var busy bool
	err := m.env.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+m.table()+" WHERE type = $1)", peerType).Scan(&busy)
	return busy, err
}

// peerArgs is the River job of the comparison: the sequence number and
// the same document mensageria's messages carry.
type peerArgs struct {
	Seq   int64           `json:"seq"`
	Order json.RawMessage `json:"order"`
}

func (peerArgs) Kind() string { return "bench_peer" }

// peerWorker is River's no-op handler: it reports the job's start.
type peerWorker struct {
	river.WorkerDefaults[peerArgs]
	deliver *atomic.Pointer[func(int64)]
}

func (w *peerWorker) Work(_ context.Context, job *river.Job[peerArgs]) error {
	(*w.deliver.Load())(job.Args.Seq)
	return nil
}

// River's settings in the comparison. riverWorkers is the MaxWorkers of
// River's examples and README; the tuned variant's fetch settings are
// the ones its documentation names for latency: a fetch at most every
// FetchCooldown (default 100ms; LISTEN/NOTIFY wakes the fetcher, and the
// notifications are limited to one per cooldown), and a poll every
// FetchPollInterval (default 1s) when no notification comes.
const (
	riverWorkers           = 100
	riverTunedCooldown     = 5 * time.Millisecond
	riverTunedPollInterval = 50 * time.Millisecond
)

// riverPeer is River in a schema of its own, migrated with rivermigrate,
// on the bench's pool.
type riverPeer struct {
	env     Env
	tuned   bool
	deliver atomic.Pointer[func(int64)]
	c       *river.Client[pgx.Tx]
}

func newRiverPeer(ctx context.Context, e Env, tuned bool) (*riverPeer, error) {
	mig, err := rivermigrate.New(riverpgxv5.New(e.Pool), &rivermigrate.Config{Schema: e.Schema, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	return &riverPeer{env: e, tuned: tuned}, nil
}

func (r *riverPeer) name() string {
	if r.tuned {
		return PeerRiverTuned
	}
	return PeerRiver
}

func (r *riverPeer) table() string { return r.env.Schema + ".river_job" }

// client is a River client with the comparison's worker and settings.
func (r *riverPeer) client() (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &peerWorker{deliver: &r.deliver})
	cfg := &river.Config{
		Schema:  r.env.Schema,
		Logger:  quiet(),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverWorkers}},
		Workers: workers,
	}
	if r.tuned {
		cfg.FetchCooldown = riverTunedCooldown
		cfg.FetchPollInterval = riverTunedPollInterval
	}
	return river.NewClient(riverpgxv5.New(r.env.Pool), cfg)
}

func (r *riverPeer) start(ctx context.Context, deliver func(int64)) error {
	r.deliver.Store(&deliver)
	c, err := r.client()
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	r.c = c
	return nil
}

func (r *riverPeer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.c.Stop(ctx)
}

func (r *riverPeer) enqueueTx(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := r.c.InsertTx(ctx, tx, peerArgs{Seq: seq, Order: json.RawMessage(Payload)}, nil)
	return err
}

// fill is River's bulk path: InsertManyFast (COPY), in chunks, from a
// client that is not started.
func (r *riverPeer) fill(ctx context.Context, n int) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	const chunk = 10000
	for first := 1; first <= n; first += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for seq := first; seq < first+chunk && seq <= n; seq++ {
			params = append(params, river.InsertManyParams{Args: peerArgs{Seq: int64(seq), Order: json.RawMessage(Payload)}})
		}
		if _, err := c.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	return nil
}

// pending: a job is settled once River marked it completed (River keeps
// completed rows for a day by default, its JobCleaner deletes them then).
func (r *riverPeer) pending(ctx context.Context) (bool, error) {
	var busy bool
	err := r.env.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+r.table()+" WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending'))").Scan(&busy)
	return busy, err
}
