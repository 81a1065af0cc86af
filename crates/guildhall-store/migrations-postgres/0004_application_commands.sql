-- Application commands: one row per command, global (guild_id 0) or of one
-- guild. Names are unique per application, scope and type, as Discord's
-- are; `spec` is the validated command (guildhall_proto::commands) as JSON,
-- so what a bot registered is echoed exactly (TEXT, not JSONB, which would
-- reorder keys and drop duplicates).
CREATE TABLE application_commands (
    id BIGINT PRIMARY KEY,
    application_id BIGINT NOT NULL REFERENCES applications(id),
    guild_id BIGINT NOT NULL,
    kind BIGINT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    version BIGINT NOT NULL
);
CREATE UNIQUE INDEX application_commands_by_name
    ON application_commands(application_id, guild_id, kind, name);
