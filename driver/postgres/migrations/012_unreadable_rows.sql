-- mensageria schema, version 12: the outbox refuses, at INSERT, the times
-- a relay cannot read or no transport can carry, and parks the pending
-- rows that already hold one (docs/adr/0024-unreadable-rows.md).
-- {{schema}} is replaced by the configured schema name.
--
-- A timestamptz holds 'infinity', '-infinity' and years from 4713 BC to
-- 294276 AD. A Go time.Time holds no infinity, and RFC 3339, which every
-- transport writes created_at in, holds years 1 to 9999 only. One pending
-- row with created_at = '-infinity' failed its whole claim batch on every
-- claim, and stats with it (now() - 'infinity' is SQLSTATE 22008). The
-- relay now reads each row's times apart and parks such a row dead with
-- its reason ("unreadable row: created_at is infinity"); these constraints
-- keep new ones out: a plain INSERT of such a time fails with SQLSTATE
-- 23514 (check_violation) and the constraint's name, which names the
-- column (README.md, "Enqueue from any language").
--
-- The bounds are open at year 1's first instant, which Go reads as "no
-- time" (every transport then leaves created_at out), and end before year
-- 10000. A NULL where the column allows one passes (lease_until,
-- attempted_at of a row never leased or marked).
--
-- Only pending rows are held to them: a row a relay parks dead for what it
-- holds must be able to become dead (an UPDATE checks every constraint,
-- NOT VALID ones too), and a dead or kept delivered row is read by
-- operators only, whose listing reads each time apart as the claim does.
-- 'mensageria dead retry' of such a row is refused by the same constraint,
-- naming the column: fix the row first.
--
-- NOT VALID: adding them reads no existing row, so the table is locked for
-- an instant whatever its size, and an old row never fails the upgrade.
-- The pending rows that hold such a time are parked dead just below, in
-- this transaction, so that no pending row breaks a constraint and no
-- claim's UPDATE of one fails.
ALTER TABLE {{schema}}.outbox
    ADD CONSTRAINT outbox_created_at_readable CHECK (state <> 'pending' OR
        (created_at > '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')) NOT VALID,
    ADD CONSTRAINT outbox_available_at_readable CHECK (state <> 'pending' OR
        (available_at > '0001-01-01 00:00:00+00' AND available_at < '10000-01-01 00:00:00+00')) NOT VALID,
    ADD CONSTRAINT outbox_lease_until_readable CHECK (state <> 'pending' OR lease_until IS NULL OR
        (lease_until > '0001-01-01 00:00:00+00' AND lease_until < '10000-01-01 00:00:00+00')) NOT VALID,
    ADD CONSTRAINT outbox_attempted_at_readable CHECK (state <> 'pending' OR attempted_at IS NULL OR
        (attempted_at > '0001-01-01 00:00:00+00' AND attempted_at < '10000-01-01 00:00:00+00')) NOT VALID;

-- The reason is the relay's: "unreadable row: <column> is <value>", each
-- column that breaks its constraint, and who parked the row.
UPDATE {{schema}}.outbox o
SET state = 'dead', lease_token = NULL, lease_until = NULL,
    last_error = 'unreadable row: ' || concat_ws('; ',
        CASE WHEN NOT (o.created_at > '0001-01-01 00:00:00+00' AND o.created_at < '10000-01-01 00:00:00+00')
             THEN 'created_at is ' || CASE WHEN isfinite(o.created_at) THEN 'out of range (' || o.created_at::text || ')' ELSE o.created_at::text END END,
        CASE WHEN NOT (o.available_at > '0001-01-01 00:00:00+00' AND o.available_at < '10000-01-01 00:00:00+00')
             THEN 'available_at is ' || CASE WHEN isfinite(o.available_at) THEN 'out of range (' || o.available_at::text || ')' ELSE o.available_at::text END END,
        CASE WHEN NOT (o.lease_until > '0001-01-01 00:00:00+00' AND o.lease_until < '10000-01-01 00:00:00+00')
             THEN 'lease_until is ' || CASE WHEN isfinite(o.lease_until) THEN 'out of range (' || o.lease_until::text || ')' ELSE o.lease_until::text END END,
        CASE WHEN NOT (o.attempted_at > '0001-01-01 00:00:00+00' AND o.attempted_at < '10000-01-01 00:00:00+00')
             THEN 'attempted_at is ' || CASE WHEN isfinite(o.attempted_at) THEN 'out of range (' || o.attempted_at::text || ')' ELSE o.attempted_at::text END END)
        || '; parked by schema migration 12 (fix the row and run ''mensageria dead retry'', or discard it)'
WHERE o.state = 'pending'
  AND NOT (o.created_at > '0001-01-01 00:00:00+00' AND o.created_at < '10000-01-01 00:00:00+00'
       AND o.available_at > '0001-01-01 00:00:00+00' AND o.available_at < '10000-01-01 00:00:00+00'
       AND (o.lease_until IS NULL OR (o.lease_until > '0001-01-01 00:00:00+00' AND o.lease_until < '10000-01-01 00:00:00+00'))
       AND (o.attempted_at IS NULL OR (o.attempted_at > '0001-01-01 00:00:00+00' AND o.attempted_at < '10000-01-01 00:00:00+00')));
