-- Delivered, kept for the delivered retention (purge_outbox.sql deletes
-- them later): the rows of ids {{ids}} that settle_lock.sql locked are
-- marked delivered at now (the first argument) and their lease given up.
UPDATE {{p}}outbox
   SET state = 'delivered', delivered_at = ?, lease_token = NULL, lease_until = NULL
 WHERE id IN ({{ids}});
