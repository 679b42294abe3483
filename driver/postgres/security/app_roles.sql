-- Which database roles act for which app: the map that the row-level
-- security of row_level_security.sql reads (docs/security.md). Written by
-- the grants of each role (relay.sql, receive.sql, console.sql,
-- producer.sql); read by every role the policies confine, so that they can
-- evaluate them. A row names a role (a login role, or a group role its
-- login roles are members of), an app, or '*' for every app, and whether
-- the role may write that app's rows or only read them.
-- {{schema}} is replaced by the configured schema name.
CREATE TABLE IF NOT EXISTS {{schema}}.app_roles (
    role   text    NOT NULL CHECK (role <> ''),
    app    text    NOT NULL CHECK (app <> ''),
    writes boolean NOT NULL,
    PRIMARY KEY (role, app)
);
GRANT SELECT ON {{schema}}.app_roles TO PUBLIC;
