//! Discord's permission bits, and a member's guild permissions from the
//! roles' bits. Pure: every role computes permissions the same way, so the
//! bits live in the contract, not in a role.

/// The guild permissions of a member from the union of `@everyone`'s
/// and their roles' bits: everything for the owner or an
/// administrator, else the union.
pub fn effective(is_owner: bool, role_bits: u64) -> u64 {
    if is_owner || role_bits & ADMINISTRATOR != 0 {
        u64::MAX
    } else {
        role_bits
    }
}

/// Every permission.
pub const ADMINISTRATOR: u64 = 1 << 3;
/// See a channel.
pub const VIEW_CHANNEL: u64 = 1 << 10;
/// Send messages.
pub const SEND_MESSAGES: u64 = 1 << 11;
/// Delete others' messages.
pub const MANAGE_MESSAGES: u64 = 1 << 13;
/// Read history.
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
/// Mention `@everyone`, `@here` and roles that are not mentionable.
pub const MENTION_EVERYONE: u64 = 1 << 17;
/// Create invites.
pub const CREATE_INSTANT_INVITE: u64 = 1 << 0;
/// Manage channels.
pub const MANAGE_CHANNELS: u64 = 1 << 4;
/// Kick members.
pub const KICK_MEMBERS: u64 = 1 << 1;
/// Change others' nicknames.
pub const MANAGE_NICKNAMES: u64 = 1 << 27;
/// Manage roles below one's highest.
pub const MANAGE_ROLES: u64 = 1 << 28;
/// Rename the guild.
pub const MANAGE_GUILD: u64 = 1 << 5;
/// Create, read (with tokens), change and delete webhooks.
pub const MANAGE_WEBHOOKS: u64 = 1 << 29;
/// Join voice channels.
pub const CONNECT: u64 = 1 << 20;
/// Speak in voice channels.
pub const SPEAK: u64 = 1 << 21;
/// Voice activity detection (speaking without push-to-talk).
pub const USE_VAD: u64 = 1 << 25;
/// React with an emoji nobody has reacted with yet (joining one
/// there needs only READ_MESSAGE_HISTORY).
pub const ADD_REACTIONS: u64 = 1 << 6;
/// `@everyone`'s default: view, send, embed, attach, history, react,
/// invite, and join and speak in voice (Discord's default for a new
/// guild's `@everyone`, trimmed).
pub const EVERYONE_DEFAULT: u64 = VIEW_CHANNEL
    | SEND_MESSAGES
    | READ_MESSAGE_HISTORY
    | CREATE_INSTANT_INVITE
    | ADD_REACTIONS
    | (1 << 14)
    | (1 << 15)
    | CONNECT
    | SPEAK
    | USE_VAD;
