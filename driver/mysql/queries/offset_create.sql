-- Makes sure the position row of (consumer, source, partition) exists,
-- without a position the first time (updated at {{now}}). A read of a
-- missing row locks nothing at READ COMMITTED, so two first appliers
-- would both see "no position"; on the inserted key the second waits for
-- the first to end, then reads what it stored (offset_read.sql).
INSERT INTO {{p}}offsets (consumer, source, `partition`, `offset`, updated_at) VALUES (?, ?, ?, NULL, {{now}})
ON DUPLICATE KEY UPDATE consumer = consumer;
