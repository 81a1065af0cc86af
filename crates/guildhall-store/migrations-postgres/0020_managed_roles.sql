-- A bot's managed role: created when the bot is authorized into a guild
-- with permissions, named after it, held by it alone, removed with it.
ALTER TABLE roles ADD COLUMN bot_id BIGINT;
