-- The ownership catalog, and an outbox that a plain INSERT from any client
-- can use and cannot misuse.

-- Who owns what. A type's owner is the only app that may enqueue it and the
-- only one whose relay claims it; a consumer's owner purges its inbox
-- records after dedup_window_us; the 'migrations' row (name 'schema') names
-- the one app allowed to migrate the schema up.
CREATE TABLE IF NOT EXISTS {{p}}owners (
    kind            VARCHAR(32)     CHARACTER SET ascii NOT NULL,
    name            VARBINARY(1000) NOT NULL,
    -- NULL is "unclaimed": a type this upgrade found in use, which its old
    -- producers may keep enqueueing until the first app to register it
    -- takes it over.
    app             VARBINARY(200)  NULL,
    -- NULL keeps a consumer's records forever.
    dedup_window_us BIGINT          NULL,
    since           BIGINT          NOT NULL DEFAULT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
    PRIMARY KEY (kind, name),
    KEY {{p}}owners_app (app, kind),
    CONSTRAINT {{p}}owners_kind CHECK (kind IN ('type', 'consumer', 'kafka_transactional_id', 'migrations')),
    CONSTRAINT {{p}}owners_name CHECK (name <> ''),
    CONSTRAINT {{p}}owners_app_name CHECK (app IS NULL OR app <> ''),
    CONSTRAINT {{p}}owners_window CHECK (dedup_window_us IS NULL OR dedup_window_us > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The outbox's identity, made here once per database: records kept outside
-- it (a Kafka transactional position) name the outbox they belong to.
CREATE TABLE IF NOT EXISTS {{p}}identity (
    one        INT      NOT NULL PRIMARY KEY,
    outbox_id  CHAR(36) CHARACTER SET ascii NOT NULL,
    created_at BIGINT   NOT NULL,
    CONSTRAINT {{p}}identity_one CHECK (one = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
-- A version 4 UUID from RANDOM_BYTES-free parts (MariaDB 10.6 lacks
-- RANDOM_BYTES): random at apply time, so one printed script applied to
-- two databases still gives two identities.
INSERT IGNORE INTO {{p}}identity (one, outbox_id, created_at)
SELECT 1, CONCAT(SUBSTR(h, 1, 8), '-', SUBSTR(h, 9, 4), '-4', SUBSTR(h, 14, 3), '-',
                 SUBSTR('89ab', 1 + FLOOR(RAND() * 4), 1), SUBSTR(h, 18, 3), '-', SUBSTR(h, 21, 12)),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
  FROM (SELECT LOWER(SHA2(CONCAT(UUID(), RAND(), RAND()), 256)) AS h) r;

-- The upgrade of a populated outbox must not strand anything: every type
-- already in use is recorded unclaimed, so its producers keep enqueueing
-- it, and its rows stay pending until the app that owns it registers.
INSERT IGNORE INTO {{p}}owners (kind, name, app)
    SELECT 'type', type, NULL FROM {{p}}outbox
    UNION
    SELECT 'type', type, NULL FROM {{p}}delivered_counts;

-- The rules a column type cannot state: the Go API's shape rules, for
-- every client, and an owner in the catalog. Each refusal is SIGNAL
-- SQLSTATE '45000' (error 1644) with a message starting "mensageria: ";
-- the driver turns the owner rule's into *driver.UnownedTypeError and the
-- others into *RefusedError.
DROP TRIGGER IF EXISTS {{p}}outbox_enqueue_rules;
DELIMITER //
CREATE TRIGGER {{p}}outbox_enqueue_rules BEFORE INSERT ON {{p}}outbox FOR EACH ROW
BEGIN
    IF NEW.type = '' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the message type is empty; give the type the receiving app routes';
    ELSEIF LENGTH(NEW.type) > 200 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the message type is longer than 200 bytes; use a shorter type name';
    ELSEIF LOCATE(X'00', NEW.type) > 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the message type contains a NUL character; remove it';
    ELSEIF NEW.`key` = '' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the key is empty; give every message its natural key (at most 1000 bytes)';
    ELSEIF LENGTH(NEW.`key`) > 1000 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the key is longer than 1000 bytes of UTF-8; use a shorter natural key, such as an id';
    ELSEIF LOCATE(X'00', NEW.`key`) > 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the key contains a NUL character; remove it';
    ELSEIF NOT EXISTS (SELECT 1 FROM {{p}}owners WHERE kind = 'type' AND name = NEW.type) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the message type has no owner app in the catalog, so no relay would ever deliver it; nothing was enqueued (the app that sends it records it when its relay starts, or run ''mensageria owners register'')';
    ELSEIF NOT JSON_VALID(NEW.payload) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the payload is not a valid JSON document; give JSON text (omit it for {})';
    ELSEIF NEW.headers IS NULL THEN
        SET NEW.headers = NULL;
    ELSEIF NOT JSON_VALID(NEW.headers) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the headers are not valid JSON; give NULL or a JSON object of strings, such as {"x-request-id":"r1"}';
    ELSEIF JSON_TYPE(NEW.headers) <> 'OBJECT' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: the headers are not a JSON object; give NULL or a JSON object of strings, such as {"x-request-id":"r1"}';
    ELSEIF JSON_CONTAINS_PATH(NEW.headers, 'one', '$.""')
        OR EXISTS (SELECT 1 FROM JSON_TABLE(NEW.headers, '$.*' COLUMNS (v JSON PATH '$')) h WHERE JSON_TYPE(h.v) <> 'STRING') THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'mensageria: every header needs a non-empty name and a string value (numbers, booleans, null and objects would be dropped on the wire); quote the value';
    END IF;
END//
DELIMITER ;
