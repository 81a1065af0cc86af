-- A guild's audit log: who did what to which object, with the changes
-- and the moderator's reason. Kept for `audit_log_retention_ms` and at
-- most `audit_log_entries_max` entries per guild (older ones are
-- forgotten as new ones arrive).
CREATE TABLE audit_log (
    id BIGINT PRIMARY KEY,
    guild_id BIGINT NOT NULL REFERENCES guilds(id),
    user_id BIGINT NOT NULL,
    target_id BIGINT,
    action_type BIGINT NOT NULL,
    changes TEXT NOT NULL,
    options TEXT,
    reason TEXT
);
CREATE INDEX audit_log_by_guild ON audit_log(guild_id, id);
