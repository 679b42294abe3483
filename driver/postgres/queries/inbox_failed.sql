-- Records a failed application ($3 microseconds until it is due again),
-- through the protocol's function; returns the attempts so far.
SELECT {{schema}}.inbox_failed($1, $2, $3::bigint * interval '1 microsecond');
