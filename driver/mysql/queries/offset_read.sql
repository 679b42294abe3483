-- The position of (consumer, source, partition), NULL for none yet,
-- locked to the transaction of the effects it will cover.
SELECT `offset` FROM {{p}}offsets WHERE consumer = ? AND source = ? AND `partition` = ? FOR UPDATE;
