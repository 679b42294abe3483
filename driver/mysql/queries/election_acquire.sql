-- The app's lease row, locked for one election round (elect.go): created
-- unheld the first time (epoch 0, lapsed), so that two first candidates
-- meet on one row instead of both inserting.
INSERT INTO {{p}}leader (app, holder, epoch, since, expires_at) VALUES (?, '', 0, {{now}}, {{now}})
ON DUPLICATE KEY UPDATE app = app;
