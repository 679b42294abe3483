package postgres_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// BenchmarkRowLevelSecurity measures what the opt-in row-level security of
// docs/security.md costs the roles it confines, through the driver, as the
// least-privilege roles of apps a and b, with it off and on:
//
//   - enqueue-1: the producer's one-row enqueue (an autocommitted INSERT);
//   - enqueue-100: one 100-row INSERT;
//   - claim-settle-10 and -100: the relay's claim of 10 (100) rows and
//     their settle as delivered (two transactions), on a backlog of both
//     apps' rows.
//
// The figures and the command are in docs/benchmarks.md, "Row-level
// security".
func BenchmarkRowLevelSecurity(b *testing.B) {
	for _, rls := range []bool{false, true} {
		mode := map[bool]string{false: "off", true: "on"}[rls]
		b.Run("enqueue-1/rls="+mode, func(b *testing.B) { benchEnqueue(b, rls, 1) })
		b.Run("enqueue-100/rls="+mode, func(b *testing.B) { benchEnqueue(b, rls, 100) })
		b.Run("claim-settle-10/rls="+mode, func(b *testing.B) { benchClaimSettle(b, rls, 10) })
		b.Run("claim-settle-100/rls="+mode, func(b *testing.B) { benchClaimSettle(b, rls, 100) })
	}
}

func benchEnqueue(b *testing.B, rls bool, n int) {
	e := newSecurityEnv(b, rls)
	p := e.as("a", postgres.RoleProducer)
	rows := make([]driver.InsertRow, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for k := range rows {
			rows[k] = driver.InsertRow{MessageID: uuid.New(), Type: "a.x", Key: fmt.Sprint("k", i, "-", k), Payload: []byte(`{"n":1}`)}
		}
		if err := p.Insert(e.ctx, driver.InsertParams{Rows: rows}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "rows/s")
}

func benchClaimSettle(b *testing.B, rls bool, batch int) {
	e := newSecurityEnv(b, rls)
	// Both apps' backlogs in the one table, as a shared schema holds them.
	for _, typ := range []string{"a.x", "b.x"} {
		e.exec("INSERT INTO "+e.table("outbox")+" (type, key) SELECT $1, 'k' || g FROM generate_series(1, $2) g", typ, b.N*batch)
	}
	e.exec("VACUUM ANALYZE " + e.table("outbox"))
	r := e.as("a", postgres.RoleRelay)
	el, err := r.Elector("a", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	epoch, ok, err := el.Acquire(e.ctx)
	if err != nil || !ok {
		b.Fatalf("election: %v %v", ok, err)
	}
	b.Cleanup(func() { _ = el.Release(e.ctx) })
	b.ResetTimer()
	settled := 0
	for i := range b.N {
		jobs, err := r.Claim(e.ctx, driver.ClaimParams{Types: []string{"a.x"}, Limit: batch, Lease: time.Minute, Token: int64(i + 1), Fence: &driver.Fence{App: "a", Epoch: epoch}})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]int64, len(jobs))
		for k, j := range jobs {
			ids[k] = j.ID
		}
		res, err := r.Settle(e.ctx, driver.SettleParams{Token: int64(i + 1), Delivered: ids})
		if err != nil {
			b.Fatal(err)
		}
		settled += len(res.Settled)
	}
	if settled != b.N*batch {
		b.Fatalf("settled %d rows, want %d", settled, b.N*batch)
	}
	b.ReportMetric(float64(settled)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkRowLevelSecurityBackend measures the same claim and settle as
// BenchmarkRowLevelSecurity's claim-settle-10, by the server's own clock:
// each statement runs under EXPLAIN (ANALYZE, TIMING OFF, SUMMARY), and
// its planning and execution times are summed, so that neither the round
// trips nor a busy client's scheduling count. Reported per claim and per
// settle, in µs.
func BenchmarkRowLevelSecurityBackend(b *testing.B) {
	for _, rls := range []bool{false, true} {
		b.Run("rls="+map[bool]string{false: "off", true: "on"}[rls], func(b *testing.B) { benchBackend(b, rls) })
	}
}

var explainTime = regexp.MustCompile(`^(Planning|Execution) Time: ([0-9.]+) ms$`)

func benchBackend(b *testing.B, rls bool) {
	e := newSecurityEnv(b, rls)
	for _, typ := range []string{"a.x", "b.x"} {
		e.exec("INSERT INTO "+e.table("outbox")+" (type, key) SELECT $1, 'k' || g FROM generate_series(1, $2) g", typ, b.N*10)
	}
	e.exec("VACUUM ANALYZE " + e.table("outbox"))
	r := e.as("a", postgres.RoleRelay)
	claim, _ := r.Statement("claim")
	settle, _ := r.Statement("settle_delivered")
	conn, err := r.Pool().Acquire(e.ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	explain := func(tx pgx.Tx, q string, args ...any) float64 {
		rows, err := tx.Query(e.ctx, "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) "+q, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			b.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			b.Fatal(err)
		}
		ms := 0.0
		for _, l := range lines {
			if m := explainTime.FindStringSubmatch(l); m != nil {
				v, _ := strconv.ParseFloat(m[2], 64)
				ms += v
			}
		}
		return ms
	}
	var claimMS, settleMS float64
	b.ResetTimer()
	for i := range b.N {
		token := int64(i + 1)
		err := pgx.BeginFunc(e.ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, "SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_bitmapscan = off"); err != nil {
				return err
			}
			claimMS += explain(tx, claim, []string{"a.x"}, 10, token, time.Minute, []bool{false}, "", int64(0), []time.Time{time.Unix(0, 0)}, []int64{0})
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		rows, _ := conn.Query(e.ctx, "SELECT id FROM "+e.table("outbox")+" WHERE lease_token = $1", token)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) != 10 {
			b.Fatalf("claimed %d rows (%v)", len(ids), err)
		}
		err = pgx.BeginFunc(e.ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
				return err
			}
			settleMS += explain(tx, settle, ids, token, false)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(claimMS*1000/float64(b.N), "claim-µs")
	b.ReportMetric(settleMS*1000/float64(b.N), "settle-µs")
}
