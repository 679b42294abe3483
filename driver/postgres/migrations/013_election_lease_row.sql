-- mensageria schema, version 13: the relay election is a lease row, no
-- longer a session advisory lock (docs/adr/0025-election-lease-row.md).
-- {{schema}} is replaced by the configured schema name.
--
-- Up to version 12 a relay led while its session held
-- pg_try_advisory_lock(key), the key a hash of the schema and the app: of
-- public names, so any role that could connect, with no grant at all,
-- could take the lock first (SELECT pg_advisory_lock(key)) and stand every
-- relay of the app by, for as long as its session lasted. Advisory locks
-- have no privileges. Now a relay leads while the app's leader row names
-- it and its lease (expires_at, on the database clock) runs: taking it
-- over, renewing it and giving it up are UPDATEs of this table, which only
-- a role granted them can make. The epoch is bumped by every takeover, as
-- before, and every claim is still fenced by it.
--
-- A row left by an earlier version gets a lease that ran out when this
-- migration ran: the first relay of this version takes it over, bumping
-- the epoch, which fences any relay of the old version still running (its
-- claims find the epoch moved). An old relay refuses to start on this
-- schema (it is ahead of its build); stop them all before the first new
-- one starts (docs/adr/0025-election-lease-row.md).
ALTER TABLE {{schema}}.leader ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now();

-- What the leader said of its own health at its last renewal ('' while it
-- is ready): 'mensageria status' shows it, since the relay's /readyz is
-- not the operator's only window.
ALTER TABLE {{schema}}.leader ADD COLUMN health text NOT NULL DEFAULT '';

COMMENT ON COLUMN {{schema}}.leader.holder IS 'relay host/pid/id holding the lease; empty once released';
COMMENT ON COLUMN {{schema}}.leader.expires_at IS 'the lease runs out then (database clock); a takeover is allowed from then on';
