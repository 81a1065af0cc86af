-- A message's rich embeds as JSON, checked and reduced to Discord's
-- documented embed fields before they are stored (NULL: none).
ALTER TABLE messages ADD COLUMN embeds TEXT;
