-- A guild's bans: who may not join it again (by invite or by being
-- added), with the moderator's reason.
CREATE TABLE bans (
    guild_id INTEGER NOT NULL REFERENCES guilds(id),
    user_id INTEGER NOT NULL,
    reason TEXT,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (guild_id, user_id)
);

-- A ban with delete_message_seconds finds the user's recent messages in
-- the guild without a scan of its channels.
CREATE INDEX messages_by_guild_author ON messages(guild_id, author_id, id);
