//! Gateway intents: which dispatches a session receives.

/// GUILDS: guild, channel, role create/update/delete.
pub const GUILDS: u64 = 1 << 0;
/// GUILD_MEMBERS (privileged): member add/update/remove.
pub const GUILD_MEMBERS: u64 = 1 << 1;
/// GUILD_MODERATION.
pub const GUILD_MODERATION: u64 = 1 << 2;
/// GUILD_EXPRESSIONS.
pub const GUILD_EXPRESSIONS: u64 = 1 << 3;
/// GUILD_INTEGRATIONS.
pub const GUILD_INTEGRATIONS: u64 = 1 << 4;
/// GUILD_WEBHOOKS.
pub const GUILD_WEBHOOKS: u64 = 1 << 5;
/// GUILD_INVITES.
pub const GUILD_INVITES: u64 = 1 << 6;
/// GUILD_VOICE_STATES: VOICE_STATE_UPDATE.
pub const GUILD_VOICE_STATES: u64 = 1 << 7;
/// GUILD_PRESENCES (privileged): PRESENCE_UPDATE.
pub const GUILD_PRESENCES: u64 = 1 << 8;
/// GUILD_MESSAGES: messages in guild channels.
pub const GUILD_MESSAGES: u64 = 1 << 9;
/// GUILD_MESSAGE_REACTIONS.
pub const GUILD_MESSAGE_REACTIONS: u64 = 1 << 10;
/// GUILD_MESSAGE_TYPING: TYPING_START in guilds.
pub const GUILD_MESSAGE_TYPING: u64 = 1 << 11;
/// DIRECT_MESSAGES.
pub const DIRECT_MESSAGES: u64 = 1 << 12;
/// DIRECT_MESSAGE_REACTIONS.
pub const DIRECT_MESSAGE_REACTIONS: u64 = 1 << 13;
/// DIRECT_MESSAGE_TYPING.
pub const DIRECT_MESSAGE_TYPING: u64 = 1 << 14;
/// MESSAGE_CONTENT (privileged): content, embeds, attachments, components.
pub const MESSAGE_CONTENT: u64 = 1 << 15;
/// GUILD_SCHEDULED_EVENTS.
pub const GUILD_SCHEDULED_EVENTS: u64 = 1 << 16;
/// AUTO_MODERATION_CONFIGURATION.
pub const AUTO_MODERATION_CONFIGURATION: u64 = 1 << 20;
/// AUTO_MODERATION_EXECUTION.
pub const AUTO_MODERATION_EXECUTION: u64 = 1 << 21;
/// GUILD_MESSAGE_POLLS.
pub const GUILD_MESSAGE_POLLS: u64 = 1 << 24;
/// DIRECT_MESSAGE_POLLS.
pub const DIRECT_MESSAGE_POLLS: u64 = 1 << 25;

/// Every bit Discord defines; any other bit is close code 4013.
pub const VALID: u64 = GUILDS
    | GUILD_MEMBERS
    | GUILD_MODERATION
    | GUILD_EXPRESSIONS
    | GUILD_INTEGRATIONS
    | GUILD_WEBHOOKS
    | GUILD_INVITES
    | GUILD_VOICE_STATES
    | GUILD_PRESENCES
    | GUILD_MESSAGES
    | GUILD_MESSAGE_REACTIONS
    | GUILD_MESSAGE_TYPING
    | DIRECT_MESSAGES
    | DIRECT_MESSAGE_REACTIONS
    | DIRECT_MESSAGE_TYPING
    | MESSAGE_CONTENT
    | GUILD_SCHEDULED_EVENTS
    | AUTO_MODERATION_CONFIGURATION
    | AUTO_MODERATION_EXECUTION
    | GUILD_MESSAGE_POLLS
    | DIRECT_MESSAGE_POLLS;

/// Intents an application must be allowed to use (close code 4014 if not).
pub const PRIVILEGED: u64 = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT;

/// Why an IDENTIFY's intents are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentsError {
    /// A bit Discord does not define (close 4013).
    Invalid,
    /// A privileged bit the application may not use (close 4014).
    Disallowed,
}

/// Checks `requested` against the privileged intents `allowed` for the
/// application.
///
/// ```
/// use guildhall_proto::intents::{self, check, IntentsError};
/// assert_eq!(check(intents::GUILDS | intents::GUILD_MESSAGES, 0), Ok(()));
/// assert_eq!(check(1 << 40, intents::PRIVILEGED), Err(IntentsError::Invalid));
/// assert_eq!(check(intents::MESSAGE_CONTENT, 0), Err(IntentsError::Disallowed));
/// ```
pub fn check(requested: u64, allowed: u64) -> Result<(), IntentsError> {
    if requested & !VALID != 0 {
        return Err(IntentsError::Invalid);
    }
    if requested & PRIVILEGED & !allowed != 0 {
        return Err(IntentsError::Disallowed);
    }
    Ok(())
}

/// Application flags that enable the privileged intents (the `_LIMITED`
/// variants, which Discord gives unverified applications).
pub mod app_flags {
    /// GATEWAY_PRESENCE_LIMITED.
    pub const PRESENCE: i64 = 1 << 13;
    /// GATEWAY_GUILD_MEMBERS_LIMITED.
    pub const GUILD_MEMBERS: i64 = 1 << 15;
    /// GATEWAY_MESSAGE_CONTENT_LIMITED.
    pub const MESSAGE_CONTENT: i64 = 1 << 19;
    /// New applications may use every privileged intent.
    pub const DEFAULT: i64 = PRESENCE | GUILD_MEMBERS | MESSAGE_CONTENT;
}
