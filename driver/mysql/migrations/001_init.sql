-- {{p}} is the table-name prefix (Config.Schema + "_"). Times are BIGINT
-- unix microseconds of the database clock (UTC_TIMESTAMP(6), whatever the
-- session's time_zone), so every replica compares leases against one clock.
--
-- Names a Go program compares byte for byte (types, keys, consumers, apps)
-- are VARBINARY: a collation would make 'Order' and 'order' one type, and
-- utf8mb4's four bytes a character would put the (type, key) index past
-- InnoDB's 3072-byte key limit. Lengths are bytes, as in the Go API.
--
-- MySQL commits each DDL statement on its own: a migration is not one
-- transaction. Migrate runs it under GET_LOCK, so two migrators never
-- interleave, and records the version only after its last statement; a
-- migration that failed halfway is re-run from the top by the next
-- Migrate, so each statement here may run again (IF NOT EXISTS).

-- A plain INSERT INTO {{p}}outbox (type, `key`, payload) VALUES (...) is a
-- complete enqueue: every other column has a default.
CREATE TABLE IF NOT EXISTS {{p}}outbox (
    -- AUTO_INCREMENT ids are never reused after a purge while the server
    -- runs; MariaDB and MySQL 8 keep the counter across restarts too.
    id           BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    -- A UUID when the caller gives none (UUID() is version 1); the library
    -- always gives a UUIDv7.
    message_id   CHAR(36)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT (UUID()),
    -- Wider than the rules (type 1-200 bytes, key 1-1000), so that the
    -- trigger of migration 2 refuses a longer value with its message
    -- instead of the server's "Data too long".
    type         VARBINARY(512)  NOT NULL,
    `key`        VARBINARY(2048) NOT NULL,
    payload      JSON          NOT NULL DEFAULT ('{}'),
    headers      JSON          NULL,
    state        VARCHAR(16)   CHARACTER SET ascii NOT NULL DEFAULT 'pending',
    attempts     BIGINT        NOT NULL DEFAULT 0,
    -- Next moment the row may be claimed. A claim moves it to the end of
    -- the lease, so one range scan finds rows that are both due and not
    -- leased.
    available_at BIGINT        NOT NULL DEFAULT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
    lease_token  BIGINT        NULL,
    lease_until  BIGINT        NULL,
    created_at   BIGINT        NOT NULL DEFAULT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
    delivered_at BIGINT        NULL,
    last_error   TEXT          NULL,
    -- Which app and destination gave last_error.
    last_route   TEXT          NULL,
    -- The at-most-once mark (docs/adr/0015-at-most-once-in-doubt.md).
    attempted_at BIGINT        NULL,
    CONSTRAINT {{p}}outbox_state CHECK (state IN ('pending', 'delivered', 'dead')),
    UNIQUE KEY {{p}}outbox_message (message_id),
    -- MySQL has no partial indexes: state leads each one instead, so the
    -- claim still scans one range of due pending rows per type.
    KEY {{p}}outbox_claim (state, type, available_at, id),
    -- The per-key order check: "is there an older unsettled row of this key?"
    KEY {{p}}outbox_key (type, `key`, state, id),
    KEY {{p}}outbox_delivered (state, type, delivered_at),
    KEY {{p}}outbox_doubt (state, attempted_at, type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{p}}inbox (
    consumer     VARBINARY(1000) NOT NULL,
    `key`        VARBINARY(1000) NOT NULL,
    message_id   CHAR(36)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    received_at  BIGINT        NOT NULL,
    -- A digest of the payload that applied the effect, so the same key
    -- with a different payload is told apart from a redelivery.
    payload_hash VARBINARY(64) NULL,
    PRIMARY KEY (consumer, `key`),
    KEY {{p}}inbox_consumer_received (consumer, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{p}}offsets (
    consumer    VARBINARY(1000) NOT NULL,
    source      VARBINARY(1000) NOT NULL,
    `partition` INT           NOT NULL,
    -- NULL until a position is stored: Offset inserts the row first, so
    -- that two first appliers of a partition meet on its key (a read of a
    -- missing row locks nothing at READ COMMITTED).
    `offset`    BIGINT        NULL,
    updated_at  BIGINT        NOT NULL,
    PRIMARY KEY (consumer, source, `partition`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One lease row per app: the relay election (docs/adr/0028-mysql-driver.md).
CREATE TABLE IF NOT EXISTS {{p}}leader (
    app        VARBINARY(200) NOT NULL PRIMARY KEY,
    holder     VARCHAR(300)   NOT NULL DEFAULT '',
    epoch      BIGINT         NOT NULL,
    since      BIGINT         NOT NULL,
    expires_at BIGINT         NOT NULL,
    health     TEXT           NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Delivered rows are deleted at settle unless kept for a retention period;
-- these per-minute counts keep "delivered in the last hour" either way.
CREATE TABLE IF NOT EXISTS {{p}}delivered_counts (
    type   VARBINARY(200) NOT NULL,
    minute BIGINT         NOT NULL,
    n      BIGINT         NOT NULL,
    PRIMARY KEY (type, minute)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The state of each route's flow control, as the active relay last
-- recorded it, for 'mensageria status'. Written on transitions only.
CREATE TABLE IF NOT EXISTS {{p}}route_state (
    type       VARBINARY(200)  NOT NULL PRIMARY KEY,
    app        VARBINARY(200)  NOT NULL,
    route      TEXT            NOT NULL,
    state      VARCHAR(16)     CHARACTER SET ascii NOT NULL,
    since      BIGINT          NOT NULL,
    `until`    BIGINT          NULL,
    failures   BIGINT          NOT NULL DEFAULT 0,
    last_error TEXT            NULL,
    updated_at BIGINT          NOT NULL,
    CONSTRAINT {{p}}route_state_state CHECK (state IN ('flowing', 'paused', 'probing'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The inbox queue: where `mensageria receive` lands deliveries an app in
-- any language applies by SQL (queries/inbox_*.sql; docs/mysql.md). A
-- claim locks its rows with FOR UPDATE SKIP LOCKED in the app's
-- transaction, so concurrent appliers take different rows.
CREATE TABLE IF NOT EXISTS {{p}}inbox_queue (
    id           BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer     VARBINARY(1000) NOT NULL,
    type         VARBINARY(200)  NOT NULL,
    `key`        VARBINARY(1000) NOT NULL,
    message_id   CHAR(36)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payload      JSON            NOT NULL,
    headers      JSON            NOT NULL,
    created_at   BIGINT          NOT NULL, -- the sender's enqueue time
    received_at  BIGINT          NOT NULL,
    state        VARCHAR(16)     CHARACTER SET ascii NOT NULL DEFAULT 'pending',
    attempts     INT             NOT NULL DEFAULT 0,
    available_at BIGINT          NOT NULL,
    applied_at   BIGINT          NULL,
    last_error   TEXT            NULL,
    CONSTRAINT {{p}}inbox_queue_state CHECK (state IN ('pending', 'applied', 'dead')),
    CONSTRAINT {{p}}inbox_queue_consumer CHECK (consumer <> ''),
    KEY {{p}}inbox_queue_claim (consumer, state, available_at, id),
    KEY {{p}}inbox_queue_applied (consumer, state, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every decision about a message in doubt, by whom, when and why: kept
-- after the outbox row is deleted.
CREATE TABLE IF NOT EXISTS {{p}}resolutions (
    id          BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    outbox_id   BIGINT          NOT NULL,
    message_id  CHAR(36)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    type        VARBINARY(200)  NOT NULL,
    `key`       VARBINARY(1000) NOT NULL,
    outcome     VARCHAR(16)     CHARACTER SET ascii NOT NULL,
    resolved_by TEXT            NOT NULL,
    reason      TEXT            NOT NULL,
    resolved_at BIGINT          NOT NULL,
    KEY {{p}}resolutions_message (message_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- An applied inbox queue row never changes again and a dead one only goes
-- back to pending, so no statement can apply a row twice.
DROP TRIGGER IF EXISTS {{p}}inbox_queue_guard;
DELIMITER //
CREATE TRIGGER {{p}}inbox_queue_guard BEFORE UPDATE ON {{p}}inbox_queue FOR EACH ROW
BEGIN
    IF OLD.state = 'applied' OR (OLD.state = 'dead' AND NEW.state <> 'pending') THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: inbox queue row is not pending: an applied row never changes and a dead one only goes back to pending; roll back';
    END IF;
END//
DELIMITER ;

-- A row the relay can read (docs/adr/0024-unreadable-rows.md): the columns
-- a plain INSERT may fill are held to what the driver reads, with a
-- message naming the column. SIGNAL writes nothing of the statement.
DROP TRIGGER IF EXISTS {{p}}outbox_enqueue_readable;
DELIMITER //
CREATE TRIGGER {{p}}outbox_enqueue_readable BEFORE INSERT ON {{p}}outbox FOR EACH ROW
BEGIN
    IF NOT (NEW.message_id REGEXP '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$') THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: message_id must be a UUID (36 characters: 8-4-4-4-12 hex digits), or left to its default; nothing was enqueued';
    ELSEIF NOT (NEW.created_at > -62135596800000000 AND NEW.created_at < 253402300800000000) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: created_at must be unix microseconds in years 1 to 9999 (UTC), or left to its default; nothing was enqueued';
    ELSEIF NOT (NEW.available_at > -62135596800000000 AND NEW.available_at < 253402300800000000) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: available_at must be unix microseconds in years 1 to 9999 (UTC), or left to its default; nothing was enqueued';
    ELSEIF NOT (NEW.lease_until IS NULL OR (NEW.lease_until > -62135596800000000 AND NEW.lease_until < 253402300800000000)) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: lease_until must be NULL (only a relay leases a row) or unix microseconds in years 1 to 9999; nothing was enqueued';
    ELSEIF NOT (NEW.attempted_at IS NULL OR (NEW.attempted_at > -62135596800000000 AND NEW.attempted_at < 253402300800000000)) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: attempted_at must be NULL (only a relay marks an attempt) or unix microseconds in years 1 to 9999; nothing was enqueued';
    ELSEIF NOT (NEW.attempts BETWEEN 0 AND 1000000000) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: attempts must be an integer from 0 to 1000000000, or left to its default 0; nothing was enqueued';
    END IF;
END//
DELIMITER ;
