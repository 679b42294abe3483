package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// The mark commits synchronously even on a pool whose sessions ask for
// asynchronous commits (as the relay's own transactions do), and a
// stronger setting is kept. The setting in force inside the mark's
// transaction is read back through a trigger on the outbox, by the same
// statement's transaction.
func TestMarkCommitsSynchronously(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	for _, session := range []string{"off", "remote_apply"} {
		t.Run(session, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(testdb.URL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = session
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			d, err := New(pool, &Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				"CREATE TABLE IF NOT EXISTS " + schema + ".seen_sync (setting text)",
				"CREATE OR REPLACE FUNCTION " + schema + ".note_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " + schema + ".seen_sync VALUES (current_setting('synchronous_commit')); RETURN NEW; END $$",
				"DROP TRIGGER IF EXISTS note_sync ON " + schema + ".outbox",
				"CREATE TRIGGER note_sync AFTER UPDATE OF attempted_at ON " + schema + ".outbox FOR EACH ROW EXECUTE FUNCTION " + schema + ".note_sync()",
				"DELETE FROM " + schema + ".seen_sync",
			} {
				if _, err := pool.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			own(t, d, "mark-test", "m")
			if err := d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: [16]byte{1, byte(len(session))}, Type: "m", Key: "k", Payload: []byte(`{}`)}}}); err != nil {
				t.Fatal(err)
			}
			jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"m"}, Limit: 10, Lease: time.Minute, Token: 7})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v %v", jobs, err)
			}
			marked, err := d.Mark(ctx, driver.MarkParams{Token: 7, IDs: []int64{jobs[0].ID}})
			if err != nil || len(marked) != 1 {
				t.Fatalf("mark: %v %v", marked, err)
			}
			var seen string
			if err := pool.QueryRow(ctx, "SELECT setting FROM "+schema+".seen_sync").Scan(&seen); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"off": "on", "remote_apply": "remote_apply"}[session]
			if seen != want {
				t.Fatalf("the mark committed with synchronous_commit = %s on a %s session, want %s", seen, session, want)
			}
			_, _ = pool.Exec(ctx, "DELETE FROM "+schema+".outbox")
		})
	}
}
