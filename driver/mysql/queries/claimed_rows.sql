-- The rows of ids {{ids}}, in id order, as jobs ({{jobcols}}, read by
-- scanJobs in unreadable.go; its test of a row in doubt takes now, the
-- first argument): the rows a claim or a probe just leased, in the same
-- transaction. Primary-key lookups.
SELECT {{jobcols}} FROM {{p}}outbox
 WHERE id IN ({{ids}})
 ORDER BY id;
