-- Stores offset ?4 of consumer ?1 in partition ?3 of source ?2, in the
-- transaction of the effects it covers.
INSERT INTO {{p}}offsets (consumer, source, partition, "offset", updated_at)
VALUES (?1, ?2, ?3, ?4, {{now}})
ON CONFLICT (consumer, source, partition) DO UPDATE SET "offset" = excluded."offset", updated_at = excluded.updated_at;
