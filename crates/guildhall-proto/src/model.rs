//! Objects on the wire, with exactly the fields the bot libraries require.
//!
//! Every field is always present (nullable ones as `null`) unless the
//! reference marks it optional *and* a library is known to tolerate its
//! absence; then it is `skip_serializing_if`. Serenity is the strictest
//! decoder of GUILD_CREATE, discord.js the strictest about `channels`, and
//! the field sets here are the ones all four libraries accepted.

use crate::Snowflake;
use serde::{Deserialize, Serialize};

/// A user (or bot user).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct User {
    /// Id.
    pub id: Snowflake,
    /// Unique name.
    pub username: String,
    /// "0" for every new-style account.
    pub discriminator: String,
    /// Display name.
    pub global_name: Option<String>,
    /// Avatar hash.
    pub avatar: Option<String>,
    /// A bot account.
    pub bot: bool,
    /// Multi-factor authentication on (READY's user needs it).
    pub mfa_enabled: bool,
    /// Email verified.
    pub verified: bool,
    /// Account flags.
    pub flags: u64,
    /// Public flags.
    pub public_flags: u64,
}

/// A role's colours.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RoleColors {
    /// Main colour.
    pub primary_color: u32,
    /// Gradient second colour.
    pub secondary_color: Option<u32>,
    /// Gradient third colour.
    pub tertiary_color: Option<u32>,
}

/// A guild role. The `@everyone` role's id is the guild's id.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Role {
    /// Id.
    pub id: Snowflake,
    /// Name.
    pub name: String,
    /// Integer colour (deprecated by Discord, still read by libraries).
    pub color: u32,
    /// Colours.
    pub colors: RoleColors,
    /// Shown separately in the member list.
    pub hoist: bool,
    /// Icon hash.
    pub icon: Option<String>,
    /// Unicode emoji.
    pub unicode_emoji: Option<String>,
    /// Position.
    pub position: i32,
    /// Permission bits as a decimal string.
    pub permissions: String,
    /// Managed by an integration.
    pub managed: bool,
    /// Mentionable.
    pub mentionable: bool,
    /// Role flags.
    pub flags: u64,
    /// Whose role it is (a bot's managed role); absent for others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<RoleTags>,
}

/// A role's tags.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RoleTags {
    /// The bot this managed role belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_id: Option<Snowflake>,
}

/// A permission overwrite on a channel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PermissionOverwrite {
    /// Role or member id.
    pub id: Snowflake,
    /// 0 role, 1 member.
    #[serde(rename = "type")]
    pub kind: u8,
    /// Allowed bits, decimal string.
    pub allow: String,
    /// Denied bits, decimal string.
    pub deny: String,
}

/// A guild channel (text 0, voice 2, category 4).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Channel {
    /// Id.
    pub id: Snowflake,
    /// Channel type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// Guild id (omitted inside GUILD_CREATE, as Discord does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
    /// Name.
    pub name: String,
    /// Sort position.
    pub position: i32,
    /// Overwrites.
    pub permission_overwrites: Vec<PermissionOverwrite>,
    /// Topic.
    pub topic: Option<String>,
    /// Age-restricted.
    pub nsfw: bool,
    /// Newest message id.
    pub last_message_id: Option<Snowflake>,
    /// Slow mode seconds.
    pub rate_limit_per_user: u32,
    /// Category.
    pub parent_id: Option<Snowflake>,
    /// Channel flags.
    pub flags: u64,
    /// Minutes after which its new threads archive (text, announcement,
    /// forum and media channels that set it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub default_auto_archive_duration: Option<u32>,
    /// The slowmode a channel's new threads get (text, announcement,
    /// forum and media channels).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub default_thread_rate_limit_per_user: Option<u32>,
    /// A voice channel's fields (discord.py reads `bitrate` and
    /// `user_limit` of every voice channel unconditionally).
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub voice: Option<VoiceChannelFields>,
    /// A forum or media channel's fields (types 15 and 16).
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub forum: Option<ForumChannelFields>,
    /// A thread's fields (types 10, 11 and 12).
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub thread: Option<ThreadFields>,
}

/// The fields only threads have (the threads topic, "Thread Fields").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ThreadFields {
    /// Who started it.
    pub owner_id: Snowflake,
    /// Archive state and settings.
    pub thread_metadata: ThreadMetadata,
    /// Messages in it, less those deleted.
    pub message_count: u32,
    /// Members, counted up to 50 (Discord's approximation).
    pub member_count: u32,
    /// Messages ever sent in it.
    pub total_message_sent: u32,
    /// A forum post's applied tags (empty elsewhere).
    #[serde(default)]
    pub applied_tags: Vec<Snowflake>,
    /// The current user's thread member, where they are one and the
    /// answer is theirs (GUILD_CREATE, GET channel, active threads).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub member: Option<ThreadMember>,
    /// Set in THREAD_CREATE when the thread was just created.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub newly_created: Option<bool>,
}

/// A thread's metadata object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ThreadMetadata {
    /// Archived.
    pub archived: bool,
    /// Minutes of inactivity before it leaves the channel list (60,
    /// 1440, 4320, 10080).
    pub auto_archive_duration: u32,
    /// When its archive status last changed (ISO 8601).
    pub archive_timestamp: String,
    /// Only MANAGE_THREADS holders unarchive it.
    pub locked: bool,
    /// Non-moderators may add others (private threads only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub invitable: Option<bool>,
    /// When it was created (ISO 8601).
    pub create_timestamp: Option<String>,
}

/// A thread member object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ThreadMember {
    /// The thread (omitted inside GUILD_CREATE, as documented).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub id: Option<Snowflake>,
    /// The user (omitted inside GUILD_CREATE, as documented).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub user_id: Option<Snowflake>,
    /// When they joined (ISO 8601).
    pub join_timestamp: String,
    /// Notification flags.
    pub flags: u64,
    /// Their guild member, when asked for `with_member`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub member: Option<Box<Member>>,
}

/// The fields only forum and media channels have.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ForumChannelFields {
    /// The tags its posts may carry.
    pub available_tags: Vec<ForumTag>,
    /// The reaction its new posts show (null: none).
    pub default_reaction_emoji: Option<DefaultReaction>,
    /// How posts are sorted by default (0 latest activity, 1 creation
    /// date; null: not set).
    pub default_sort_order: Option<u8>,
    /// How posts are shown by default (0 not set, 1 list, 2 gallery).
    pub default_forum_layout: u8,
}

/// A tag of a forum or media channel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ForumTag {
    /// Id.
    pub id: Snowflake,
    /// Name (1 to 20 characters).
    pub name: String,
    /// Only MANAGE_THREADS holders apply or remove it.
    #[serde(default)]
    pub moderated: bool,
    /// A guild emoji's id, or null.
    #[serde(default)]
    pub emoji_id: Option<Snowflake>,
    /// A unicode emoji, or null.
    #[serde(default)]
    pub emoji_name: Option<String>,
}

/// The reaction a forum's new posts show: one of a guild emoji's id or a
/// unicode emoji.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DefaultReaction {
    /// A guild emoji's id, or null.
    #[serde(default)]
    pub emoji_id: Option<Snowflake>,
    /// A unicode emoji, or null.
    #[serde(default)]
    pub emoji_name: Option<String>,
}

/// The fields only voice channels have.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VoiceChannelFields {
    /// Bits per second (Discord's default 64,000).
    pub bitrate: u32,
    /// Participants allowed at once (0: no limit).
    pub user_limit: u32,
    /// Voice region (null: automatic).
    pub rtc_region: Option<String>,
    /// Camera quality (1: auto).
    pub video_quality_mode: u8,
}

/// A guild member. `user` is absent in a message's partial member.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    /// The user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
    /// Guild nickname.
    pub nick: Option<String>,
    /// Guild avatar hash.
    pub avatar: Option<String>,
    /// Role ids (never `@everyone`).
    pub roles: Vec<Snowflake>,
    /// When the member joined.
    pub joined_at: String,
    /// Boosting since.
    pub premium_since: Option<String>,
    /// Server-deafened.
    pub deaf: bool,
    /// Server-muted.
    pub mute: bool,
    /// Member flags.
    pub flags: u64,
    /// Membership screening pending.
    pub pending: bool,
    /// Timed out until (ISO 8601); null when not timed out.
    #[serde(default)]
    pub communication_disabled_until: Option<String>,
}

impl User {
    /// The author of a webhook's message as Discord sends it: the
    /// webhook's id, the name it posted under, its avatar hash,
    /// discriminator `0000` and `bot: true` (discord.py and discord.js tell
    /// a webhook author by `webhook_id` and the `0000`).
    pub fn webhook(id: Snowflake, username: String, avatar: Option<String>) -> User {
        User {
            id,
            username,
            discriminator: "0000".into(),
            global_name: None,
            avatar,
            bot: true,
            mfa_enabled: false,
            verified: false,
            flags: 0,
            public_flags: 0,
        }
    }
}

/// Webhook type 1: Incoming, the only type this server has (Channel
/// Follower and Application webhooks need features it lacks).
pub const WEBHOOK_INCOMING: u8 = 1;

/// A webhook object, with Discord's field set for an Incoming webhook.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Webhook {
    /// Id.
    pub id: Snowflake,
    /// Webhook type ([`WEBHOOK_INCOMING`]).
    #[serde(rename = "type")]
    pub kind: u8,
    /// Guild.
    pub guild_id: Option<Snowflake>,
    /// Channel it posts to.
    pub channel_id: Option<Snowflake>,
    /// Who created it: only to authenticated callers, never with the
    /// token-authorised routes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
    /// Default name.
    pub name: Option<String>,
    /// Default avatar hash.
    pub avatar: Option<String>,
    /// The secret token: to callers with MANAGE_WEBHOOKS and to token
    /// holders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The application that created it (null: created by a user).
    pub application_id: Option<Snowflake>,
    /// The URL that executes it (with the token, so only where the token is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The data of WEBHOOKS_UPDATE.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WebhooksUpdate {
    /// Guild.
    pub guild_id: Snowflake,
    /// Channel whose webhooks changed.
    pub channel_id: Snowflake,
}

/// An always-empty list whose element type libraries never see.
pub type Empty = Vec<serde_json::Value>;

/// A member's presence, as GUILD_CREATE, GUILD_MEMBERS_CHUNK and
/// PRESENCE_UPDATE carry it (Discord's Presence Update object; statuses
/// are set from one client, reported as `web`, and there are no
/// activities).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Presence {
    /// The user (only `id` is sure to be there, as Discord documents).
    pub user: PresenceUser,
    /// The guild; absent inside a guild's own GUILD_CREATE and chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
    /// online, idle, dnd or offline.
    pub status: String,
    /// Activities (none are set here).
    pub activities: Vec<serde_json::Value>,
    /// Status per client platform.
    pub client_status: ClientStatus,
}

/// A presence's user: its id.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PresenceUser {
    /// Id.
    pub id: Snowflake,
}

/// A presence's status per platform (only the ones with a session).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClientStatus {
    /// The web client's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<String>,
}

impl Presence {
    /// `user_id`'s presence with `status`, set from one (web) client.
    pub fn of(user_id: Snowflake, guild_id: Option<Snowflake>, status: &str) -> Self {
        Self {
            user: PresenceUser { id: user_id },
            guild_id,
            status: status.to_owned(),
            activities: vec![],
            client_status: ClientStatus {
                web: (status != "offline").then(|| status.to_owned()),
            },
        }
    }
}

/// GUILD_CREATE's payload: a complete guild.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Guild {
    /// Id.
    pub id: Snowflake,
    /// Name.
    pub name: String,
    /// Icon hash.
    pub icon: Option<String>,
    /// Splash hash.
    pub splash: Option<String>,
    /// Discovery splash hash.
    pub discovery_splash: Option<String>,
    /// Owner.
    pub owner_id: Snowflake,
    /// AFK channel.
    pub afk_channel_id: Option<Snowflake>,
    /// AFK timeout, seconds.
    pub afk_timeout: u32,
    /// Verification level.
    pub verification_level: u8,
    /// Default notifications.
    pub default_message_notifications: u8,
    /// Explicit content filter.
    pub explicit_content_filter: u8,
    /// Roles, `@everyone` first.
    pub roles: Vec<Role>,
    /// Emojis.
    pub emojis: Empty,
    /// Features.
    pub features: Vec<String>,
    /// MFA level.
    pub mfa_level: u8,
    /// Creating application.
    pub application_id: Option<Snowflake>,
    /// System channel.
    pub system_channel_id: Option<Snowflake>,
    /// System channel flags.
    pub system_channel_flags: u64,
    /// Rules channel.
    pub rules_channel_id: Option<Snowflake>,
    /// Most presences.
    pub max_presences: Option<u32>,
    /// Most members.
    pub max_members: u32,
    /// Vanity code.
    pub vanity_url_code: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Banner hash.
    pub banner: Option<String>,
    /// Boost tier.
    pub premium_tier: u8,
    /// Boosts.
    pub premium_subscription_count: u32,
    /// Locale.
    pub preferred_locale: String,
    /// Public updates channel.
    pub public_updates_channel_id: Option<Snowflake>,
    /// Video users cap.
    pub max_video_channel_users: u32,
    /// Stage video users cap.
    pub max_stage_video_channel_users: u32,
    /// NSFW level.
    pub nsfw_level: u8,
    /// Stickers.
    pub stickers: Empty,
    /// Boost bar shown.
    pub premium_progress_bar_enabled: bool,
    /// Safety alerts channel.
    pub safety_alerts_channel_id: Option<Snowflake>,
    /// When the receiving user joined.
    pub joined_at: String,
    /// Above the large threshold.
    pub large: bool,
    /// Always false in GUILD_CREATE.
    pub unavailable: bool,
    /// Members in the guild.
    pub member_count: u32,
    /// Voice states.
    pub voice_states: Empty,
    /// Members (all of them for small guilds).
    pub members: Vec<Member>,
    /// Channels (discord.js drops a guild's messages without them).
    pub channels: Vec<Channel>,
    /// Threads.
    /// Active threads the user can view.
    pub threads: Vec<Channel>,
    /// Presences of the members it carries who are not offline.
    pub presences: Vec<Presence>,
    /// Stage instances.
    pub stage_instances: Empty,
    /// Scheduled events.
    pub guild_scheduled_events: Empty,
    /// Soundboard sounds.
    pub soundboard_sounds: Empty,
}

/// A file attached to a message (Discord's Attachment object). The api
/// fills `url` and `proxy_url` when it shows the message, from where its
/// files are served; what is stored with the message is the rest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Attachment {
    /// Id (its upload time is in it).
    pub id: Snowflake,
    /// The file's name, as sanitised at upload.
    pub filename: String,
    /// Its title, as the uploader gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Alt text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Media type, sniffed from the bytes (never the client's word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Where the file is served.
    #[serde(default)]
    pub url: String,
    /// The same, through the media proxy (here the same server).
    #[serde(default)]
    pub proxy_url: String,
    /// Height in pixels (images only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// Width in pixels (images only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Attachment flags (IS_REMIX and the like); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u64>,
}

/// A message.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// Id.
    pub id: Snowflake,
    /// Channel.
    pub channel_id: Snowflake,
    /// Guild (guild messages only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
    /// Author.
    pub author: User,
    /// The author as a member (guild messages only; no `user`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<Member>,
    /// Text (blanked without MESSAGE_CONTENT, see [`Message::blanked`]).
    pub content: String,
    /// Sent at.
    pub timestamp: String,
    /// Edited at.
    pub edited_timestamp: Option<String>,
    /// Text to speech.
    pub tts: bool,
    /// Mentions everyone.
    pub mention_everyone: bool,
    /// Mentioned users.
    pub mentions: Vec<User>,
    /// Mentioned roles.
    pub mention_roles: Vec<Snowflake>,
    /// Attachments.
    pub attachments: Vec<Attachment>,
    /// Embeds.
    pub embeds: Empty,
    /// Pinned.
    pub pinned: bool,
    /// Message type (0 default).
    #[serde(rename = "type")]
    pub kind: u8,
    /// Message flags.
    pub flags: u64,
    /// Components.
    pub components: Empty,
    /// The client's nonce, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<serde_json::Value>,
    /// The webhook that sent the message (webhook messages only; their
    /// `author` is then the webhook, see [`User::webhook`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<Snowflake>,
    /// The application of an interaction's response (its `webhook_id` is
    /// the application's id too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application_id: Option<Snowflake>,
    /// The interaction this message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interaction_metadata: Option<crate::interactions::InteractionMetadata>,
    /// What a reply (type 19) points to; absent on other messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_reference: Option<MessageReference>,
    /// A reply's referenced message as it is now: absent on other messages
    /// (and inside a `referenced_message`, which Discord does not nest
    /// further), `null` once the referenced message is deleted (Discord's
    /// footnote: "If the field exists but is null, the referenced message
    /// was deleted").
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub referenced_message: Option<Option<Box<Message>>>,
    /// The message's reactions, one per emoji; absent when it has none, as
    /// Discord omits it (every library reads a missing `reactions` as
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reactions: Option<Vec<Reaction>>,
}

/// A message's reactions with one emoji (Discord's Reaction object).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reaction {
    /// Users who reacted with the emoji (super reactions included).
    pub count: u64,
    /// The count split into super and normal reactions.
    pub count_details: ReactionCountDetails,
    /// Whether the user reading the message reacted with it.
    pub me: bool,
    /// Whether the user reading the message super-reacted with it.
    pub me_burst: bool,
    /// The emoji.
    pub emoji: PartialEmoji,
    /// HEX colors of the super reaction.
    pub burst_colors: Vec<String>,
}

/// A reaction's count split by kind (Discord's Reaction Count Details).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReactionCountDetails {
    /// Super reactions.
    pub burst: u64,
    /// Normal reactions.
    pub normal: u64,
}

/// A partial emoji: `id` null for a unicode emoji, whose `name` is the
/// emoji itself.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartialEmoji {
    /// A custom emoji's id; null for a unicode emoji.
    pub id: Option<Snowflake>,
    /// The custom emoji's name, or the unicode emoji (Discord's may be
    /// null for a deleted custom emoji).
    pub name: Option<String>,
}

/// A field that may be absent (outer `None`) or `null` (inner `None`):
/// serde's plain `Option` cannot tell the two apart. Use with
/// `#[serde(default, skip_serializing_if = "Option::is_none")]`.
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A message's `message_reference` as messages carry it (Discord's Message
/// Reference object; `fail_if_not_exists` is a sending option only and is
/// never echoed).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MessageReference {
    /// Reference type (0 DEFAULT: a reply).
    #[serde(rename = "type", default)]
    pub kind: u8,
    /// The referenced message.
    pub message_id: Snowflake,
    /// Its channel (always present on what is received).
    pub channel_id: Snowflake,
    /// Its guild (guild channels only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
}

impl Message {
    /// The copy a session without MESSAGE_CONTENT receives: content, embeds,
    /// attachments and components blank (Discord's rule; DMs and mentions of
    /// the recipient are exempt, which the caller decides).
    pub fn blanked(&self) -> Message {
        Message {
            content: String::new(),
            embeds: Vec::new(),
            attachments: Vec::new(),
            components: Vec::new(),
            // The referenced message's content is as private as the reply's.
            referenced_message: self
                .referenced_message
                .as_ref()
                .map(|referenced| referenced.as_ref().map(|m| Box::new(m.blanked()))),
            ..self.clone()
        }
    }
}

/// An unavailable guild, as READY lists them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct UnavailableGuild {
    /// Id.
    pub id: Snowflake,
    /// Always true in READY.
    pub unavailable: bool,
}

/// READY's `application`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartialApplication {
    /// Id.
    pub id: Snowflake,
    /// Flags.
    pub flags: u64,
}

/// READY's payload.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Ready {
    /// Gateway version.
    pub v: u8,
    /// The session's user.
    pub user: User,
    /// Guilds, each followed by its GUILD_CREATE.
    pub guilds: Vec<UnavailableGuild>,
    /// Session id for RESUME.
    pub session_id: String,
    /// Where to RESUME (`ws://host:port`, no trailing slash).
    pub resume_gateway_url: String,
    /// `[shard_id, num_shards]`, when the client sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<[u32; 2]>,
    /// The application (discord.js crashes without it).
    pub application: PartialApplication,
    /// DM channels.
    pub private_channels: Empty,
    /// Relationships.
    pub relationships: Empty,
    /// Presences.
    pub presences: Empty,
    /// Guild join requests.
    pub guild_join_requests: Empty,
    /// User settings.
    pub user_settings: serde_json::Map<String, serde_json::Value>,
}
