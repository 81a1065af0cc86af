-- Threads (types 10, 11 and 12) are channel rows, so messages, reactions
-- and pins name them as they name any channel; parent_id is the channel
-- a thread was started in, owner_id who started it. A thread's metadata
-- (archived, locked, invitable, its auto-archive minutes and the times it
-- was archived and created) and its counts live beside it; rows of other
-- channels leave them at their defaults.
ALTER TABLE channels ADD COLUMN owner_id INTEGER;
ALTER TABLE channels ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN locked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN invitable INTEGER NOT NULL DEFAULT 1;
ALTER TABLE channels ADD COLUMN auto_archive_duration INTEGER;
ALTER TABLE channels ADD COLUMN archive_ms INTEGER;
ALTER TABLE channels ADD COLUMN thread_created_ms INTEGER;
ALTER TABLE channels ADD COLUMN member_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN total_message_sent INTEGER NOT NULL DEFAULT 0;
CREATE INDEX channels_by_parent ON channels (parent_id);
-- Who is in a thread: Discord tracks membership explicitly (a private
-- thread is seen by its members and moderators only).
CREATE TABLE thread_members (
    thread_id INTEGER NOT NULL REFERENCES channels (id),
    user_id INTEGER NOT NULL REFERENCES users (id),
    guild_id INTEGER NOT NULL REFERENCES guilds (id),
    join_ms INTEGER NOT NULL,
    flags INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, user_id)
);
CREATE INDEX thread_members_by_user ON thread_members (guild_id, user_id);
