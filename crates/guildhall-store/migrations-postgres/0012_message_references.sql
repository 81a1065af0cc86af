-- A reply's message reference (Discord's message_reference object): the
-- reference type (0 DEFAULT, a reply) and the message it points to. The
-- referenced message is read again on every read of the reply, so the
-- reply shows it as it is now (null once it is deleted); only its key is
-- kept here. All NULL: the message references nothing.
ALTER TABLE messages ADD COLUMN reference_kind BIGINT;
ALTER TABLE messages ADD COLUMN reference_message_id BIGINT;
ALTER TABLE messages ADD COLUMN reference_channel_id BIGINT;
ALTER TABLE messages ADD COLUMN reference_guild_id BIGINT;
