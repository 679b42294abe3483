package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// queueEnv is a migrated schema whose inbox queue holds other consumers'
// rows by the tens of thousands, and a few thousand of app a's.
func queueEnv(t *testing.T) (*Driver, context.Context) {
	t.Helper()
	ctx, pool, d := migratedDriver(t)
	var rs []driver.Resource
	for i := range 5 {
		rs = append(rs, driver.Resource{Kind: driver.ResourceConsumer, Name: fmt.Sprintf("mine.%d", i), Window: time.Hour})
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: rs}); err != nil {
		t.Fatal(err)
	}
	fill := func(consumer string, n int, state string) {
		exec(t, pool, "INSERT INTO "+d.table("inbox_queue")+` (consumer, type, key, message_id, payload, created_at, received_at, state, available_at)
			SELECT `+consumer+`, 't', 'k' || g, gen_random_uuid(), '{}', now(), now() - g * interval '1 second', '`+state+`', now() - g * interval '1 second'
			FROM generate_series(1, `+fmt.Sprint(n)+`) g`)
	}
	// As a queue looks: a window of applied rows, a small backlog.
	fill("'theirs.' || (g % 20)", 30000, "applied")
	fill("'theirs.' || (g % 20)", 1000, "pending")
	fill("'theirs.' || (g % 20)", 100, "dead")
	fill("'mine.' || (g % 5)", 2000, "applied")
	fill("'mine.' || (g % 5)", 500, "pending")
	return d, ctx
}

// The purge of applied rows seeks each of the app's consumers on
// inbox_queue_applied_idx and deletes what it found by id: a scan of the
// queue, or a walk of everyone's applied rows, would grow with the other
// apps' rows.
func TestPurgeInboxQueuePlanSeeksEachConsumer(t *testing.T) {
	d, _ := queueEnv(t)
	for _, state := range []string{"never analyzed", "analyzed"} {
		scans := planScans(t, d.pool, d.q.purgeInboxQueue, "a", 1000)
		seeks := 0
		for _, s := range scans {
			if s.index == "inbox_queue_applied_idx" {
				seeks++
			}
		}
		if bad := badScans(scans, "inbox_queue", "inbox_queue_applied_idx", "inbox_queue_pkey"); len(bad) > 0 || seeks != 1 {
			t.Errorf("%s: the purge reads the queue with %v; want one seek on inbox_queue_applied_idx and the rows deleted by id; scans %v", state, bad, scans)
		}
		exec(t, d.pool, "ANALYZE "+d.table("inbox_queue"))
	}
}

// The claim inside inbox_claim walks the consumer's part of the claim
// index; the plan of the statement inside the function is read back with
// auto_explain, on this session only, as notices.
func TestInboxClaimPlanUsesTheClaimIndex(t *testing.T) {
	d, ctx := queueEnv(t)
	cfg := d.pool.Config().ConnConfig.Copy()
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		testdb.Unavailable(t, "auto_explain (PostgreSQL's contrib module)", err)
	}
	for _, set := range []string{"auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on", "auto_explain.log_level = notice", "auto_explain.log_format = json"} {
		if _, err := conn.Exec(ctx, "SET "+set); err != nil {
			t.Fatal(err)
		}
	}
	for _, state := range []string{"never analyzed", "analyzed"} {
		mu.Lock()
		plans = nil
		mu.Unlock()
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, d.q.inboxClaim, "mine.3", 100)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		var inner []scan
		for _, p := range plans {
			_, js, ok := strings.Cut(p, "plan:")
			if !ok || !strings.Contains(p, "inbox_queue q") {
				continue
			}
			var tree map[string]any
			if err := json.Unmarshal([]byte(js), &tree); err != nil {
				t.Fatalf("plan %s: %v", js, err)
			}
			walk(tree["Plan"], func(node map[string]any) {
				if rel, idx := str(node["Relation Name"]), str(node["Index Name"]); rel != "" || idx != "" {
					inner = append(inner, scan{str(node["Node Type"]), rel, idx})
				}
			})
		}
		mu.Unlock()
		if len(inner) == 0 {
			t.Fatalf("%s: no plan of the claim inside inbox_claim was logged", state)
		}
		if bad := badScans(inner, "inbox_queue", "inbox_queue_claim_idx"); len(bad) > 0 {
			t.Errorf("%s: the claim reads the queue with %v; want the claim index; scans %v", state, bad, inner)
		}
		exec(t, d.pool, "ANALYZE "+d.table("inbox_queue"))
	}
}

// The statistics behind /metrics read the pending and dead rows through
// their partial indexes, never the applied rows that fill the table.
func TestInboxQueueStatsPlanSkipsTheAppliedRows(t *testing.T) {
	d, _ := queueEnv(t)
	for _, state := range []string{"never analyzed", "analyzed"} {
		scans := planScans(t, d.pool, d.q.inboxQueueStats)
		if bad := badScans(scans, "inbox_queue", "inbox_queue_claim_idx", "inbox_queue_dead_idx", "inbox_queue_pkey"); len(bad) > 0 {
			t.Errorf("%s: the statistics read the queue with %v; scans %v", state, bad, scans)
		}
		exec(t, d.pool, "ANALYZE "+d.table("inbox_queue"))
	}
}
