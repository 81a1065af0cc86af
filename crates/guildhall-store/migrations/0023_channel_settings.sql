-- The channel fields Discord documents beyond name, topic and overwrites:
-- age restriction, slowmode (seconds between a member's messages), the
-- category it sits in, a voice channel's bitrate, user limit and camera
-- quality, and the auto-archive default its threads start with. Rows from
-- before read as Discord's defaults.
ALTER TABLE channels ADD COLUMN nsfw INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN rate_limit_per_user INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN parent_id INTEGER;
ALTER TABLE channels ADD COLUMN bitrate INTEGER NOT NULL DEFAULT 64000;
ALTER TABLE channels ADD COLUMN user_limit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN video_quality_mode INTEGER NOT NULL DEFAULT 1;
ALTER TABLE channels ADD COLUMN default_auto_archive_duration INTEGER;
