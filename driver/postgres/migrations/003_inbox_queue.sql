-- mensageria schema, version 3: the inbox queue, where `mensageria receive`
-- lands the deliveries an app in any language applies by SQL, and the
-- functions of that protocol (docs/config.md, "The inbox queue SQL
-- protocol"). {{schema}} is replaced by the configured schema name.
--
-- Only new objects: the statements of earlier versions are untouched, so
-- relays and receivers of the previous build go on while this applies.
--
-- Refusals raise SQLSTATE MS010 (class MS, as the outbox's MS001-MS004), so
-- that a JDBC or node-pg caller branches on the code: the row is not
-- pending, and the caller must roll back rather than commit its effect.

-- One row per accepted delivery, stored by the receiver in the transaction
-- that stores its dedup record in inbox: the record says "this key was
-- taken", the row carries the message to the app. A key comes once per
-- window, so there is no per-key ordering to keep between rows.
--
-- No lease columns: a claim is a row lock held by the app's own business
-- transaction (FOR UPDATE SKIP LOCKED), which ends with the transaction
-- whatever happens to the app, so a crashed applier needs no expiry.
CREATE TABLE {{schema}}.inbox_queue (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer     text        NOT NULL,
    type         text        NOT NULL,
    key          text        NOT NULL,
    message_id   uuid        NOT NULL,
    -- json, not jsonb: the document as the sender wrote it, as the outbox
    -- keeps it; the app parses it anyway.
    payload      json        NOT NULL,
    headers      json        NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL, -- the sender's enqueue time
    received_at  timestamptz NOT NULL DEFAULT now(),
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'applied', 'dead')),
    attempts     integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    applied_at   timestamptz,
    last_error   text
);

-- The claim: one consumer's due rows in order, pending ones only, so the
-- index stays as small as the backlog.
CREATE INDEX inbox_queue_claim_idx ON {{schema}}.inbox_queue (consumer, available_at, id) WHERE state = 'pending';
-- The purge: one consumer's oldest applied rows, as its records are purged.
CREATE INDEX inbox_queue_applied_idx ON {{schema}}.inbox_queue (consumer, received_at) WHERE state = 'applied';
-- The dead rows an operator or the app looks at, and their count.
CREATE INDEX inbox_queue_dead_idx ON {{schema}}.inbox_queue (consumer, id) WHERE state = 'dead';

-- An applied row never changes again, and a dead one only goes back to
-- pending: a hand-written UPDATE that would let a row be applied twice is
-- refused like the functions below refuse it. The WHEN clause keeps the
-- trigger off the path of pending rows, which is every claim's.
CREATE FUNCTION {{schema}}.inbox_queue_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'dead' AND NEW.state = 'pending' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'mensageria: inbox queue row % is %: an applied row never changes and a dead one only goes back to pending; roll back',
            OLD.id, OLD.state
        USING ERRCODE = 'MS010', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'state';
END
$$;

CREATE TRIGGER inbox_queue_guard BEFORE UPDATE ON {{schema}}.inbox_queue
    FOR EACH ROW WHEN (OLD.state <> 'pending') EXECUTE FUNCTION {{schema}}.inbox_queue_guard();

-- The functions run with the caller's rights (the app's role needs SELECT
-- and UPDATE on inbox_queue): a definer's rights would hand every role with
-- USAGE on the schema the power to mark rows applied. The fixed search_path
-- keeps a caller's own from resolving the functions they call.

-- Locks and returns up to n due pending rows of a consumer, oldest first,
-- skipping those another transaction holds: the caller's transaction owns
-- them until it ends, so its effect and inbox_applied commit together.
CREATE FUNCTION {{schema}}.inbox_claim(consumer text, n integer)
RETURNS SETOF {{schema}}.inbox_queue
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF n IS NULL OR n < 1 THEN
        RAISE EXCEPTION 'mensageria: inbox_claim: n must be at least 1, got %', coalesce(n::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT q.* FROM {{schema}}.inbox_queue q
        WHERE q.consumer = inbox_claim.consumer AND q.state = 'pending' AND q.available_at <= now()
        ORDER BY q.available_at, q.id
        LIMIT n
        FOR UPDATE SKIP LOCKED;
END
$$;

-- The three marks share one refusal: a row that is not pending was applied
-- or parked by another transaction (or never existed), and committing the
-- caller's effect would apply it a second time.
CREATE FUNCTION {{schema}}.inbox_refuse(row_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    st text;
BEGIN
    SELECT q.state INTO st FROM {{schema}}.inbox_queue q WHERE q.id = row_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'mensageria: inbox queue row % does not exist; roll back', row_id
            USING ERRCODE = 'MS010';
    END IF;
    RAISE EXCEPTION 'mensageria: inbox queue row % is %, not pending (another transaction applied or parked it); roll back', row_id, st
        USING ERRCODE = 'MS010';
END
$$;

CREATE FUNCTION {{schema}}.inbox_applied(id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.inbox_queue q SET state = 'applied', applied_at = now()
    WHERE q.id = inbox_applied.id AND q.state = 'pending';
    IF NOT FOUND THEN
        PERFORM {{schema}}.inbox_refuse(inbox_applied.id);
    END IF;
END
$$;

-- Returns the attempts recorded so far, so the app can decide when to stop
-- retrying (inbox_dead) without another query.
CREATE FUNCTION {{schema}}.inbox_failed(id bigint, error text, retry_after interval) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
BEGIN
    IF retry_after < interval '0' THEN
        RAISE EXCEPTION 'mensageria: inbox_failed: retry_after must not be negative, got %', retry_after
            USING ERRCODE = '22023';
    END IF;
    UPDATE {{schema}}.inbox_queue q
    SET attempts = q.attempts + 1, last_error = inbox_failed.error,
        available_at = now() + coalesce(inbox_failed.retry_after, interval '0')
    WHERE q.id = inbox_failed.id AND q.state = 'pending'
    RETURNING q.attempts INTO n;
    IF NOT FOUND THEN
        PERFORM {{schema}}.inbox_refuse(inbox_failed.id);
    END IF;
    RETURN n;
END
$$;

CREATE FUNCTION {{schema}}.inbox_dead(id bigint, error text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.inbox_queue q SET state = 'dead', attempts = q.attempts + 1, last_error = inbox_dead.error
    WHERE q.id = inbox_dead.id AND q.state = 'pending';
    IF NOT FOUND THEN
        PERFORM {{schema}}.inbox_refuse(inbox_dead.id);
    END IF;
END
$$;
