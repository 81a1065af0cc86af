-- Invites as Discord documents them: an age after which they expire
-- (max_age_s, 0 = never; expires_ms is created_ms + max_age_s * 1000, NULL
-- when never, so expiry is one indexed comparison), temporary membership,
-- and a voice channel invite's target (1 = a user's stream, 2 = an embedded
-- application). Rows from before default to what they did: never expire,
-- not temporary, no target.
ALTER TABLE invites ADD COLUMN max_age_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE invites ADD COLUMN expires_ms INTEGER;
ALTER TABLE invites ADD COLUMN temporary INTEGER NOT NULL DEFAULT 0;
ALTER TABLE invites ADD COLUMN target_type INTEGER;
ALTER TABLE invites ADD COLUMN target_user_id INTEGER;
ALTER TABLE invites ADD COLUMN target_application_id INTEGER;
-- A guild's and a channel's invites are listed, counted against the
-- per-guild cap and looked up for reuse.
CREATE INDEX invites_by_guild ON invites(guild_id, created_ms);
CREATE INDEX invites_by_channel ON invites(channel_id, inviter_id);
