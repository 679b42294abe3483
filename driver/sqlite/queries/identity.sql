-- The outbox's identity, a UUID made by the first migration: it tells
-- outboxes apart in every message's headers.
SELECT outbox_id FROM {{p}}identity WHERE one = 1;
