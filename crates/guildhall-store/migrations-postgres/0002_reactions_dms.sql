-- Reactions: one row per (message, emoji, user).
CREATE TABLE reactions (
    message_id BIGINT NOT NULL,
    emoji TEXT NOT NULL,
    user_id BIGINT NOT NULL REFERENCES users(id),
    PRIMARY KEY (message_id, emoji, user_id)
);

-- Direct-message channels: channels with no guild, and who is in them.
CREATE TABLE dm_members (
    channel_id BIGINT NOT NULL REFERENCES channels(id),
    user_id BIGINT NOT NULL REFERENCES users(id),
    PRIMARY KEY (channel_id, user_id)
);
CREATE INDEX dm_members_by_user ON dm_members(user_id);
