-- Guildhall's durable state on PostgreSQL (cluster mode): the schema of
-- ../migrations, version for version, in PostgreSQL's types. Those files
-- cannot be shared: SQLite's INTEGER is PostgreSQL's 32-bit int, and a
-- snowflake (positive, below 2^63 for the next century) needs BIGINT;
-- PostgreSQL has BOOLEAN and BYTEA where SQLite stores 0/1 and BLOB; and
-- SQLite's applied files are checksummed, so they stay as they are.
-- A new migration is added to both directories with the same version.
CREATE TABLE users (
    id BIGINT PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    bot BOOLEAN NOT NULL,
    global_name TEXT,
    created_ms BIGINT NOT NULL
);

-- Tokens are stored as SHA-256 digests: a leaked database is not a set of
-- working credentials.
CREATE TABLE tokens (
    token_hash BYTEA PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users(id),
    created_ms BIGINT NOT NULL
);
CREATE INDEX tokens_by_user ON tokens(user_id);

CREATE TABLE applications (
    id BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    owner_id BIGINT NOT NULL REFERENCES users(id),
    bot_user_id BIGINT NOT NULL UNIQUE REFERENCES users(id),
    flags BIGINT NOT NULL
);

CREATE TABLE guilds (
    id BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    owner_id BIGINT NOT NULL REFERENCES users(id),
    created_ms BIGINT NOT NULL
);

CREATE TABLE channels (
    id BIGINT PRIMARY KEY,
    guild_id BIGINT REFERENCES guilds(id),
    kind BIGINT NOT NULL,
    name TEXT NOT NULL,
    position BIGINT NOT NULL,
    topic TEXT
);
CREATE INDEX channels_by_guild ON channels(guild_id);

CREATE TABLE roles (
    id BIGINT PRIMARY KEY,
    guild_id BIGINT NOT NULL REFERENCES guilds(id),
    name TEXT NOT NULL,
    permissions BIGINT NOT NULL,
    position BIGINT NOT NULL,
    color BIGINT NOT NULL,
    hoist BOOLEAN NOT NULL,
    mentionable BOOLEAN NOT NULL
);
CREATE INDEX roles_by_guild ON roles(guild_id);

CREATE TABLE members (
    guild_id BIGINT NOT NULL REFERENCES guilds(id),
    user_id BIGINT NOT NULL REFERENCES users(id),
    joined_ms BIGINT NOT NULL,
    nick TEXT,
    PRIMARY KEY (guild_id, user_id)
);
CREATE INDEX members_by_user ON members(user_id);

CREATE TABLE member_roles (
    guild_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    role_id BIGINT NOT NULL REFERENCES roles(id),
    PRIMARY KEY (guild_id, user_id, role_id)
);

CREATE TABLE messages (
    id BIGINT PRIMARY KEY,
    channel_id BIGINT NOT NULL REFERENCES channels(id),
    guild_id BIGINT,
    author_id BIGINT NOT NULL REFERENCES users(id),
    content TEXT NOT NULL,
    tts BOOLEAN NOT NULL,
    edited_ms BIGINT
);
CREATE INDEX messages_by_channel ON messages(channel_id, id);

CREATE TABLE invites (
    code TEXT PRIMARY KEY,
    guild_id BIGINT NOT NULL REFERENCES guilds(id),
    channel_id BIGINT NOT NULL REFERENCES channels(id),
    inviter_id BIGINT NOT NULL REFERENCES users(id),
    uses BIGINT NOT NULL,
    max_uses BIGINT NOT NULL,
    created_ms BIGINT NOT NULL
);
