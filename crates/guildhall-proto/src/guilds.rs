//! The guilds role's bus envelopes: what other roles ask a guild's owner
//! ([`GuildRequest`] on [`guild_requests_subject`]), what it answers
//! ([`GuildReply`]), and a new owner's question to gateway nodes (which
//! sessions follow a guild, [`follows_subject`]).
//!
//! They live here, not in the role, so a caller depends on the contract
//! and never on the role's code. What they carry are wire objects and
//! records ([`ChannelRecord`], [`RoleRecord`], [`UserRecord`]), never a
//! store row: a row's shape is the store's to change, and a row with a
//! password hash must not be one derive away from the bus.

use crate::model::{self, Channel, Member, Role};
use crate::users::UserRecord;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A channel as a guild change carries it (a new channel's fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    /// Id (chosen by the caller).
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
    /// Permission overwrites (absent from an older caller: none).
    #[serde(default)]
    pub permission_overwrites: Vec<model::PermissionOverwrite>,
    /// The other documented fields the caller set (the owner checks the
    /// parent against the guild; absent: Discord's defaults).
    #[serde(default)]
    pub settings: ChannelSettings,
}

/// A new thread as `GuildChange::CreateThread` carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Id: a fresh one, or the message it starts from (a message starts
    /// at most one thread, which shares its id).
    pub id: i64,
    /// The channel it is started in.
    pub parent_id: i64,
    /// 10 (announcement), 11 (public) or 12 (private).
    pub kind: i64,
    /// Name (1 to 100 characters, checked by the caller).
    pub name: String,
    /// Minutes of inactivity before it leaves the channel list (None: the
    /// parent's default).
    pub auto_archive_duration: Option<i64>,
    /// Slowmode seconds (None: the parent's
    /// `default_thread_rate_limit_per_user`).
    #[serde(default)]
    pub rate_limit_per_user: Option<i64>,
    /// Non-moderators may add others (private threads).
    pub invitable: bool,
    /// Started from this message of the parent.
    pub from_message: bool,
    /// A forum or media post's applied tags (at most 5, the forum's).
    #[serde(default)]
    pub applied_tags: Vec<i64>,
}

/// An edit of a thread (`PATCH /channels/{thread.id}`), its fields
/// checked by the caller against Discord's bounds; None leaves a field as
/// it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPatch {
    /// Name (1 to 100 characters).
    pub name: Option<String>,
    /// Archive (true) or unarchive.
    pub archived: Option<bool>,
    /// Only MANAGE_THREADS holders unarchive it.
    pub locked: Option<bool>,
    /// Minutes of inactivity before it archives (60, 1440, 4320, 10080).
    pub auto_archive_duration: Option<i64>,
    /// Slowmode seconds.
    pub rate_limit_per_user: Option<i64>,
    /// Non-moderators may add others (private threads only).
    pub invitable: Option<bool>,
    /// A forum or media post's applied tags, whole (at most 5).
    #[serde(default)]
    pub applied_tags: Option<Vec<i64>>,
}

/// One entry of a bulk channel move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelMove {
    /// The channel.
    pub id: i64,
    /// Its new position.
    #[serde(default)]
    pub position: Option<i64>,
    /// Its new category (Some(None): out of any).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::present"
    )]
    pub parent_id: Option<Option<i64>>,
    /// Take the (new) category's overwrites.
    #[serde(default)]
    pub lock_permissions: bool,
}

/// A channel's documented fields beyond name, topic, position and
/// overwrites, as a create or update sets them: `None` leaves one as it
/// is (or at Discord's default). The api checks each against Discord's
/// bounds and the channel's type; the owner checks `parent_id` against
/// the guild's categories.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelSettings {
    /// A new type (text and announcement change into each other only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<i64>,
    /// Age-restricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsfw: Option<bool>,
    /// Slowmode seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_user: Option<i64>,
    /// The category (Some(None): out of any).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::present"
    )]
    pub parent_id: Option<Option<i64>>,
    /// A voice channel's bits per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bitrate: Option<i64>,
    /// A voice channel's participants at once (0: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<i64>,
    /// A voice channel's camera quality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_quality_mode: Option<i64>,
    /// Its new threads' auto-archive minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_auto_archive_duration: Option<i64>,
    /// Its new threads' slowmode seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_thread_rate_limit_per_user: Option<i64>,
    /// A forum or media channel's tags, whole (a new tag's id is minted by
    /// the caller; an id that is not the channel's is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_tags: Option<Vec<crate::model::ForumTag>>,
    /// The ids the caller minted for `available_tags`' new tags (the only
    /// ids besides the channel's own that the owner accepts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minted_tags: Vec<i64>,
    /// The reaction new posts show (Some(None): none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::present"
    )]
    pub default_reaction_emoji: Option<Option<crate::model::DefaultReaction>>,
    /// The default sort order (Some(None): not set).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::present"
    )]
    pub default_sort_order: Option<Option<i64>>,
    /// The default layout (forum channels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_forum_layout: Option<i64>,
}

/// A role as a guild change carries it (a new role's fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleRecord {
    /// Id (chosen by the caller; the guild's id for `@everyone`).
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
}

/// Why a guild request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum GuildError {
    /// No such guild.
    #[error("unknown guild")]
    UnknownGuild,
    /// No such channel in the guild.
    #[error("unknown channel")]
    UnknownChannel,
    /// The user is not a member, or may not see the channel.
    #[error("missing access")]
    MissingAccess,
    /// The member lacks a permission (or ranks too low).
    #[error("missing permissions")]
    MissingPermissions,
    /// No such role.
    #[error("unknown role")]
    UnknownRole,
    /// No such member.
    #[error("unknown member")]
    UnknownMember,
    /// A name of the wrong length.
    #[error("invalid name")]
    InvalidName,
    /// The guild holds `guild_roles_max` roles, or a new one would not fit
    /// its GUILD_CREATE.
    #[error("maximum number of roles")]
    MaxRoles,
    /// The guild holds `guild_channels_max` channels, or a new one would
    /// not fit its GUILD_CREATE.
    #[error("maximum number of channels")]
    MaxChannels,
    /// An edit would grow the guild's roles and channels past what its
    /// GUILD_CREATE can carry.
    #[error("guild at its size limit")]
    SizeLimit(Grown),
    /// A channel would hold more than `channel_overwrites_max` overwrites.
    #[error("too many permission overwrites")]
    MaxOverwrites,
    /// An overwrite is malformed (a type other than 0 or 1, bits that are
    /// not a decimal string of documented permissions).
    #[error("invalid permission overwrite")]
    InvalidOverwrite,
    /// A forum's tags name an id that is not one of its tags (50035 at
    /// `available_tags`), or a post applies one that is not (50035 at
    /// `applied_tags`).
    #[error("unknown tag")]
    UnknownTag(TagField),
    /// `parent_id` names no category of the guild, or a category was
    /// given one (50035 at `parent_id`).
    #[error("invalid parent category")]
    InvalidParent,
    /// The channel's slowmode holds the user for this many more
    /// milliseconds (20016, 429).
    #[error("slowmode")]
    Slowmode(u64),
    /// The user is banned from the guild (40007).
    #[error("banned")]
    Banned,
    /// The action does not apply to the channel's type, e.g. a thread
    /// of a kind its parent cannot hold (50024).
    #[error("wrong channel type")]
    WrongChannelType,
    /// A thread was started from this message already (160004).
    #[error("thread exists")]
    ThreadExists,
    /// The guild holds `guild_active_threads_max` active threads
    /// (160006).
    #[error("maximum number of active threads")]
    MaxActiveThreads,
    /// The thread is archived: unarchive it first (50083).
    #[error("thread archived")]
    ThreadArchived,
    /// No such ban (10026).
    #[error("unknown ban")]
    UnknownBan,
    /// The owner is busy or gone: retry later.
    #[error("overloaded")]
    Overloaded,
    /// The store failed.
    #[error("store")]
    Store,
}

/// The field an unknown tag was named in ([`GuildError::UnknownTag`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagField {
    /// A forum's `available_tags`.
    Available,
    /// A post's `applied_tags`.
    Applied,
}

impl TagField {
    /// The body field it names.
    pub fn key(self) -> &'static str {
        match self {
            TagField::Available => "available_tags",
            TagField::Applied => "applied_tags",
        }
    }
}

/// The field whose growth an edit was refused for ([`GuildError::SizeLimit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grown {
    /// A name (of the guild, a role or a channel).
    Name,
    /// A channel's topic.
    Topic,
}

impl Grown {
    /// The body field it names.
    pub fn key(self) -> &'static str {
        match self {
            Grown::Name => "name",
            Grown::Topic => "topic",
        }
    }
}

/// The `channel_id` of an [`GuildCall::Authorize`] that asks about the
/// guild as a whole (no channel has id 0: ids are snowflakes).
pub const GUILD_WIDE: i64 = 0;

/// What an authorised sender needs to build its message.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendGrant {
    /// The guild.
    pub guild_id: i64,
    /// The author as a partial member (no `user`).
    pub member: Member,
    /// The user's permissions in the guild (an interaction's
    /// `member.permissions` and `app_permissions`).
    #[serde(default)]
    pub permissions: u64,
    /// A timeout runs: the user may read and nothing else, not even
    /// join an existing reaction (which needs no permission of its own).
    #[serde(default)]
    pub timed_out: bool,
}

/// An event for a guild's subscribers, its data encoded once.
#[derive(Debug, Serialize, Deserialize)]
pub struct Outgoing {
    /// Set by the caller that publishes (the guild directory): the owner confirms a retry of an
    /// id it fanned out already without fanning it out again (0: none).
    #[serde(default)]
    pub publish_id: u64,
    /// Event name.
    pub name: String,
    /// The intent a session needs to receive it.
    pub required_intent: u64,
    /// Event data.
    pub data: Box<RawValue>,
    /// The data for sessions without MESSAGE_CONTENT (messages only).
    pub blanked: Option<Box<RawValue>>,
    /// Users who receive `data` regardless (author, mentioned users).
    pub content_exempt: Vec<i64>,
    /// The channel the event belongs to (0: the guild as a whole): only
    /// sessions whose user may view it receive it.
    #[serde(default)]
    pub channel_id: i64,
    /// Permissions a session's user needs in `channel_id` besides
    /// VIEW_CHANNEL to receive it (the invite events' MANAGE_CHANNELS;
    /// 0: none).
    #[serde(default)]
    pub channel_permissions: u64,
}

/// A new owner's question to a gateway node: which of your sessions follow
/// this guild? (Subject [`follows_subject`].)
#[derive(Debug, Serialize, Deserialize)]
pub struct FollowsAsk {
    /// The guild.
    pub guild_id: i64,
}

/// A session that follows a guild, as a gateway node reports it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Follower {
    /// The session.
    pub session_id: String,
    /// Its user.
    pub user_id: i64,
    /// Its intents.
    pub intents: u64,
    /// Its `large_threshold` (absent from a node that predates it:
    /// Discord's default).
    #[serde(default = "default_large_threshold")]
    pub large_threshold: u32,
}

fn default_large_threshold() -> u32 {
    crate::gateway::LARGE_THRESHOLD_DEFAULT
}

/// Subject where `node`'s gateway answers [`FollowsAsk`].
pub fn follows_subject(node: &str) -> String {
    format!("gw.{node}.follows")
}

/// A request to a guild's owner, as it travels on the bus (subject
/// `guilds.<owner node>`). The answer, when the caller waits for one, is a
/// [`GuildAnswer`].
#[derive(Debug, Serialize, Deserialize)]
pub enum GuildCall {
    /// Subscribe a session: its GUILD_CREATE, then the guild's events, in
    /// its node's stream.
    Subscribe {
        /// The session's gateway node.
        node: String,
        /// The session.
        session_id: String,
        /// Its user.
        user_id: i64,
        /// Its intents.
        intents: u64,
        /// Its `large_threshold` (absent from a node that predates it:
        /// Discord's default).
        #[serde(default = "default_large_threshold")]
        large_threshold: u32,
    },
    /// A session moves from gateway node `from` to `to` (a RESUME there):
    /// `from`'s stream gets `Moved` (the last event it records for the
    /// session is the one before), `to`'s gets `Adopt` (or a fresh
    /// GUILD_CREATE when `from` held no subscription), and every later
    /// event goes to `to` only. The owner's mailbox orders this against
    /// every publish, so each event goes to exactly one of the two nodes.
    Move {
        /// The node giving the session away.
        from: String,
        /// The node taking it.
        to: String,
        /// The session.
        session_id: String,
        /// Its user.
        user_id: i64,
        /// Its intents.
        intents: u64,
        /// Its `large_threshold` (absent from a node that predates it:
        /// Discord's default).
        #[serde(default = "default_large_threshold")]
        large_threshold: u32,
    },
    /// A session is gone: stop counting it.
    Unsubscribe {
        /// The session's gateway node.
        node: String,
        /// The session.
        session_id: String,
    },
    /// May `user_id` use `channel_id` with `need` permissions?
    Authorize {
        /// Who.
        user_id: i64,
        /// Which channel; [`GUILD_WIDE`] for a permission on the guild as a
        /// whole (GET /guilds/{id}/webhooks names no channel).
        channel_id: i64,
        /// Required bits.
        need: u64,
        /// A message send: the channel's slowmode applies (refused with
        /// [`GuildError::Slowmode`] while the user's clock runs) and
        /// starts the user's clock.
        #[serde(default)]
        slowmode: bool,
    },
    /// Fan an event out.
    Publish(Outgoing),
    /// A user joined (invite or bot authorisation).
    AddMember {
        /// The user.
        user: UserRecord,
        /// Through a temporary invite: removed when their last session
        /// disconnects unless they hold a role by then.
        #[serde(default)]
        temporary: bool,
    },
    /// The guild as `user_id`'s GUILD_CREATE shows it.
    Snapshot {
        /// Who asks (must be a member).
        user_id: i64,
    },
    /// The guild object of GET /guilds/{id}: no members, channels or
    /// voice states, so its size is bounded by the roles alone.
    Guild {
        /// Who asks (must be a member).
        user_id: i64,
    },
    /// Members, for op 8 and REST: `query` prefix, at most `limit`.
    Members {
        /// Who asks (must be a member).
        user_id: i64,
        /// Username prefix.
        query: String,
        /// Specific users.
        user_ids: Vec<i64>,
        /// Only users with a higher id (paging; 0 for all).
        after: i64,
        /// Most members.
        limit: usize,
        /// Match `query` against nicknames too (REST member search, as
        /// Discord documents it); op 8 matches usernames only.
        #[serde(default)]
        nicknames: bool,
    },
    /// A change by `actor`, checked against their permissions.
    Change {
        /// Who asks.
        actor: i64,
        /// What (boxed: a channel's settings make it the largest call).
        change: Box<GuildChange>,
        /// The moderator's `X-Audit-Log-Reason`, kept in the audit log
        /// entry the change makes.
        #[serde(default)]
        reason: Option<String>,
    },
    /// Record an audit log entry for an action another role performed
    /// (the api's message deletes, pins and invites): stored and
    /// announced as the owner's own entries (GUILD_AUDIT_LOG_ENTRY_CREATE).
    Audit {
        /// Who acted (a member).
        actor: i64,
        /// The documented action type.
        action_type: u8,
        /// What it acted on.
        target_id: Option<i64>,
        /// The documented changes.
        changes: Vec<serde_json::Value>,
        /// The documented optional info.
        options: Option<serde_json::Value>,
        /// `X-Audit-Log-Reason`.
        reason: Option<String>,
    },
    /// A member's presence changed (best effort: dropped when busy).
    Presence {
        /// Who.
        user_id: i64,
        /// online, idle, dnd, invisible, offline.
        status: String,
        /// The user's last session has gone (their status is then
        /// offline; an invisible user who disconnects is cast with this
        /// alone).
        #[serde(default)]
        disconnected: bool,
    },
    /// Op 4: join, move or leave a voice channel.
    Voice {
        /// Who.
        user_id: i64,
        /// Their gateway session.
        session_id: String,
        /// The channel (None: leave).
        channel_id: Option<i64>,
        /// Muted by self.
        self_mute: bool,
        /// Deafened by self.
        self_deaf: bool,
    },
    /// The roles of the guild.
    Roles {
        /// Who asks (must be a member).
        user_id: i64,
    },
    /// The channels of the guild.
    Channels {
        /// Who asks (must be a member).
        user_id: i64,
    },
    /// The guild's active threads that `user_id` can view, each with
    /// their thread member where they joined (answered `Channels`).
    ActiveThreads {
        /// Who asks (must be a member).
        user_id: i64,
    },
}

/// What a guild owner answers.
#[derive(Debug, Serialize, Deserialize)]
pub enum GuildAnswer {
    /// To `Authorize`.
    Granted(SendGrant),
    /// To `AddMember`: whether the user was new.
    Added(bool),
    /// To `Snapshot`.
    Guild(Box<model::Guild>),
    /// To `Guild`.
    RestGuild(serde_json::Value),
    /// To `Members`.
    Members(MemberPage),
    /// To `Change`.
    Changed(Changed),
    /// To `Voice`: the voice state.
    Voice(serde_json::Value),
    /// To `Roles`.
    Roles(Vec<Role>),
    /// To `Channels`.
    Channels(Vec<Channel>),
    /// To `Publish`: the dispatch went out to every stream (on the bus
    /// ahead of this answer).
    Published,
}

/// A change to a guild.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum GuildChange {
    /// Create a channel (id chosen by the caller).
    CreateChannel {
        /// The channel.
        channel: ChannelRecord,
    },
    /// Start a thread in a channel of the guild; the actor is its owner
    /// and first member.
    CreateThread {
        /// The thread.
        thread: ThreadRecord,
    },
    /// Edit a thread, active or archived (THREAD_UPDATE).
    UpdateThread {
        /// The thread.
        thread_id: i64,
        /// What changes.
        patch: ThreadPatch,
    },
    /// Delete a thread with its messages and members (THREAD_DELETE).
    DeleteThread {
        /// The thread.
        thread_id: i64,
    },
    /// Add a member to an active thread or remove one (the actor
    /// themself: join or leave).
    ThreadMember {
        /// The thread.
        thread_id: i64,
        /// Who joins or leaves.
        user_id: i64,
        /// Add (true) or remove.
        add: bool,
    },
    /// Move channels (`PATCH /guilds/{id}/channels`): positions,
    /// categories, overwrites synced with the new category.
    ChannelPositions {
        /// One entry per channel, ids distinct.
        moves: Vec<ChannelMove>,
    },
    /// Reorder roles (`PATCH /guilds/{id}/roles`): (role id, position),
    /// ids distinct; the others keep their order around them.
    RolePositions {
        /// The requested positions.
        moves: Vec<(i64, i64)>,
    },
    /// Rename, re-topic or move a channel.
    UpdateChannel {
        /// Which.
        channel_id: i64,
        /// New name.
        name: Option<String>,
        /// New topic (Some(None) clears it: absent and null differ on the
        /// bus too).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::model::present"
        )]
        topic: Option<Option<String>>,
        /// New position.
        position: Option<i64>,
        /// New overwrites, all of them (needs MANAGE_ROLES there too).
        #[serde(default)]
        permission_overwrites: Option<Vec<model::PermissionOverwrite>>,
        /// The other fields it changes.
        #[serde(default)]
        settings: ChannelSettings,
    },
    /// Set one permission overwrite of a channel (`PUT
    /// /channels/{id}/permissions/{overwrite.id}`).
    SetOverwrite {
        /// Which channel.
        channel_id: i64,
        /// The overwrite (replaces one with its id).
        overwrite: model::PermissionOverwrite,
    },
    /// Remove one permission overwrite of a channel (none with that id:
    /// nothing changes, nothing is announced).
    DeleteOverwrite {
        /// Which channel.
        channel_id: i64,
        /// The role's or member's id.
        overwrite_id: i64,
    },
    /// Delete a channel.
    DeleteChannel {
        /// Which.
        channel_id: i64,
    },
    /// Create a role (id chosen by the caller).
    CreateRole {
        /// The role.
        role: RoleRecord,
    },
    /// Change a role.
    UpdateRole {
        /// Which.
        role_id: i64,
        /// New name.
        name: Option<String>,
        /// New permission bits.
        permissions: Option<i64>,
        /// New colour.
        color: Option<i64>,
        /// Hoisted.
        hoist: Option<bool>,
        /// Mentionable.
        mentionable: Option<bool>,
    },
    /// Delete a role.
    DeleteRole {
        /// Which.
        role_id: i64,
    },
    /// Change a member's nickname and/or roles.
    UpdateMember {
        /// Whom.
        member_id: i64,
        /// New nickname (Some(None) clears it: absent and null differ on
        /// the bus too).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::model::present"
        )]
        nick: Option<Option<String>>,
        /// New role set.
        roles: Option<Vec<i64>>,
        /// A timeout until (Unix ms), Some(None) lifting it (needs
        /// MODERATE_MEMBERS).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::model::present"
        )]
        communication_disabled_until_ms: Option<Option<i64>>,
    },
    /// Give or take one role.
    MemberRole {
        /// Whom.
        member_id: i64,
        /// Which role.
        role_id: i64,
        /// Give (true) or take (false).
        add: bool,
    },
    /// Kick a member (or leave, when actor is the member).
    RemoveMember {
        /// Whom.
        member_id: i64,
    },
    /// Ban a user (a member is removed), deleting their messages in the
    /// guild from `delete_since_id` on (0: none).
    Ban {
        /// Whom.
        user: UserRecord,
        /// The oldest message id to delete (0: delete none).
        delete_since_id: i64,
        /// The moderator's reason.
        reason: Option<String>,
    },
    /// Ban several users (`POST /guilds/{id}/bulk-ban`), each as `Ban`;
    /// answered with who was banned and who was not.
    BulkBan {
        /// Whom (users the caller could not find are its failures).
        users: Vec<UserRecord>,
        /// The oldest message id to delete (0: delete none).
        delete_since_id: i64,
        /// The moderator's reason.
        reason: Option<String>,
    },
    /// Lift a ban.
    Unban {
        /// Whom.
        user: UserRecord,
    },
    /// A bot authorized into the guild (`POST /oauth2/authorize`) with
    /// `permissions`: its managed role (id chosen by the caller, named after
    /// it, held by it alone) is created, or its permissions replaced; none
    /// for 0, as Discord does. The bot is a member already.
    AuthorizeBot {
        /// The bot user.
        bot: UserRecord,
        /// The managed role's id, if one is created.
        role_id: i64,
        /// The permissions asked for.
        permissions: i64,
    },
    /// Rename the guild.
    UpdateGuild {
        /// New name.
        name: String,
    },
    /// Delete the guild (owner only).
    DeleteGuild,
}

/// One page of members, and how many match the filter in all (so a
/// caller paging through them knows the chunk count up front).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberPage {
    /// Members of this page, by user id.
    pub members: Vec<Member>,
    /// Members matching the filter, all pages together.
    pub matching: usize,
    /// The statuses of this page's members who are not offline (op 8's
    /// `presences`).
    #[serde(default)]
    pub statuses: Vec<(i64, String)>,
}

/// What a change produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Changed {
    /// A channel (updated or deleted).
    Channel(Channel),
    /// A role.
    Role(Role),
    /// A member.
    Member(Member),
    /// The guild (GUILD_UPDATE's payload).
    Guild(serde_json::Value),
    /// The guild's roles, in position order (after a reorder).
    Roles(Vec<Role>),
    /// A bulk ban's outcome: user ids banned, and not.
    Banned {
        /// Banned now.
        banned: Vec<i64>,
        /// Not banned (owner, ranked too high, banned already, unknown).
        failed: Vec<i64>,
    },
    /// Nothing to return.
    Nothing,
}

/// A guild request on the bus.
#[derive(Serialize, Deserialize)]
pub struct GuildRequest {
    /// Envelope version ([`crate::bus::ENVELOPE_VERSION`]).
    pub v: u32,
    /// The guild.
    pub guild_id: i64,
    /// What is asked.
    pub call: GuildCall,
    /// Forwards so far (absent: 0, a request straight from its caller).
    #[serde(default)]
    pub hops: u32,
}

/// A guild owner's answer on the bus.
#[derive(Serialize, Deserialize)]
pub struct GuildReply {
    /// Envelope version ([`crate::bus::ENVELOPE_VERSION`]).
    pub v: u32,
    /// The answer.
    pub result: Result<GuildAnswer, GuildError>,
}

/// Subject of the guilds role on `node`.
pub fn guild_requests_subject(node: &str) -> String {
    format!("guilds.{node}.requests")
}

impl GuildError {
    /// Whether the same request may succeed later, at the same owner or a
    /// new one (busy, gone, too slow, a store failure); the rest are
    /// answers that asking again does not change.
    pub fn is_retryable(&self) -> bool {
        matches!(self, GuildError::Overloaded | GuildError::Store)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// A member change that clears a nickname or lifts a timeout (null)
    /// reaches the owner as a clear, not as "unchanged": serde's plain
    /// `Option<Option<_>>` reads null as absent.
    #[test]
    fn a_cleared_field_survives_the_bus() {
        let change = GuildChange::UpdateMember {
            member_id: 1,
            nick: Some(None),
            roles: None,
            communication_disabled_until_ms: None,
        };
        let back: GuildChange =
            serde_json::from_slice(&serde_json::to_vec(&change).unwrap()).unwrap();
        let GuildChange::UpdateMember {
            nick,
            communication_disabled_until_ms,
            ..
        } = back
        else {
            panic!("not a member update");
        };
        assert_eq!(nick, Some(None));
        assert_eq!(communication_disabled_until_ms, None);
    }

    /// A gateway node that predates `large_threshold` sends none on a
    /// subscription, a move or a follower list: the owner reads Discord's
    /// default, and a node that sends one has it kept.
    #[test]
    fn calls_without_a_large_threshold_read_as_the_default() {
        let default = crate::gateway::LARGE_THRESHOLD_DEFAULT;
        let subscribe: GuildCall = serde_json::from_str(
            r#"{"Subscribe":{"node":"a","session_id":"s","user_id":1,"intents":1}}"#,
        )
        .unwrap();
        let GuildCall::Subscribe {
            large_threshold, ..
        } = subscribe
        else {
            panic!("not a subscription");
        };
        assert_eq!(large_threshold, default);
        let moved: GuildCall = serde_json::from_str(
            r#"{"Move":{"from":"a","to":"b","session_id":"s","user_id":1,"intents":1}}"#,
        )
        .unwrap();
        assert!(
            matches!(moved, GuildCall::Move { large_threshold, .. } if large_threshold == default)
        );
        let followers: Vec<Follower> =
            serde_json::from_str(r#"[{"session_id":"s","user_id":1,"intents":1}]"#).unwrap();
        assert_eq!(followers[0].large_threshold, default);
        let kept = serde_json::to_vec(&GuildCall::Subscribe {
            node: "a".into(),
            session_id: "s".into(),
            user_id: 1,
            intents: 1,
            large_threshold: 200,
        })
        .unwrap();
        assert!(matches!(
            serde_json::from_slice(&kept).unwrap(),
            GuildCall::Subscribe {
                large_threshold: 200,
                ..
            }
        ));
    }
}
