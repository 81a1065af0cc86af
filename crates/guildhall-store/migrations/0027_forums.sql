-- Forum (15) and media (16) channels: the tags their posts may carry, the
-- reaction shown on new posts, the sort order and layout clients default
-- to, and the slowmode new posts get. A post (a thread, type 11) carries
-- the ids of the tags applied to it. Tags are JSON text, as overwrites
-- are: read and written whole with their channel, and bounded by the
-- owner (at most 20 tags, 5 applied).
ALTER TABLE channels ADD COLUMN available_tags TEXT NOT NULL DEFAULT '[]';
ALTER TABLE channels ADD COLUMN default_reaction_emoji TEXT;
ALTER TABLE channels ADD COLUMN default_sort_order INTEGER;
ALTER TABLE channels ADD COLUMN default_forum_layout INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN default_thread_rate_limit_per_user INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN applied_tags TEXT NOT NULL DEFAULT '[]';
