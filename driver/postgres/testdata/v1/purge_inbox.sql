DELETE FROM {{schema}}.inbox WHERE (consumer, key) IN (
    SELECT consumer, key FROM {{schema}}.inbox
    WHERE received_at < now() - $1::interval
    ORDER BY received_at LIMIT $2);
