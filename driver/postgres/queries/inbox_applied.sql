-- Marks a claimed row applied, in the app's transaction (see inbox_claim.sql).
SELECT {{schema}}.inbox_applied($1);
