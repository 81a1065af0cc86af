-- Messages that answer interactions. `kind` is the message type (20 for a
-- slash command's response), `flags` Discord's message flags (EPHEMERAL,
-- LOADING for a deferred response), `components` the components as the
-- application sent them (JSON: a component interaction is checked
-- against the message's stored components), `application_id` and
-- `interaction_id` the application and interaction it answers, and
-- `interaction_metadata` the object messages carry (JSON, kept as sent,
-- since the interaction itself is forgotten after 15 minutes).
-- `visible_to`: an ephemeral message's only reader (the invoking user);
-- history reads leave such messages out.
ALTER TABLE messages ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN flags INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN components TEXT;
ALTER TABLE messages ADD COLUMN application_id INTEGER;
ALTER TABLE messages ADD COLUMN interaction_id INTEGER;
ALTER TABLE messages ADD COLUMN interaction_metadata TEXT;
ALTER TABLE messages ADD COLUMN visible_to INTEGER;
