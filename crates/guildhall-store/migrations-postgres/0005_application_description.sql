-- An application's description, shown in its application object and
-- edited through PATCH /applications/@me (Discord's 400-character field).
ALTER TABLE applications ADD COLUMN description TEXT NOT NULL DEFAULT '';
