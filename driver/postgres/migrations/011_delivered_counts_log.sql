-- mensageria schema, version 11: settles append their delivered counts to
-- a log, and maintenance folds the log into the per-minute counts.
-- {{schema}} is replaced by the configured schema name.
--
-- Up to version 10 every settle upserted its type's row for the current
-- minute in delivered_counts: one row that every settle of the minute
-- updates. Each update leaves a dead version behind, and the next one
-- reaches the live version by walking that chain; pruning and vacuum
-- shorten the chain only behind the xmin horizon. While a transaction pins
-- the horizon (a forgotten psql session, a long report, a lagging
-- replica), the chain grows by one version per settle for the whole
-- minute: with four sessions settling and the horizon pinned, a settle
-- went from 0.80 ms to 5.6 ms within 30 s, and in the stress scenario's
-- pinned phase the settle statement reached 34 ms a call
-- (docs/adr/0022-delivered-counts-log.md).
--
-- An insert has no version to look for: it costs the same whether the
-- horizon is pinned or not. So a settle inserts one row per type into
-- delivered_counts_log (queries/settle_delivered.sql, resolve.sql), and
-- the active relay's maintenance moves the log into delivered_counts once
-- per purge interval, one upsert per type and minute
-- (queries/purge_counts.sql). Readers add both (stats.sql,
-- delivered_minutes.sql).
--
-- delivered_counts keeps its primary key, so a relay of an earlier version
-- still running during the upgrade keeps settling into it (its statement
-- names that conflict target). The log has no key and no index: it holds
-- about one purge interval of settles, read whole by the fold and the
-- readers, and an index would be a second write on every settle.
CREATE TABLE {{schema}}.delivered_counts_log (
    type   text        NOT NULL,
    minute timestamptz NOT NULL,
    n      bigint      NOT NULL
);
