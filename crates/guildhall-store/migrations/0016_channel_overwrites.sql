-- A guild channel's permission overwrites, as the wire carries them (a
-- JSON array of {id, type, allow, deny}; '[]' for none). Kept with the
-- channel, not in a table of their own: they are read and written whole
-- with it (the owner loads a guild's channels at once, CHANNEL_UPDATE
-- carries them all), and a channel holds at most
-- `channel_overwrites_max` of them.
ALTER TABLE channels ADD COLUMN permission_overwrites TEXT NOT NULL DEFAULT '[]';
