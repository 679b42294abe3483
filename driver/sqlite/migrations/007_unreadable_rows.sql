-- A row the relay can read, refused at INSERT otherwise; the pending rows
-- that already hold one are parked (docs/adr/0024-unreadable-rows.md).
--
-- SQLite stores what an INSERT gives whatever the column's type: a
-- message_id of 36 characters that is no UUID
-- ('order-0001-created-by-java-app-00001'), a created_at of 'yesterday' or
-- 1.5e15. One such row failed every claim of its app, for all of its
-- types, until someone deleted it by hand. The relay now reads each row
-- apart and parks such a row dead with its reason ("unreadable row:
-- message_id is not a UUID"); this trigger keeps new ones out, on every
-- INSERT, with a message that names the column. SQLite reports RAISE(ABORT)
-- as SQLITE_CONSTRAINT_TRIGGER (extended code 1811; Python's sqlite3
-- raises IntegrityError) and writes nothing of the statement.
--
-- The rules: message_id is a UUID in its 36-character text form (hex
-- digits of either case and four hyphens: what the Go client, a
-- randomblob default and every UUID library write); created_at and
-- available_at are integers of unix microseconds after year 1's first
-- instant and before year 10000 (RFC 3339's years, which every transport
-- writes created_at in; Go reads the first instant as "no time");
-- lease_until and attempted_at are NULL or such integers; attempts is an
-- integer from 0 to 1,000,000,000.
--
-- A trigger, not CHECK constraints: SQLite adds a CHECK only by copying
-- the table. It is a trigger of its own beside version 3's enqueue rules:
-- each refusal is complete, and a row that breaks rules of both gets one
-- of their messages.
CREATE TRIGGER {{p}}outbox_enqueue_readable BEFORE INSERT ON {{p}}outbox
BEGIN
    SELECT CASE
        WHEN NOT (typeof(NEW.message_id) = 'text' AND NEW.message_id GLOB '[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]') THEN
            RAISE(ABORT, 'mensageria: message_id must be a UUID (36 characters: 8-4-4-4-12 hex digits), or left to its default; nothing was enqueued')
        WHEN NOT (typeof(NEW.created_at) = 'integer' AND NEW.created_at > -62135596800000000 AND NEW.created_at < 253402300800000000) THEN
            RAISE(ABORT, 'mensageria: created_at must be an integer of unix microseconds in years 1 to 9999 (UTC), or left to its default; nothing was enqueued')
        WHEN NOT (typeof(NEW.available_at) = 'integer' AND NEW.available_at > -62135596800000000 AND NEW.available_at < 253402300800000000) THEN
            RAISE(ABORT, 'mensageria: available_at must be an integer of unix microseconds in years 1 to 9999 (UTC), or left to its default; nothing was enqueued')
        WHEN NOT (NEW.lease_until IS NULL OR (typeof(NEW.lease_until) = 'integer' AND NEW.lease_until > -62135596800000000 AND NEW.lease_until < 253402300800000000)) THEN
            RAISE(ABORT, 'mensageria: lease_until must be NULL (only a relay leases a row) or an integer of unix microseconds in years 1 to 9999; nothing was enqueued')
        WHEN NOT (NEW.attempted_at IS NULL OR (typeof(NEW.attempted_at) = 'integer' AND NEW.attempted_at > -62135596800000000 AND NEW.attempted_at < 253402300800000000)) THEN
            RAISE(ABORT, 'mensageria: attempted_at must be NULL (only a relay marks an attempt) or an integer of unix microseconds in years 1 to 9999; nothing was enqueued')
        WHEN NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 1000000000) THEN
            RAISE(ABORT, 'mensageria: attempts must be an integer from 0 to 1000000000, or left to its default 0; nothing was enqueued')
    END;
END;

-- The pending rows written before this version that break a rule are
-- parked dead now, with the relay's reason, so that no claim meets them.
-- A dead row keeps what it holds, for the operator to read and fix.
UPDATE {{p}}outbox
SET state = 'dead', lease_token = NULL, lease_until = NULL,
    last_error = 'unreadable row: ' || substr(
        CASE WHEN NOT (typeof(message_id) = 'text' AND message_id GLOB '[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]') THEN '; message_id is not a UUID (' || quote(message_id) || ')' ELSE '' END ||
        CASE WHEN NOT (typeof(created_at) = 'integer' AND created_at > -62135596800000000 AND created_at < 253402300800000000) THEN '; created_at is not unix microseconds in years 1 to 9999 (' || quote(created_at) || ')' ELSE '' END ||
        CASE WHEN NOT (typeof(available_at) = 'integer' AND available_at > -62135596800000000 AND available_at < 253402300800000000) THEN '; available_at is not unix microseconds in years 1 to 9999 (' || quote(available_at) || ')' ELSE '' END ||
        CASE WHEN NOT (attempted_at IS NULL OR (typeof(attempted_at) = 'integer' AND attempted_at > -62135596800000000 AND attempted_at < 253402300800000000)) THEN '; attempted_at is not unix microseconds in years 1 to 9999 (' || quote(attempted_at) || ')' ELSE '' END ||
        CASE WHEN NOT (typeof(attempts) = 'integer') THEN '; attempts is not an integer (' || quote(attempts) || ')' ELSE '' END,
        3) || '; parked by schema migration 7 (fix the row and run ''mensageria dead retry'', or discard it)'
WHERE state = 'pending' AND NOT (
    typeof(message_id) = 'text' AND message_id GLOB '[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]'
    AND typeof(created_at) = 'integer' AND created_at > -62135596800000000 AND created_at < 253402300800000000
    AND typeof(available_at) = 'integer' AND available_at > -62135596800000000 AND available_at < 253402300800000000
    AND (attempted_at IS NULL OR (typeof(attempted_at) = 'integer' AND attempted_at > -62135596800000000 AND attempted_at < 253402300800000000))
    AND typeof(attempts) = 'integer');
