//! Durable state behind one trait, [`StoreBackend`], and the handle the
//! roles hold, [`Store`].
//!
//! [`SqliteStore`] (sqlx over SQLite) is the implementation embedded mode
//! runs on; [`PgStore`] (sqlx over PostgreSQL) is cluster mode's. Both are
//! [`SqlStore`]: the queries are portable SQL with `$N` parameters, written
//! once over sqlx's `Database`, and [`Dialect`] holds what differs (the
//! design is explained at `Dialect`). [`Store::open_url`] picks one by URL.
//! Each database has its own migration directory (`migrations`,
//! `migrations-postgres`) building one schema; a test holds them to it.
//!
//! Durability: on SQLite, WAL with `synchronous = FULL`; on PostgreSQL,
//! `synchronous_commit = on` for every session of the store. Either way a
//! write acknowledged to a client (a message answered with 200) is durable
//! before the answer and survives `kill -9` and power loss alike.
//!
//! Bounds: the pool holds at most `store_pool_connections_max` connections and a
//! caller waits at most [`ACQUIRE_TIMEOUT_MS`] for one (then
//! [`StoreError::Busy`], which the API answers with 503); list queries take
//! an explicit `limit`.
//!
//! Scoping: every operation on a message, a reaction, a channel, a role or
//! a member names its container (the channel, or the guild) and touches
//! nothing outside it, so an id from another guild can never reach a row
//! of that guild, whatever check a caller forgot.

use guildhall_limits::Limits;
use sqlx::Connection;
use sqlx::FromRow;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// Longest wait for a pooled connection before failing fast.
pub const ACQUIRE_TIMEOUT_MS: u64 = 2_000;

/// Longest wait on SQLite's write lock.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique key already exists (a taken username, a duplicate member).
    #[error("conflict: {0}")]
    Conflict(&'static str),
    /// No connection within the acquire timeout: retry later.
    #[error("store busy")]
    Busy,
    /// A guild owner's write under an epoch the guild row no longer holds:
    /// a newer owner claimed the guild (fencing; the stale owner stops).
    #[error("stale owner epoch")]
    StaleEpoch,
    /// Anything else from the database.
    #[error("database: {0}")]
    Database(#[source] sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::PoolTimedOut => StoreError::Busy,
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict("unique key")
            }
            _ => StoreError::Database(error),
        }
    }
}

/// Result of a store call.
pub type Result<T> = std::result::Result<T, StoreError>;

/// A user row.
// Serde for the bus (a guild owner receives new members' rows); the
// password hash never leaves the store that way.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct UserRow {
    /// Id.
    pub id: i64,
    /// Unique name.
    pub username: String,
    /// Argon2 PHC string; none for bots.
    pub password_hash: Option<String>,
    /// A bot user.
    pub bot: bool,
    /// Display name.
    pub global_name: Option<String>,
    /// Created at, Unix ms.
    pub created_ms: i64,
}

// Rows derive no serde: what travels on the bus is proto's records, built
// from rows here (a user's record leaves the password hash behind).

impl From<&UserRow> for guildhall_proto::users::UserRecord {
    fn from(row: &UserRow) -> Self {
        Self {
            id: row.id,
            username: row.username.clone(),
            bot: row.bot,
            global_name: row.global_name.clone(),
            created_ms: row.created_ms,
        }
    }
}

impl From<guildhall_proto::users::UserRecord> for UserRow {
    fn from(record: guildhall_proto::users::UserRecord) -> Self {
        Self {
            id: record.id,
            username: record.username,
            password_hash: None,
            bot: record.bot,
            global_name: record.global_name,
            created_ms: record.created_ms,
        }
    }
}

impl From<guildhall_proto::guilds::ChannelRecord> for ChannelRow {
    fn from(record: guildhall_proto::guilds::ChannelRecord) -> Self {
        let guildhall_proto::guilds::ChannelRecord {
            id,
            guild_id,
            kind,
            name,
            position,
            topic,
            permission_overwrites,
            // Applied by the owner, which checks them against the guild.
            settings: _,
        } = record;
        Self {
            id,
            guild_id,
            kind,
            name,
            position,
            topic,
            permission_overwrites: guildhall_proto::permissions::Overwrite::to_stored(
                &permission_overwrites
                    .iter()
                    .filter_map(guildhall_proto::permissions::Overwrite::from_wire)
                    .collect::<Vec<_>>(),
            ),
            ..Self::default()
        }
    }
}

impl From<guildhall_proto::guilds::RoleRecord> for RoleRow {
    fn from(record: guildhall_proto::guilds::RoleRecord) -> Self {
        let guildhall_proto::guilds::RoleRecord {
            id,
            guild_id,
            name,
            permissions,
            position,
            color,
            hoist,
            mentionable,
        } = record;
        Self {
            bot_id: None,
            id,
            guild_id,
            name,
            permissions,
            position,
            color,
            hoist,
            mentionable,
        }
    }
}

/// An application row.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct ApplicationRow {
    /// Id (equal to the bot user's id, as Discord does).
    pub id: i64,
    /// Name.
    pub name: String,
    /// Owner.
    pub owner_id: i64,
    /// Bot user.
    pub bot_user_id: i64,
    /// Application flags (privileged intents allowed live here).
    pub flags: i64,
    /// Description (at most 400 characters).
    pub description: String,
}

/// A guild as the current user's guild list shows it: the row, the kept
/// member count, and the user's permissions there (owner, or the union of
/// `@everyone` and their roles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserGuildRow {
    /// Id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Owner.
    pub owner_id: i64,
    /// Members (kept with every join and leave).
    pub member_count: i64,
    /// The union of the permission bits of `@everyone` and the user's roles.
    pub role_permissions: i64,
}

/// A guild row.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct GuildRow {
    /// Id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Owner.
    pub owner_id: i64,
    /// Created at, Unix ms.
    pub created_ms: i64,
}

/// A channel row. Its default holds Discord's defaults where zero is not
/// one (a 64,000 bps bitrate and automatic camera quality), as the
/// migration's column defaults do.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct ChannelRow {
    /// Id.
    pub id: i64,
    /// Guild (none for DMs).
    pub guild_id: Option<i64>,
    /// Channel type.
    pub kind: i64,
    /// Name.
    pub name: String,
    /// Position.
    pub position: i64,
    /// Topic.
    pub topic: Option<String>,
    /// Permission overwrites, the wire form's JSON (read with
    /// `guildhall_proto::permissions::Overwrite::parse_stored`; empty
    /// reads as none).
    pub permission_overwrites: String,
    /// Age-restricted.
    pub nsfw: bool,
    /// Slowmode: seconds a member waits between messages (0: none).
    pub rate_limit_per_user: i64,
    /// The category it sits in.
    pub parent_id: Option<i64>,
    /// A voice channel's bits per second.
    pub bitrate: i64,
    /// A voice channel's participants at once (0: no limit).
    pub user_limit: i64,
    /// A voice channel's camera quality (1 auto, 2 full).
    pub video_quality_mode: i64,
    /// Minutes of inactivity after which its new threads archive.
    pub default_auto_archive_duration: Option<i64>,
    /// A thread's starter (threads only).
    pub owner_id: Option<i64>,
    /// A thread is archived.
    pub archived: bool,
    /// A thread is locked (only MANAGE_THREADS unarchives it).
    pub locked: bool,
    /// Non-moderators may add others to a private thread.
    pub invitable: bool,
    /// A thread's minutes of inactivity before it leaves the channel list.
    pub auto_archive_duration: Option<i64>,
    /// When a thread's archive status last changed (unix ms).
    pub archive_ms: Option<i64>,
    /// When a thread was created (unix ms).
    pub thread_created_ms: Option<i64>,
    /// A thread's members.
    pub member_count: i64,
    /// A thread's messages (less those deleted).
    pub message_count: i64,
    /// Messages ever sent in a thread.
    pub total_message_sent: i64,
    /// A forum or media channel's tags, the wire form's JSON (`[{id,
    /// name, moderated, emoji_id, emoji_name}]`; '[]' for none).
    pub available_tags: String,
    /// The reaction a forum's new posts show, JSON `{emoji_id,
    /// emoji_name}` (None: none).
    pub default_reaction_emoji: Option<String>,
    /// How a forum's posts are sorted by default (0 latest activity, 1
    /// creation date; None: the client's choice).
    pub default_sort_order: Option<i64>,
    /// How a forum's posts are shown by default (0 not set, 1 list, 2
    /// gallery).
    pub default_forum_layout: i64,
    /// The slowmode its new threads get, seconds.
    pub default_thread_rate_limit_per_user: i64,
    /// A forum post's applied tags, JSON `["id", ...]` ('[]' for none).
    pub applied_tags: String,
}

/// Channel types that are threads: announcement (10), public (11) and
/// private (12).
pub const THREAD_KINDS: [i64; 3] = [10, 11, 12];

/// A thread's member.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct ThreadMemberRow {
    /// The thread.
    pub thread_id: i64,
    /// The member.
    pub user_id: i64,
    /// The thread's guild.
    pub guild_id: i64,
    /// When they joined (unix ms).
    pub join_ms: i64,
    /// Notification flags.
    pub flags: i64,
}

impl Default for ChannelRow {
    fn default() -> Self {
        Self {
            id: 0,
            guild_id: None,
            kind: 0,
            name: String::new(),
            position: 0,
            topic: None,
            permission_overwrites: String::new(),
            nsfw: false,
            rate_limit_per_user: 0,
            parent_id: None,
            bitrate: 64_000,
            user_limit: 0,
            video_quality_mode: 1,
            default_auto_archive_duration: None,
            owner_id: None,
            archived: false,
            locked: false,
            invitable: true,
            auto_archive_duration: None,
            archive_ms: None,
            thread_created_ms: None,
            member_count: 0,
            message_count: 0,
            total_message_sent: 0,
            available_tags: "[]".into(),
            default_reaction_emoji: None,
            default_sort_order: None,
            default_forum_layout: 0,
            default_thread_rate_limit_per_user: 0,
            applied_tags: "[]".into(),
        }
    }
}

impl ChannelRow {
    /// The overwrites as stored ('[]' for none).
    fn overwrites_stored(&self) -> &str {
        if self.permission_overwrites.is_empty() {
            "[]"
        } else {
            &self.permission_overwrites
        }
    }
}

/// A role row.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct RoleRow {
    /// Id (the guild's id for `@everyone`).
    pub id: i64,
    /// Guild.
    pub guild_id: i64,
    /// Name.
    pub name: String,
    /// Permission bits.
    pub permissions: i64,
    /// Position.
    pub position: i64,
    /// Colour.
    pub color: i64,
    /// Hoisted.
    pub hoist: bool,
    /// Mentionable.
    pub mentionable: bool,
    /// The bot whose managed role this is (created when the bot was
    /// authorized with permissions); none for other roles.
    pub bot_id: Option<i64>,
}

/// A member row.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct MemberRow {
    /// Guild.
    pub guild_id: i64,
    /// User.
    pub user_id: i64,
    /// Joined at, Unix ms.
    pub joined_ms: i64,
    /// Nickname.
    pub nick: Option<String>,
    /// Timed out until (Unix ms); a past value is no timeout.
    pub communication_disabled_until_ms: Option<i64>,
    /// Joined through a temporary invite: removed when their last session
    /// disconnects unless they hold a role by then.
    pub temporary: bool,
}

/// A guild's ban of a user.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct BanRow {
    /// Guild.
    pub guild_id: i64,
    /// The banned user.
    pub user_id: i64,
    /// Why (the moderator's `X-Audit-Log-Reason`), if given.
    pub reason: Option<String>,
    /// Banned at, Unix ms.
    pub created_ms: i64,
}

/// One audit log entry as stored (`changes` and `options` as JSON).
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct AuditRow {
    /// The entry's id (a snowflake: its time is in it).
    pub id: i64,
    /// Guild.
    pub guild_id: i64,
    /// Who acted.
    pub user_id: i64,
    /// What was acted on, if anything.
    pub target_id: Option<i64>,
    /// The documented action type.
    pub action_type: i64,
    /// The changes, a JSON array ('[]' for none).
    pub changes: String,
    /// The optional info, JSON, if any.
    pub options: Option<String>,
    /// The moderator's reason.
    pub reason: Option<String>,
}

/// What a ban changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BanWrite {
    /// The ban is new (false: the user was banned already).
    pub banned: bool,
    /// The user was a member, and no longer is.
    pub was_member: bool,
}

/// A message row.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct MessageRow {
    /// Id (its creation time is in it).
    pub id: i64,
    /// Channel.
    pub channel_id: i64,
    /// Guild.
    pub guild_id: Option<i64>,
    /// Author.
    pub author_id: i64,
    /// Text.
    pub content: String,
    /// Text to speech.
    pub tts: bool,
    /// Edited at, Unix ms.
    pub edited_ms: Option<i64>,
    /// The webhook that sent it (then `author_id` is the webhook's creator
    /// and the author shown is the webhook).
    pub webhook_id: Option<i64>,
    /// The name a webhook posted it under.
    pub author_name: Option<String>,
    /// The avatar hash a webhook posted it under.
    pub author_avatar: Option<String>,
    /// Message type (0 default, 20 a slash command's response).
    pub kind: i64,
    /// Message flags (EPHEMERAL, LOADING, ...).
    pub flags: i64,
    /// Components as JSON, as the application sent them.
    pub components: Option<String>,
    /// Rich embeds as JSON, checked and reduced to the documented fields
    /// (`guildhall_proto::embeds`).
    pub embeds: Option<String>,
    /// The application of an interaction's response.
    pub application_id: Option<i64>,
    /// The interaction it answers.
    pub interaction_id: Option<i64>,
    /// Its `interaction_metadata` as JSON.
    pub interaction_metadata: Option<String>,
    /// An ephemeral message's only reader (left out of history).
    pub visible_to: Option<i64>,
    /// Its `message_reference.type` (0: a reply); `None`: no reference.
    pub reference_kind: Option<i64>,
    /// The referenced message (read afresh with every read of this one).
    pub reference_message_id: Option<i64>,
    /// The referenced message's channel.
    pub reference_channel_id: Option<i64>,
    /// The referenced message's guild (guild channels only).
    pub reference_guild_id: Option<i64>,
    /// Who it mentions (`guildhall_proto::mentions::Stored` as JSON);
    /// `None`: nobody.
    pub mentions: Option<String>,
    /// Its files (`guildhall_proto::model::Attachment`s without URLs, as
    /// JSON); `None`: none.
    pub attachments: Option<String>,
}

impl MessageRow {
    /// A plain message (no webhook, no interaction) of `author_id`.
    pub fn plain(
        id: i64,
        channel_id: i64,
        guild_id: Option<i64>,
        author_id: i64,
        content: String,
    ) -> Self {
        Self {
            id,
            channel_id,
            guild_id,
            author_id,
            content,
            tts: false,
            edited_ms: None,
            webhook_id: None,
            author_name: None,
            author_avatar: None,
            kind: 0,
            flags: 0,
            components: None,
            application_id: None,
            interaction_id: None,
            interaction_metadata: None,
            embeds: None,
            visible_to: None,
            reference_kind: None,
            reference_message_id: None,
            reference_channel_id: None,
            reference_guild_id: None,
            mentions: None,
            attachments: None,
        }
    }
}

/// An invite row.
#[derive(Clone, Debug, Default, FromRow, PartialEq, Eq)]
pub struct InviteRow {
    /// Code.
    pub code: String,
    /// Guild.
    pub guild_id: i64,
    /// Channel.
    pub channel_id: i64,
    /// Who made it.
    pub inviter_id: i64,
    /// Times used.
    pub uses: i64,
    /// Most uses (0: unlimited).
    pub max_uses: i64,
    /// Created at, Unix ms.
    pub created_ms: i64,
    /// Seconds it lasts from creation (0: never expires).
    pub max_age_s: i64,
    /// When it expires, Unix ms (None: never).
    pub expires_ms: Option<i64>,
    /// Whether it grants temporary membership (gone on disconnect unless
    /// given a role).
    pub temporary: bool,
    /// A voice channel invite's target type (1: stream, 2: embedded
    /// application).
    pub target_type: Option<i64>,
    /// The user whose stream it shows (target type 1).
    pub target_user_id: Option<i64>,
    /// The application it opens (target type 2).
    pub target_application_id: Option<i64>,
}

impl InviteRow {
    /// Whether it has expired at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }
}

/// What an invite preview shows: the invite, with its guild's name and
/// member count and its channel's type and name (one indexed read; the
/// guild's members are never loaded for it).
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct InvitePreviewRow {
    /// The invite.
    #[sqlx(flatten)]
    pub invite: InviteRow,
    /// The guild's name.
    pub guild_name: String,
    /// Members of the guild (kept with every join and leave).
    pub member_count: i64,
    /// The channel's type.
    pub channel_kind: i64,
    /// The channel's name.
    pub channel_name: String,
}

/// Counters of the store, read by `/metrics`.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// Whole guilds loaded (an owner starting, or a caller that needed one).
    pub guild_loads_total: std::sync::atomic::AtomicU64,
    /// Member rows those loads read.
    pub member_rows_loaded_total: std::sync::atomic::AtomicU64,
}

/// An application command row (`guild_id` 0: a global command).
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct CommandRow {
    /// Id.
    pub id: i64,
    /// Application.
    pub application_id: i64,
    /// Guild, or 0 for a global command.
    pub guild_id: i64,
    /// Command type.
    pub kind: i64,
    /// Name (unique per application, scope and type).
    pub name: String,
    /// The validated command as JSON.
    pub spec: String,
    /// Version: a fresh snowflake on every change.
    pub version: i64,
}

/// A webhook row (an Incoming webhook of one guild channel).
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct WebhookRow {
    /// Id.
    pub id: i64,
    /// Guild.
    pub guild_id: i64,
    /// Channel it posts to.
    pub channel_id: i64,
    /// The user who created it.
    pub creator_id: i64,
    /// Default name.
    pub name: String,
    /// Default avatar hash.
    pub avatar: Option<String>,
    /// The secret token, as issued.
    pub token: String,
    /// The application whose bot created it (application-owned); `None`
    /// for one a user created.
    pub application_id: Option<i64>,
}

/// What writing a webhook did: a create or a move is refused when the
/// channel, or the guild, holds its maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookWrite {
    /// Stored.
    Done,
    /// The webhook (or, for a create, its guild or channel) does not exist.
    Missing,
    /// The channel holds `per_channel_max` webhooks.
    ChannelFull,
    /// The guild holds `per_guild_max` webhooks.
    GuildFull,
}

/// A pinned message and when it was pinned.
#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct PinRow {
    /// The message.
    #[sqlx(flatten)]
    pub message: MessageRow,
    /// Pinned at, Unix ms (distinct and increasing within a channel).
    pub pinned_ms: i64,
}

/// What adding a reaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReactionWrite {
    /// Added.
    Added,
    /// The user had reacted with that emoji already; nothing changed.
    AlreadyThere,
    /// The channel has no such message.
    Missing,
    /// The emoji is new to the message and it carries `emoji_max` distinct
    /// emoji; nothing changed.
    Full,
    /// The emoji is new to the message and the user may not add emoji;
    /// nothing changed.
    NewEmojiForbidden,
}

/// One emoji's reactions on one message, as a rendered message shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReactionCount {
    /// The message.
    pub message_id: i64,
    /// The emoji key: a unicode emoji, or `name:id` for a custom one.
    pub emoji: String,
    /// Users who reacted with it (at least 1).
    pub count: i64,
    /// Whether the user the page is read for is among them.
    pub me: bool,
}

/// What pinning a message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinWrite {
    /// Pinned at this time, Unix ms (the channel's newest pin now).
    Pinned(i64),
    /// It was pinned already; nothing changed.
    AlreadyPinned,
    /// The channel has no such message (or only an ephemeral one).
    Missing,
    /// The channel holds `pins_max` pins; nothing changed.
    Full,
}

/// What unpinning a message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnpinWrite {
    /// Unpinned; the time of the channel's newest remaining pin, if any.
    Unpinned(Option<i64>),
    /// It was not pinned; nothing changed.
    NotPinned,
    /// The channel has no such message.
    Missing,
}

/// A bot's session starts (counted IDENTIFYs) in its current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionStarts {
    /// IDENTIFYs counted in the window; one above the total once one has
    /// been refused (it stays there, so the count cannot grow without
    /// bound).
    pub starts: i64,
    /// When the window began (Unix ms, the first IDENTIFY's node's clock).
    pub window_start_ms: i64,
}

/// What counting an IDENTIFY did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStart {
    /// Counted: `starts` of the window, at most the total.
    Started(SessionStarts),
    /// The window's total was already used; nothing counted.
    Refused(SessionStarts),
    /// The store tracks `bots_max` bots whose windows are running: this
    /// one is not counted.
    Untracked,
}

/// What an IDENTIFY's `max_concurrency` bucket said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentifyBucket {
    /// The bucket's window had ended (or it was new): this IDENTIFY
    /// starts a new one.
    Admitted,
    /// The bucket admitted an IDENTIFY less than a window ago.
    Refused,
    /// The store tracks `rows_max` buckets within their windows: this one
    /// is not counted.
    Untracked,
}

/// What creating a command did (Discord's POST is an upsert by name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandUpsert {
    /// A new command (201).
    Created(CommandRow),
    /// The command of that name and type was replaced, id kept (200).
    Updated(CommandRow),
    /// The scope holds its maximum of commands of that type.
    Full,
}

/// Everything a guild owner loads to serve a guild.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuildState {
    /// The guild.
    pub guild: Option<GuildRow>,
    /// Channels by position.
    pub channels: Vec<ChannelRow>,
    /// Roles by position.
    pub roles: Vec<RoleRow>,
    /// Members by join time.
    pub members: Vec<MemberRow>,
    /// (user, role) pairs.
    pub member_roles: Vec<(i64, i64)>,
    /// Active (unarchived) threads, by id.
    pub threads: Vec<ChannelRow>,
    /// The members of those threads, by thread and user.
    pub thread_members: Vec<ThreadMemberRow>,
    /// (thread, its newest message's id) for those threads that have
    /// messages: when each was last active, for auto-archiving.
    pub thread_last_messages: Vec<(i64, i64)>,
}

/// A message write waiting for the group-commit writer.
struct MessageWrite {
    row: MessageRow,
    // The database's own error, so the caller classifies it (a duplicate id
    // is a conflict on either database) exactly as a direct query would.
    ack: tokio::sync::oneshot::Sender<std::result::Result<(), sqlx::Error>>,
}

impl std::fmt::Debug for MessageWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageWrite")
            .field("id", &self.row.id)
            .finish()
    }
}

// ----- the databases --------------------------------------------------------
//
// Design: every query, the group-commit writer and the pool are written once,
// in `SqlStore<DB>`, generic over sqlx's `Database`, and the few things the
// two databases do differently are the `Dialect` trait's constants. The
// alternatives were worse: sqlx's `Any` driver (a runtime choice) maps every
// value through its own small set of types, checked only when a query runs,
// and is set up from a URL rather than each driver's connect options (WAL,
// `synchronous`); a macro that stamps the queries out once per database is
// not formatted by rustfmt, and its errors point into the macro.
// The generic code's cost is one `where` clause listing the column and row
// types it binds and decodes; the compiler checks it for both databases.
//
// What differs, and where it is handled:
// - types: separate migration directories with one schema (BIGINT, BOOLEAN
//   and BYTEA on PostgreSQL; see migrations-postgres/0001_initial.sql);
//   the queries bind `bool` and `i64`, which each driver maps to its column;
// - serialising a read-then-write transaction: `Dialect::BEGIN_WRITE` and
//   `Dialect::FOR_UPDATE`;
// - rows affected: `RowsAffected` (an inherent method on each driver's type);
// - opening: the constructors (`SqliteStore::open`, `PgStore::open`), which
//   set each database's durability and run its migrations.
// Everything else is already portable: `$N` parameters, `ON CONFLICT`,
// `TRUE`/`FALSE` literals, and no `last_insert_rowid` (ids are snowflakes
// chosen by the caller).

/// A statement's count of changed rows, for generic code (each driver has
/// it as an inherent method of its own result type).
pub trait RowsAffected {
    /// Rows inserted, updated or deleted.
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

/// What a database does differently from the other, for [`SqlStore`].
pub trait Dialect: sqlx::Database<QueryResult: RowsAffected> {
    /// Opens a transaction that reads and then writes an application's
    /// commands, with [`Self::FOR_UPDATE`] on the read of the application's
    /// row, so two such transactions of one application run one after the
    /// other (a count or an existence check cannot be passed by both).
    const BEGIN_WRITE: &'static str;
    /// Appended to that read.
    const FOR_UPDATE: &'static str;
    /// Appended to an `ORDER BY` of a text column: byte order, so both
    /// databases list emoji keys alike (PostgreSQL's default is the
    /// database's locale, which differs between deployments).
    const BYTEWISE: &'static str;
}

impl Dialect for sqlx::Sqlite {
    // IMMEDIATE takes the write lock before the reads: a deferred
    // transaction that read and then wrote after a concurrent create
    // committed would fail with SQLITE_BUSY_SNAPSHOT, or two creates of one
    // name would both pass the existence check. SQLite has one writer, so
    // the row needs no lock of its own.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const FOR_UPDATE: &'static str = "";
    // SQLite's default collation, BINARY, is byte order already.
    const BYTEWISE: &'static str = "";
}

impl Dialect for sqlx::Postgres {
    // Writers run concurrently under READ COMMITTED: the application's row
    // lock is what serialises them (SERIALIZABLE would instead fail one of
    // them, and every caller would need a retry loop).
    const BEGIN_WRITE: &'static str = "BEGIN";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const BYTEWISE: &'static str = r#" COLLATE "C""#;
}

/// The store over one database: every operation, written once.
///
/// Message inserts go through one writer task that commits whatever is
/// waiting (up to `message_write_batch_max`) in one transaction, so many
/// concurrent sends share one fsync (SQLite) or one WAL flush (PostgreSQL),
/// and each caller is answered only after the commit: durable before
/// acknowledged, at the disk's batch rate rather than its fsync rate
/// (docs/benchmarks.md has the measured figures).
pub struct SqlStore<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    writes: tokio::sync::mpsc::Sender<MessageWrite>,
    counters: std::sync::Arc<StoreCounters>,
}

// By hand: a derive would ask `DB` itself to be `Clone` and `Debug`.
impl<DB: sqlx::Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writes: self.writes.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<DB: sqlx::Database> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &std::any::type_name::<DB>())
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// The SQLite store (embedded mode).
pub type SqliteStore = SqlStore<sqlx::Sqlite>;

/// The PostgreSQL store (cluster mode).
pub type PgStore = SqlStore<sqlx::Postgres>;

const INSERT_MESSAGE: &str = "INSERT INTO messages (id, channel_id, guild_id, author_id, content, tts, edited_ms, webhook_id, author_name, author_avatar, kind, flags, components, application_id, interaction_id, interaction_metadata, visible_to, embeds, reference_kind, reference_message_id, reference_channel_id, reference_guild_id, mentions, attachments) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)";

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
static PG_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-postgres");

/// The key of the advisory lock PostgreSQL migrations run under ("guildhal"
/// in ASCII). sqlx's migrator takes a lock of its own, keyed by the
/// database's name; this one is ours, so the guarantee that N nodes
/// starting at once on an empty database migrate it once, one after the
/// other, is tested here and holds whatever the migrator's settings.
pub const PG_MIGRATION_LOCK_KEY: i64 = 0x6775_696c_6468_616c;

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path`,
    /// with the pool and write-queue bounds of `limits`.
    pub async fn open(path: &Path, limits: &Limits) -> Result<Self> {
        Self::open_with(SqliteConnectOptions::new().filename(path), limits).await
    }

    /// Opens a `sqlite:` URL (`sqlite://PATH`, `sqlite:PATH`) as
    /// [`SqliteStore::open`] opens a path: created if missing, WAL, FULL.
    pub async fn open_url(url: &str, limits: &Limits) -> Result<Self> {
        Self::open_with(SqliteConnectOptions::from_str(url)?, limits).await
    }

    async fn open_with(options: SqliteConnectOptions, limits: &Limits) -> Result<Self> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS));
        Self::connect(options, limits.store_pool_connections_max, limits).await
    }

    /// A private in-memory database (tests).
    pub async fn open_in_memory() -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .in_memory(true)
            .foreign_keys(true);
        // One connection: every in-memory connection is its own database.
        Self::connect(options, 1, &Limits::default()).await
    }

    async fn connect(
        options: SqliteConnectOptions,
        connections: u32,
        limits: &Limits,
    ) -> Result<Self> {
        let pool = SqlitePoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_millis(ACQUIRE_TIMEOUT_MS))
            .connect_with(options)
            .await?;
        SQLITE_MIGRATIONS
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(e.into()))?;
        Ok(Self::start(pool, limits))
    }
}

impl PgStore {
    /// Connects to the PostgreSQL database at `url` (`postgres://…`) and
    /// migrates it, with the pool and write-queue bounds of `limits`.
    ///
    /// Any number of processes may open one empty database at once: the
    /// migrations run under [`PG_MIGRATION_LOCK_KEY`], so one migrates and
    /// the others wait, then find it done.
    pub async fn open(url: &str, limits: &Limits) -> Result<Self> {
        // Set per session, so a server or role default of `off` cannot
        // weaken it: a commit returns only once its WAL is flushed, so a
        // write acknowledged to a client survives a crash of the server.
        let options = PgConnectOptions::from_str(url)?.options([("synchronous_commit", "on")]);
        let pool = PgPoolOptions::new()
            .max_connections(limits.store_pool_connections_max)
            .acquire_timeout(Duration::from_millis(ACQUIRE_TIMEOUT_MS))
            .connect_with(options.clone())
            .await?;
        // The lock is held by a session of its own, outside the pool: the
        // migrator takes a pooled connection (a pool may hold just one), and
        // it must run on the pool, as `Migrator::run` over a borrowed
        // connection makes this future not `Send`.
        let mut lock = PgConnection::connect_with(&options).await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(PG_MIGRATION_LOCK_KEY)
            .execute(&mut lock)
            .await?;
        let migrated = PG_MIGRATIONS.run(&pool).await;
        // Ending the session releases its advisory locks; if the goodbye
        // fails, dropping the socket ends the session all the same.
        let _ = lock.close().await;
        migrated.map_err(|e| StoreError::Database(e.into()))?;
        Ok(Self::start(pool, limits))
    }
}

impl<DB: Dialect> SqlStore<DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> UserRow: FromRow<'r, DB::Row>,
    for<'r> ApplicationRow: FromRow<'r, DB::Row>,
    for<'r> GuildRow: FromRow<'r, DB::Row>,
    for<'r> ChannelRow: FromRow<'r, DB::Row>,
    for<'r> RoleRow: FromRow<'r, DB::Row>,
    for<'r> MemberRow: FromRow<'r, DB::Row>,
    for<'r> BanRow: FromRow<'r, DB::Row>,
    for<'r> ThreadMemberRow: FromRow<'r, DB::Row>,
    for<'r> AuditRow: FromRow<'r, DB::Row>,
    for<'r> MessageRow: FromRow<'r, DB::Row>,
    for<'r> PinRow: FromRow<'r, DB::Row>,
    for<'r> InviteRow: FromRow<'r, DB::Row>,
    for<'r> InvitePreviewRow: FromRow<'r, DB::Row>,
    for<'r> CommandRow: FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (i64, i64): FromRow<'r, DB::Row>,
    for<'r> (Option<i64>,): FromRow<'r, DB::Row>,
    for<'r> (i64, Option<i64>): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'r> (i64, String, i64, i64, Option<i64>): FromRow<'r, DB::Row>,
    for<'r> (i64, String, i64, i64): FromRow<'r, DB::Row>,
    for<'r> (i64, Option<String>): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    /// Starts the group-commit writer over a migrated pool.
    fn start(pool: sqlx::Pool<DB>, limits: &Limits) -> Self {
        let (writes, queue) = tokio::sync::mpsc::channel(limits.message_write_queue_max);
        tokio::spawn(Self::message_writer(
            pool.clone(),
            queue,
            limits.message_write_batch_max,
        ));
        Self {
            pool,
            writes,
            counters: std::sync::Arc::default(),
        }
    }

    async fn insert_one(
        executor: impl sqlx::Executor<'_, Database = DB>,
        m: &MessageRow,
    ) -> std::result::Result<(), sqlx::Error> {
        sqlx::query(INSERT_MESSAGE)
            .bind(m.id)
            .bind(m.channel_id)
            .bind(m.guild_id)
            .bind(m.author_id)
            .bind(&m.content)
            .bind(m.tts)
            .bind(m.edited_ms)
            .bind(m.webhook_id)
            .bind(&m.author_name)
            .bind(&m.author_avatar)
            .bind(m.kind)
            .bind(m.flags)
            .bind(&m.components)
            .bind(m.application_id)
            .bind(m.interaction_id)
            .bind(&m.interaction_metadata)
            .bind(m.visible_to)
            .bind(&m.embeds)
            .bind(m.reference_kind)
            .bind(m.reference_message_id)
            .bind(m.reference_channel_id)
            .bind(m.reference_guild_id)
            .bind(&m.mentions)
            .bind(&m.attachments)
            .execute(executor)
            .await?;
        Ok(())
    }

    async fn commit_batch(
        pool: &sqlx::Pool<DB>,
        batch: &[MessageWrite],
    ) -> std::result::Result<(), sqlx::Error> {
        let mut tx = pool.begin().await?;
        for write in batch {
            Self::insert_one(&mut *tx, &write.row).await?;
        }
        tx.commit().await
    }

    async fn message_writer(
        pool: sqlx::Pool<DB>,
        mut queue: tokio::sync::mpsc::Receiver<MessageWrite>,
        batch_max: usize,
    ) {
        let mut batch = Vec::with_capacity(batch_max);
        while let Some(first) = queue.recv().await {
            batch.push(first);
            while batch.len() < batch_max {
                match queue.try_recv() {
                    Ok(write) => batch.push(write),
                    Err(_) => break,
                }
            }
            match Self::commit_batch(&pool, &batch).await {
                Ok(()) => {
                    for write in batch.drain(..) {
                        let _ = write.ack.send(Ok(()));
                    }
                }
                // One bad row must not fail its neighbours: retry one by one
                // so each caller gets its own answer. (The failed transaction
                // was rolled back; on PostgreSQL it is aborted as a whole.)
                Err(_) => {
                    for write in batch.drain(..) {
                        let result = Self::insert_one(&pool, &write.row).await;
                        let _ = write.ack.send(result);
                    }
                }
            }
        }
    }

    async fn insert_command(tx: &mut sqlx::Transaction<'_, DB>, row: &CommandRow) -> Result<()> {
        sqlx::query("INSERT INTO application_commands (id, application_id, guild_id, kind, name, spec, version) VALUES ($1, $2, $3, $4, $5, $6, $7)")
            .bind(row.id)
            .bind(row.application_id)
            .bind(row.guild_id)
            .bind(row.kind)
            .bind(&row.name)
            .bind(&row.spec)
            .bind(row.version)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Opens a [`Dialect::BEGIN_WRITE`] transaction holding the lock on
    /// `application_id`'s row (see there).
    async fn begin_application_write(
        &self,
        application_id: i64,
    ) -> Result<sqlx::Transaction<'static, DB>> {
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
        let sql = format!(
            "SELECT id FROM applications WHERE id = $1{}",
            DB::FOR_UPDATE
        );
        // Safe: the suffix is one of the dialects' literals; the id is bound.
        let _: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(application_id)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(tx)
    }

    // ----- users and tokens -------------------------------------------------

    /// Creates a user; a taken username is [`StoreError::Conflict`].
    pub async fn create_user(&self, user: &UserRow) -> Result<()> {
        sqlx::query("INSERT INTO users (id, username, password_hash, bot, global_name, created_ms) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(user.id)
            .bind(&user.username)
            .bind(&user.password_hash)
            .bind(user.bot)
            .bind(&user.global_name)
            .bind(user.created_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A user by id.
    pub async fn user(&self, id: i64) -> Result<Option<UserRow>> {
        Ok(sqlx::query_as("SELECT * FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The users among `ids` (one query; callers bound the batch).
    pub async fn users_by_ids(&self, ids: &[i64]) -> Result<Vec<UserRow>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let placeholders: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT * FROM users WHERE id IN ({})",
            placeholders.join(",")
        );
        // Safe: the statement holds only placeholders generated here; the
        // ids are bound, never formatted in.
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
        for id in ids {
            query = query.bind(*id);
        }
        Ok(query.fetch_all(&self.pool).await?)
    }

    /// A user by name.
    pub async fn user_by_name(&self, username: &str) -> Result<Option<UserRow>> {
        Ok(sqlx::query_as("SELECT * FROM users WHERE username = $1")
            .bind(username)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Stores a token digest for `user_id`.
    pub async fn add_token(&self, token_hash: &[u8], user_id: i64, created_ms: i64) -> Result<()> {
        sqlx::query("INSERT INTO tokens (token_hash, user_id, created_ms) VALUES ($1, $2, $3)")
            .bind(token_hash)
            .bind(user_id)
            .bind(created_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Revokes every token of `user_id` (bot token reset).
    pub async fn revoke_tokens(&self, user_id: i64) -> Result<()> {
        sqlx::query("DELETE FROM tokens WHERE user_id = $1")
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The user a token digest belongs to.
    pub async fn user_by_token(&self, token_hash: &[u8]) -> Result<Option<UserRow>> {
        Ok(sqlx::query_as(
            "SELECT u.* FROM users u JOIN tokens t ON t.user_id = u.id WHERE t.token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?)
    }

    // ----- applications -----------------------------------------------------

    /// Creates an application and its bot user in one transaction.
    pub async fn create_application(&self, app: &ApplicationRow, bot: &UserRow) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO users (id, username, password_hash, bot, global_name, created_ms) VALUES ($1, $2, NULL, TRUE, NULL, $3)")
            .bind(bot.id)
            .bind(&bot.username)
            .bind(bot.created_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO applications (id, name, owner_id, bot_user_id, flags, description) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(app.id)
            .bind(&app.name)
            .bind(app.owner_id)
            .bind(app.bot_user_id)
            .bind(app.flags)
            .bind(&app.description)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// An application by id.
    pub async fn application(&self, id: i64) -> Result<Option<ApplicationRow>> {
        Ok(sqlx::query_as("SELECT * FROM applications WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The application whose bot is `bot_user_id`.
    pub async fn application_by_bot(&self, bot_user_id: i64) -> Result<Option<ApplicationRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM applications WHERE bot_user_id = $1")
                .bind(bot_user_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Sets an application's description.
    pub async fn set_application_description(&self, id: i64, description: &str) -> Result<()> {
        sqlx::query("UPDATE applications SET description = $2 WHERE id = $1")
            .bind(id)
            .bind(description)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// How many guilds `user_id` is a member of (an application's
    /// `approximate_guild_count`, through its bot).
    pub async fn guild_count_of(&self, user_id: i64) -> Result<i64> {
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM members WHERE user_id = $1")
            .bind(user_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(count)
    }

    /// A page of the guilds `user_id` is a member of, ordered by id: those
    /// after `after` and before `before` (exclusive), at most `limit`; with
    /// `newest_first`, the `limit` just below `before`. One query: the page,
    /// then each guild's `@everyone` and the user's roles, folded here.
    pub async fn user_guilds(
        &self,
        user_id: i64,
        after: i64,
        before: i64,
        limit: i64,
        newest_first: bool,
    ) -> Result<Vec<UserGuildRow>> {
        let order = if newest_first { "DESC" } else { "ASC" };
        // Safe: `order` is one of two literals; every value is bound.
        let sql = format!(
            "WITH page AS (SELECT guild_id FROM members WHERE user_id = $1 AND guild_id > $2 \
             AND guild_id < $3 ORDER BY guild_id {order} LIMIT $4) \
             SELECT g.id, g.name, g.owner_id, g.member_count, r.permissions FROM page p \
             JOIN guilds g ON g.id = p.guild_id LEFT JOIN roles r ON r.guild_id = g.id AND \
             (r.id = g.id OR EXISTS (SELECT 1 FROM member_roles mr WHERE mr.guild_id = g.id \
             AND mr.user_id = $1 AND mr.role_id = r.id)) ORDER BY g.id"
        );
        let rows: Vec<(i64, String, i64, i64, Option<i64>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(user_id)
                .bind(after)
                .bind(before)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
        let mut out: Vec<UserGuildRow> = Vec::new();
        for (id, name, owner_id, member_count, permissions) in rows {
            match out.last_mut() {
                Some(last) if last.id == id => last.role_permissions |= permissions.unwrap_or(0),
                _ => out.push(UserGuildRow {
                    id,
                    name,
                    owner_id,
                    member_count,
                    role_permissions: permissions.unwrap_or(0),
                }),
            }
        }
        Ok(out)
    }

    /// Sets an application's flags.
    pub async fn set_application_flags(&self, id: i64, flags: i64) -> Result<()> {
        sqlx::query("UPDATE applications SET flags = $2 WHERE id = $1")
            .bind(id)
            .bind(flags)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // ----- guilds -----------------------------------------------------------

    /// Creates a guild with its `@everyone` role, its first channel and its
    /// owner as the first member, in one transaction.
    pub async fn create_guild(
        &self,
        guild: &GuildRow,
        everyone: &RoleRow,
        first: &ChannelRow,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO guilds (id, name, owner_id, created_ms, member_count) VALUES ($1, $2, $3, $4, 1)")
            .bind(guild.id)
            .bind(&guild.name)
            .bind(guild.owner_id)
            .bind(guild.created_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO roles (id, guild_id, name, permissions, position, color, hoist, mentionable) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(everyone.id)
            .bind(everyone.guild_id)
            .bind(&everyone.name)
            .bind(everyone.permissions)
            .bind(everyone.position)
            .bind(everyone.color)
            .bind(everyone.hoist)
            .bind(everyone.mentionable)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO channels (id, guild_id, kind, name, position, topic, permission_overwrites, nsfw, rate_limit_per_user, parent_id, bitrate, user_limit, video_quality_mode, default_auto_archive_duration) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)")
            .bind(first.id)
            .bind(first.guild_id)
            .bind(first.kind)
            .bind(&first.name)
            .bind(first.position)
            .bind(&first.topic)
            .bind(first.overwrites_stored())
            .bind(first.nsfw)
            .bind(first.rate_limit_per_user)
            .bind(first.parent_id)
            .bind(first.bitrate)
            .bind(first.user_limit)
            .bind(first.video_quality_mode)
            .bind(first.default_auto_archive_duration)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO members (guild_id, user_id, joined_ms, nick) VALUES ($1, $2, $3, NULL)",
        )
        .bind(guild.id)
        .bind(guild.owner_id)
        .bind(guild.created_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Ids of the guilds `user_id` is a member of, at most `limit`.
    pub async fn guild_ids_of(&self, user_id: i64, limit: i64) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT guild_id FROM members WHERE user_id = $1 ORDER BY guild_id LIMIT $2",
        )
        .bind(user_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Ids of `user_id`'s guilds on shard `shard_id` of `num_shards`, at
    /// most `limit`. The database filters by Discord's formula so a bot's
    /// other shards' guilds are not read; callers apply
    /// `guildhall_proto::shard::receives` to what comes back, which stays
    /// the rule (a test holds the two to each other).
    pub async fn shard_guild_ids_of(
        &self,
        user_id: i64,
        shard_id: i64,
        num_shards: i64,
        limit: i64,
    ) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT guild_id FROM members WHERE user_id = $1 AND ((guild_id >> 22) % $2) = $3 \
             ORDER BY guild_id LIMIT $4",
        )
        .bind(user_id)
        .bind(num_shards.max(1))
        .bind(shard_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Counts one IDENTIFY of bot `user_id` at `now_ms` against `total`
    /// per `window_ms`. A bot already tracked costs one UPDATE (a window
    /// that has ended restarts at `now_ms`); a new one an INSERT, made only
    /// while fewer than `bots_max` rows exist (after deleting rows whose
    /// window ended, when there are that many). Concurrent IDENTIFYs of
    /// one bot on several nodes are serialised by the row; concurrent
    /// first IDENTIFYs of new bots on PostgreSQL may pass `bots_max` by
    /// the number of them.
    pub async fn start_session(
        &self,
        user_id: i64,
        now_ms: i64,
        window_ms: i64,
        total: i64,
        bots_max: i64,
    ) -> Result<SessionStart> {
        let counted = |starts: i64, window_start_ms: i64| {
            let starts = SessionStarts {
                starts,
                window_start_ms,
            };
            if starts.starts <= total {
                SessionStart::Started(starts)
            } else {
                SessionStart::Refused(starts)
            }
        };
        // A second round when the INSERT did nothing: another node may
        // have inserted this bot's row since the UPDATE (the UPDATE now
        // finds it), or the table is full (ended windows are deleted
        // first, once).
        for round in 0..2 {
            let row: Option<(i64, i64)> = sqlx::query_as(
                "UPDATE session_starts SET \
                 starts = CASE WHEN window_start_ms + $3 <= $2 THEN 1 \
                 WHEN starts <= $4 THEN starts + 1 ELSE starts END, \
                 window_start_ms = CASE WHEN window_start_ms + $3 <= $2 THEN $2 \
                 ELSE window_start_ms END \
                 WHERE user_id = $1 RETURNING starts, window_start_ms",
            )
            .bind(user_id)
            .bind(now_ms)
            .bind(window_ms)
            .bind(total)
            .fetch_optional(&self.pool)
            .await?;
            if let Some((starts, window_start_ms)) = row {
                return Ok(counted(starts, window_start_ms));
            }
            let inserted = sqlx::query(
                "INSERT INTO session_starts (user_id, window_start_ms, starts) \
                 SELECT $1, $2, 1 WHERE (SELECT COUNT(*) FROM session_starts) < $3 \
                 ON CONFLICT (user_id) DO NOTHING",
            )
            .bind(user_id)
            .bind(now_ms)
            .bind(bots_max)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok(counted(1, now_ms));
            }
            if round == 0 {
                sqlx::query("DELETE FROM session_starts WHERE window_start_ms + $1 <= $2")
                    .bind(window_ms)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(SessionStart::Untracked)
    }

    /// Admits one IDENTIFY of bot `user_id` into its `max_concurrency`
    /// bucket at `now_ms` if the bucket admitted none in the `window_ms`
    /// before. A tracked bucket costs one conditional UPDATE, which
    /// serialises concurrent IDENTIFYs of one bucket on several nodes (the
    /// row lock on PostgreSQL, the single writer on SQLite); a new one an
    /// INSERT, made only while fewer than `rows_max` rows exist (after
    /// deleting rows whose window ended, when there are that many).
    pub async fn identify_in_bucket(
        &self,
        user_id: i64,
        bucket: i64,
        now_ms: i64,
        window_ms: i64,
        rows_max: i64,
    ) -> Result<IdentifyBucket> {
        for round in 0..2 {
            let updated = sqlx::query(
                "UPDATE identify_buckets SET identified_at_ms = $3 \
                 WHERE user_id = $1 AND bucket = $2 AND identified_at_ms + $4 <= $3",
            )
            .bind(user_id)
            .bind(bucket)
            .bind(now_ms)
            .bind(window_ms)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if updated == 1 {
                return Ok(IdentifyBucket::Admitted);
            }
            let inserted = sqlx::query(
                "INSERT INTO identify_buckets (user_id, bucket, identified_at_ms) \
                 SELECT $1, $2, $3 WHERE (SELECT COUNT(*) FROM identify_buckets) < $4 \
                 ON CONFLICT (user_id, bucket) DO NOTHING",
            )
            .bind(user_id)
            .bind(bucket)
            .bind(now_ms)
            .bind(rows_max)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok(IdentifyBucket::Admitted);
            }
            // Nothing written: the bucket's row exists within its window
            // (refused), or the table is full.
            let exists: Option<(i64,)> = sqlx::query_as(
                "SELECT identified_at_ms FROM identify_buckets WHERE user_id = $1 AND bucket = $2",
            )
            .bind(user_id)
            .bind(bucket)
            .fetch_optional(&self.pool)
            .await?;
            if let Some((at_ms,)) = exists {
                if at_ms.saturating_add(window_ms) > now_ms {
                    return Ok(IdentifyBucket::Refused);
                }
                // Its window ended between the UPDATE and now (another
                // node's clock): the next round's UPDATE takes it.
                continue;
            }
            if round == 0 {
                sqlx::query("DELETE FROM identify_buckets WHERE identified_at_ms + $1 <= $2")
                    .bind(window_ms)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(IdentifyBucket::Untracked)
    }

    /// Bot `user_id`'s session starts, if it is tracked (its window may
    /// have ended: the caller compares with the clock).
    pub async fn session_starts(&self, user_id: i64) -> Result<Option<SessionStarts>> {
        let row: Option<(i64, i64)> =
            sqlx::query_as("SELECT starts, window_start_ms FROM session_starts WHERE user_id = $1")
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(starts, window_start_ms)| SessionStarts {
            starts,
            window_start_ms,
        }))
    }

    /// Everything about one guild (its owner loads this once).
    pub async fn load_guild(&self, guild_id: i64) -> Result<GuildState> {
        let guild = sqlx::query_as("SELECT * FROM guilds WHERE id = $1")
            .bind(guild_id)
            .fetch_optional(&self.pool)
            .await?;
        let channels = sqlx::query_as(
            "SELECT * FROM channels WHERE guild_id = $1 AND kind NOT IN (10, 11, 12) ORDER BY position, id",
        )
        .bind(guild_id)
        .fetch_all(&self.pool)
        .await?;
        // Archived threads stay in the store: an owner holds the active
        // ones only, as Discord's gateway syncs only those.
        let threads = sqlx::query_as(
            "SELECT * FROM channels WHERE guild_id = $1 AND kind IN (10, 11, 12) AND archived = FALSE ORDER BY id",
        )
        .bind(guild_id)
        .fetch_all(&self.pool)
        .await?;
        let thread_members = sqlx::query_as(
            "SELECT m.* FROM thread_members m JOIN channels c ON c.id = m.thread_id WHERE m.guild_id = $1 AND c.archived = FALSE ORDER BY m.thread_id, m.user_id",
        )
        .bind(guild_id)
        .fetch_all(&self.pool)
        .await?;
        let thread_last_messages = sqlx::query_as(
            "SELECT m.channel_id, MAX(m.id) FROM messages m JOIN channels c ON c.id = m.channel_id \
             WHERE c.guild_id = $1 AND c.kind IN (10, 11, 12) AND c.archived = FALSE GROUP BY m.channel_id",
        )
        .bind(guild_id)
        .fetch_all(&self.pool)
        .await?;
        let roles = sqlx::query_as("SELECT * FROM roles WHERE guild_id = $1 ORDER BY position, id")
            .bind(guild_id)
            .fetch_all(&self.pool)
            .await?;
        let members =
            sqlx::query_as("SELECT * FROM members WHERE guild_id = $1 ORDER BY joined_ms, user_id")
                .bind(guild_id)
                .fetch_all(&self.pool)
                .await?;
        let member_roles =
            sqlx::query_as("SELECT user_id, role_id FROM member_roles WHERE guild_id = $1")
                .bind(guild_id)
                .fetch_all(&self.pool)
                .await?;
        let members: Vec<MemberRow> = members;
        self.counters
            .guild_loads_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.counters
            .member_rows_loaded_total
            .fetch_add(members.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(GuildState {
            guild,
            channels,
            roles,
            members,
            member_roles,
            threads,
            thread_members,
            thread_last_messages,
        })
    }

    /// Adds a member; false if already a member.
    pub async fn add_member(&self, member: &MemberRow, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, member.guild_id, epoch).await?;
        let done = sqlx::query("INSERT INTO members (guild_id, user_id, joined_ms, nick, temporary) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING")
            .bind(member.guild_id)
            .bind(member.user_id)
            .bind(member.joined_ms)
            .bind(&member.nick)
            .bind(member.temporary)
            .execute(&mut *tx)
            .await?;
        let added = done.rows_affected() == 1;
        if added {
            sqlx::query("UPDATE guilds SET member_count = member_count + 1 WHERE id = $1")
                .bind(member.guild_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    /// Creates a channel.
    pub async fn create_channel(&self, channel: &ChannelRow, epoch: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // A guild's channel is its owner's to write; a direct message
        // channel has no owner to fence.
        if let Some(guild_id) = channel.guild_id {
            Self::fence(&mut tx, guild_id, epoch).await?;
        }
        sqlx::query("INSERT INTO channels (id, guild_id, kind, name, position, topic, permission_overwrites, nsfw, rate_limit_per_user, parent_id, bitrate, user_limit, video_quality_mode, default_auto_archive_duration, available_tags, default_reaction_emoji, default_sort_order, default_forum_layout, default_thread_rate_limit_per_user) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)")
            .bind(channel.id)
            .bind(channel.guild_id)
            .bind(channel.kind)
            .bind(&channel.name)
            .bind(channel.position)
            .bind(&channel.topic)
            .bind(channel.overwrites_stored())
            .bind(channel.nsfw)
            .bind(channel.rate_limit_per_user)
            .bind(channel.parent_id)
            .bind(channel.bitrate)
            .bind(channel.user_limit)
            .bind(channel.video_quality_mode)
            .bind(channel.default_auto_archive_duration)
            .bind(&channel.available_tags)
            .bind(&channel.default_reaction_emoji)
            .bind(channel.default_sort_order)
            .bind(channel.default_forum_layout)
            .bind(channel.default_thread_rate_limit_per_user)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Creates a thread with its first member (its starter), in one
    /// fenced transaction; false, with nothing written, if a channel with
    /// its id exists (a message starts at most one thread, and shares its
    /// id).
    pub async fn create_thread(
        &self,
        thread: &ChannelRow,
        first: &ThreadMemberRow,
        epoch: i64,
    ) -> Result<bool> {
        let guild_id = thread
            .guild_id
            .ok_or(StoreError::Conflict("a thread has a guild"))?;
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        let inserted = sqlx::query("INSERT INTO channels (id, guild_id, kind, name, position, topic, permission_overwrites, nsfw, rate_limit_per_user, parent_id, bitrate, user_limit, video_quality_mode, default_auto_archive_duration, owner_id, archived, locked, invitable, auto_archive_duration, archive_ms, thread_created_ms, member_count, message_count, total_message_sent, applied_tags) VALUES ($1, $2, $3, $4, 0, NULL, '[]', $5, $6, $7, $8, 0, 1, NULL, $9, $10, $11, $12, $13, $14, $15, 0, 0, 0, $16) ON CONFLICT DO NOTHING")
            .bind(thread.id)
            .bind(guild_id)
            .bind(thread.kind)
            .bind(&thread.name)
            .bind(thread.nsfw)
            .bind(thread.rate_limit_per_user)
            .bind(thread.parent_id)
            .bind(thread.bitrate)
            .bind(thread.owner_id)
            .bind(thread.archived)
            .bind(thread.locked)
            .bind(thread.invitable)
            .bind(thread.auto_archive_duration)
            .bind(thread.archive_ms)
            .bind(thread.thread_created_ms)
            .bind(&thread.applied_tags)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !inserted {
            return Ok(false);
        }
        Self::insert_thread_member(&mut tx, first).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn insert_thread_member(
        tx: &mut sqlx::Transaction<'static, DB>,
        member: &ThreadMemberRow,
    ) -> Result<bool> {
        let added = sqlx::query("INSERT INTO thread_members (thread_id, user_id, guild_id, join_ms, flags) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING")
            .bind(member.thread_id)
            .bind(member.user_id)
            .bind(member.guild_id)
            .bind(member.join_ms)
            .bind(member.flags)
            .execute(&mut **tx)
            .await?
            .rows_affected()
            == 1;
        if added {
            sqlx::query("UPDATE channels SET member_count = member_count + 1 WHERE id = $1")
                .bind(member.thread_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(added)
    }

    /// Adds a member to a thread (its count kept in the same
    /// transaction); false if they were one already.
    pub async fn add_thread_member(&self, member: &ThreadMemberRow, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, member.guild_id, epoch).await?;
        let added = Self::insert_thread_member(&mut tx, member).await?;
        tx.commit().await?;
        Ok(added)
    }

    /// Removes a member from a thread; false if they were none.
    pub async fn remove_thread_member(
        &self,
        guild_id: i64,
        thread_id: i64,
        user_id: i64,
        epoch: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        let removed = sqlx::query(
            "DELETE FROM thread_members WHERE guild_id = $1 AND thread_id = $2 AND user_id = $3",
        )
        .bind(guild_id)
        .bind(thread_id)
        .bind(user_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if removed {
            sqlx::query("UPDATE channels SET member_count = member_count - 1 WHERE id = $1")
                .bind(thread_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    /// `user_id`'s membership of a thread, if they joined it.
    pub async fn thread_member(
        &self,
        thread_id: i64,
        user_id: i64,
    ) -> Result<Option<ThreadMemberRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM thread_members WHERE thread_id = $1 AND user_id = $2")
                .bind(thread_id)
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// A thread's members above `after` (a user id; 0 for all), by user
    /// id, at most `limit`.
    pub async fn thread_members(
        &self,
        thread_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ThreadMemberRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM thread_members WHERE thread_id = $1 AND user_id > $2 ORDER BY user_id LIMIT $3",
        )
        .bind(thread_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Writes a thread's own fields (name, slowmode, archive state and
    /// settings); false if the guild has no such thread.
    pub async fn update_thread(&self, thread: &ChannelRow, epoch: i64) -> Result<bool> {
        let guild_id = thread
            .guild_id
            .ok_or(StoreError::Conflict("a thread has a guild"))?;
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        let done = sqlx::query(
            "UPDATE channels SET name = $3, rate_limit_per_user = $4, archived = $5, locked = $6, \
             invitable = $7, auto_archive_duration = $8, archive_ms = $9, applied_tags = $10 \
             WHERE id = $1 AND guild_id = $2 AND kind IN (10, 11, 12)",
        )
        .bind(thread.id)
        .bind(guild_id)
        .bind(&thread.name)
        .bind(thread.rate_limit_per_user)
        .bind(thread.archived)
        .bind(thread.locked)
        .bind(thread.invitable)
        .bind(thread.auto_archive_duration)
        .bind(thread.archive_ms)
        .bind(&thread.applied_tags)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// A page of `parent_id`'s archived threads of the kinds in `kinds`,
    /// newest archive first, archived before `before_ms` (exclusive), at
    /// most `limit`.
    pub async fn archived_threads(
        &self,
        parent_id: i64,
        kinds: &[i64],
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<ChannelRow>> {
        // Two kinds at most (public and announcement, or private): bound
        // as two parameters, the second repeating the first when alone.
        let first = kinds.first().copied().unwrap_or(-1);
        let second = kinds.get(1).copied().unwrap_or(first);
        Ok(sqlx::query_as(
            "SELECT * FROM channels WHERE parent_id = $1 AND kind IN ($2, $3) AND archived = TRUE \
             AND archive_ms < $4 ORDER BY archive_ms DESC, id DESC LIMIT $5",
        )
        .bind(parent_id)
        .bind(first)
        .bind(second)
        .bind(before_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// A page of `parent_id`'s archived private threads that `user_id`
    /// joined, by id descending, below `before` (exclusive), at most
    /// `limit`.
    pub async fn joined_archived_threads(
        &self,
        parent_id: i64,
        user_id: i64,
        before: i64,
        limit: i64,
    ) -> Result<Vec<ChannelRow>> {
        Ok(sqlx::query_as(
            "SELECT c.* FROM channels c JOIN thread_members m ON m.thread_id = c.id \
             WHERE c.parent_id = $1 AND c.kind = 12 AND c.archived = TRUE AND m.user_id = $2 \
             AND c.id < $3 ORDER BY c.id DESC LIMIT $4",
        )
        .bind(parent_id)
        .bind(user_id)
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Counts a message sent in a thread (`message_count` and
    /// `total_message_sent`); a channel that is not a thread is left as
    /// it is.
    pub async fn count_thread_message(&self, thread_id: i64) -> Result<()> {
        sqlx::query("UPDATE channels SET message_count = message_count + 1, total_message_sent = total_message_sent + 1 WHERE id = $1 AND kind IN (10, 11, 12)")
            .bind(thread_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A channel by id.
    pub async fn channel(&self, id: i64) -> Result<Option<ChannelRow>> {
        Ok(sqlx::query_as("SELECT * FROM channels WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    // ----- messages ---------------------------------------------------------

    /// Stores a message; returns once it is durable (group commit).
    pub async fn insert_message(&self, message: &MessageRow) -> Result<()> {
        let (ack, done) = tokio::sync::oneshot::channel();
        self.writes
            .try_send(MessageWrite {
                row: message.clone(),
                ack,
            })
            .map_err(|_| StoreError::Busy)?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => match StoreError::from(error) {
                StoreError::Conflict(_) => Err(StoreError::Conflict("message id")),
                other => Err(other),
            },
            Err(_) => Err(StoreError::Busy),
        }
    }

    /// A message of a channel.
    pub async fn message(&self, channel_id: i64, id: i64) -> Result<Option<MessageRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM messages WHERE channel_id = $1 AND id = $2")
                .bind(channel_id)
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Newest first, before `before` (exclusive) if given, at most `limit`;
    /// ephemeral messages (`visible_to`) are left out.
    pub async fn messages(
        &self,
        channel_id: i64,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<MessageRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM messages WHERE channel_id = $1 AND id < $2 AND visible_to IS NULL ORDER BY id DESC LIMIT $3",
        )
        .bind(channel_id)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Edits a message's content; false if it does not exist.
    pub async fn edit_message(
        &self,
        channel_id: i64,
        id: i64,
        content: &str,
        edited_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE messages SET content = $3, edited_ms = $4 WHERE channel_id = $1 AND id = $2",
        )
        .bind(channel_id)
        .bind(id)
        .bind(content)
        .bind(edited_ms)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Rewrites a message's content, flags, components, embeds,
    /// attachments and edit time (an edit, or an interaction's response
    /// updated by its application); false if it does not exist.
    pub async fn update_message(&self, row: &MessageRow) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE messages SET content = $3, edited_ms = $4, flags = $5, components = $6, embeds = $7, mentions = $8, attachments = $9 WHERE channel_id = $1 AND id = $2",
        )
        .bind(row.channel_id)
        .bind(row.id)
        .bind(&row.content)
        .bind(row.edited_ms)
        .bind(row.flags)
        .bind(&row.components)
        .bind(&row.embeds)
        .bind(&row.mentions)
        .bind(&row.attachments)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a message; false if it did not exist.
    pub async fn delete_message(&self, channel_id: i64, id: i64) -> Result<bool> {
        // The bulk path also removes the message's reactions.
        Ok(self.delete_messages(channel_id, &[id]).await?.len() == 1)
    }

    /// Changes a channel's name, topic, position and overwrites (in its
    /// guild only);
    /// false if the guild has no such channel.
    pub async fn update_channel(&self, channel: &ChannelRow, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // A guild's channel is its owner's to write; a direct message
        // channel has no owner to fence.
        if let Some(guild_id) = channel.guild_id {
            Self::fence(&mut tx, guild_id, epoch).await?;
        }
        let done = sqlx::query(
            "UPDATE channels SET name = $2, topic = $3, position = $4, permission_overwrites = $6, \
             kind = $7, nsfw = $8, rate_limit_per_user = $9, parent_id = $10, bitrate = $11, \
             user_limit = $12, video_quality_mode = $13, default_auto_archive_duration = $14, \
             available_tags = $15, default_reaction_emoji = $16, default_sort_order = $17, \
             default_forum_layout = $18, default_thread_rate_limit_per_user = $19 \
             WHERE id = $1 AND guild_id = $5",
        )
        .bind(channel.id)
        .bind(&channel.name)
        .bind(&channel.topic)
        .bind(channel.position)
        .bind(channel.guild_id)
        .bind(channel.overwrites_stored())
        .bind(channel.kind)
        .bind(channel.nsfw)
        .bind(channel.rate_limit_per_user)
        .bind(channel.parent_id)
        .bind(channel.bitrate)
        .bind(channel.user_limit)
        .bind(channel.video_quality_mode)
        .bind(channel.default_auto_archive_duration)
        .bind(&channel.available_tags)
        .bind(&channel.default_reaction_emoji)
        .bind(channel.default_sort_order)
        .bind(channel.default_forum_layout)
        .bind(channel.default_thread_rate_limit_per_user)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Writes several of a guild's channels at once (bulk positions), in
    /// one transaction: all or none. False if one is not the guild's
    /// (then none is written).
    pub async fn update_channels(
        &self,
        guild_id: i64,
        channels: &[ChannelRow],
        epoch: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        for channel in channels {
            let done = sqlx::query(
                "UPDATE channels SET position = $2, parent_id = $3, permission_overwrites = $4 \
                 WHERE id = $1 AND guild_id = $5",
            )
            .bind(channel.id)
            .bind(channel.position)
            .bind(channel.parent_id)
            .bind(channel.overwrites_stored())
            .bind(guild_id)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() != 1 {
                return Ok(false);
            }
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Sets several of a guild's role positions at once, in one
    /// transaction (ids that are not the guild's roles change nothing).
    pub async fn set_role_positions(
        &self,
        guild_id: i64,
        positions: &[(i64, i64)],
        epoch: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        for (role_id, position) in positions {
            sqlx::query("UPDATE roles SET position = $2 WHERE id = $1 AND guild_id = $3")
                .bind(role_id)
                .bind(position)
                .bind(guild_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Deletes a guild's channel with its messages, reactions and invites;
    /// false if the guild has no such channel.
    pub async fn delete_channel(&self, guild_id: i64, id: i64, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        let found: Option<(i64,)> =
            sqlx::query_as("SELECT id FROM channels WHERE id = $1 AND guild_id = $2")
                .bind(id)
                .bind(guild_id)
                .fetch_optional(&mut *tx)
                .await?;
        if found.is_none() {
            return Ok(false);
        }
        // A channel's threads go with it, their messages and members
        // first (the foreign keys hold on both databases).
        let threads: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM channels WHERE parent_id = $1 AND guild_id = $2 AND kind IN (10, 11, 12)",
        )
        .bind(id)
        .bind(guild_id)
        .fetch_all(&mut *tx)
        .await?;
        for thread in threads.into_iter().map(|(thread,)| thread).chain([id]) {
            sqlx::query("DELETE FROM reactions WHERE message_id IN (SELECT id FROM messages WHERE channel_id = $1)")
                .bind(thread)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM messages WHERE channel_id = $1")
                .bind(thread)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM thread_members WHERE thread_id = $1")
                .bind(thread)
                .execute(&mut *tx)
                .await?;
            if thread != id {
                sqlx::query("DELETE FROM channels WHERE id = $1")
                    .bind(thread)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query("DELETE FROM invites WHERE channel_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM dm_members WHERE channel_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        // A channel's webhooks go with it (their messages went above).
        sqlx::query("DELETE FROM webhooks WHERE channel_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM channels WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Creates or replaces a role of `role.guild_id`; false if the id is
    /// another guild's role (which is left as it is).
    pub async fn upsert_role(&self, role: &RoleRow, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, role.guild_id, epoch).await?;
        let done = sqlx::query(
            "INSERT INTO roles (id, guild_id, name, permissions, position, color, hoist, mentionable, bot_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO UPDATE SET name = $3, \
             permissions = $4, position = $5, color = $6, hoist = $7, mentionable = $8, bot_id = $9 \
             WHERE roles.guild_id = $2",
        )
        .bind(role.id)
        .bind(role.guild_id)
        .bind(&role.name)
        .bind(role.permissions)
        .bind(role.position)
        .bind(role.color)
        .bind(role.hoist)
        .bind(role.mentionable)
        .bind(role.bot_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a role and its assignments.
    pub async fn delete_role(&self, guild_id: i64, role_id: i64, epoch: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        sqlx::query("DELETE FROM member_roles WHERE guild_id = $1 AND role_id = $2")
            .bind(guild_id)
            .bind(role_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM roles WHERE guild_id = $1 AND id = $2")
            .bind(guild_id)
            .bind(role_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces a member's nickname and roles; role ids that are not the
    /// guild's, and repeats, are not assigned.
    pub async fn update_member(
        &self,
        guild_id: i64,
        user_id: i64,
        nick: Option<&str>,
        roles: &[i64],
        timeout_until_ms: Option<i64>,
        epoch: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        sqlx::query("UPDATE members SET nick = $3, communication_disabled_until_ms = $4 WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .bind(nick)
            .bind(timeout_until_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM member_roles WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        for role in roles {
            sqlx::query(
                "INSERT INTO member_roles (guild_id, user_id, role_id) SELECT $1, $2, $3 \
                 WHERE EXISTS (SELECT 1 FROM roles WHERE id = $3 AND guild_id = $1) ON CONFLICT DO NOTHING",
            )
            .bind(guild_id)
            .bind(user_id)
            .bind(role)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Removes a member and their roles.
    pub async fn remove_member(&self, guild_id: i64, user_id: i64, epoch: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        Self::leave_threads(&mut tx, guild_id, user_id).await?;
        sqlx::query("DELETE FROM member_roles WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        let removed = sqlx::query("DELETE FROM members WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if removed == 1 {
            sqlx::query("UPDATE guilds SET member_count = member_count - 1 WHERE id = $1")
                .bind(guild_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A member leaving the guild leaves its threads (their counts kept).
    async fn leave_threads(
        tx: &mut sqlx::Transaction<'static, DB>,
        guild_id: i64,
        user_id: i64,
    ) -> Result<()> {
        sqlx::query("UPDATE channels SET member_count = member_count - 1 WHERE id IN (SELECT thread_id FROM thread_members WHERE guild_id = $1 AND user_id = $2)")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut **tx)
            .await?;
        sqlx::query("DELETE FROM thread_members WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Bans a user from a guild; a member is removed (with their roles, the
    /// member count kept) in the same transaction. Banning a banned user
    /// changes nothing.
    pub async fn ban_member(&self, ban: &BanRow, epoch: i64) -> Result<BanWrite> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, ban.guild_id, epoch).await?;
        let banned = sqlx::query(
            "INSERT INTO bans (guild_id, user_id, reason, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(ban.guild_id)
        .bind(ban.user_id)
        .bind(&ban.reason)
        .bind(ban.created_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        Self::leave_threads(&mut tx, ban.guild_id, ban.user_id).await?;
        sqlx::query("DELETE FROM member_roles WHERE guild_id = $1 AND user_id = $2")
            .bind(ban.guild_id)
            .bind(ban.user_id)
            .execute(&mut *tx)
            .await?;
        let removed = sqlx::query("DELETE FROM members WHERE guild_id = $1 AND user_id = $2")
            .bind(ban.guild_id)
            .bind(ban.user_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if removed == 1 {
            sqlx::query("UPDATE guilds SET member_count = member_count - 1 WHERE id = $1")
                .bind(ban.guild_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(BanWrite {
            banned,
            was_member: removed == 1,
        })
    }

    /// Appends an audit log entry, then forgets the guild's entries older
    /// than `oldest_id` (the retention) and those past the newest
    /// `keep_max`.
    pub async fn add_audit_entry(
        &self,
        entry: &AuditRow,
        oldest_id: i64,
        keep_max: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO audit_log (id, guild_id, user_id, target_id, action_type, changes, options, reason) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(entry.id)
        .bind(entry.guild_id)
        .bind(entry.user_id)
        .bind(entry.target_id)
        .bind(entry.action_type)
        .bind(&entry.changes)
        .bind(&entry.options)
        .bind(&entry.reason)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM audit_log WHERE guild_id = $1 AND id < $2")
            .bind(entry.guild_id)
            .bind(oldest_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM audit_log WHERE guild_id = $1 AND id <= \
             (SELECT id FROM audit_log WHERE guild_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        )
        .bind(entry.guild_id)
        .bind(keep_max)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A page of a guild's audit log: newest first below `before` (> 0),
    /// or, with `after` (> 0) and no `before`, oldest first above it; only
    /// `user_id`'s (> 0) and `action_type`'s (> 0) when given.
    pub async fn audit_entries(
        &self,
        guild_id: i64,
        user_id: i64,
        action_type: i64,
        before: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditRow>> {
        let ascending = before == 0 && after > 0;
        let sql = format!(
            "SELECT * FROM audit_log WHERE guild_id = $1 AND ($2 = 0 OR user_id = $2) \
             AND ($3 = 0 OR action_type = $3) AND ($4 = 0 OR id < $4) AND id > $5 \
             ORDER BY id {} LIMIT $6",
            if ascending { "ASC" } else { "DESC" }
        );
        // Safe: the statement's only formatted part is one of two fixed
        // words; every value is bound.
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(guild_id)
            .bind(user_id)
            .bind(action_type)
            .bind(before)
            .bind(if before == 0 { after } else { 0 })
            .bind(limit)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Lifts a ban; false if there was none.
    pub async fn unban_member(&self, guild_id: i64, user_id: i64, epoch: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        Self::fence(&mut tx, guild_id, epoch).await?;
        let lifted = sqlx::query("DELETE FROM bans WHERE guild_id = $1 AND user_id = $2")
            .bind(guild_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(lifted == 1)
    }

    /// A user's ban in a guild, if any.
    pub async fn ban(&self, guild_id: i64, user_id: i64) -> Result<Option<BanRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM bans WHERE guild_id = $1 AND user_id = $2")
                .bind(guild_id)
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// A page of a guild's bans in ascending user id: the first `limit`
    /// after `after` or, with `before` (> 0, which wins), the last `limit`
    /// before it.
    pub async fn bans(
        &self,
        guild_id: i64,
        after: i64,
        before: i64,
        limit: i64,
    ) -> Result<Vec<BanRow>> {
        if before > 0 {
            let mut page: Vec<BanRow> = sqlx::query_as(
                "SELECT * FROM bans WHERE guild_id = $1 AND user_id < $2 ORDER BY user_id DESC LIMIT $3",
            )
            .bind(guild_id)
            .bind(before)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
            page.reverse();
            return Ok(page);
        }
        Ok(sqlx::query_as(
            "SELECT * FROM bans WHERE guild_id = $1 AND user_id > $2 ORDER BY user_id LIMIT $3",
        )
        .bind(guild_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The newest messages of `author_id` in a guild's channels from
    /// message id `since_id` on, at most `limit`: (channel, message).
    pub async fn messages_by_author_since(
        &self,
        guild_id: i64,
        author_id: i64,
        since_id: i64,
        limit: i64,
    ) -> Result<Vec<(i64, i64)>> {
        Ok(sqlx::query_as(
            "SELECT channel_id, id FROM messages WHERE guild_id = $1 AND author_id = $2 AND id >= $3 ORDER BY id DESC LIMIT $4",
        )
        .bind(guild_id)
        .bind(author_id)
        .bind(since_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes those of `ids` that are messages of `channel_id`, with
    /// their reactions; returns the ids it deleted. Ids of other channels
    /// (or guilds) are left alone, reactions included.
    pub async fn delete_messages(&self, channel_id: i64, ids: &[i64]) -> Result<Vec<i64>> {
        Ok(self
            .delete_messages_with_files(channel_id, ids)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// [`SqlStore::delete_messages`], answering each deleted message's
    /// attachments (as stored) with its id, so their files can go too.
    pub async fn delete_messages_with_files(
        &self,
        channel_id: i64,
        ids: &[i64],
    ) -> Result<Vec<(i64, Option<String>)>> {
        let mut tx = self.pool.begin().await?;
        let mut deleted = Vec::with_capacity(ids.len());
        for id in ids {
            let found: Option<(i64, Option<String>)> = sqlx::query_as(
                "DELETE FROM messages WHERE channel_id = $1 AND id = $2 RETURNING id, attachments",
            )
            .bind(channel_id)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            // Reactions only go with a message of this channel that was
            // really deleted, never by message id alone.
            if let Some((_, attachments)) = found {
                sqlx::query("DELETE FROM reactions WHERE message_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                deleted.push((*id, attachments));
            }
        }
        if !deleted.is_empty() {
            // A thread counts the messages it holds.
            sqlx::query("UPDATE channels SET message_count = message_count - $2 WHERE id = $1 AND kind IN (10, 11, 12)")
                .bind(channel_id)
                .bind(i64::try_from(deleted.len()).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Renames a guild.
    pub async fn rename_guild(&self, id: i64, name: &str, epoch: i64) -> Result<()> {
        // One statement: the name changes only under the owner's epoch.
        let done = sqlx::query("UPDATE guilds SET name = $2 WHERE id = $1 AND owner_epoch = $3")
            .bind(id)
            .bind(name)
            .bind(epoch)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::StaleEpoch);
        }
        Ok(())
    }

    /// Claims `guild_id` for a new owner: the next epoch (one atomic
    /// increment, so two claimants get distinct epochs and the later one
    /// wins); `None` if there is no such guild.
    pub async fn claim_guild(&self, guild_id: i64) -> Result<Option<i64>> {
        let row: Option<(i64,)> = sqlx::query_as(
            "UPDATE guilds SET owner_epoch = owner_epoch + 1 WHERE id = $1 RETURNING owner_epoch",
        )
        .bind(guild_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(epoch,)| epoch))
    }

    /// The cluster-wide setting `name`: the value stored first, by any
    /// node (`value` if this call is the first), so every node reads the
    /// same one.
    pub async fn setting_or_insert(&self, name: &str, value: &str) -> Result<String> {
        sqlx::query(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(value)
        .execute(&self.pool)
        .await?;
        let (value,): (String,) = sqlx::query_as("SELECT value FROM settings WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(value)
    }

    /// The epoch of `guild_id`'s current owner (its last claim); `None` if
    /// there is no such guild. An owner that reads another than its own
    /// was superseded.
    pub async fn owner_epoch(&self, guild_id: i64) -> Result<Option<i64>> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT owner_epoch FROM guilds WHERE id = $1")
            .bind(guild_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(epoch,)| epoch))
    }

    /// Guild ids above `after`, ascending, at most `limit` (placement's
    /// input: every node pages through the same list).
    pub async fn guild_ids_after(&self, after: i64, limit: i64) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> =
            sqlx::query_as("SELECT id FROM guilds WHERE id > $1 ORDER BY id LIMIT $2")
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// The fence of an owner's write, first in its transaction: a no-op
    /// update of the guild row under the owner's epoch. It takes the row's
    /// write lock (PostgreSQL's row lock, SQLite's database write lock)
    /// until the commit, so a concurrent claim waits for this write or
    /// this write sees the claim and is refused; never both.
    async fn fence(
        tx: &mut sqlx::Transaction<'static, DB>,
        guild_id: i64,
        epoch: i64,
    ) -> Result<()> {
        let done = sqlx::query(
            "UPDATE guilds SET owner_epoch = owner_epoch WHERE id = $1 AND owner_epoch = $2",
        )
        .bind(guild_id)
        .bind(epoch)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::StaleEpoch);
        }
        Ok(())
    }

    /// Deletes a guild and everything in it, in one transaction.
    pub async fn delete_guild(&self, id: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for statement in [
            "DELETE FROM reactions WHERE message_id IN (SELECT id FROM messages WHERE guild_id = $1)",
            "DELETE FROM messages WHERE guild_id = $1",
            "DELETE FROM invites WHERE guild_id = $1",
            "DELETE FROM webhooks WHERE guild_id = $1",
            "DELETE FROM member_roles WHERE guild_id = $1",
            "DELETE FROM thread_members WHERE guild_id = $1",
            "DELETE FROM members WHERE guild_id = $1",
            "DELETE FROM bans WHERE guild_id = $1",
            "DELETE FROM audit_log WHERE guild_id = $1",
            "DELETE FROM roles WHERE guild_id = $1",
            "DELETE FROM channels WHERE guild_id = $1",
            "DELETE FROM application_commands WHERE guild_id = $1",
            "DELETE FROM guilds WHERE id = $1",
        ] {
            sqlx::query(statement).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Changes a user's display name (and username, if given and free).
    pub async fn update_user(
        &self,
        id: i64,
        username: Option<&str>,
        global_name: Option<Option<&str>>,
    ) -> Result<()> {
        if let Some(username) = username {
            sqlx::query("UPDATE users SET username = $2 WHERE id = $1")
                .bind(id)
                .bind(username)
                .execute(&self.pool)
                .await?;
        }
        if let Some(global_name) = global_name {
            sqlx::query("UPDATE users SET global_name = $2 WHERE id = $1")
                .bind(id)
                .bind(global_name)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    // ----- reactions --------------------------------------------------------

    /// Adds a reaction to a message of `channel_id`, unless its emoji is new
    /// to the message and the message carries `emoji_max` distinct emoji
    /// (counted under the message's lock, so two new emoji added at once
    /// cannot both take the last place), or the user may not add emoji
    /// (`may_add_emoji` false: Discord's ADD_REACTIONS, needed only by the
    /// first to react with one; decided under the same lock, so an emoji
    /// removed meanwhile is not joined as if it were still there).
    pub async fn add_reaction(
        &self,
        channel_id: i64,
        message_id: i64,
        emoji: &str,
        user_id: i64,
        emoji_max: i64,
        may_add_emoji: bool,
    ) -> Result<ReactionWrite> {
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
        let sql = format!(
            "SELECT id FROM messages WHERE id = $1 AND channel_id = $2{}",
            DB::FOR_UPDATE
        );
        // Safe: the suffix is one of the dialects' literals; the ids are bound.
        let found: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(message_id)
            .bind(channel_id)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Ok(ReactionWrite::Missing);
        }
        // The emoji's first row is one primary-key probe; the distinct
        // count, which reads every reaction of the message, only runs for
        // an emoji the message does not carry yet.
        let present: Option<(i64,)> = sqlx::query_as(
            "SELECT user_id FROM reactions WHERE message_id = $1 AND emoji = $2 LIMIT 1",
        )
        .bind(message_id)
        .bind(emoji)
        .fetch_optional(&mut *tx)
        .await?;
        if present.is_none() {
            if !may_add_emoji {
                return Ok(ReactionWrite::NewEmojiForbidden);
            }
            let (distinct,): (i64,) =
                sqlx::query_as("SELECT COUNT(DISTINCT emoji) FROM reactions WHERE message_id = $1")
                    .bind(message_id)
                    .fetch_one(&mut *tx)
                    .await?;
            if distinct >= emoji_max {
                return Ok(ReactionWrite::Full);
            }
        }
        let done = sqlx::query(
            "INSERT INTO reactions (message_id, emoji, user_id) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(message_id)
        .bind(emoji)
        .bind(user_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(if done.rows_affected() == 1 {
            ReactionWrite::Added
        } else {
            ReactionWrite::AlreadyThere
        })
    }

    /// Removes a reaction from a message of `channel_id`; false if it was
    /// not there.
    pub async fn remove_reaction(
        &self,
        channel_id: i64,
        message_id: i64,
        emoji: &str,
        user_id: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM reactions WHERE message_id = $2 AND emoji = $3 AND user_id = $4 \
             AND EXISTS (SELECT 1 FROM messages WHERE id = $2 AND channel_id = $1)",
        )
        .bind(channel_id)
        .bind(message_id)
        .bind(emoji)
        .bind(user_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// (emoji, count) of the reactions of a message of `channel_id`.
    pub async fn reactions(&self, channel_id: i64, message_id: i64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT r.emoji, COUNT(*) FROM reactions r JOIN messages m ON m.id = r.message_id \
             WHERE m.channel_id = $1 AND r.message_id = $2 GROUP BY r.emoji ORDER BY r.emoji",
        )
        .bind(channel_id)
        .bind(message_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The reactions of the messages `message_ids` of `channel_id` (a page
    /// of them; the caller bounds it): one row per message and emoji with
    /// its count and whether `user_id` reacted, by message id, then by
    /// emoji key in byte order (the table keeps no time a reaction was
    /// added, so Discord's first-added order cannot be rebuilt). At most
    /// `per_message_max` emoji of each message: a message carrying more
    /// (stored before a lower limit was configured) shows its first ones
    /// and leaves the page's other messages whole.
    pub async fn message_reactions(
        &self,
        channel_id: i64,
        message_ids: &[i64],
        user_id: i64,
        per_message_max: i64,
    ) -> Result<Vec<ReactionCount>> {
        if message_ids.is_empty() {
            return Ok(vec![]);
        }
        let placeholders: Vec<String> = (4..4 + message_ids.len())
            .map(|i| format!("${i}"))
            .collect();
        let sql = format!(
            "SELECT message_id, emoji, users, mine FROM (\
             SELECT r.message_id, r.emoji, COUNT(*) AS users, \
             COUNT(CASE WHEN r.user_id = $2 THEN 1 END) AS mine, \
             ROW_NUMBER() OVER (PARTITION BY r.message_id ORDER BY r.emoji{order}) AS place \
             FROM reactions r JOIN messages m ON m.id = r.message_id \
             WHERE m.channel_id = $1 AND r.message_id IN ({ids}) \
             GROUP BY r.message_id, r.emoji) AS counted \
             WHERE place <= $3 ORDER BY message_id, emoji{order}",
            order = DB::BYTEWISE,
            ids = placeholders.join(","),
        );
        // Safe: the statement holds only placeholders generated here and
        // the dialect's collation literal; every value is bound.
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(channel_id)
            .bind(user_id)
            .bind(per_message_max);
        for id in message_ids {
            query = query.bind(*id);
        }
        let rows: Vec<(i64, String, i64, i64)> = query.fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|(message_id, emoji, count, mine)| ReactionCount {
                message_id,
                emoji,
                count,
                me: mine > 0,
            })
            .collect())
    }

    /// The users who reacted to a message of `channel_id` with `emoji`,
    /// by user id ascending (Discord's order), those above `after` only,
    /// at most `limit`.
    pub async fn reaction_users(
        &self,
        channel_id: i64,
        message_id: i64,
        emoji: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<UserRow>> {
        Ok(sqlx::query_as(
            "SELECT u.* FROM reactions r JOIN users u ON u.id = r.user_id \
             WHERE r.message_id = $2 AND r.emoji = $3 AND r.user_id > $4 \
             AND EXISTS (SELECT 1 FROM messages WHERE id = $2 AND channel_id = $1) \
             ORDER BY r.user_id LIMIT $5",
        )
        .bind(channel_id)
        .bind(message_id)
        .bind(emoji)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Removes every reaction with `emoji` from a message of `channel_id`;
    /// false if there was none.
    pub async fn remove_emoji_reactions(
        &self,
        channel_id: i64,
        message_id: i64,
        emoji: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM reactions WHERE message_id = $2 AND emoji = $3 \
             AND EXISTS (SELECT 1 FROM messages WHERE id = $2 AND channel_id = $1)",
        )
        .bind(channel_id)
        .bind(message_id)
        .bind(emoji)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Removes every reaction from a message of `channel_id`; false if
    /// there was none.
    pub async fn remove_all_reactions(&self, channel_id: i64, message_id: i64) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM reactions WHERE message_id = $2 \
             AND EXISTS (SELECT 1 FROM messages WHERE id = $2 AND channel_id = $1)",
        )
        .bind(channel_id)
        .bind(message_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    // ----- pins -------------------------------------------------------------

    /// Opens a [`Dialect::BEGIN_WRITE`] transaction holding the lock on
    /// `channel_id`'s row, so a pin count and the pin it allows hold until
    /// the commit (two concurrent pins cannot both take the last place).
    async fn begin_channel_write(&self, channel_id: i64) -> Result<sqlx::Transaction<'static, DB>> {
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
        let sql = format!("SELECT id FROM channels WHERE id = $1{}", DB::FOR_UPDATE);
        // Safe: the suffix is one of the dialects' literals; the id is bound.
        let _: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(channel_id)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// Pins a message of `channel_id` at `now_ms`, unless the channel holds
    /// `pins_max` pins. The time stored is after the channel's newest pin
    /// (a millisecond later if the clock has not moved past it), so a
    /// channel's pin times are distinct and `before` pages without ties.
    pub async fn pin_message(
        &self,
        channel_id: i64,
        id: i64,
        now_ms: i64,
        pins_max: i64,
    ) -> Result<PinWrite> {
        let mut tx = self.begin_channel_write(channel_id).await?;
        // Ephemeral messages exist for one reader and are never pinned.
        let found: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT pinned_ms FROM messages WHERE channel_id = $1 AND id = $2 AND visible_to IS NULL",
        )
        .bind(channel_id)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        match found {
            None => return Ok(PinWrite::Missing),
            Some((Some(_),)) => return Ok(PinWrite::AlreadyPinned),
            Some((None,)) => {}
        }
        let (pins, newest_ms): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MAX(pinned_ms) FROM messages WHERE channel_id = $1 AND pinned_ms IS NOT NULL",
        )
        .bind(channel_id)
        .fetch_one(&mut *tx)
        .await?;
        if pins >= pins_max {
            return Ok(PinWrite::Full);
        }
        let pinned_ms = newest_ms.map_or(now_ms, |newest| now_ms.max(newest.saturating_add(1)));
        sqlx::query("UPDATE messages SET pinned_ms = $3 WHERE channel_id = $1 AND id = $2")
            .bind(channel_id)
            .bind(id)
            .bind(pinned_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(PinWrite::Pinned(pinned_ms))
    }

    /// Unpins a message of `channel_id`; reports the channel's newest
    /// remaining pin, read in the same transaction (CHANNEL_PINS_UPDATE's
    /// `last_pin_timestamp`).
    pub async fn unpin_message(&self, channel_id: i64, id: i64) -> Result<UnpinWrite> {
        let mut tx = self.begin_channel_write(channel_id).await?;
        let found: Option<(Option<i64>,)> =
            sqlx::query_as("SELECT pinned_ms FROM messages WHERE channel_id = $1 AND id = $2")
                .bind(channel_id)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        match found {
            None => return Ok(UnpinWrite::Missing),
            Some((None,)) => return Ok(UnpinWrite::NotPinned),
            Some((Some(_),)) => {}
        }
        sqlx::query("UPDATE messages SET pinned_ms = NULL WHERE channel_id = $1 AND id = $2")
            .bind(channel_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let (newest_ms,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(pinned_ms) FROM messages WHERE channel_id = $1 AND pinned_ms IS NOT NULL",
        )
        .bind(channel_id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(UnpinWrite::Unpinned(newest_ms))
    }

    /// A channel's pins, newest pin first, pinned before `before_ms`
    /// (exclusive) if given, at most `limit`.
    pub async fn pins(
        &self,
        channel_id: i64,
        before_ms: Option<i64>,
        limit: i64,
    ) -> Result<Vec<PinRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM messages WHERE channel_id = $1 AND pinned_ms IS NOT NULL AND pinned_ms < $2 \
             ORDER BY pinned_ms DESC LIMIT $3",
        )
        .bind(channel_id)
        .bind(before_ms.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// (message id, pinned at) of the pinned messages of `channel_id` with
    /// ids in `first_id..=last_id`: what a page of messages needs for its
    /// `pinned` fields, read from the channel's pins alone (at most
    /// `pins_per_channel_max` rows, whatever the page).
    pub async fn pinned_between(
        &self,
        channel_id: i64,
        first_id: i64,
        last_id: i64,
    ) -> Result<Vec<(i64, i64)>> {
        Ok(sqlx::query_as(
            "SELECT id, pinned_ms FROM messages WHERE channel_id = $1 AND pinned_ms IS NOT NULL \
             AND id >= $2 AND id <= $3",
        )
        .bind(channel_id)
        .bind(first_id)
        .bind(last_id)
        .fetch_all(&self.pool)
        .await?)
    }

    // ----- direct messages --------------------------------------------------

    /// The DM channel between two users, creating it (with `new_id`) if
    /// needed.
    pub async fn dm_channel(&self, a: i64, b: i64, new_id: i64) -> Result<ChannelRow> {
        let existing: Option<(i64,)> = sqlx::query_as(
            "SELECT x.channel_id FROM dm_members x JOIN dm_members y ON x.channel_id = y.channel_id \
             WHERE x.user_id = $1 AND y.user_id = $2 LIMIT 1",
        )
        .bind(a)
        .bind(b)
        .fetch_optional(&self.pool)
        .await?;
        if let Some((id,)) = existing
            && let Some(channel) = self.channel(id).await?
        {
            return Ok(channel);
        }
        let channel = ChannelRow {
            permission_overwrites: "[]".into(),
            id: new_id,
            guild_id: None,
            kind: 1,
            name: String::new(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO channels (id, guild_id, kind, name, position, topic) VALUES ($1, NULL, 1, '', 0, NULL)")
            .bind(new_id)
            .execute(&mut *tx)
            .await?;
        for user in [a, b] {
            sqlx::query("INSERT INTO dm_members (channel_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(new_id)
                .bind(user)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(channel)
    }

    /// Who is in a DM channel.
    pub async fn dm_members(&self, channel_id: i64) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> =
            sqlx::query_as("SELECT user_id FROM dm_members WHERE channel_id = $1 ORDER BY user_id")
                .bind(channel_id)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    // ----- invites ----------------------------------------------------------

    /// Creates an invite.
    pub async fn create_invite(&self, invite: &InviteRow) -> Result<()> {
        sqlx::query("INSERT INTO invites (code, guild_id, channel_id, inviter_id, uses, max_uses, created_ms, max_age_s, expires_ms, temporary, target_type, target_user_id, target_application_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)")
            .bind(&invite.code)
            .bind(invite.guild_id)
            .bind(invite.channel_id)
            .bind(invite.inviter_id)
            .bind(invite.uses)
            .bind(invite.max_uses)
            .bind(invite.created_ms)
            .bind(invite.max_age_s)
            .bind(invite.expires_ms)
            .bind(invite.temporary)
            .bind(invite.target_type)
            .bind(invite.target_user_id)
            .bind(invite.target_application_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// An unexpired invite of `channel_id` by `inviter_id` with the same
    /// settings as `like` (what a non-unique create reuses).
    pub async fn similar_invite(&self, like: &InviteRow, now_ms: i64) -> Result<Option<InviteRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM invites WHERE channel_id = $1 AND inviter_id = $2 AND max_age_s = $3 \
             AND max_uses = $4 AND temporary = $5 AND target_type IS NOT DISTINCT FROM $6 \
             AND target_user_id IS NOT DISTINCT FROM $7 \
             AND target_application_id IS NOT DISTINCT FROM $8 \
             AND (max_uses = 0 OR uses < max_uses) AND (expires_ms IS NULL OR expires_ms > $9) \
             ORDER BY created_ms DESC LIMIT 1",
        )
        .bind(like.channel_id)
        .bind(like.inviter_id)
        .bind(like.max_age_s)
        .bind(like.max_uses)
        .bind(like.temporary)
        .bind(like.target_type)
        .bind(like.target_user_id)
        .bind(like.target_application_id)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The unexpired invites of a guild (`channel_id` 0) or of one of its
    /// channels, oldest first, at most `limit`.
    pub async fn invites(
        &self,
        guild_id: i64,
        channel_id: i64,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<InviteRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM invites WHERE guild_id = $1 AND ($2 = 0 OR channel_id = $2) \
             AND (expires_ms IS NULL OR expires_ms > $3) ORDER BY created_ms, code LIMIT $4",
        )
        .bind(guild_id)
        .bind(channel_id)
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes a guild's expired invites; returns how many invites it
    /// still has.
    pub async fn prune_invites(&self, guild_id: i64, now_ms: i64) -> Result<i64> {
        sqlx::query("DELETE FROM invites WHERE guild_id = $1 AND expires_ms <= $2")
            .bind(guild_id)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM invites WHERE guild_id = $1")
            .bind(guild_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(count)
    }

    /// Deletes an invite; false if it did not exist.
    pub async fn delete_invite(&self, code: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM invites WHERE code = $1")
            .bind(code)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// An invite by code.
    pub async fn invite(&self, code: &str) -> Result<Option<InviteRow>> {
        Ok(sqlx::query_as("SELECT * FROM invites WHERE code = $1")
            .bind(code)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// An invite with what its preview shows, in one indexed read (no
    /// member is loaded: the count is the guild's kept `member_count`).
    pub async fn invite_preview(&self, code: &str) -> Result<Option<InvitePreviewRow>> {
        Ok(sqlx::query_as(
            "SELECT i.*, g.name AS guild_name, g.member_count, c.kind AS channel_kind, \
             c.name AS channel_name FROM invites i JOIN guilds g ON g.id = i.guild_id \
             JOIN channels c ON c.id = i.channel_id WHERE i.code = $1",
        )
        .bind(code)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// A guild's row (not its channels, roles or members).
    pub async fn guild(&self, id: i64) -> Result<Option<GuildRow>> {
        Ok(sqlx::query_as("SELECT * FROM guilds WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    // ----- application commands ---------------------------------------------

    /// The commands of an application in one scope (guild 0: global), in
    /// creation order.
    pub async fn commands(&self, application_id: i64, guild_id: i64) -> Result<Vec<CommandRow>> {
        Ok(sqlx::query_as("SELECT * FROM application_commands WHERE application_id = $1 AND guild_id = $2 ORDER BY id")
            .bind(application_id)
            .bind(guild_id)
            .fetch_all(&self.pool)
            .await?)
    }

    /// One command of an application in one scope.
    pub async fn command(
        &self,
        application_id: i64,
        guild_id: i64,
        id: i64,
    ) -> Result<Option<CommandRow>> {
        Ok(sqlx::query_as("SELECT * FROM application_commands WHERE application_id = $1 AND guild_id = $2 AND id = $3")
            .bind(application_id)
            .bind(guild_id)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Creates `row`, or replaces the command of the same name and type in
    /// its scope (keeping that one's id); refuses a new command once the
    /// scope holds `kind_max` of its type. One transaction, so two
    /// concurrent creates cannot both pass the count.
    pub async fn upsert_command(&self, row: &CommandRow, kind_max: i64) -> Result<CommandUpsert> {
        // Serialised with every other command write of the application
        // (`Dialect::BEGIN_WRITE`), so the existence check and the count
        // hold until the commit.
        let mut tx = self.begin_application_write(row.application_id).await?;
        let existing: Option<(i64,)> = sqlx::query_as("SELECT id FROM application_commands WHERE application_id = $1 AND guild_id = $2 AND kind = $3 AND name = $4")
            .bind(row.application_id)
            .bind(row.guild_id)
            .bind(row.kind)
            .bind(&row.name)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some((id,)) = existing {
            sqlx::query("UPDATE application_commands SET spec = $1, version = $2 WHERE id = $3")
                .bind(&row.spec)
                .bind(row.version)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(CommandUpsert::Updated(CommandRow { id, ..row.clone() }));
        }
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM application_commands WHERE application_id = $1 AND guild_id = $2 AND kind = $3")
            .bind(row.application_id)
            .bind(row.guild_id)
            .bind(row.kind)
            .fetch_one(&mut *tx)
            .await?;
        if count >= kind_max {
            return Ok(CommandUpsert::Full);
        }
        Self::insert_command(&mut tx, row).await?;
        tx.commit().await?;
        Ok(CommandUpsert::Created(row.clone()))
    }

    /// Replaces a command's name and spec; false if it does not exist. A
    /// name taken by another command of the type is [`StoreError::Conflict`].
    pub async fn update_command(&self, row: &CommandRow) -> Result<bool> {
        let done = sqlx::query("UPDATE application_commands SET name = $1, spec = $2, version = $3 WHERE id = $4 AND application_id = $5 AND guild_id = $6")
            .bind(&row.name)
            .bind(&row.spec)
            .bind(row.version)
            .bind(row.id)
            .bind(row.application_id)
            .bind(row.guild_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a command; false if it did not exist.
    pub async fn delete_command(
        &self,
        application_id: i64,
        guild_id: i64,
        id: i64,
    ) -> Result<bool> {
        let done = sqlx::query("DELETE FROM application_commands WHERE application_id = $1 AND guild_id = $2 AND id = $3")
            .bind(application_id)
            .bind(guild_id)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Replaces every command of an application in one scope with `rows`,
    /// in one transaction (a bulk overwrite is all or nothing).
    pub async fn replace_commands(
        &self,
        application_id: i64,
        guild_id: i64,
        rows: &[CommandRow],
    ) -> Result<()> {
        let mut tx = self.begin_application_write(application_id).await?;
        sqlx::query("DELETE FROM application_commands WHERE application_id = $1 AND guild_id = $2")
            .bind(application_id)
            .bind(guild_id)
            .execute(&mut *tx)
            .await?;
        for row in rows {
            Self::insert_command(&mut tx, row).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Whether `user_id` is a member of `guild_id`.
    pub async fn is_member(&self, guild_id: i64, user_id: i64) -> Result<bool> {
        // The key column, not a literal 1: PostgreSQL types a literal as a
        // 32-bit int, which does not decode as i64.
        let found: Option<(i64,)> =
            sqlx::query_as("SELECT user_id FROM members WHERE guild_id = $1 AND user_id = $2")
                .bind(guild_id)
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    // ----- webhooks -----------------------------------------------------------

    /// Opens a [`Dialect::BEGIN_WRITE`] transaction holding the lock on
    /// `guild_id`'s row, so a webhook count and the write it allows hold
    /// until the commit (two concurrent creates cannot both pass a cap).
    async fn begin_guild_write(&self, guild_id: i64) -> Result<sqlx::Transaction<'static, DB>> {
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
        let sql = format!("SELECT id FROM guilds WHERE id = $1{}", DB::FOR_UPDATE);
        // Safe: the suffix is one of the dialects' literals; the id is bound.
        let _: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(guild_id)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// Whether one more webhook fits `channel_id` and its guild.
    async fn webhook_room(
        tx: &mut sqlx::Transaction<'static, DB>,
        guild_id: i64,
        channel_id: i64,
        per_channel_max: i64,
        per_guild_max: i64,
    ) -> Result<WebhookWrite> {
        let (in_channel,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM webhooks WHERE channel_id = $1")
                .bind(channel_id)
                .fetch_one(&mut **tx)
                .await?;
        if in_channel >= per_channel_max {
            return Ok(WebhookWrite::ChannelFull);
        }
        let (in_guild,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM webhooks WHERE guild_id = $1")
                .bind(guild_id)
                .fetch_one(&mut **tx)
                .await?;
        if in_guild >= per_guild_max {
            return Ok(WebhookWrite::GuildFull);
        }
        Ok(WebhookWrite::Done)
    }

    /// Creates a webhook in its channel, unless the channel (of that
    /// guild) is gone or it, or the guild, is at its maximum.
    pub async fn create_webhook(
        &self,
        row: &WebhookRow,
        per_channel_max: i64,
        per_guild_max: i64,
    ) -> Result<WebhookWrite> {
        let mut tx = self.begin_guild_write(row.guild_id).await?;
        let channel: Option<(i64,)> =
            sqlx::query_as("SELECT id FROM channels WHERE id = $1 AND guild_id = $2")
                .bind(row.channel_id)
                .bind(row.guild_id)
                .fetch_optional(&mut *tx)
                .await?;
        if channel.is_none() {
            return Ok(WebhookWrite::Missing);
        }
        let room = Self::webhook_room(
            &mut tx,
            row.guild_id,
            row.channel_id,
            per_channel_max,
            per_guild_max,
        )
        .await?;
        if room != WebhookWrite::Done {
            return Ok(room);
        }
        sqlx::query("INSERT INTO webhooks (id, guild_id, channel_id, creator_id, name, avatar, token, application_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(row.id)
            .bind(row.guild_id)
            .bind(row.channel_id)
            .bind(row.creator_id)
            .bind(&row.name)
            .bind(&row.avatar)
            .bind(&row.token)
            .bind(row.application_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(WebhookWrite::Done)
    }

    /// A webhook by id.
    pub async fn webhook(&self, id: i64) -> Result<Option<WebhookRow>> {
        Ok(sqlx::query_as("SELECT * FROM webhooks WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The webhooks of a channel, oldest first (at most the per-channel
    /// maximum exist).
    pub async fn channel_webhooks(&self, channel_id: i64) -> Result<Vec<WebhookRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM webhooks WHERE channel_id = $1 ORDER BY id")
                .bind(channel_id)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The webhooks of a guild, oldest first (at most the per-guild
    /// maximum exist).
    pub async fn guild_webhooks(&self, guild_id: i64) -> Result<Vec<WebhookRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM webhooks WHERE guild_id = $1 ORDER BY id")
                .bind(guild_id)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Replaces a webhook's name, avatar and channel (within its guild: the
    /// guild is not changed, and a channel of another guild is
    /// [`WebhookWrite::Missing`]). A move is refused when the new channel
    /// is at its maximum.
    pub async fn update_webhook(
        &self,
        row: &WebhookRow,
        per_channel_max: i64,
    ) -> Result<WebhookWrite> {
        let mut tx = self.begin_guild_write(row.guild_id).await?;
        let old: Option<WebhookRow> =
            sqlx::query_as("SELECT * FROM webhooks WHERE id = $1 AND guild_id = $2")
                .bind(row.id)
                .bind(row.guild_id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(old) = old else {
            return Ok(WebhookWrite::Missing);
        };
        if old.channel_id != row.channel_id {
            let channel: Option<(i64,)> =
                sqlx::query_as("SELECT id FROM channels WHERE id = $1 AND guild_id = $2")
                    .bind(row.channel_id)
                    .bind(row.guild_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            if channel.is_none() {
                return Ok(WebhookWrite::Missing);
            }
            // The guild's count does not change with a move.
            let room = Self::webhook_room(
                &mut tx,
                row.guild_id,
                row.channel_id,
                per_channel_max,
                i64::MAX,
            )
            .await?;
            if room != WebhookWrite::Done {
                return Ok(room);
            }
        }
        sqlx::query("UPDATE webhooks SET name = $1, avatar = $2, channel_id = $3 WHERE id = $4 AND guild_id = $5")
            .bind(&row.name)
            .bind(&row.avatar)
            .bind(row.channel_id)
            .bind(row.id)
            .bind(row.guild_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(WebhookWrite::Done)
    }

    /// A message `webhook_id` sent (a message of anyone else is `None`).
    pub async fn webhook_message(&self, webhook_id: i64, id: i64) -> Result<Option<MessageRow>> {
        Ok(
            sqlx::query_as("SELECT * FROM messages WHERE id = $1 AND webhook_id = $2")
                .bind(id)
                .bind(webhook_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Deletes a webhook (its messages stay); false if it did not exist.
    pub async fn delete_webhook(&self, id: i64) -> Result<bool> {
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Counts one use, if the invite has uses left and has not expired at
    /// `now_ms`; its uses after this one, or None if it could not be used.
    pub async fn use_invite(&self, code: &str, now_ms: i64) -> Result<Option<i64>> {
        Ok(sqlx::query_as("UPDATE invites SET uses = uses + 1 WHERE code = $1 AND (max_uses = 0 OR uses < max_uses) AND (expires_ms IS NULL OR expires_ms > $2) RETURNING uses")
            .bind(code)
            .bind(now_ms)
            .fetch_optional(&self.pool)
            .await?
            .map(|(uses,): (i64,)| uses))
    }
}

// ----- the trait the roles depend on ---------------------------------------

/// A boxed, sendable future: what the object-safe store trait returns.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Declares every store operation once and derives from that one list the
/// object-safe trait, its implementations by [`SqliteStore`] and [`PgStore`]
/// (the generic inherent methods of the same names), and the [`Store`]
/// handle's methods. Written
/// by hand because async trait methods are not object-safe and one list
/// keeps the three from drifting apart.
macro_rules! store_api {
    ($( $(#[$doc:meta])* fn $name:ident<'a>(&'a self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        /// Every operation of the store, as the roles use it.
        pub trait StoreBackend: Send + Sync + std::fmt::Debug + 'static {
            /// The store's counters.
            fn counters(&self) -> &StoreCounters;
            $( $(#[$doc])* fn $name<'a>(&'a self $(, $arg: $ty)*) -> BoxFuture<'a, Result<$ret>>; )*
        }

        // The one list names a lifetime for every signature, whether or not
        // elision would have found it. One impl per database rather than one
        // generic impl: each future's `Send` is then proved for the concrete
        // driver, not for every `Database`.
        #[allow(clippy::needless_lifetimes)]
        impl StoreBackend for SqliteStore {
            fn counters(&self) -> &StoreCounters {
                &self.counters
            }
            $( fn $name<'a>(&'a self $(, $arg: $ty)*) -> BoxFuture<'a, Result<$ret>> {
                Box::pin(SqliteStore::$name(self $(, $arg)*))
            } )*
        }

        #[allow(clippy::needless_lifetimes)]
        impl StoreBackend for PgStore {
            fn counters(&self) -> &StoreCounters {
                &self.counters
            }
            $( fn $name<'a>(&'a self $(, $arg: $ty)*) -> BoxFuture<'a, Result<$ret>> {
                Box::pin(PgStore::$name(self $(, $arg)*))
            } )*
        }

        #[allow(clippy::needless_lifetimes)]
        impl Store {
            /// The store's counters.
            pub fn counters(&self) -> &StoreCounters {
                self.backend.counters()
            }
            $( $(#[$doc])* pub async fn $name<'a>(&'a self $(, $arg: $ty)*) -> Result<$ret> {
                self.backend.$name($($arg),*).await
            } )*
        }
    };
}

store_api! {
    /// Creates a user; a taken username is [`StoreError::Conflict`].
    fn create_user<'a>(&'a self, user: &'a UserRow) -> ();
    /// A user by id.
    fn user<'a>(&'a self, id: i64) -> Option<UserRow>;
    /// The users among `ids` (one query; callers bound the batch).
    fn users_by_ids<'a>(&'a self, ids: &'a [i64]) -> Vec<UserRow>;
    /// A user by name.
    fn user_by_name<'a>(&'a self, username: &'a str) -> Option<UserRow>;
    /// Stores a token digest for `user_id`.
    fn add_token<'a>(&'a self, token_hash: &'a [u8], user_id: i64, created_ms: i64) -> ();
    /// Revokes every token of `user_id` (bot token reset).
    fn revoke_tokens<'a>(&'a self, user_id: i64) -> ();
    /// The user a token digest belongs to.
    fn user_by_token<'a>(&'a self, token_hash: &'a [u8]) -> Option<UserRow>;
    /// Creates an application and its bot user in one transaction.
    fn create_application<'a>(&'a self, app: &'a ApplicationRow, bot: &'a UserRow) -> ();
    /// An application by id.
    fn application<'a>(&'a self, id: i64) -> Option<ApplicationRow>;
    /// The application whose bot is `bot_user_id`.
    fn application_by_bot<'a>(&'a self, bot_user_id: i64) -> Option<ApplicationRow>;
    /// Sets an application's flags.
    fn set_application_flags<'a>(&'a self, id: i64, flags: i64) -> ();
    /// Sets an application's description.
    fn set_application_description<'a>(&'a self, id: i64, description: &'a str) -> ();
    /// How many guilds a user is a member of.
    fn guild_count_of<'a>(&'a self, user_id: i64) -> i64;
    /// A page of the guilds a user is a member of, with their permissions.
    fn user_guilds<'a>(&'a self, user_id: i64, after: i64, before: i64, limit: i64, newest_first: bool) -> Vec<UserGuildRow>;
    /// Creates a guild with its `@everyone` role, its first channel and its
    /// owner as the first member, in one transaction.
    fn create_guild<'a>(&'a self, guild: &'a GuildRow, everyone: &'a RoleRow, first: &'a ChannelRow) -> ();
    /// Ids of the guilds `user_id` is a member of, at most `limit`.
    fn guild_ids_of<'a>(&'a self, user_id: i64, limit: i64) -> Vec<i64>;
    /// Ids of a user's guilds on one shard, at most `limit`.
    fn shard_guild_ids_of<'a>(&'a self, user_id: i64, shard_id: i64, num_shards: i64, limit: i64) -> Vec<i64>;
    /// Counts one IDENTIFY of a bot against its session start limit.
    fn start_session<'a>(&'a self, user_id: i64, now_ms: i64, window_ms: i64, total: i64, bots_max: i64) -> SessionStart;
    /// A bot's session starts, if tracked.
    fn session_starts<'a>(&'a self, user_id: i64) -> Option<SessionStarts>;
    /// Admits a bot's IDENTIFY into its `max_concurrency` bucket, or not.
    fn identify_in_bucket<'a>(&'a self, user_id: i64, bucket: i64, now_ms: i64, window_ms: i64, rows_max: i64) -> IdentifyBucket;
    /// Everything about one guild (its owner loads this once).
    fn load_guild<'a>(&'a self, guild_id: i64) -> GuildState;
    /// Adds a member; false if already a member.
    fn add_member<'a>(&'a self, member: &'a MemberRow, epoch: i64) -> bool;
    /// Bans a user (removing the member) in one transaction.
    fn ban_member<'a>(&'a self, ban: &'a BanRow, epoch: i64) -> BanWrite;
    /// Appends an audit log entry and applies the retention.
    fn add_audit_entry<'a>(&'a self, entry: &'a AuditRow, oldest_id: i64, keep_max: i64) -> ();
    /// A page of a guild's audit log.
    fn audit_entries<'a>(&'a self, guild_id: i64, user_id: i64, action_type: i64, before: i64, after: i64, limit: i64) -> Vec<AuditRow>;
    /// Lifts a ban; false if there was none.
    fn unban_member<'a>(&'a self, guild_id: i64, user_id: i64, epoch: i64) -> bool;
    /// A user's ban in a guild.
    fn ban<'a>(&'a self, guild_id: i64, user_id: i64) -> Option<BanRow>;
    /// A page of a guild's bans.
    fn bans<'a>(&'a self, guild_id: i64, after: i64, before: i64, limit: i64) -> Vec<BanRow>;
    /// A user's newest messages in a guild since an id.
    fn messages_by_author_since<'a>(&'a self, guild_id: i64, author_id: i64, since_id: i64, limit: i64) -> Vec<(i64, i64)>;
    /// Creates a channel.
    fn create_channel<'a>(&'a self, channel: &'a ChannelRow, epoch: i64) -> ();
    /// A channel by id.
    fn channel<'a>(&'a self, id: i64) -> Option<ChannelRow>;
    /// Creates a thread with its starter as its first member.
    fn create_thread<'a>(&'a self, thread: &'a ChannelRow, first: &'a ThreadMemberRow, epoch: i64) -> bool;
    /// Adds a thread member.
    fn add_thread_member<'a>(&'a self, member: &'a ThreadMemberRow, epoch: i64) -> bool;
    /// Removes a thread member.
    fn remove_thread_member<'a>(&'a self, guild_id: i64, thread_id: i64, user_id: i64, epoch: i64) -> bool;
    /// A user's membership of a thread.
    fn thread_member<'a>(&'a self, thread_id: i64, user_id: i64) -> Option<ThreadMemberRow>;
    /// A thread's members, by user id.
    fn thread_members<'a>(&'a self, thread_id: i64, after: i64, limit: i64) -> Vec<ThreadMemberRow>;
    /// Counts a message sent in a thread.
    fn count_thread_message<'a>(&'a self, thread_id: i64) -> ();
    /// Writes a thread's own fields.
    fn update_thread<'a>(&'a self, thread: &'a ChannelRow, epoch: i64) -> bool;
    /// A page of a channel's archived threads.
    fn archived_threads<'a>(&'a self, parent_id: i64, kinds: &'a [i64], before_ms: i64, limit: i64) -> Vec<ChannelRow>;
    /// A page of a channel's archived private threads a user joined.
    fn joined_archived_threads<'a>(&'a self, parent_id: i64, user_id: i64, before: i64, limit: i64) -> Vec<ChannelRow>;
    /// Stores a message; returns once it is durable (group commit).
    fn insert_message<'a>(&'a self, message: &'a MessageRow) -> ();
    /// A message of a channel.
    fn message<'a>(&'a self, channel_id: i64, id: i64) -> Option<MessageRow>;
    /// Newest first, before `before` (exclusive) if given, at most `limit`.
    fn messages<'a>(&'a self, channel_id: i64, before: Option<i64>, limit: i64) -> Vec<MessageRow>;
    /// Edits a message's content; false if it does not exist.
    fn edit_message<'a>(&'a self, channel_id: i64, id: i64, content: &'a str, edited_ms: i64) -> bool;
    /// Deletes a message; false if it did not exist.
    fn delete_message<'a>(&'a self, channel_id: i64, id: i64) -> bool;
    /// See [`SqlStore::update_message`].
    fn update_message<'a>(&'a self, row: &'a MessageRow) -> bool;
    /// Changes a channel's name, topic, position and overwrites (in its
    /// guild only);
    /// false if the guild has no such channel.
    fn update_channel<'a>(&'a self, channel: &'a ChannelRow, epoch: i64) -> bool;
    /// Several channels' positions, parents and overwrites, all or none.
    fn update_channels<'a>(&'a self, guild_id: i64, channels: &'a [ChannelRow], epoch: i64) -> bool;
    /// Several role positions at once.
    fn set_role_positions<'a>(&'a self, guild_id: i64, positions: &'a [(i64, i64)], epoch: i64) -> ();
    /// Deletes a guild's channel with its messages, reactions and invites;
    /// false if the guild has no such channel.
    fn delete_channel<'a>(&'a self, guild_id: i64, id: i64, epoch: i64) -> bool;
    /// Creates or replaces a role of `role.guild_id`; false if the id is
    /// another guild's role (which is left as it is).
    fn upsert_role<'a>(&'a self, role: &'a RoleRow, epoch: i64) -> bool;
    /// Deletes a role and its assignments.
    fn delete_role<'a>(&'a self, guild_id: i64, role_id: i64, epoch: i64) -> ();
    /// Replaces a member's nickname, roles and timeout; role ids that are not the
    /// guild's, and repeats, are not assigned.
    fn update_member<'a>(&'a self, guild_id: i64, user_id: i64, nick: Option<&'a str>, roles: &'a [i64], timeout_until_ms: Option<i64>, epoch: i64) -> ();
    /// Removes a member and their roles.
    fn remove_member<'a>(&'a self, guild_id: i64, user_id: i64, epoch: i64) -> ();
    /// Deletes those of `ids` that are messages of `channel_id`, with
    /// their reactions; returns the ids it deleted.
    fn delete_messages<'a>(&'a self, channel_id: i64, ids: &'a [i64]) -> Vec<i64>;
    /// See [`SqlStore::delete_messages_with_files`].
    fn delete_messages_with_files<'a>(&'a self, channel_id: i64, ids: &'a [i64]) -> Vec<(i64, Option<String>)>;
    /// Renames a guild.
    fn rename_guild<'a>(&'a self, id: i64, name: &'a str, epoch: i64) -> ();
    /// Claims a guild for a new owner: its next epoch.
    fn claim_guild<'a>(&'a self, guild_id: i64) -> Option<i64>;
    /// See [`SqlStore::setting_or_insert`].
    fn setting_or_insert<'a>(&'a self, name: &'a str, value: &'a str) -> String;
    /// The epoch of a guild's current owner (its last claim).
    fn owner_epoch<'a>(&'a self, guild_id: i64) -> Option<i64>;
    /// Guild ids above `after`, ascending, at most `limit`.
    fn guild_ids_after<'a>(&'a self, after: i64, limit: i64) -> Vec<i64>;
    /// Deletes a guild and everything in it, in one transaction.
    fn delete_guild<'a>(&'a self, id: i64) -> ();
    /// Changes a user's display name (and username, if given and free).
    fn update_user<'a>(&'a self, id: i64, username: Option<&'a str>, global_name: Option<Option<&'a str>>) -> ();
    /// Adds a reaction to a message of `channel_id`, unless its emoji is new
    /// to the message and the message carries `emoji_max` distinct emoji
    /// or the user may not add emoji (`may_add_emoji`).
    fn add_reaction<'a>(&'a self, channel_id: i64, message_id: i64, emoji: &'a str, user_id: i64, emoji_max: i64, may_add_emoji: bool) -> ReactionWrite;
    /// Removes a reaction from a message of `channel_id`; false if it was
    /// not there.
    fn remove_reaction<'a>(&'a self, channel_id: i64, message_id: i64, emoji: &'a str, user_id: i64) -> bool;
    /// (emoji, count) of the reactions of a message of `channel_id`.
    fn reactions<'a>(&'a self, channel_id: i64, message_id: i64) -> Vec<(String, i64)>;
    /// The reactions of a page of messages of `channel_id`, with counts and
    /// whether `user_id` reacted, at most `per_message_max` emoji each.
    fn message_reactions<'a>(&'a self, channel_id: i64, message_ids: &'a [i64], user_id: i64, per_message_max: i64) -> Vec<ReactionCount>;
    /// The users who reacted to a message of `channel_id` with `emoji`, by
    /// id ascending, above `after`, at most `limit`.
    fn reaction_users<'a>(&'a self, channel_id: i64, message_id: i64, emoji: &'a str, after: i64, limit: i64) -> Vec<UserRow>;
    /// Removes every reaction with `emoji` from a message of `channel_id`;
    /// false if there was none.
    fn remove_emoji_reactions<'a>(&'a self, channel_id: i64, message_id: i64, emoji: &'a str) -> bool;
    /// Removes every reaction from a message of `channel_id`; false if
    /// there was none.
    fn remove_all_reactions<'a>(&'a self, channel_id: i64, message_id: i64) -> bool;
    /// Pins a message of `channel_id` unless the channel holds `pins_max`
    /// pins (counted under the channel's lock).
    fn pin_message<'a>(&'a self, channel_id: i64, id: i64, now_ms: i64, pins_max: i64) -> PinWrite;
    /// Unpins a message of `channel_id`, with the channel's newest
    /// remaining pin time.
    fn unpin_message<'a>(&'a self, channel_id: i64, id: i64) -> UnpinWrite;
    /// A channel's pins, newest first, pinned before `before_ms` if given.
    fn pins<'a>(&'a self, channel_id: i64, before_ms: Option<i64>, limit: i64) -> Vec<PinRow>;
    /// (id, pinned at) of the pinned messages of `channel_id` with ids in
    /// `first_id..=last_id`.
    fn pinned_between<'a>(&'a self, channel_id: i64, first_id: i64, last_id: i64) -> Vec<(i64, i64)>;
    /// The DM channel between two users, creating it (with `new_id`) if
    /// needed.
    fn dm_channel<'a>(&'a self, a: i64, b: i64, new_id: i64) -> ChannelRow;
    /// Who is in a DM channel.
    fn dm_members<'a>(&'a self, channel_id: i64) -> Vec<i64>;
    /// Creates an invite.
    fn create_invite<'a>(&'a self, invite: &'a InviteRow) -> ();
    /// An invite by code.
    fn invite<'a>(&'a self, code: &'a str) -> Option<InviteRow>;
    /// An invite with what its preview shows, in one indexed read.
    fn invite_preview<'a>(&'a self, code: &'a str) -> Option<InvitePreviewRow>;
    /// A guild's row (not its channels, roles or members).
    fn guild<'a>(&'a self, id: i64) -> Option<GuildRow>;
    /// Counts one use if the invite has uses left and has not expired;
    /// its uses after it.
    fn use_invite<'a>(&'a self, code: &'a str, now_ms: i64) -> Option<i64>;
    /// An unexpired invite like `like` (same channel, inviter, settings).
    fn similar_invite<'a>(&'a self, like: &'a InviteRow, now_ms: i64) -> Option<InviteRow>;
    /// The unexpired invites of a guild or one of its channels.
    fn invites<'a>(&'a self, guild_id: i64, channel_id: i64, now_ms: i64, limit: i64) -> Vec<InviteRow>;
    /// Deletes a guild's expired invites; how many it still has.
    fn prune_invites<'a>(&'a self, guild_id: i64, now_ms: i64) -> i64;
    /// Deletes an invite; false if it did not exist.
    fn delete_invite<'a>(&'a self, code: &'a str) -> bool;
    /// The commands of an application in one scope (guild 0: global).
    fn commands<'a>(&'a self, application_id: i64, guild_id: i64) -> Vec<CommandRow>;
    /// One command of an application in one scope.
    fn command<'a>(&'a self, application_id: i64, guild_id: i64, id: i64) -> Option<CommandRow>;
    /// Creates a command, or replaces the one of the same name and type.
    fn upsert_command<'a>(&'a self, row: &'a CommandRow, kind_max: i64) -> CommandUpsert;
    /// Replaces a command's name and spec; false if it does not exist.
    fn update_command<'a>(&'a self, row: &'a CommandRow) -> bool;
    /// Deletes a command; false if it did not exist.
    fn delete_command<'a>(&'a self, application_id: i64, guild_id: i64, id: i64) -> bool;
    /// Replaces every command of an application in one scope, atomically.
    fn replace_commands<'a>(&'a self, application_id: i64, guild_id: i64, rows: &'a [CommandRow]) -> ();
    /// Whether a user is a member of a guild.
    fn is_member<'a>(&'a self, guild_id: i64, user_id: i64) -> bool;
    /// Creates a webhook unless its channel or guild is full.
    fn create_webhook<'a>(&'a self, row: &'a WebhookRow, per_channel_max: i64, per_guild_max: i64) -> WebhookWrite;
    /// A webhook by id.
    fn webhook<'a>(&'a self, id: i64) -> Option<WebhookRow>;
    /// A channel's webhooks.
    fn channel_webhooks<'a>(&'a self, channel_id: i64) -> Vec<WebhookRow>;
    /// A guild's webhooks.
    fn guild_webhooks<'a>(&'a self, guild_id: i64) -> Vec<WebhookRow>;
    /// Renames or moves a webhook within its guild.
    fn update_webhook<'a>(&'a self, row: &'a WebhookRow, per_channel_max: i64) -> WebhookWrite;
    /// A message a webhook sent.
    fn webhook_message<'a>(&'a self, webhook_id: i64, id: i64) -> Option<MessageRow>;
    /// Deletes a webhook; its messages stay.
    fn delete_webhook<'a>(&'a self, id: i64) -> bool;
}

/// The store as the roles hold it: a cheap handle to a [`StoreBackend`].
#[derive(Clone, Debug)]
pub struct Store {
    backend: std::sync::Arc<dyn StoreBackend>,
}

impl Store {
    /// Wraps an implementation.
    pub fn new(backend: std::sync::Arc<dyn StoreBackend>) -> Self {
        Self { backend }
    }

    /// Opens the SQLite store at `path` (embedded mode).
    pub async fn open(path: &Path, limits: &Limits) -> Result<Self> {
        Ok(Self::new(std::sync::Arc::new(
            SqliteStore::open(path, limits).await?,
        )))
    }

    /// A private in-memory SQLite store (tests).
    pub async fn open_in_memory() -> Result<Self> {
        Ok(Self::new(std::sync::Arc::new(
            SqliteStore::open_in_memory().await?,
        )))
    }

    /// Opens the store a URL names: PostgreSQL for `postgres://` and
    /// `postgresql://` (cluster mode), SQLite for `sqlite:` URLs and for
    /// anything else, taken as a file path (embedded mode).
    pub async fn open_url(url: &str, limits: &Limits) -> Result<Self> {
        let backend: std::sync::Arc<dyn StoreBackend> =
            if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                std::sync::Arc::new(PgStore::open(url, limits).await?)
            } else if url.starts_with("sqlite:") {
                std::sync::Arc::new(SqliteStore::open_url(url, limits).await?)
            } else {
                std::sync::Arc::new(SqliteStore::open(Path::new(url), limits).await?)
            };
        Ok(Self::new(backend))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: i64, name: &str) -> UserRow {
        UserRow {
            id,
            username: name.into(),
            password_hash: Some("x".into()),
            bot: false,
            global_name: None,
            created_ms: 1,
        }
    }

    async fn guild_round_trip_and_unique_names(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        assert!(matches!(
            store.create_user(&user(2, "alice")).await,
            Err(StoreError::Conflict(_))
        ));
        let guild = GuildRow {
            id: 10,
            name: "g".into(),
            owner_id: 1,
            created_ms: 5,
        };
        let everyone = RoleRow {
            bot_id: None,
            id: 10,
            guild_id: 10,
            name: "@everyone".into(),
            permissions: 117_824,
            position: 0,
            color: 0,
            hoist: false,
            mentionable: false,
        };
        let general = ChannelRow {
            permission_overwrites: "[]".into(),
            id: 11,
            guild_id: Some(10),
            kind: 0,
            name: "general".into(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        store
            .create_guild(&guild, &everyone, &general)
            .await
            .unwrap();
        let state = store.load_guild(10).await.unwrap();
        assert_eq!(state.guild, Some(guild));
        assert_eq!(state.roles, [everyone]);
        assert_eq!(state.channels, [general]);
        assert_eq!(state.members.len(), 1);
        assert_eq!(store.guild_ids_of(1, 100).await.unwrap(), [10]);
        store.create_user(&user(3, "bob")).await.unwrap();
        let bob = MemberRow {
            temporary: false,
            communication_disabled_until_ms: None,
            guild_id: 10,
            user_id: 3,
            joined_ms: 6,
            nick: None,
        };
        assert!(store.add_member(&bob, 0).await.unwrap());
        assert!(
            !store.add_member(&bob, 0).await.unwrap(),
            "second add is a no-op"
        );
    }

    async fn messages_page_newest_first(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        let ch = ChannelRow {
            permission_overwrites: "[]".into(),
            id: 5,
            guild_id: None,
            kind: 1,
            name: String::new(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        store.create_channel(&ch, 0).await.unwrap();
        for id in 100..110 {
            let m = MessageRow {
                id,
                channel_id: 5,
                guild_id: None,
                author_id: 1,
                content: format!("m{id}"),
                tts: false,
                edited_ms: None,
                webhook_id: None,
                author_name: None,
                author_avatar: None,
                kind: 0,
                flags: 0,
                components: None,
                application_id: None,
                interaction_id: None,
                interaction_metadata: None,
                embeds: None,
                visible_to: None,
                reference_kind: None,
                reference_message_id: None,
                reference_channel_id: None,
                reference_guild_id: None,
                mentions: None,
                attachments: None,
            };
            store.insert_message(&m).await.unwrap();
        }
        let page: Vec<i64> = store
            .messages(5, Some(105), 3)
            .await
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(page, [104, 103, 102]);
        // A reply's reference (migration 0012) reads back as written.
        let reply = MessageRow {
            kind: 19,
            reference_kind: Some(0),
            reference_message_id: Some(100),
            reference_channel_id: Some(5),
            reference_guild_id: Some(7),
            ..MessageRow::plain(110, 5, None, 1, "re".into())
        };
        store.insert_message(&reply).await.unwrap();
        assert_eq!(store.message(5, 110).await.unwrap(), Some(reply));
        assert!(store.edit_message(5, 104, "edited", 9).await.unwrap());
        assert_eq!(
            store.message(5, 104).await.unwrap().unwrap().content,
            "edited"
        );
        assert_eq!(
            store.add_reaction(5, 104, "👍", 1, 20, true).await.unwrap(),
            ReactionWrite::Added
        );
        assert!(store.delete_message(5, 104).await.unwrap());
        assert!(
            store.reactions(5, 104).await.unwrap().is_empty(),
            "reactions go with the message"
        );
        assert!(!store.delete_message(5, 104).await.unwrap());
    }

    async fn concurrent_inserts_are_all_durable_and_answered(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        let ch = ChannelRow {
            permission_overwrites: "[]".into(),
            id: 5,
            guild_id: None,
            kind: 1,
            name: String::new(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        store.create_channel(&ch, 0).await.unwrap();
        let mut tasks = Vec::new();
        for id in 1..=500 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let m = MessageRow {
                    id,
                    channel_id: 5,
                    guild_id: None,
                    author_id: 1,
                    content: "x".into(),
                    tts: false,
                    edited_ms: None,
                    webhook_id: None,
                    author_name: None,
                    author_avatar: None,
                    kind: 0,
                    flags: 0,
                    components: None,
                    application_id: None,
                    interaction_id: None,
                    interaction_metadata: None,
                    embeds: None,
                    visible_to: None,
                    reference_kind: None,
                    reference_message_id: None,
                    reference_channel_id: None,
                    reference_guild_id: None,
                    mentions: None,
                    attachments: None,
                };
                store.insert_message(&m).await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        // A duplicate id fails alone, its batch neighbours succeed.
        let dup = MessageRow {
            id: 1,
            channel_id: 5,
            guild_id: None,
            author_id: 1,
            content: "x".into(),
            tts: false,
            edited_ms: None,
            webhook_id: None,
            author_name: None,
            author_avatar: None,
            kind: 0,
            flags: 0,
            components: None,
            application_id: None,
            interaction_id: None,
            interaction_metadata: None,
            embeds: None,
            visible_to: None,
            reference_kind: None,
            reference_message_id: None,
            reference_channel_id: None,
            reference_guild_id: None,
            mentions: None,
            attachments: None,
        };
        let fresh = MessageRow {
            id: 501,
            ..dup.clone()
        };
        let (a, b) = tokio::join!(store.insert_message(&dup), store.insert_message(&fresh));
        assert!(matches!(a, Err(StoreError::Conflict(_))));
        b.unwrap();
        assert_eq!(store.messages(5, None, 1000).await.unwrap().len(), 501);
    }

    /// Two guilds of one owner: (guild id, channel id, role id, message id)
    /// for each, every message with one reaction.
    async fn two_guilds(store: &Store) -> [(i64, i64, i64, i64); 2] {
        store.create_user(&user(1, "alice")).await.unwrap();
        let mut out = [(0, 0, 0, 0); 2];
        for (i, base) in [100, 200].into_iter().enumerate() {
            let guild = GuildRow {
                id: base,
                name: format!("g{base}"),
                owner_id: 1,
                created_ms: 1,
            };
            let everyone = RoleRow {
                bot_id: None,
                id: base,
                guild_id: base,
                name: "@everyone".into(),
                permissions: 0,
                position: 0,
                color: 0,
                hoist: false,
                mentionable: false,
            };
            let channel = ChannelRow {
                permission_overwrites: "[]".into(),
                id: base + 1,
                guild_id: Some(base),
                kind: 0,
                name: "general".into(),
                position: 0,
                topic: None,
                ..ChannelRow::default()
            };
            store
                .create_guild(&guild, &everyone, &channel)
                .await
                .unwrap();
            let role = RoleRow {
                id: base + 2,
                name: "mods".into(),
                position: 1,
                ..everyone
            };
            assert!(store.upsert_role(&role, 0).await.unwrap());
            let message = MessageRow {
                id: base + 3,
                channel_id: base + 1,
                guild_id: Some(base),
                author_id: 1,
                content: "hi".into(),
                tts: false,
                edited_ms: None,
                webhook_id: None,
                author_name: None,
                author_avatar: None,
                kind: 0,
                flags: 0,
                components: None,
                application_id: None,
                interaction_id: None,
                interaction_metadata: None,
                embeds: None,
                visible_to: None,
                reference_kind: None,
                reference_message_id: None,
                reference_channel_id: None,
                reference_guild_id: None,
                mentions: None,
                attachments: None,
            };
            store.insert_message(&message).await.unwrap();
            assert_eq!(
                store
                    .add_reaction(base + 1, base + 3, "x", 1, 20, true)
                    .await
                    .unwrap(),
                ReactionWrite::Added
            );
            out[i] = (base, base + 1, base + 2, base + 3);
        }
        out
    }

    /// Pins: capped per channel (checked under the channel's lock), times
    /// distinct and increasing even within one millisecond, pages newest
    /// first before a time, the newest remaining pin reported on unpin,
    /// a deleted message taking its pin, and ids of another channel
    /// touching nothing. Reactions: users by id after a bound, removal of
    /// one emoji or all, scoped to the channel.
    async fn pins_and_reaction_removals_are_capped_ordered_and_scoped(store: Store) {
        let [(_, a_channel, _, a_message), (_, b_channel, _, b_message)] = two_guilds(&store).await;
        for id in 400..404 {
            let m = MessageRow::plain(id, a_channel, Some(100), 1, format!("m{id}"));
            store.insert_message(&m).await.unwrap();
        }
        // Three pins in the same millisecond: a millisecond apart.
        for (id, expected_ms) in [(400, 1_000), (401, 1_001), (402, 1_002)] {
            assert_eq!(
                store.pin_message(a_channel, id, 1_000, 3).await.unwrap(),
                PinWrite::Pinned(expected_ms)
            );
        }
        assert_eq!(
            store.pin_message(a_channel, 400, 5_000, 3).await.unwrap(),
            PinWrite::AlreadyPinned
        );
        assert_eq!(
            store.pin_message(a_channel, 403, 5_000, 3).await.unwrap(),
            PinWrite::Full
        );
        assert_eq!(
            store
                .pin_message(a_channel, b_message, 5_000, 9)
                .await
                .unwrap(),
            PinWrite::Missing
        );
        assert_eq!(
            store.unpin_message(a_channel, b_message).await.unwrap(),
            UnpinWrite::Missing
        );
        let page = |pins: Vec<PinRow>| -> Vec<(i64, i64)> {
            pins.iter().map(|p| (p.message.id, p.pinned_ms)).collect()
        };
        assert_eq!(
            page(store.pins(a_channel, None, 2).await.unwrap()),
            [(402, 1_002), (401, 1_001)]
        );
        assert_eq!(
            page(store.pins(a_channel, Some(1_001), 10).await.unwrap()),
            [(400, 1_000)]
        );
        assert!(store.pins(b_channel, None, 10).await.unwrap().is_empty());
        assert_eq!(
            store.pinned_between(a_channel, 401, 403).await.unwrap(),
            [(401, 1_001), (402, 1_002)]
        );
        // Unpinning the newest reports the one before it; the last, none.
        assert_eq!(
            store.unpin_message(a_channel, 402).await.unwrap(),
            UnpinWrite::Unpinned(Some(1_001))
        );
        assert_eq!(
            store.unpin_message(a_channel, 402).await.unwrap(),
            UnpinWrite::NotPinned
        );
        assert!(store.delete_message(a_channel, 401).await.unwrap());
        assert_eq!(
            page(store.pins(a_channel, None, 10).await.unwrap()),
            [(400, 1_000)]
        );
        assert_eq!(
            store.unpin_message(a_channel, 400).await.unwrap(),
            UnpinWrite::Unpinned(None)
        );
        // A place freed is taken again, after the newest time ever seen
        // only if the clock has not passed it.
        assert_eq!(
            store.pin_message(a_channel, 403, 7_000, 3).await.unwrap(),
            PinWrite::Pinned(7_000)
        );

        // Reactions: users 1..=3 on A's message, B's message holds "x".
        for id in [2, 3] {
            store
                .create_user(&user(id, &format!("u{id}")))
                .await
                .unwrap();
        }
        for id in [3, 1, 2] {
            assert_eq!(
                store
                    .add_reaction(a_channel, a_message, "y", id, 20, true)
                    .await
                    .unwrap(),
                ReactionWrite::Added
            );
        }
        let ids = |users: Vec<UserRow>| -> Vec<i64> { users.iter().map(|u| u.id).collect() };
        assert_eq!(
            ids(store
                .reaction_users(a_channel, a_message, "y", 0, 10)
                .await
                .unwrap()),
            [1, 2, 3]
        );
        assert_eq!(
            ids(store
                .reaction_users(a_channel, a_message, "y", 1, 1)
                .await
                .unwrap()),
            [2]
        );
        assert!(
            store
                .reaction_users(a_channel, b_message, "x", 0, 10)
                .await
                .unwrap()
                .is_empty(),
            "B's reactions through A's channel"
        );
        assert!(
            !store
                .remove_emoji_reactions(a_channel, b_message, "x")
                .await
                .unwrap()
        );
        assert!(
            !store
                .remove_all_reactions(a_channel, b_message)
                .await
                .unwrap()
        );
        assert_eq!(
            store.reactions(b_channel, b_message).await.unwrap(),
            [("x".to_owned(), 1)]
        );
        assert!(
            store
                .remove_emoji_reactions(a_channel, a_message, "y")
                .await
                .unwrap()
        );
        assert!(
            !store
                .remove_emoji_reactions(a_channel, a_message, "y")
                .await
                .unwrap()
        );
        assert_eq!(
            store.reactions(a_channel, a_message).await.unwrap(),
            [("x".to_owned(), 1)]
        );
        assert!(
            store
                .remove_all_reactions(a_channel, a_message)
                .await
                .unwrap()
        );
        assert!(
            store
                .reactions(a_channel, a_message)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            !store
                .remove_all_reactions(a_channel, a_message)
                .await
                .unwrap()
        );
    }

    /// A page's reactions in one read: counts and `me` per message and
    /// emoji, by message id then emoji key in byte order (uppercase before
    /// lowercase before non-ASCII, whatever PostgreSQL's locale), at most
    /// `per_message_max` emoji of each message, only the channel's
    /// messages; and the per-message distinct emoji cap on adding, which
    /// concurrent adds of new emoji cannot pass together.
    async fn page_reactions_are_counted_capped_and_scoped(store: Store) {
        let [(_, a_channel, _, a_message), (_, _, _, b_message)] = two_guilds(&store).await;
        for id in [2, 3] {
            store
                .create_user(&user(id, &format!("u{id}")))
                .await
                .unwrap();
        }
        for id in 500..503 {
            let m = MessageRow::plain(id, a_channel, Some(100), 1, format!("m{id}"));
            store.insert_message(&m).await.unwrap();
        }
        const EMOJI_MAX: i64 = 3;
        let add = |message, emoji, user| {
            store.add_reaction(a_channel, message, emoji, user, EMOJI_MAX, true)
        };
        for (emoji, user) in [("😀", 2), ("😀", 3), ("a", 2), ("Blob:9", 1)] {
            assert_eq!(
                add(500, emoji, user).await.unwrap(),
                ReactionWrite::Added,
                "{emoji}"
            );
        }
        assert_eq!(add(502, "z", 1).await.unwrap(), ReactionWrite::Added);
        // Full: a fourth emoji is refused, one already there is not.
        assert_eq!(add(500, "q", 1).await.unwrap(), ReactionWrite::Full);
        assert_eq!(add(500, "a", 3).await.unwrap(), ReactionWrite::Added);
        assert_eq!(add(500, "a", 3).await.unwrap(), ReactionWrite::AlreadyThere);
        // Without ADD_REACTIONS: an emoji there is joined, a new one is not
        // (and is not added).
        assert_eq!(
            store
                .add_reaction(a_channel, 502, "z", 2, EMOJI_MAX, false)
                .await
                .unwrap(),
            ReactionWrite::Added
        );
        assert_eq!(
            store
                .add_reaction(a_channel, 502, "new", 2, EMOJI_MAX, false)
                .await
                .unwrap(),
            ReactionWrite::NewEmojiForbidden
        );
        assert!(store.remove_reaction(a_channel, 502, "z", 2).await.unwrap());
        assert_eq!(
            add(b_message, "a", 1).await.unwrap(),
            ReactionWrite::Missing
        );

        let page = [502, 501, 500, a_message, b_message];
        let read = |user, per_message_max| {
            store.message_reactions(a_channel, &page, user, per_message_max)
        };
        let row = |message_id, emoji: &str, count, me| ReactionCount {
            message_id,
            emoji: emoji.into(),
            count,
            me,
        };
        assert_eq!(
            read(1, 20).await.unwrap(),
            [
                row(a_message, "x", 1, true),
                row(500, "Blob:9", 1, true),
                row(500, "a", 2, false),
                row(500, "😀", 2, false),
                row(502, "z", 1, true),
            ],
            "B's message through A's channel shows nothing"
        );
        // Two emoji a message: 500 loses its last, the others stay whole.
        assert_eq!(
            read(2, 2).await.unwrap(),
            [
                row(a_message, "x", 1, false),
                row(500, "Blob:9", 1, false),
                row(500, "a", 2, true),
                row(502, "z", 1, false),
            ]
        );
        assert!(
            store
                .message_reactions(a_channel, &[], 1, 20)
                .await
                .unwrap()
                .is_empty()
        );

        // Eight new emoji at once on a message with none: three are added.
        let adds = futures_all((0..8).map(|i| {
            let store = store.clone();
            async move {
                store
                    .add_reaction(a_channel, 501, &format!("e{i}"), 1, EMOJI_MAX, true)
                    .await
                    .unwrap()
            }
        }))
        .await;
        let added = adds.iter().filter(|w| **w == ReactionWrite::Added).count();
        assert_eq!(added, EMOJI_MAX as usize, "{adds:?}");
        assert_eq!(store.reactions(a_channel, 501).await.unwrap().len(), added);
    }

    /// Ids of guild B passed with guild A's container touch nothing of B.
    async fn operations_are_scoped_by_channel_and_guild(store: Store) {
        let [
            (a, a_channel, _, a_message),
            (b, b_channel, b_role, b_message),
        ] = two_guilds(&store).await;
        let deleted = store
            .delete_messages(a_channel, &[b_message, a_message])
            .await
            .unwrap();
        assert_eq!(deleted, [a_message]);
        assert_eq!(
            store.reactions(b_channel, b_message).await.unwrap(),
            [("x".to_owned(), 1)],
            "another channel's reactions survive a bulk delete"
        );
        assert!(!store.delete_message(a_channel, b_message).await.unwrap());
        assert!(
            !store
                .edit_message(a_channel, b_message, "x", 2)
                .await
                .unwrap()
        );
        assert!(store.message(a_channel, b_message).await.unwrap().is_none());
        assert_eq!(
            store
                .add_reaction(a_channel, b_message, "y", 1, 20, true)
                .await
                .unwrap(),
            ReactionWrite::Missing
        );
        assert!(
            !store
                .remove_reaction(a_channel, b_message, "x", 1)
                .await
                .unwrap()
        );
        assert!(
            store
                .reactions(a_channel, b_message)
                .await
                .unwrap()
                .is_empty()
        );
        let hijack = RoleRow {
            bot_id: None,
            id: b_role,
            guild_id: a,
            name: "hijacked".into(),
            permissions: -1,
            position: 9,
            color: 0,
            hoist: false,
            mentionable: false,
        };
        assert!(!store.upsert_role(&hijack, 0).await.unwrap());
        let moved = ChannelRow {
            permission_overwrites: "[]".into(),
            id: b_channel,
            guild_id: Some(a),
            kind: 0,
            name: "moved".into(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        assert!(!store.update_channel(&moved, 0).await.unwrap());
        assert!(!store.delete_channel(a, b_channel, 0).await.unwrap());
        store
            .update_member(a, 1, None, &[b_role, b_role], None, 0)
            .await
            .unwrap();
        store.delete_role(a, b_role, 0).await.unwrap();
        let state = store.load_guild(b).await.unwrap();
        assert_eq!(state.roles[1].name, "mods");
        assert_eq!(state.channels[0].name, "general");
        assert_eq!(
            store.reactions(b_channel, b_message).await.unwrap(),
            [("x".to_owned(), 1)]
        );
        assert!(store.load_guild(a).await.unwrap().member_roles.is_empty());
    }

    /// Fencing: each claim issues a larger epoch, and an owner's writes
    /// under an epoch the row no longer holds are refused and change
    /// nothing.
    async fn stale_owner_writes_are_refused(store: Store) {
        let [(a, a_channel, _, _), _] = two_guilds(&store).await;
        assert_eq!(store.claim_guild(a).await.unwrap(), Some(1));
        assert_eq!(store.claim_guild(a).await.unwrap(), Some(2));
        assert_eq!(store.claim_guild(999_999).await.unwrap(), None);
        assert_eq!(store.owner_epoch(a).await.unwrap(), Some(2));
        assert_eq!(store.owner_epoch(999_999).await.unwrap(), None);
        assert!(matches!(
            store.rename_guild(a, "stale", 1).await,
            Err(StoreError::StaleEpoch)
        ));
        let channel = ChannelRow {
            permission_overwrites: "[]".into(),
            id: a_channel,
            guild_id: Some(a),
            kind: 0,
            name: "stale".into(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        assert!(matches!(
            store.update_channel(&channel, 1).await,
            Err(StoreError::StaleEpoch)
        ));
        let fresh = ChannelRow {
            id: a_channel + 1_000,
            ..channel.clone()
        };
        assert!(matches!(
            store.create_channel(&fresh, 1).await,
            Err(StoreError::StaleEpoch)
        ));
        store.create_user(&user(3, "carol")).await.unwrap();
        let carol = MemberRow {
            temporary: false,
            communication_disabled_until_ms: None,
            guild_id: a,
            user_id: 3,
            joined_ms: 3,
            nick: None,
        };
        assert!(matches!(
            store.add_member(&carol, 1).await,
            Err(StoreError::StaleEpoch)
        ));
        let state = store.load_guild(a).await.unwrap();
        assert_ne!(state.guild.as_ref().unwrap().name, "stale");
        assert!(state.members.iter().all(|m| m.user_id != 3));
        assert!(state.channels.iter().all(|c| c.name != "stale"));
        // The current owner's writes pass.
        store.rename_guild(a, "fresh", 2).await.unwrap();
        assert!(store.add_member(&carol, 2).await.unwrap());
        assert!(store.update_channel(&channel, 2).await.unwrap());
        let ids = store.guild_ids_after(0, 10).await.unwrap();
        assert!(ids.len() == 2 && ids[0] < ids[1], "{ids:?}");
        assert_eq!(store.guild_ids_after(ids[0], 10).await.unwrap(), [ids[1]]);
    }

    async fn member_counts_follow_joins_and_leaves(store: Store) {
        let [(a, a_channel, _, _), _] = two_guilds(&store).await;
        let invite = InviteRow {
            code: "abc".into(),
            guild_id: a,
            channel_id: a_channel,
            inviter_id: 1,
            uses: 0,
            max_uses: 0,
            created_ms: 1,
            ..InviteRow::default()
        };
        store.create_invite(&invite).await.unwrap();
        let count = |store: Store| async move {
            store
                .invite_preview("abc")
                .await
                .unwrap()
                .unwrap()
                .member_count
        };
        assert_eq!(count(store.clone()).await, 1);
        store.create_user(&user(2, "bob")).await.unwrap();
        let bob = MemberRow {
            temporary: false,
            communication_disabled_until_ms: None,
            guild_id: a,
            user_id: 2,
            joined_ms: 2,
            nick: None,
        };
        assert!(store.add_member(&bob, 0).await.unwrap());
        assert!(!store.add_member(&bob, 0).await.unwrap());
        assert_eq!(count(store.clone()).await, 2);
        store.remove_member(a, 2, 0).await.unwrap();
        store.remove_member(a, 2, 0).await.unwrap();
        assert_eq!(count(store.clone()).await, 1);
        let preview = store.invite_preview("abc").await.unwrap().unwrap();
        assert_eq!(preview.invite, invite);
        assert_eq!(
            (preview.guild_name.as_str(), preview.channel_name.as_str()),
            ("g100", "general")
        );
    }

    /// Invites expire at their time (unusable, unlisted, pruned), run out
    /// at their last use, are reused only when alike and unexpired, are
    /// listed by guild and channel, and are deleted.
    async fn invites_expire_run_out_and_list(store: Store) {
        let [(a, a_channel, _, _), (b, _, _, _)] = two_guilds(&store).await;
        let invite = |code: &str, max_age_s: i64, max_uses: i64| InviteRow {
            code: code.into(),
            guild_id: a,
            channel_id: a_channel,
            inviter_id: 1,
            max_uses,
            created_ms: 1_000,
            max_age_s,
            expires_ms: (max_age_s > 0).then_some(1_000 + max_age_s * 1_000),
            ..InviteRow::default()
        };
        let (day, once, never) = (
            invite("day", 86_400, 0),
            invite("once", 0, 1),
            invite("never", 0, 0),
        );
        for row in [&day, &once, &never] {
            store.create_invite(row).await.unwrap();
        }
        let day_ends_ms = 1_000 + 86_400_000;
        let listed = |channel_id, now_ms| {
            let store = store.clone();
            async move {
                let rows = store.invites(a, channel_id, now_ms, 10).await.unwrap();
                rows.into_iter().map(|r| r.code).collect::<Vec<_>>()
            }
        };
        assert_eq!(listed(0, 2_000).await, ["day", "never", "once"]);
        assert_eq!(listed(a_channel, 2_000).await.len(), 3);
        assert_eq!(listed(0, day_ends_ms).await, ["never", "once"]);
        assert!(store.invites(b, 0, 2_000, 10).await.unwrap().is_empty());
        assert!(day.expired(day_ends_ms) && !day.expired(day_ends_ms - 1));
        // Usable until it expires, counted each time.
        assert_eq!(
            store.use_invite("day", day_ends_ms - 1).await.unwrap(),
            Some(1)
        );
        assert_eq!(store.use_invite("day", day_ends_ms).await.unwrap(), None);
        // One use only.
        assert_eq!(store.use_invite("once", 2_000).await.unwrap(), Some(1));
        assert_eq!(store.use_invite("once", 2_000).await.unwrap(), None);
        // Reuse: the same settings by the same inviter, still usable.
        let like = |row: &InviteRow| InviteRow {
            code: "new".into(),
            ..row.clone()
        };
        let found = store.similar_invite(&like(&never), 2_000).await.unwrap();
        assert_eq!(found.map(|r| r.code).as_deref(), Some("never"));
        assert_eq!(
            store.similar_invite(&like(&once), 2_000).await.unwrap(),
            None
        );
        assert_eq!(
            store
                .similar_invite(&like(&day), day_ends_ms)
                .await
                .unwrap(),
            None
        );
        let other_inviter = InviteRow {
            inviter_id: 2,
            ..like(&never)
        };
        assert_eq!(
            store.similar_invite(&other_inviter, 2_000).await.unwrap(),
            None
        );
        // Pruning drops the expired one only.
        assert_eq!(store.prune_invites(a, day_ends_ms).await.unwrap(), 2);
        assert_eq!(store.invite("day").await.unwrap(), None);
        assert!(store.delete_invite("never").await.unwrap());
        assert!(!store.delete_invite("never").await.unwrap());
        assert_eq!(store.prune_invites(a, day_ends_ms).await.unwrap(), 1);
    }

    /// A ban removes the member and keeps the count; banning again changes
    /// nothing; bans page in ascending user id from either side; a lifted
    /// ban is gone; a stale owner's ban is refused.
    /// Threads are channel rows that an owner loads apart from channels
    /// (active ones only); their members are counted in the same
    /// transaction; they go with their parent, and a member leaving the
    /// guild leaves them.
    async fn threads_stay_apart_from_channels_and_go_with_their_parent(store: Store) {
        let [(a, a_channel, _, _), _] = two_guilds(&store).await;
        for id in 2..=3 {
            store
                .create_user(&user(id, &format!("u{id}")))
                .await
                .unwrap();
            let member = MemberRow {
                temporary: false,
                communication_disabled_until_ms: None,
                guild_id: a,
                user_id: id,
                joined_ms: id,
                nick: None,
            };
            store.add_member(&member, 0).await.unwrap();
        }
        let thread = ChannelRow {
            id: 900,
            guild_id: Some(a),
            kind: 11,
            name: "talk".into(),
            parent_id: Some(a_channel),
            owner_id: Some(1),
            auto_archive_duration: Some(1440),
            archive_ms: Some(5),
            thread_created_ms: Some(5),
            ..ChannelRow::default()
        };
        let starter = |user_id| ThreadMemberRow {
            thread_id: 900,
            user_id,
            guild_id: a,
            join_ms: 5,
            flags: 0,
        };
        assert!(store.create_thread(&thread, &starter(1), 0).await.unwrap());
        // One thread per id (a message starts at most one).
        assert!(!store.create_thread(&thread, &starter(1), 0).await.unwrap());
        assert!(matches!(
            store.create_thread(&thread, &starter(1), 7).await,
            Err(StoreError::StaleEpoch)
        ));
        assert!(store.add_thread_member(&starter(2), 0).await.unwrap());
        assert!(!store.add_thread_member(&starter(2), 0).await.unwrap());
        assert!(store.add_thread_member(&starter(3), 0).await.unwrap());
        let state = store.load_guild(a).await.unwrap();
        assert!(state.channels.iter().all(|c| c.id != 900), "{state:?}");
        assert_eq!(state.threads.len(), 1);
        let loaded = &state.threads[0];
        assert_eq!(
            (
                loaded.kind,
                loaded.parent_id,
                loaded.owner_id,
                loaded.member_count
            ),
            (11, Some(a_channel), Some(1), 3)
        );
        assert!(loaded.invitable && !loaded.archived && !loaded.locked);
        let users: Vec<i64> = state.thread_members.iter().map(|m| m.user_id).collect();
        assert_eq!(users, vec![1, 2, 3]);
        assert!(state.thread_last_messages.is_empty());
        let page = store.thread_members(900, 1, 1).await.unwrap();
        assert_eq!(page, vec![starter(2)]);
        assert_eq!(store.thread_member(900, 3).await.unwrap(), Some(starter(3)));
        assert_eq!(store.thread_member(900, 4).await.unwrap(), None);
        assert!(store.remove_thread_member(a, 900, 2, 0).await.unwrap());
        assert!(!store.remove_thread_member(a, 900, 2, 0).await.unwrap());
        // Leaving the guild leaves its threads.
        store.remove_member(a, 3, 0).await.unwrap();
        let thread_row = store.channel(900).await.unwrap().unwrap();
        assert_eq!(thread_row.member_count, 1);
        assert_eq!(
            store.thread_members(900, 0, 10).await.unwrap(),
            vec![starter(1)]
        );
        // Messages are counted; a delete takes one off the count only.
        for id in [901, 902] {
            let m = MessageRow {
                id,
                channel_id: 900,
                guild_id: Some(a),
                author_id: 1,
                content: format!("m{id}"),
                tts: false,
                edited_ms: None,
                webhook_id: None,
                author_name: None,
                author_avatar: None,
                kind: 0,
                flags: 0,
                components: None,
                application_id: None,
                interaction_id: None,
                interaction_metadata: None,
                embeds: None,
                visible_to: None,
                reference_kind: None,
                reference_message_id: None,
                reference_channel_id: None,
                reference_guild_id: None,
                mentions: None,
                attachments: None,
            };
            store.insert_message(&m).await.unwrap();
            store.count_thread_message(900).await.unwrap();
        }
        assert_eq!(
            store.load_guild(a).await.unwrap().thread_last_messages,
            vec![(900, 902)]
        );
        // A channel that is not a thread keeps no count.
        store.count_thread_message(a_channel).await.unwrap();
        assert_eq!(
            store
                .channel(a_channel)
                .await
                .unwrap()
                .unwrap()
                .message_count,
            0
        );
        assert_eq!(store.delete_messages(900, &[901]).await.unwrap(), vec![901]);
        let thread_row = store.channel(900).await.unwrap().unwrap();
        assert_eq!(
            (thread_row.message_count, thread_row.total_message_sent),
            (1, 2)
        );
        // Archived, it leaves the owner's load and enters the lists.
        let archived = ChannelRow {
            archived: true,
            locked: true,
            name: "done".into(),
            archive_ms: Some(50),
            ..store.channel(900).await.unwrap().unwrap()
        };
        assert!(store.update_thread(&archived, 0).await.unwrap());
        assert!(matches!(
            store.update_thread(&archived, 7).await,
            Err(StoreError::StaleEpoch)
        ));
        let row = store.channel(900).await.unwrap().unwrap();
        assert_eq!(
            (row.archived, row.locked, row.name.as_str()),
            (true, true, "done")
        );
        assert!(store.load_guild(a).await.unwrap().threads.is_empty());
        let ids = |rows: Vec<ChannelRow>| rows.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store
                .archived_threads(a_channel, &[11], 51, 10)
                .await
                .unwrap()),
            vec![900]
        );
        assert!(
            store
                .archived_threads(a_channel, &[11], 50, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .archived_threads(a_channel, &[12], 51, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Joined private archived threads: only private ones (this is public).
        assert!(
            store
                .joined_archived_threads(a_channel, 1, i64::MAX, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // The parent's delete takes the thread, its messages and members.
        assert!(store.delete_channel(a, a_channel, 0).await.unwrap());
        assert_eq!(store.channel(900).await.unwrap(), None);
        assert_eq!(store.message(900, 902).await.unwrap(), None);
        assert!(store.thread_members(900, 0, 10).await.unwrap().is_empty());
        assert!(store.load_guild(a).await.unwrap().threads.is_empty());
    }

    async fn bans_remove_members_page_and_lift(store: Store) {
        let [(a, a_channel, _, _), _] = two_guilds(&store).await;
        let count = |store: Store| async move { store.load_guild(a).await.unwrap().members.len() };
        for id in 2..=5 {
            store
                .create_user(&user(id, &format!("u{id}")))
                .await
                .unwrap();
        }
        let member = MemberRow {
            temporary: false,
            communication_disabled_until_ms: None,
            guild_id: a,
            user_id: 2,
            joined_ms: 2,
            nick: None,
        };
        store.add_member(&member, 0).await.unwrap();
        let before = count(store.clone()).await;
        let ban = |user_id| BanRow {
            guild_id: a,
            user_id,
            reason: Some("spam".into()),
            created_ms: 9,
        };
        let write = store.ban_member(&ban(2), 0).await.unwrap();
        assert_eq!(
            write,
            BanWrite {
                banned: true,
                was_member: true
            }
        );
        assert_eq!(count(store.clone()).await, before - 1);
        let again = store.ban_member(&ban(2), 0).await.unwrap();
        assert_eq!(
            again,
            BanWrite {
                banned: false,
                was_member: false
            }
        );
        for id in [3, 4, 5] {
            store.ban_member(&ban(id), 0).await.unwrap();
        }
        let ids = |page: Vec<BanRow>| page.iter().map(|b| b.user_id).collect::<Vec<_>>();
        assert_eq!(ids(store.bans(a, 0, 0, 2).await.unwrap()), [2, 3]);
        assert_eq!(ids(store.bans(a, 3, 0, 10).await.unwrap()), [4, 5]);
        assert_eq!(ids(store.bans(a, 0, 5, 2).await.unwrap()), [3, 4]);
        assert_eq!(store.ban(a, 2).await.unwrap(), Some(ban(2)));
        assert!(store.unban_member(a, 2, 0).await.unwrap());
        assert!(!store.unban_member(a, 2, 0).await.unwrap());
        assert_eq!(store.ban(a, 2).await.unwrap(), None);
        assert_eq!(store.claim_guild(a).await.unwrap(), Some(1));
        assert!(matches!(
            store.ban_member(&ban(2), 0).await,
            Err(StoreError::StaleEpoch)
        ));
        assert_eq!(store.ban(a, 2).await.unwrap(), None, "nothing stored");
        let _ = a_channel;
    }

    /// Audit entries page newest first (or oldest first after an id),
    /// filter by user and action, and are forgotten past the retention and
    /// past the per-guild bound.
    async fn audit_entries_page_filter_and_expire(store: Store) {
        let [(a, _, _, _), (b, _, _, _)] = two_guilds(&store).await;
        let entry = |id: i64, guild_id: i64, user_id: i64, action_type: i64| AuditRow {
            id,
            guild_id,
            user_id,
            target_id: Some(7),
            action_type,
            changes: "[]".into(),
            options: None,
            reason: Some("why".into()),
        };
        for id in 1..=5 {
            let user = if id % 2 == 0 { 20 } else { 21 };
            store
                .add_audit_entry(&entry(id, a, user, 10 + id % 2), 0, 100)
                .await
                .unwrap();
        }
        store
            .add_audit_entry(&entry(6, b, 20, 10), 0, 100)
            .await
            .unwrap();
        let ids = |rows: Vec<AuditRow>| rows.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.audit_entries(a, 0, 0, 0, 0, 10).await.unwrap()),
            [5, 4, 3, 2, 1]
        );
        assert_eq!(
            ids(store.audit_entries(a, 0, 0, 4, 0, 2).await.unwrap()),
            [3, 2]
        );
        assert_eq!(
            ids(store.audit_entries(a, 0, 0, 0, 2, 2).await.unwrap()),
            [3, 4]
        );
        assert_eq!(
            ids(store.audit_entries(a, 20, 0, 0, 0, 10).await.unwrap()),
            [4, 2]
        );
        assert_eq!(
            ids(store.audit_entries(a, 0, 11, 0, 0, 10).await.unwrap()),
            [5, 3, 1]
        );
        assert_eq!(
            store.audit_entries(a, 0, 0, 0, 0, 1).await.unwrap()[0],
            entry(5, a, 21, 11)
        );
        // Retention (ids below 3 forgotten) and the bound (newest 2 kept).
        store
            .add_audit_entry(&entry(7, a, 20, 10), 3, 100)
            .await
            .unwrap();
        assert_eq!(
            ids(store.audit_entries(a, 0, 0, 0, 0, 10).await.unwrap()),
            [7, 5, 4, 3]
        );
        store
            .add_audit_entry(&entry(8, a, 20, 10), 0, 2)
            .await
            .unwrap();
        assert_eq!(
            ids(store.audit_entries(a, 0, 0, 0, 0, 10).await.unwrap()),
            [8, 7]
        );
        assert_eq!(
            ids(store.audit_entries(b, 0, 0, 0, 0, 10).await.unwrap()),
            [6],
            "per guild"
        );
    }

    async fn tokens_resolve_and_revoke(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        store.add_token(b"digest", 1, 0).await.unwrap();
        assert_eq!(
            store.user_by_token(b"digest").await.unwrap().map(|u| u.id),
            Some(1)
        );
        store.revoke_tokens(1).await.unwrap();
        assert_eq!(store.user_by_token(b"digest").await.unwrap(), None);
    }

    /// An application (id 50, bot user 51, owner 1) to hang commands on.
    async fn application(store: &Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        let app = ApplicationRow {
            id: 50,
            name: "app".into(),
            owner_id: 1,
            bot_user_id: 51,
            flags: 0,
            description: String::new(),
        };
        store
            .create_application(
                &app,
                &UserRow {
                    bot: true,
                    ..user(51, "bot")
                },
            )
            .await
            .unwrap();
        assert_eq!(store.application_by_bot(51).await.unwrap(), Some(app));
        assert!(store.user(51).await.unwrap().unwrap().bot);
    }

    fn command(id: i64, name: &str) -> CommandRow {
        CommandRow {
            id,
            application_id: 50,
            guild_id: 0,
            kind: 1,
            name: name.into(),
            spec: r#"{"name":"x","b":1,"a":2}"#.into(),
            version: id,
        }
    }

    /// Concurrent creates of one application cannot both pass the count or
    /// the existence check (the store runs on a pool of several connections).
    async fn command_upserts_are_serialised(store: Store) {
        application(&store).await;
        let outcomes = futures_all((0..8).map(|i| {
            let store = store.clone();
            async move {
                store
                    .upsert_command(&command(100 + i, &format!("c{i}")), 3)
                    .await
            }
        }))
        .await;
        let created = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(CommandUpsert::Created(_))))
            .count();
        let full = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(CommandUpsert::Full)))
            .count();
        assert_eq!((created, full), (3, 5), "{outcomes:?}");
        store.replace_commands(50, 0, &[]).await.unwrap();
        let outcomes = futures_all((0..8).map(|i| {
            let store = store.clone();
            async move { store.upsert_command(&command(200 + i, "same"), 3).await }
        }))
        .await;
        let created = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(CommandUpsert::Created(_))))
            .count();
        let updated = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(CommandUpsert::Updated(_))))
            .count();
        assert_eq!((created, updated), (1, 7), "{outcomes:?}");
        let stored = store.commands(50, 0).await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            stored[0].spec,
            command(0, "").spec,
            "JSON text kept as sent"
        );
    }

    /// Runs the futures as tasks at once and collects their outputs in order.
    async fn futures_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let tasks: Vec<_> = futures.map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    }

    /// A private SQLite database: in memory, or a file in a temporary
    /// directory (a pool of several connections, WAL, as deployed).
    struct SqliteDb {
        store: Store,
        _dir: Option<tempfile::TempDir>,
    }

    async fn sqlite_memory() -> SqliteDb {
        SqliteDb {
            store: Store::open_in_memory().await.unwrap(),
            _dir: None,
        }
    }

    async fn sqlite_file() -> SqliteDb {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), &Limits::default())
            .await
            .unwrap();
        SqliteDb {
            store,
            _dir: Some(dir),
        }
    }

    /// Real PostgreSQL for the tests: one server per test process, shared by
    /// the tests that run at the same time (`cargo test` runs them as
    /// threads; nextest runs each in its own process), each test in a fresh
    /// database of its own. The server stops when the last holder drops it.
    mod pg {
        use super::*;
        use guildhall_sandbox::{Service, Services};
        use sqlx::migrate::MigrateDatabase;
        use std::sync::{Arc, Mutex, PoisonError, Weak};

        static SERVER: Mutex<Weak<Services>> = Mutex::new(Weak::new());

        fn server() -> Arc<Services> {
            let mut shared = SERVER.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(server) = shared.upgrade() {
                return server;
            }
            let server =
                Arc::new(Services::start(&[Service::Postgres]).unwrap_or_else(|e| panic!("{e}")));
            *shared = Arc::downgrade(&server);
            server
        }

        /// An empty database on the shared server.
        pub struct EmptyDb {
            /// `postgres://…/NAME`.
            pub url: String,
            /// Its name.
            pub name: String,
            _server: Arc<Services>,
        }

        pub async fn empty() -> EmptyDb {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let server = server();
            let name = format!(
                "test_{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let base = server.database_url();
            let url = match base.rsplit_once('/') {
                Some((host, _)) => format!("{host}/{name}"),
                None => panic!("DATABASE_URL without a database: {base}"),
            };
            sqlx::Postgres::create_database(&url).await.unwrap();
            EmptyDb {
                url,
                name,
                _server: server,
            }
        }

        /// A migrated store over a fresh database (the database's handle
        /// keeps the server up).
        pub async fn store() -> (Store, EmptyDb) {
            let db = empty().await;
            let store = Store::open_url(&db.url, &Limits::default()).await.unwrap();
            (store, db)
        }
    }

    /// Every shared test, once per database: `tests::sqlite::NAME` (with
    /// the SQLite database named) and `tests::postgres::NAME`.
    macro_rules! on_both_databases {
        ($($name:ident($sqlite:ident);)*) => {
            mod sqlite {
                $( #[tokio::test]
                async fn $name() {
                    let db = super::$sqlite().await;
                    super::$name(db.store.clone()).await;
                } )*
            }
            mod postgres {
                $( #[tokio::test]
                async fn $name() {
                    let (store, _db) = super::pg::store().await;
                    super::$name(store).await;
                } )*
            }
        };
    }

    fn webhook_row(id: i64, channel_id: i64) -> WebhookRow {
        WebhookRow {
            id,
            guild_id: 10,
            channel_id,
            creator_id: 1,
            name: format!("hook{id}"),
            avatar: None,
            token: format!("token{id}"),
            // Every other one application-owned: the column round-trips.
            application_id: (id % 2 == 0).then_some(900 + id),
        }
    }

    /// Webhooks: the per-channel and per-guild caps (counted under the
    /// guild's lock, so concurrent creates cannot pass them together),
    /// moves within the guild only, and a deleted channel taking its
    /// webhooks while a deleted webhook leaves its messages.
    async fn webhooks_are_capped_scoped_and_go_with_their_channel(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        let guild = GuildRow {
            id: 10,
            name: "g".into(),
            owner_id: 1,
            created_ms: 5,
        };
        let everyone = RoleRow {
            bot_id: None,
            id: 10,
            guild_id: 10,
            name: "@everyone".into(),
            permissions: 0,
            position: 0,
            color: 0,
            hoist: false,
            mentionable: false,
        };
        let channel = |id| ChannelRow {
            permission_overwrites: "[]".into(),
            id,
            guild_id: Some(10),
            kind: 0,
            name: "c".into(),
            position: 0,
            topic: None,
            ..ChannelRow::default()
        };
        store
            .create_guild(&guild, &everyone, &channel(11))
            .await
            .unwrap();
        store.create_channel(&channel(12), 0).await.unwrap();
        store.create_channel(&channel(13), 0).await.unwrap();
        // Eight concurrent creates into a channel of three places.
        let outcomes = futures_all((0..8).map(|i| {
            let store = store.clone();
            async move { store.create_webhook(&webhook_row(100 + i, 11), 3, 5).await }
        }))
        .await;
        let done = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(WebhookWrite::Done)))
            .count();
        assert_eq!(done, 3, "{outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(WebhookWrite::Done | WebhookWrite::ChannelFull)))
        );
        assert_eq!(store.channel_webhooks(11).await.unwrap().len(), 3);
        for id in [200, 201] {
            assert_eq!(
                store
                    .create_webhook(&webhook_row(id, 12), 3, 5)
                    .await
                    .unwrap(),
                WebhookWrite::Done
            );
        }
        assert_eq!(
            store
                .create_webhook(&webhook_row(202, 13), 3, 5)
                .await
                .unwrap(),
            WebhookWrite::GuildFull
        );
        assert_eq!(
            store
                .create_webhook(&webhook_row(203, 99), 3, 50)
                .await
                .unwrap(),
            WebhookWrite::Missing,
            "no such channel in the guild"
        );
        assert_eq!(store.guild_webhooks(10).await.unwrap().len(), 5);
        // A move into a full channel is refused; into a channel with room
        // it is stored; the guild never changes.
        let mut moved = store.webhook(200).await.unwrap().unwrap();
        assert_eq!(moved, webhook_row(200, 12), "read back whole");
        moved.channel_id = 11;
        assert_eq!(
            store.update_webhook(&moved, 3).await.unwrap(),
            WebhookWrite::ChannelFull
        );
        moved.channel_id = 13;
        moved.name = "renamed".into();
        assert_eq!(
            store.update_webhook(&moved, 3).await.unwrap(),
            WebhookWrite::Done
        );
        assert_eq!(store.webhook(200).await.unwrap(), Some(moved.clone()));
        let elsewhere = WebhookRow {
            guild_id: 77,
            ..moved.clone()
        };
        assert_eq!(
            store.update_webhook(&elsewhere, 3).await.unwrap(),
            WebhookWrite::Missing
        );
        // A webhook's message outlives the webhook.
        let message = MessageRow {
            id: 300,
            channel_id: 13,
            guild_id: Some(10),
            author_id: 1,
            content: "from a hook".into(),
            tts: false,
            edited_ms: None,
            webhook_id: Some(200),
            author_name: Some("override".into()),
            author_avatar: None,
            kind: 0,
            flags: 0,
            components: None,
            application_id: None,
            interaction_id: None,
            interaction_metadata: None,
            embeds: None,
            visible_to: None,
            reference_kind: None,
            reference_message_id: None,
            reference_channel_id: None,
            reference_guild_id: None,
            mentions: None,
            attachments: None,
        };
        store.insert_message(&message).await.unwrap();
        assert!(store.delete_webhook(200).await.unwrap());
        assert!(!store.delete_webhook(200).await.unwrap());
        assert_eq!(store.message(13, 300).await.unwrap(), Some(message.clone()));
        assert_eq!(
            store.webhook_message(200, 300).await.unwrap(),
            Some(message)
        );
        assert_eq!(store.webhook_message(201, 300).await.unwrap(), None);
        // Deleting a channel deletes its webhooks.
        assert!(store.delete_channel(10, 11, 0).await.unwrap());
        assert!(store.channel_webhooks(11).await.unwrap().is_empty());
        assert_eq!(store.webhook(100).await.unwrap(), None);
        assert_eq!(store.guild_webhooks(10).await.unwrap().len(), 1);
        store.delete_guild(10).await.unwrap();
        assert!(store.guild_webhooks(10).await.unwrap().is_empty());
    }

    /// The database's shard filter is `guildhall_proto::shard::receives`:
    /// for several shard counts, every shard's list is exactly the user's
    /// guilds the rule gives it, and nobody else's.
    async fn shard_guild_ids_follow_the_sharding_rule(store: Store) {
        store.create_user(&user(1, "alice")).await.unwrap();
        store.create_user(&user(2, "bob")).await.unwrap();
        let mut mine = Vec::new();
        for t in 1..=12i64 {
            let id = (t << 22) | 7;
            let guild = GuildRow {
                id,
                name: format!("g{t}"),
                owner_id: if t == 6 { 2 } else { 1 },
                created_ms: 5,
            };
            let everyone = RoleRow {
                bot_id: None,
                id,
                guild_id: id,
                name: "@everyone".into(),
                permissions: 0,
                position: 0,
                color: 0,
                hoist: false,
                mentionable: false,
            };
            let channel = ChannelRow {
                permission_overwrites: "[]".into(),
                id: id + 1,
                guild_id: Some(id),
                kind: 0,
                name: "general".into(),
                position: 0,
                topic: None,
                ..ChannelRow::default()
            };
            store
                .create_guild(&guild, &everyone, &channel)
                .await
                .unwrap();
            if t != 6 {
                mine.push(id);
            }
        }
        for num_shards in [1u32, 2, 3, 5] {
            for shard_id in 0..num_shards {
                let expected: Vec<i64> = mine
                    .iter()
                    .copied()
                    .filter(|g| {
                        guildhall_proto::shard::receives(Some([shard_id, num_shards]), Some(*g))
                    })
                    .collect();
                let listed = store
                    .shard_guild_ids_of(1, i64::from(shard_id), i64::from(num_shards), 100)
                    .await
                    .unwrap();
                assert_eq!(listed, expected, "shard [{shard_id}, {num_shards}]");
            }
        }
    }

    /// Session starts: counted up to the total, then refused without
    /// growing, restarted once the window has ended; at most `bots_max`
    /// bots tracked, a further one untracked until a window ends.
    async fn session_starts_are_counted_refused_and_reset(store: Store) {
        let (window, total, bots) = (1_000, 3, 2);
        for (n, now) in [(1, 100), (2, 150), (3, 900)] {
            assert_eq!(
                store
                    .start_session(1, now, window, total, bots)
                    .await
                    .unwrap(),
                SessionStart::Started(SessionStarts {
                    starts: n,
                    window_start_ms: 100
                })
            );
        }
        let refused = SessionStart::Refused(SessionStarts {
            starts: 4,
            window_start_ms: 100,
        });
        for now in [950, 1_050] {
            assert_eq!(
                store
                    .start_session(1, now, window, total, bots)
                    .await
                    .unwrap(),
                refused
            );
        }
        assert_eq!(
            store.session_starts(1).await.unwrap(),
            Some(SessionStarts {
                starts: 4,
                window_start_ms: 100
            })
        );
        assert_eq!(
            store
                .start_session(1, 1_100, window, total, bots)
                .await
                .unwrap(),
            SessionStart::Started(SessionStarts {
                starts: 1,
                window_start_ms: 1_100
            })
        );
        assert!(matches!(
            store
                .start_session(2, 1_200, window, total, bots)
                .await
                .unwrap(),
            SessionStart::Started(_)
        ));
        assert_eq!(
            store
                .start_session(3, 1_300, window, total, bots)
                .await
                .unwrap(),
            SessionStart::Untracked
        );
        assert_eq!(store.session_starts(3).await.unwrap(), None);
        // Bot 1's window ended at 2,100: its row makes room.
        assert_eq!(
            store
                .start_session(3, 2_100, window, total, bots)
                .await
                .unwrap(),
            SessionStart::Started(SessionStarts {
                starts: 1,
                window_start_ms: 2_100
            })
        );
        assert_eq!(store.session_starts(1).await.unwrap(), None);
        assert!(store.session_starts(2).await.unwrap().is_some());
    }

    /// `max_concurrency` buckets: one IDENTIFY per bucket per window, each
    /// bucket and bot apart; at most `rows_max` buckets tracked, a further
    /// one untracked until a window ends.
    async fn identify_buckets_admit_one_per_window(store: Store) {
        let (window, rows) = (5_000, 3);
        let admit = |user, bucket, now| store.identify_in_bucket(user, bucket, now, window, rows);
        assert_eq!(admit(1, 0, 1_000).await.unwrap(), IdentifyBucket::Admitted);
        for now in [1_000, 1_001, 5_999] {
            assert_eq!(admit(1, 0, now).await.unwrap(), IdentifyBucket::Refused);
        }
        // Another bucket of the bot, and the same bucket of another bot.
        assert_eq!(admit(1, 1, 1_500).await.unwrap(), IdentifyBucket::Admitted);
        assert_eq!(admit(2, 0, 1_500).await.unwrap(), IdentifyBucket::Admitted);
        // The window is the refused attempts' too: they did not extend it.
        assert_eq!(admit(1, 0, 6_000).await.unwrap(), IdentifyBucket::Admitted);
        assert_eq!(admit(1, 0, 10_999).await.unwrap(), IdentifyBucket::Refused);
        // Three rows: a fourth bucket is untracked while all are in their
        // windows, tracked once one has ended.
        assert_eq!(admit(3, 0, 6_400).await.unwrap(), IdentifyBucket::Untracked);
        assert_eq!(admit(3, 0, 6_500).await.unwrap(), IdentifyBucket::Admitted);
        assert_eq!(admit(3, 0, 6_501).await.unwrap(), IdentifyBucket::Refused);
    }

    on_both_databases! {
        identify_buckets_admit_one_per_window(sqlite_file);
        shard_guild_ids_follow_the_sharding_rule(sqlite_memory);
        session_starts_are_counted_refused_and_reset(sqlite_file);
        webhooks_are_capped_scoped_and_go_with_their_channel(sqlite_file);
        guild_round_trip_and_unique_names(sqlite_memory);
        messages_page_newest_first(sqlite_memory);
        concurrent_inserts_are_all_durable_and_answered(sqlite_file);
        operations_are_scoped_by_channel_and_guild(sqlite_memory);
        pins_and_reaction_removals_are_capped_ordered_and_scoped(sqlite_file);
        page_reactions_are_counted_capped_and_scoped(sqlite_file);
        member_counts_follow_joins_and_leaves(sqlite_memory);
        invites_expire_run_out_and_list(sqlite_memory);
        bans_remove_members_page_and_lift(sqlite_memory);
        threads_stay_apart_from_channels_and_go_with_their_parent(sqlite_memory);
        audit_entries_page_filter_and_expire(sqlite_memory);
        stale_owner_writes_are_refused(sqlite_memory);
        tokens_resolve_and_revoke(sqlite_memory);
        command_upserts_are_serialised(sqlite_file);
    }

    /// `open_url` picks the database by the URL's scheme.
    #[tokio::test]
    async fn open_url_picks_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let limits = Limits::default();
        for url in [
            format!("sqlite://{}", path.display()),
            path.display().to_string(),
        ] {
            let store = Store::open_url(&url, &limits).await.unwrap();
            assert!(format!("{store:?}").contains("Sqlite"), "{url}: {store:?}");
            assert_eq!(store.user(1).await.unwrap(), None);
        }
        let (store, _db) = pg::store().await;
        assert!(format!("{store:?}").contains("Postgres"), "{store:?}");
    }

    /// Eight nodes starting at once on one empty database all open it, and
    /// its migrations ran once each.
    #[tokio::test]
    async fn postgres_concurrent_opens_migrate_once() {
        let db = pg::empty().await;
        let opens = futures_all((0..8).map(|_| {
            let url = db.url.clone();
            async move { PgStore::open(&url, &Limits::default()).await }
        }))
        .await;
        let stores: Vec<PgStore> = opens
            .into_iter()
            .map(|open| open.unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let applied: Vec<(i64, bool)> =
            sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&stores[0].pool)
                .await
                .unwrap();
        let expected: Vec<(i64, bool)> = PG_MIGRATIONS.iter().map(|m| (m.version, true)).collect();
        assert_eq!(applied, expected);
        stores[3].create_user(&user(1, "alice")).await.unwrap();
        assert_eq!(stores[7].user(1).await.unwrap(), Some(user(1, "alice")));
    }

    /// An open waits while another session holds the migration lock, and
    /// has not touched the schema before it gets it.
    #[tokio::test]
    async fn postgres_migrations_wait_for_the_advisory_lock() {
        let db = pg::empty().await;
        let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(PG_MIGRATION_LOCK_KEY)
            .execute(&mut holder)
            .await
            .unwrap();
        let url = db.url.clone();
        let open = tokio::spawn(async move { PgStore::open(&url, &Limits::default()).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!open.is_finished(), "open did not wait for the lock");
        let (table,): (Option<String>,) =
            sqlx::query_as("SELECT to_regclass('_sqlx_migrations')::text")
                .fetch_one(&mut holder)
                .await
                .unwrap();
        assert_eq!(table, None, "migrated without the lock");
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(PG_MIGRATION_LOCK_KEY)
            .execute(&mut holder)
            .await
            .unwrap();
        let store = open.await.unwrap().unwrap();
        assert_eq!(store.user(1).await.unwrap(), None);
    }

    /// A database whose default is `synchronous_commit = off` still commits
    /// synchronously for the store.
    #[tokio::test]
    async fn postgres_commits_are_synchronous_whatever_the_default() {
        let db = pg::empty().await;
        let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
        // Safe: the name is the test's own, made of letters, digits and `_`.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
        let mut fresh = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let (plain,): (String,) = sqlx::query_as("SHOW synchronous_commit")
            .fetch_one(&mut fresh)
            .await
            .unwrap();
        assert_eq!(plain, "off", "the database default took");
        let store = PgStore::open(&db.url, &Limits::default()).await.unwrap();
        let (setting,): (String,) = sqlx::query_as("SHOW synchronous_commit")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(setting, "on");
    }

    /// A pool with every connection taken answers `Busy` after the acquire
    /// timeout, on both databases, reads and group-committed writes alike.
    #[tokio::test]
    async fn exhausted_pool_fails_fast_with_busy() {
        let limits = Limits {
            store_pool_connections_max: 1,
            ..Limits::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("db"), &limits)
            .await
            .unwrap();
        let db = pg::empty().await;
        let pg = PgStore::open(&db.url, &limits).await.unwrap();
        let held = (
            sqlite.pool.acquire().await.unwrap(),
            pg.pool.acquire().await.unwrap(),
        );
        let started = std::time::Instant::now();
        let (a, b) = tokio::join!(sqlite.user(1), pg.user(1));
        assert!(matches!(a, Err(StoreError::Busy)), "{a:?}");
        assert!(matches!(b, Err(StoreError::Busy)), "{b:?}");
        let waited_ms = started.elapsed().as_millis();
        assert!(
            (u128::from(ACQUIRE_TIMEOUT_MS)..u128::from(ACQUIRE_TIMEOUT_MS) * 2)
                .contains(&waited_ms),
            "waited {waited_ms} ms"
        );
        drop(held);
        assert_eq!(pg.user(1).await.unwrap(), None);
    }

    /// The two migration directories build one schema: the same tables and
    /// columns, each column of the matching type (SQLite's INTEGER is
    /// PostgreSQL's BIGINT, or BOOLEAN for flags; BLOB is BYTEA).
    #[tokio::test]
    async fn both_databases_have_one_schema() {
        let sqlite = SqliteStore::open_in_memory().await.unwrap();
        let mut lite: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT m.name, p.name, p.type FROM sqlite_master m JOIN pragma_table_info(m.name) p \
             WHERE m.type = 'table' AND m.name NOT LIKE '\\_%' ESCAPE '\\'",
        )
        .fetch_all(&sqlite.pool)
        .await
        .unwrap();
        let db = pg::empty().await;
        let pg = PgStore::open(&db.url, &Limits::default()).await.unwrap();
        let mut post: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name NOT LIKE '\\_%'",
        )
        .fetch_all(&pg.pool)
        .await
        .unwrap();
        for column in &mut post {
            column.2 = match column.2.as_str() {
                "bigint" | "boolean" => "INTEGER",
                "text" => "TEXT",
                "bytea" => "BLOB",
                other => panic!("{}.{} is {other}", column.0, column.1),
            }
            .into();
        }
        lite.sort();
        post.sort();
        assert!(lite.len() > 50, "{lite:?}");
        assert_eq!(lite, post);
    }
}
