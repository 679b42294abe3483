DELETE FROM {{schema}}.delivered_counts WHERE minute < now() - interval '1 day';
