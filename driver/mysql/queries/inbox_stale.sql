-- Whether a message enqueued at the first argument (unix microseconds) is
-- older than the consumer's window, the second (microseconds), on the
-- database clock {{now}}: such a message is refused as stale, since its
-- dedup record may already have been purged.
SELECT ? < {{now}} - ?;
