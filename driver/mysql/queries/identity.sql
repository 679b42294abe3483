-- The outbox's identity, a UUID written once by the migration that made
-- the catalog: what tells two outboxes apart (a restored copy, another
-- database) to a receiver's dedup.
SELECT outbox_id FROM {{p}}identity WHERE one = 1;
