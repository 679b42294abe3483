-- The schema's version: the last migration the version table records
-- (every migration's SQL ends with its row, MigrationSQL).
SELECT coalesce(max(version), 0) FROM {{p}}migrations;
