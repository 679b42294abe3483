-- A transfer to nobody: the entry (kind, name) that transfer_lock.sql
-- locked is deleted, and the next app to register it owns it.
DELETE FROM {{p}}owners WHERE kind = ? AND name = ?;
