-- Delivered rows are deleted at settle unless the relay keeps them for a
-- retention period; these per-minute counts keep "delivered in the last
-- hour" for Stats either way. minute is unix microseconds at the start of
-- the minute. Purge drops counts older than a day.
CREATE TABLE {{p}}delivered_counts (
    type   TEXT    NOT NULL,
    minute INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (type, minute)
) WITHOUT ROWID;
