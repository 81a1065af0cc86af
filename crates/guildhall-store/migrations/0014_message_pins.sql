-- When a message was pinned, Unix ms; NULL: not pinned. A column of the
-- message rather than a table of pins, so a deleted message takes its pin
-- with it (Discord sends no CHANNEL_PINS_UPDATE then) and no cleanup can be
-- forgotten. Within a channel the times are distinct and increase (the
-- store makes a pin in the same millisecond as the last one a millisecond
-- later), so `before` pages through pins without skipping ties.
ALTER TABLE messages ADD COLUMN pinned_ms INTEGER;
-- A channel's pins, newest first, without reading its unpinned messages.
CREATE INDEX messages_pinned_by_channel ON messages(channel_id, pinned_ms)
    WHERE pinned_ms IS NOT NULL;
