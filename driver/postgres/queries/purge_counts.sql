-- The per-minute counts behind "delivered in the last hour" of the app's
-- types ($1), kept a day.
DELETE FROM {{schema}}.delivered_counts WHERE type = ANY($1::text[]) AND minute < now() - interval '1 day';
