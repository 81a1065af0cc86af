-- Each guild's member count, kept in the same transaction as every join
-- and leave, so an invite preview reads one row instead of counting (or
-- loading) the members: its cost does not grow with the guild.
ALTER TABLE guilds ADD COLUMN member_count BIGINT NOT NULL DEFAULT 0;
UPDATE guilds SET member_count = (SELECT COUNT(*) FROM members WHERE members.guild_id = guilds.id);
