-- Guildhall's durable state. Ids are snowflakes (positive, below 2^63 for
-- the next century). Portable SQL: the same file must run on PostgreSQL.
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    bot INTEGER NOT NULL,
    global_name TEXT,
    created_ms INTEGER NOT NULL
);

-- Tokens are stored as SHA-256 digests: a leaked database is not a set of
-- working credentials.
CREATE TABLE tokens (
    token_hash BLOB PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    created_ms INTEGER NOT NULL
);
CREATE INDEX tokens_by_user ON tokens(user_id);

CREATE TABLE applications (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    owner_id INTEGER NOT NULL REFERENCES users(id),
    bot_user_id INTEGER NOT NULL UNIQUE REFERENCES users(id),
    flags INTEGER NOT NULL
);

CREATE TABLE guilds (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    owner_id INTEGER NOT NULL REFERENCES users(id),
    created_ms INTEGER NOT NULL
);

CREATE TABLE channels (
    id INTEGER PRIMARY KEY,
    guild_id INTEGER REFERENCES guilds(id),
    kind INTEGER NOT NULL,
    name TEXT NOT NULL,
    position INTEGER NOT NULL,
    topic TEXT
);
CREATE INDEX channels_by_guild ON channels(guild_id);

CREATE TABLE roles (
    id INTEGER PRIMARY KEY,
    guild_id INTEGER NOT NULL REFERENCES guilds(id),
    name TEXT NOT NULL,
    permissions INTEGER NOT NULL,
    position INTEGER NOT NULL,
    color INTEGER NOT NULL,
    hoist INTEGER NOT NULL,
    mentionable INTEGER NOT NULL
);
CREATE INDEX roles_by_guild ON roles(guild_id);

CREATE TABLE members (
    guild_id INTEGER NOT NULL REFERENCES guilds(id),
    user_id INTEGER NOT NULL REFERENCES users(id),
    joined_ms INTEGER NOT NULL,
    nick TEXT,
    PRIMARY KEY (guild_id, user_id)
);
CREATE INDEX members_by_user ON members(user_id);

CREATE TABLE member_roles (
    guild_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    role_id INTEGER NOT NULL REFERENCES roles(id),
    PRIMARY KEY (guild_id, user_id, role_id)
);

CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    guild_id INTEGER,
    author_id INTEGER NOT NULL REFERENCES users(id),
    content TEXT NOT NULL,
    tts INTEGER NOT NULL,
    edited_ms INTEGER
);
CREATE INDEX messages_by_channel ON messages(channel_id, id);

CREATE TABLE invites (
    code TEXT PRIMARY KEY,
    guild_id INTEGER NOT NULL REFERENCES guilds(id),
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    inviter_id INTEGER NOT NULL REFERENCES users(id),
    uses INTEGER NOT NULL,
    max_uses INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
