-- The newest migration applied, 0 for none.
SELECT COALESCE(MAX(version), 0) FROM {{p}}migrations;
