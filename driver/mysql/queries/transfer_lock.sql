-- The entry (kind, name) a transfer moves: its app, window and since,
-- locked until the transfer commits, so that two operators' transfers
-- from one app cannot both win (a compare-and-set on the app).
SELECT app, dedup_window_us, since FROM {{p}}owners WHERE kind = ? AND name = ? FOR UPDATE;
