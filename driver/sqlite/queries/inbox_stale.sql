-- Whether a message enqueued at ?1 (unix microseconds) is older than the
-- consumer's window ?2 (microseconds) on the database clock: such a
-- message is refused as stale, since its dedup record may already have
-- been purged.
SELECT ?1 < {{now}} - ?2;
