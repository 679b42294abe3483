package postgres_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// A plain SQL enqueue that leaves message_id to its default gets what the Go
// client would give it: a version-7 UUID of the RFC 4122 variant whose first
// 48 bits are the database's clock in milliseconds, so ids sort by enqueue
// time across both kinds of producer. Schema version 9 rewrote the default's
// function in PL/pgSQL (so that planning an INSERT stops parsing it); this
// holds the value to what version 1 made.
func TestPlainInsertGetsAVersion7MessageID(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("app", "t")
	var before, after time.Time
	if err := e.pool.QueryRow(e.ctx, "SELECT clock_timestamp()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('t', 'k')")
		time.Sleep(2 * time.Millisecond) // ids a millisecond or more apart must sort in time order
	}
	if err := e.pool.QueryRow(e.ctx, "SELECT clock_timestamp()").Scan(&after); err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(e.ctx, "SELECT message_id FROM "+e.table("outbox")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev uuid.UUID
	n := 0
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("message_id %s: version %d, variant %v; want 7, RFC 4122", id, id.Version(), id.Variant())
		}
		sec, nsec := id.Time().UnixTime()
		at := time.Unix(sec, nsec)
		if at.Before(before.Truncate(time.Millisecond)) || at.After(after) {
			t.Fatalf("message_id %s carries %v, outside the inserts' %v..%v", id, at, before, after)
		}
		if n > 0 && id.String() <= prev.String() {
			t.Fatalf("message_id %s after %s: ids of inserts 2 ms apart must ascend", id, prev)
		}
		prev = id
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d rows, want 20", n)
	}
	var lang string
	if err := e.pool.QueryRow(e.ctx, "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = ($1 || '.uuid_v7')::regproc", e.schema).Scan(&lang); err != nil {
		t.Fatal(err)
	}
	if lang != "plpgsql" {
		t.Fatalf("uuid_v7 is in %s; version 9 made it PL/pgSQL so that no INSERT's plan inlines (and parses) it", lang)
	}
}
