-- Incoming webhooks: one row per webhook, in one channel of one guild.
-- The token is kept as it was issued, not as a digest (unlike account
-- tokens): Discord shows a webhook's token again to anyone with
-- MANAGE_WEBHOOKS (GET /channels/{id}/webhooks), so it must be readable.
-- `avatar` is the avatar hash (the image itself is not kept: no CDN).
CREATE TABLE webhooks (
    id BIGINT PRIMARY KEY,
    guild_id BIGINT NOT NULL REFERENCES guilds(id),
    channel_id BIGINT NOT NULL REFERENCES channels(id),
    creator_id BIGINT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    avatar TEXT,
    token TEXT NOT NULL
);
CREATE INDEX webhooks_by_channel ON webhooks(channel_id);
CREATE INDEX webhooks_by_guild ON webhooks(guild_id);

-- A webhook's message: `author_id` stays a user (the webhook's creator, so
-- the key to users holds), `webhook_id` names the webhook, and the name and
-- avatar it was posted under are kept with the message, so the message
-- reads the same after the webhook is renamed or deleted.
ALTER TABLE messages ADD COLUMN webhook_id BIGINT;
ALTER TABLE messages ADD COLUMN author_name TEXT;
ALTER TABLE messages ADD COLUMN author_avatar TEXT;
