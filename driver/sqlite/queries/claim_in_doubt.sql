-- Leases up to ?5 rows in doubt of the types in the JSON array ?4 to token
-- ?2 until ?3, for a reconcile probe, without counting an attempt: marked,
-- whose lease ended at ?6 or before (now minus the quiet period, so that a
-- request a dead relay left on the way has arrived), and due for a probe
-- (available_at, pushed back after a probe without an answer). ?1 is now.
-- SQLite plans it on each type's range of outbox_claim (type,
-- available_at), not on outbox_doubt, which holds marked rows only
-- (TestRelayStatementsKeepToTheirIndexes pins the plan). RETURNING
-- gives the job columns ({{jobcols}}, read by unreadable.go).
UPDATE {{p}}outbox SET lease_token = ?2, lease_until = ?3
 WHERE id IN (SELECT id FROM {{p}}outbox
               WHERE state = 'pending' AND attempted_at IS NOT NULL
                 AND type IN (SELECT value FROM json_each(?4))
                 AND (lease_until IS NULL OR lease_until <= ?6)
                 AND available_at <= ?1
               ORDER BY id LIMIT ?5)
RETURNING {{jobcols}};
