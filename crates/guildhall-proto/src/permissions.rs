//! Discord's permission bits, and the one function that turns a member's
//! roles, a channel's overwrites and a timeout into the permissions they
//! hold there (`in_channel`, `in_guild`). Pure: every role computes
//! permissions the same way (REST checks, interactions' `permissions`,
//! voice joins, gateway delivery), so the algorithm lives in the
//! contract, not in a role.

use crate::model::PermissionOverwrite;

/// The guild permissions of a member from the union of `@everyone`'s
/// and their roles' bits: every permission for the owner or an
/// administrator, else the union.
pub fn effective(is_owner: bool, role_bits: u64) -> u64 {
    if is_owner || role_bits & ADMINISTRATOR != 0 {
        ALL
    } else {
        role_bits
    }
}

/// Who the permissions are computed for, in one guild.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The guild (the `@everyone` role and its overwrite have its id).
    pub guild_id: i64,
    /// The member's user id.
    pub user_id: i64,
    /// Whether they own the guild.
    pub is_owner: bool,
    /// The union of `@everyone`'s bits and their roles' bits.
    pub role_bits: u64,
    /// Their role ids (without `@everyone`).
    pub roles: &'a [i64],
    /// Whether a timeout (`communication_disabled_until`) is running.
    pub timed_out: bool,
}

/// A member's permissions in the guild as a whole (no channel): Discord's
/// `compute_base_permissions`, then a running timeout's reduction.
pub fn in_guild(subject: &Subject<'_>) -> u64 {
    let base = effective(subject.is_owner, subject.role_bits);
    timeout(base, subject.timed_out)
}

/// A member's permissions in a channel of `kind` with `overwrites`:
/// Discord's `compute_permissions` in its documented order (base, then
/// `@everyone`'s overwrite, then the roles' overwrites together, then the
/// member's), then the implicit denials (no VIEW_CHANNEL: nothing; no
/// SEND_MESSAGES: no mentions of everyone, TTS, files or embeds; a voice
/// or stage channel without CONNECT: no MANAGE_CHANNELS), then a running
/// timeout's reduction to VIEW_CHANNEL and READ_MESSAGE_HISTORY (owners
/// and administrators exempt).
pub fn in_channel(subject: &Subject<'_>, kind: i64, overwrites: &[Overwrite]) -> u64 {
    let base = effective(subject.is_owner, subject.role_bits);
    if base & ADMINISTRATOR != 0 {
        return ALL;
    }
    let mut bits = base;
    if let Some(everyone) = overwrites.iter().find(|o| o.id == subject.guild_id) {
        bits &= !everyone.deny;
        bits |= everyone.allow;
    }
    let (mut allow, mut deny) = (0u64, 0u64);
    for overwrite in overwrites
        .iter()
        .filter(|o| o.kind == OverwriteKind::Role && subject.roles.contains(&o.id))
    {
        allow |= overwrite.allow;
        deny |= overwrite.deny;
    }
    bits &= !deny;
    bits |= allow;
    if let Some(member) = overwrites
        .iter()
        .find(|o| o.kind == OverwriteKind::Member && o.id == subject.user_id)
    {
        bits &= !member.deny;
        bits |= member.allow;
    }
    // Not `timeout`: the exemption is the guild-level ADMINISTRATOR
    // (returned above), never an overwrite's bit.
    let bits = implicit(bits, kind);
    if subject.timed_out {
        bits & TIMED_OUT_KEEPS
    } else {
        bits
    }
}

/// What decides a member's view of a thread beyond its parent channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadAccess {
    /// A private thread (type 12).
    pub private: bool,
    /// The member joined it.
    pub member: bool,
    /// Locked: only moderators talk in it.
    pub locked: bool,
}

/// A member's permissions in a thread, from theirs in its parent channel
/// (the threads topic, "Permissions"): a private thread is seen only by
/// its members and by moderators (MANAGE_THREADS); SEND_MESSAGES has no
/// effect in a thread, where SEND_MESSAGES_IN_THREADS lets a member talk,
/// so SEND_MESSAGES here reads as that (a check that names SEND_MESSAGES
/// holds in threads as Discord has it); a locked thread lets only
/// moderators talk. The implicit denials of a missing SEND_MESSAGES
/// follow from the result.
pub fn in_thread(parent_bits: u64, access: ThreadAccess) -> u64 {
    if parent_bits & VIEW_CHANNEL == 0 {
        return 0;
    }
    let moderator = parent_bits & MANAGE_THREADS != 0;
    if access.private && !access.member && !moderator {
        return 0;
    }
    let mut bits = parent_bits & !SEND_MESSAGES;
    if parent_bits & SEND_MESSAGES_IN_THREADS != 0 && (!access.locked || moderator) {
        bits |= SEND_MESSAGES;
    } else {
        bits &= !(MENTION_EVERYONE | SEND_TTS_MESSAGES | ATTACH_FILES | EMBED_LINKS);
    }
    bits
}

/// What a timed-out member keeps.
const TIMED_OUT_KEEPS: u64 = VIEW_CHANNEL | READ_MESSAGE_HISTORY;

/// Discord's implicit denials (the permissions page, "Implicit
/// Permissions").
fn implicit(bits: u64, kind: i64) -> u64 {
    if bits & VIEW_CHANNEL == 0 {
        return 0;
    }
    let mut bits = bits;
    if bits & SEND_MESSAGES == 0 {
        bits &= !(MENTION_EVERYONE | SEND_TTS_MESSAGES | ATTACH_FILES | EMBED_LINKS);
    }
    if matches!(kind, 2 | 13) && bits & CONNECT == 0 {
        bits &= !MANAGE_CHANNELS;
    }
    bits
}

/// A timed-out member keeps only VIEW_CHANNEL and READ_MESSAGE_HISTORY;
/// owners and administrators (whose bits are [`ALL`]) are exempt.
fn timeout(bits: u64, timed_out: bool) -> u64 {
    if timed_out && bits & ADMINISTRATOR == 0 {
        bits & TIMED_OUT_KEEPS
    } else {
        bits
    }
}

/// Whom an overwrite names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverwriteKind {
    /// A role (`type` 0; `@everyone`'s has the guild's id).
    Role,
    /// A member (`type` 1).
    Member,
}

/// A channel's permission overwrite as numbers (the wire form,
/// [`PermissionOverwrite`], carries decimal strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overwrite {
    /// The role's or the member's id.
    pub id: i64,
    /// Whom it names.
    pub kind: OverwriteKind,
    /// Bits allowed.
    pub allow: u64,
    /// Bits denied.
    pub deny: u64,
}

impl Overwrite {
    /// The numeric form of a wire overwrite; `None` if a field is not what
    /// the wire allows (an unknown type, bits that are not a decimal
    /// string or name undefined permissions, an id that is not a
    /// snowflake).
    pub fn from_wire(wire: &PermissionOverwrite) -> Option<Overwrite> {
        let kind = match wire.kind {
            0 => OverwriteKind::Role,
            1 => OverwriteKind::Member,
            _ => return None,
        };
        let allow = parse_bits(&wire.allow)?;
        let deny = parse_bits(&wire.deny)?;
        Some(Overwrite {
            id: i64::try_from(wire.id.get()).ok()?,
            kind,
            allow,
            deny,
        })
    }

    /// The wire form.
    pub fn to_wire(&self) -> PermissionOverwrite {
        PermissionOverwrite {
            // Never zero: a stored overwrite came through `from_wire`.
            id: crate::snowflake::Snowflake(
                std::num::NonZeroU64::new(self.id as u64).unwrap_or(std::num::NonZeroU64::MIN),
            ),
            kind: match self.kind {
                OverwriteKind::Role => 0,
                OverwriteKind::Member => 1,
            },
            allow: self.allow.to_string(),
            deny: self.deny.to_string(),
        }
    }

    /// A channel's overwrites as the store keeps them (the wire form's
    /// JSON); an unreadable entry is skipped, never trusted.
    pub fn parse_stored(json: &str) -> Vec<Overwrite> {
        serde_json::from_str::<Vec<PermissionOverwrite>>(json)
            .unwrap_or_default()
            .iter()
            .filter_map(Overwrite::from_wire)
            .collect()
    }

    /// The store's form of `overwrites`.
    pub fn to_stored(overwrites: &[Overwrite]) -> String {
        let wire: Vec<PermissionOverwrite> = overwrites.iter().map(Overwrite::to_wire).collect();
        serde_json::to_string(&wire).unwrap_or_else(|_| "[]".to_owned())
    }
}

/// A permission bit set as the wire carries it: a decimal string of
/// defined bits only (`None` otherwise).
pub fn parse_bits(text: &str) -> Option<u64> {
    let bits: u64 = text.parse().ok()?;
    (bits & !ALL == 0).then_some(bits)
}

/// Create invites.
pub const CREATE_INSTANT_INVITE: u64 = 1 << 0;
/// Kick members.
pub const KICK_MEMBERS: u64 = 1 << 1;
/// Ban members.
pub const BAN_MEMBERS: u64 = 1 << 2;
/// Every permission, and past every overwrite.
pub const ADMINISTRATOR: u64 = 1 << 3;
/// Manage channels.
pub const MANAGE_CHANNELS: u64 = 1 << 4;
/// Rename the guild.
pub const MANAGE_GUILD: u64 = 1 << 5;
/// React with an emoji nobody has reacted with yet (joining one
/// there needs only READ_MESSAGE_HISTORY).
pub const ADD_REACTIONS: u64 = 1 << 6;
/// Read the audit log.
pub const VIEW_AUDIT_LOG: u64 = 1 << 7;
/// Priority speaker in voice.
pub const PRIORITY_SPEAKER: u64 = 1 << 8;
/// Go live.
pub const STREAM: u64 = 1 << 9;
/// See a channel.
pub const VIEW_CHANNEL: u64 = 1 << 10;
/// Send messages.
pub const SEND_MESSAGES: u64 = 1 << 11;
/// Send TTS messages.
pub const SEND_TTS_MESSAGES: u64 = 1 << 12;
/// Delete others' messages.
pub const MANAGE_MESSAGES: u64 = 1 << 13;
/// Links auto-embed.
pub const EMBED_LINKS: u64 = 1 << 14;
/// Upload files.
pub const ATTACH_FILES: u64 = 1 << 15;
/// Read history.
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
/// Mention `@everyone`, `@here` and roles that are not mentionable.
pub const MENTION_EVERYONE: u64 = 1 << 17;
/// Join voice channels.
pub const CONNECT: u64 = 1 << 20;
/// Speak in voice channels.
pub const SPEAK: u64 = 1 << 21;
/// Mute others in voice.
pub const MUTE_MEMBERS: u64 = 1 << 22;
/// Deafen others in voice.
pub const DEAFEN_MEMBERS: u64 = 1 << 23;
/// Move others between voice channels (or disconnect them).
pub const MOVE_MEMBERS: u64 = 1 << 24;
/// Voice activity detection (speaking without push-to-talk).
pub const USE_VAD: u64 = 1 << 25;
/// Change one's own nickname.
pub const CHANGE_NICKNAME: u64 = 1 << 26;
/// Change others' nicknames.
pub const MANAGE_NICKNAMES: u64 = 1 << 27;
/// Manage roles below one's highest, and channel overwrites.
pub const MANAGE_ROLES: u64 = 1 << 28;
/// Create, read (with tokens), change and delete webhooks.
pub const MANAGE_WEBHOOKS: u64 = 1 << 29;
/// Manage threads (archive, delete, see every private thread).
pub const MANAGE_THREADS: u64 = 1 << 34;
/// Create public and announcement threads.
pub const CREATE_PUBLIC_THREADS: u64 = 1 << 35;
/// Create private threads.
pub const CREATE_PRIVATE_THREADS: u64 = 1 << 36;
/// Send messages in threads.
pub const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;
/// Time members out.
pub const MODERATE_MEMBERS: u64 = 1 << 40;
/// Send messages past a channel's slowmode.
pub const BYPASS_SLOWMODE: u64 = 1 << 52;

/// Every permission Discord documents: bits 0 to 46 and 48 to 52 (47 is
/// not assigned). An owner's or an administrator's bits; a bit set
/// outside it is refused wherever a client sends permissions.
pub const ALL: u64 = ((1 << 47) - 1) | (((1 << 53) - 1) & !((1 << 48) - 1));

/// `@everyone`'s default: view, send, embed, attach, history, react,
/// invite, and join and speak in voice (Discord's default for a new
/// guild's `@everyone`, trimmed).
pub const EVERYONE_DEFAULT: u64 = VIEW_CHANNEL
    | SEND_MESSAGES
    | READ_MESSAGE_HISTORY
    | CREATE_INSTANT_INVITE
    | ADD_REACTIONS
    | EMBED_LINKS
    | ATTACH_FILES
    | CONNECT
    | SPEAK
    | USE_VAD;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Discord's pseudocode, transcribed as written (maps keyed by id, the
    /// role loop over the member's roles), independently of `in_channel`,
    /// with the implicit rules and the timeout rule as the page states
    /// them.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        guild_id: i64,
        owner: bool,
        everyone: u64,
        role_perms: &HashMap<i64, u64>,
        member_roles: &[i64],
        user_id: i64,
        overwrites: &[Overwrite],
        kind: i64,
        timed_out: bool,
    ) -> u64 {
        let all = ALL;
        let base = if owner {
            all
        } else {
            let mut p = everyone;
            for r in member_roles {
                p |= role_perms.get(r).copied().unwrap_or(0);
            }
            if p & ADMINISTRATOR == ADMINISTRATOR {
                all
            } else {
                p
            }
        };
        if base & ADMINISTRATOR == ADMINISTRATOR {
            return all;
        }
        let by_id: HashMap<(i64, OverwriteKind), &Overwrite> =
            overwrites.iter().map(|o| ((o.id, o.kind), o)).collect();
        let mut p = base;
        if let Some(o) = by_id.get(&(guild_id, OverwriteKind::Role)) {
            p &= !o.deny;
            p |= o.allow;
        }
        let (mut allow, mut deny) = (0, 0);
        for r in member_roles {
            if let Some(o) = by_id.get(&(*r, OverwriteKind::Role)) {
                allow |= o.allow;
                deny |= o.deny;
            }
        }
        p &= !deny;
        p |= allow;
        if let Some(o) = by_id.get(&(user_id, OverwriteKind::Member)) {
            p &= !o.deny;
            p |= o.allow;
        }
        if p & VIEW_CHANNEL == 0 {
            p = 0;
        }
        if p & SEND_MESSAGES == 0 {
            p &= !(MENTION_EVERYONE | SEND_TTS_MESSAGES | ATTACH_FILES | EMBED_LINKS);
        }
        if (kind == 2 || kind == 13) && p & CONNECT == 0 {
            p &= !MANAGE_CHANNELS;
        }
        if timed_out {
            p &= VIEW_CHANNEL | READ_MESSAGE_HISTORY;
        }
        p
    }

    /// Bits drawn mostly from the ones the rules single out, so overlaps
    /// and the implicit cases are common.
    fn some_bits() -> impl Strategy<Value = u64> {
        let interesting = [
            VIEW_CHANNEL,
            SEND_MESSAGES,
            MENTION_EVERYONE,
            ATTACH_FILES,
            EMBED_LINKS,
            CONNECT,
            MANAGE_CHANNELS,
            READ_MESSAGE_HISTORY,
            ADMINISTRATOR,
            SEND_TTS_MESSAGES,
            1 << 50,
        ];
        (
            proptest::collection::vec(0..interesting.len(), 0..6),
            any::<u64>(),
            0u8..8,
        )
            .prop_map(move |(picks, noise, noisy)| {
                let mut bits = picks.iter().fold(0, |b, i| b | interesting[*i]);
                if noisy == 0 {
                    bits |= noise & ALL;
                }
                // Administrator rarely, or every case collapses to ALL.
                if noisy > 1 {
                    bits &= !ADMINISTRATOR;
                }
                bits
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Over random guilds (roles 1..=6, the member holding some, the
        /// owner sometimes), overwrites for @everyone, roles and members
        /// (the member's own among them), channel kinds and timeouts: the
        /// function agrees with the documented algorithm.
        #[test]
        fn agrees_with_the_documented_algorithm(
            everyone in some_bits(),
            roles in proptest::collection::vec(some_bits(), 6),
            held in proptest::collection::vec(any::<bool>(), 6),
            owner in proptest::bool::weighted(0.1),
            timed_out in proptest::bool::weighted(0.2),
            kind in prop_oneof![Just(0i64), Just(2), Just(4), Just(5), Just(13)],
            overwrites in proptest::collection::vec(
                (0i64..9, any::<bool>(), some_bits(), some_bits()), 0..7),
        ) {
            let guild_id = 100;
            let user_id = 7;
            // Ids 0..=5 are roles 1..=6, 6 is @everyone, 7 the member, 8 another member.
            let role_ids: Vec<i64> = (1..=6).collect();
            let role_perms: HashMap<i64, u64> =
                role_ids.iter().copied().zip(roles.iter().copied()).collect();
            let member_roles: Vec<i64> = role_ids
                .iter()
                .zip(&held)
                .filter(|(_, h)| **h)
                .map(|(r, _)| *r)
                .collect();
            let mut seen = std::collections::HashSet::new();
            let overwrites: Vec<Overwrite> = overwrites
                .into_iter()
                .map(|(target, member, allow, deny)| {
                    let (id, kind) = match target {
                        0..=5 => (target + 1, OverwriteKind::Role),
                        6 => (guild_id, OverwriteKind::Role),
                        7 => (user_id, if member { OverwriteKind::Member } else { OverwriteKind::Role }),
                        _ => (8, OverwriteKind::Member),
                    };
                    Overwrite { id, kind, allow, deny }
                })
                // A channel holds one overwrite per target, as the route keeps it.
                .filter(|o| seen.insert(o.id))
                .collect();
            let role_bits = member_roles.iter().fold(everyone, |b, r| b | role_perms[r]);
            let subject = Subject {
                guild_id,
                user_id,
                is_owner: owner,
                role_bits,
                roles: &member_roles,
                timed_out,
            };
            let want = reference(
                guild_id, owner, everyone, &role_perms, &member_roles, user_id,
                &overwrites, kind, timed_out,
            );
            prop_assert_eq!(in_channel(&subject, kind, &overwrites), want);
        }
    }

    #[test]
    fn a_private_channel_hides_from_everyone_but_the_allowed_role() {
        const STAFF: i64 = 2;
        let guild_id = 1;
        let staff = STAFF;
        let overwrites = [
            Overwrite {
                id: guild_id,
                kind: OverwriteKind::Role,
                allow: 0,
                deny: VIEW_CHANNEL,
            },
            Overwrite {
                id: staff,
                kind: OverwriteKind::Role,
                allow: VIEW_CHANNEL,
                deny: 0,
            },
        ];
        let member = |roles: &'static [i64]| Subject {
            guild_id,
            user_id: 9,
            is_owner: false,
            role_bits: EVERYONE_DEFAULT,
            roles,
            timed_out: false,
        };
        assert_eq!(in_channel(&member(&[]), 0, &overwrites), 0);
        assert_eq!(
            in_channel(&member(&[STAFF]), 0, &overwrites),
            EVERYONE_DEFAULT
        );
        let owner = Subject {
            is_owner: true,
            ..member(&[])
        };
        assert_eq!(in_channel(&owner, 0, &overwrites), ALL);
    }

    #[test]
    fn a_timeout_leaves_reading_only_and_spares_administrators() {
        let subject = Subject {
            guild_id: 1,
            user_id: 9,
            is_owner: false,
            role_bits: EVERYONE_DEFAULT,
            roles: &[],
            timed_out: true,
        };
        assert_eq!(in_guild(&subject), VIEW_CHANNEL | READ_MESSAGE_HISTORY);
        assert_eq!(
            in_channel(&subject, 0, &[]),
            VIEW_CHANNEL | READ_MESSAGE_HISTORY
        );
        let admin = Subject {
            role_bits: ADMINISTRATOR,
            ..subject
        };
        assert_eq!(in_guild(&admin), ALL);
    }

    /// Threads: SEND_MESSAGES_IN_THREADS is what talks there; a private
    /// thread is its members' and moderators'; a locked one, moderators'.
    #[test]
    fn threads_talk_by_their_own_bit_and_hide_private_ones() {
        let viewer = VIEW_CHANNEL | SEND_MESSAGES | EMBED_LINKS | READ_MESSAGE_HISTORY;
        let open = ThreadAccess {
            private: false,
            member: false,
            locked: false,
        };
        // SEND_MESSAGES alone does not talk in a thread, nor embed.
        let bits = in_thread(viewer, open);
        assert_eq!(bits & (SEND_MESSAGES | EMBED_LINKS), 0);
        assert_ne!(bits & VIEW_CHANNEL, 0);
        let talker = (viewer & !SEND_MESSAGES) | SEND_MESSAGES_IN_THREADS;
        assert_ne!(in_thread(talker, open) & SEND_MESSAGES, 0);
        assert_ne!(in_thread(talker, open) & EMBED_LINKS, 0);
        // Nothing without the parent's VIEW_CHANNEL.
        assert_eq!(in_thread(talker & !VIEW_CHANNEL, open), 0);
        let private = ThreadAccess {
            private: true,
            ..open
        };
        assert_eq!(in_thread(talker, private), 0);
        let joined = ThreadAccess {
            member: true,
            ..private
        };
        assert_ne!(in_thread(talker, joined) & VIEW_CHANNEL, 0);
        assert_ne!(
            in_thread(talker | MANAGE_THREADS, private) & VIEW_CHANNEL,
            0
        );
        let locked = ThreadAccess {
            locked: true,
            ..open
        };
        assert_eq!(in_thread(talker, locked) & SEND_MESSAGES, 0);
        assert_ne!(
            in_thread(talker | MANAGE_THREADS, locked) & SEND_MESSAGES,
            0
        );
    }

    #[test]
    fn wire_overwrites_refuse_undefined_bits_and_types() {
        let wire = |kind, allow: &str| PermissionOverwrite {
            id: crate::snowflake::Snowflake::new(5).unwrap(),
            kind,
            allow: allow.to_owned(),
            deny: "0".to_owned(),
        };
        assert!(Overwrite::from_wire(&wire(0, "1024")).is_some());
        assert!(Overwrite::from_wire(&wire(2, "1024")).is_none());
        assert!(Overwrite::from_wire(&wire(1, &(1u64 << 47).to_string())).is_none());
        assert!(Overwrite::from_wire(&wire(1, "x")).is_none());
        let stored = Overwrite::to_stored(&[Overwrite::from_wire(&wire(1, "1024")).unwrap()]);
        assert_eq!(Overwrite::parse_stored(&stored)[0].allow, VIEW_CHANNEL);
        const { assert!(ALL & (1 << 47) == 0 && ALL & (1 << 52) != 0 && ALL & (1 << 53) == 0) };
    }
}
