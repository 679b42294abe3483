-- The rows in doubt of the types {{types}} a reconcile probe may lease:
-- marked, not under a live lease since ? (now minus the quiet period, so
-- that a request a dead relay left on the way has arrived), and due for a
-- probe at {{now}} (available_at, pushed back after a probe without an
-- answer); at most ? of them, oldest first, locked (skipping those another
-- probe holds) until the lease is written (claim_in_doubt_lease.sql).
-- The outbox_doubt index (state, attempted_at, type, id) holds the marked
-- pending rows apart from the unmarked ones.
SELECT id FROM {{p}}outbox
 WHERE state = 'pending' AND attempted_at IS NOT NULL
   AND type IN ({{types}})
   AND (lease_until IS NULL OR lease_until <= ?)
   AND available_at <= {{now}}
 ORDER BY id LIMIT ?
   FOR UPDATE SKIP LOCKED;
