-- Deletes the per-minute delivered counts of the types {{types}} older
-- than the last argument (a day ago): the console charts the last hour.
DELETE FROM {{p}}delivered_counts WHERE type IN ({{types}}) AND minute < ?;
