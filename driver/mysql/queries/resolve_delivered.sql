-- An operator's "delivered" for a row in doubt (doubt_rows.sql, same
-- transaction): the row goes, as a settled delivery does; it is counted
-- in delivered_counts and the decision recorded (resolve_record.sql).
DELETE FROM {{p}}outbox WHERE id = ?;
