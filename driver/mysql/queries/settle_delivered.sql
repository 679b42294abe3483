-- Delivered: the rows of ids {{ids}}, which settle_lock.sql locked in the
-- same transaction, go. They are counted per type and minute first
-- (delivered_count.sql), so Stats knows the recent deliveries without
-- the rows. Primary-key lookups.
DELETE FROM {{p}}outbox WHERE id IN ({{ids}});
