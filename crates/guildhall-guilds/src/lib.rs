//! The guilds role: one live owner per guild.
//!
//! A [`GuildOwner`] is a task with a bounded mailbox that holds a guild's
//! channels, roles and members in memory, checks permissions, and fans its
//! events out over the bus: one message per gateway node with subscribed
//! sessions, numbered in a per-(guild, node) stream (see
//! `guildhall_proto::bus`). A session's subscription travels in the same
//! stream as the guild's events, so it always receives the guild's
//! GUILD_CREATE before that guild's events, whatever node it is on.
//!
//! The [`GuildDirectory`] finds (and if needed starts) the owner of a guild.
//! A full mailbox is answered at once with [`GuildError::Overloaded`], which
//! the API turns into 503: callers never queue behind a busy guild. A guild
//! that is not loaded is loaded once however many requests ask (single-
//! flight), distinct guilds load at once, and the requests that arrive
//! during a load reach the new owner in arrival order, before any later one.

use guildhall_cluster::Bus;
use guildhall_common::cluster::ClusterState;
use guildhall_common::guilds::GuildsClient;
use guildhall_common::state::{Shared, sf};
use guildhall_common::wire::{wire_channel, wire_thread_member, wire_user};
use guildhall_control::singleflight::{Join, SingleFlight};
use guildhall_proto::bus::{
    NodeEvent, NodeEventBody, StreamBody, StreamEvent, gateway_events_subject, partition_of,
};
use guildhall_proto::guilds::{
    Changed, Follower, FollowsAsk, GUILD_WIDE, Grown, GuildAnswer, GuildCall, GuildChange,
    GuildError, MemberPage, SendGrant, follows_subject, guild_requests_subject,
};
use guildhall_proto::guilds::{GuildReply, GuildRequest};
use guildhall_proto::intents;
use guildhall_proto::model::{self, Member, Role, RoleColors};
use guildhall_proto::permissions as perm;
use guildhall_proto::timestamp::format_unix_ms;
use guildhall_store::{ChannelRow, GuildState, MemberRow, RoleRow, ThreadMemberRow, UserRow};
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// A member as the owner holds it.
#[derive(Clone, Debug)]
struct MemberEntry {
    row: MemberRow,
    user: UserRow,
    roles: Vec<i64>,
}

/// Who an event is for, beyond the guild's subscribed sessions and
/// their intents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Audience {
    /// Members holding these permissions in this channel (VIEW_CHANNEL
    /// among them).
    Channel(i64, u64),
    /// Members holding these guild permissions (the audit log's
    /// VIEW_AUDIT_LOG).
    Holding(u64),
}

/// What an audited change looked like before: the wire object it
/// changes (Null when it is new or has none).
#[derive(Debug)]
struct AuditBefore(serde_json::Value);

/// An audit entry a change makes, before it has an id: (action type,
/// target, changes, options).
type PlannedEntry = (
    u8,
    Option<i64>,
    Vec<serde_json::Value>,
    Option<serde_json::Value>,
);

/// The keys an audit entry lists for each object.
const CHANNEL_AUDIT_KEYS: &[&str] = &[
    "name",
    "type",
    "topic",
    "position",
    "nsfw",
    "rate_limit_per_user",
    "parent_id",
    "bitrate",
    "user_limit",
];
const ROLE_AUDIT_KEYS: &[&str] = &["name", "permissions", "color", "hoist", "mentionable"];
const THREAD_AUDIT_KEYS: &[&str] = &[
    "name",
    "type",
    "rate_limit_per_user",
    "archived",
    "locked",
    "auto_archive_duration",
    "invitable",
];

/// When `thread` archives by itself: `auto_archive_duration` minutes after
/// its last activity, its newest message (`last_message_ms`) or the last
/// change of its archive status, whichever is later (None: it has no
/// duration).
fn auto_archive_at_ms(thread: &ChannelRow, last_message_ms: Option<i64>) -> Option<i64> {
    let minutes = thread.auto_archive_duration.filter(|m| *m > 0)?;
    let since_ms = thread
        .archive_ms
        .unwrap_or(0)
        .max(last_message_ms.unwrap_or(0));
    Some(since_ms.saturating_add(minutes.saturating_mul(60_000)))
}

/// The active threads due to archive at `now_ms` (by position), and the
/// earliest time one of the others is due (None: none will be).
fn threads_due(
    threads: &[ChannelRow],
    activity_ms: &HashMap<i64, i64>,
    now_ms: i64,
) -> (Vec<i64>, Option<i64>) {
    let mut due = vec![];
    let mut next: Option<i64> = None;
    for thread in threads.iter().filter(|t| !t.archived) {
        let Some(at) = auto_archive_at_ms(thread, activity_ms.get(&thread.id).copied()) else {
            continue;
        };
        if at <= now_ms {
            due.push(thread.id);
        } else {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    (due, next)
}

/// A thread's wire object with its metadata's keys at the top, as the
/// audit log's thread entries name them (`archived`, not
/// `thread_metadata.archived`).
fn thread_audit_value(wire: &serde_json::Value) -> serde_json::Value {
    let mut flat = wire.clone();
    if let (Some(flat), Some(metadata)) = (
        flat.as_object_mut(),
        wire.get("thread_metadata").and_then(|m| m.as_object()),
    ) {
        for key in ["archived", "locked", "auto_archive_duration", "invitable"] {
            if let Some(value) = metadata.get(key) {
                flat.insert(key.to_owned(), value.clone());
            }
        }
    }
    flat
}
const MEMBER_AUDIT_KEYS: &[&str] = &["nick", "communication_disabled_until"];

/// The numeric form of overwrites a caller sent, refused whole if one is
/// malformed.
fn parse_overwrites(
    wire: &[model::PermissionOverwrite],
) -> Result<Vec<perm::Overwrite>, GuildError> {
    wire.iter()
        .map(|o| perm::Overwrite::from_wire(o).ok_or(GuildError::InvalidOverwrite))
        .collect()
}

/// Fanout counters of a node's guild owners, read by `/metrics`.
#[derive(Debug, Default)]
pub struct FanoutCounters {
    /// Stream messages published to gateway nodes.
    pub stream_messages_total: AtomicU64,
    /// Stream tails sent (see [`GuildOwner::send_tails`]).
    pub stream_tails_total: AtomicU64,
    /// Publishes fanned out by an owner that then found a newer owner's
    /// claim: not confirmed, and the owner stopped.
    pub superseded_publishes_total: AtomicU64,
    /// Stream messages the bus refused (disconnected, subscriber full, no
    /// responders); each is kept in its stream's unsent queue and published
    /// again, in order, before anything later on that stream.
    pub stream_publish_failed_total: AtomicU64,
    /// Unsent stream messages published on a later try.
    pub stream_resent_total: AtomicU64,
    /// Unsent stream messages given up at `guild_stream_unsent_max`: the
    /// receiving node sees the gap and resynchronises (a fresh
    /// GUILD_CREATE, the documented exception).
    pub stream_unsent_dropped_total: AtomicU64,
    /// Publishes answered "not yet" (retryable) because part of their
    /// fanout was still unsent: the caller holds the event and asks again,
    /// and is confirmed once every stream took it.
    pub publish_unconfirmed_total: AtomicU64,
    /// Subscriptions refused at `guild_subscriptions_max`.
    pub subscriptions_refused_total: AtomicU64,
    /// Sends in a slowmode channel let through unrecorded because the
    /// owner held `guild_slowmode_clocks_max` running clocks.
    pub slowmode_unrecorded_total: AtomicU64,
    /// GUILD_CREATEs left out because they exceed the bus payload bound.
    pub guild_create_too_large_total: AtomicU64,
    /// Guild requests that did not decode.
    pub malformed_requests_total: AtomicU64,
    /// Requests whose caller's deadline had passed when they were read
    /// (a process resumed after a pause, a backlog): not started.
    pub requests_expired_total: AtomicU64,
    /// Requests refused because an owner's mailbox was full.
    pub mailbox_refusals_total: AtomicU64,
    /// Owners stopped because placement moved their guild to another node
    /// (or this node's lease could no longer be vouched for).
    pub moved_out_total: AtomicU64,
    /// Owners started for a guild that had an owner before (claimed epoch
    /// above 1: a move, or a restart).
    pub moved_in_total: AtomicU64,
    /// Owners stopped because the store refused one of their writes as
    /// stale (a newer owner claimed the guild).
    pub fenced_total: AtomicU64,
    /// Requests forwarded to the owner in this node's view (they reached
    /// a node that is not, or no longer, the guild's owner).
    pub forwarded_total: AtomicU64,
    /// Requests refused instead of forwarded (`guild_forward_hops_max`
    /// reached, or no other owner known).
    pub forward_refused_total: AtomicU64,
    /// Loads refused because this node could not claim (lease not renewed
    /// within its TTL, or claims held after a fenced write).
    pub claims_refused_total: AtomicU64,
    /// Sessions a new owner subscribed from the gateways' answers.
    pub pulled_sessions_total: AtomicU64,
    /// Gateway nodes that did not answer a new owner's question in time.
    pub pulls_failed_total: AtomicU64,
    /// Sessions owners dropped because their gateway node's lease ended.
    pub dead_gateway_sessions_dropped_total: AtomicU64,
    /// Questions asked again of gateway nodes that had not answered.
    pub pulls_retried_total: AtomicU64,
    /// Late pulls not started at `guild_late_pull_tasks_max`.
    pub late_pulls_refused_total: AtomicU64,
    /// Publishes confirmed without a fanout: a retry of an id this owner
    /// had fanned out already.
    pub publish_repeats_total: AtomicU64,
    /// Publish ids forgotten at `guild_publish_ids_remembered_max` before
    /// `fanout_outbox_event_age_ms_max` passed (a retry of one would be
    /// fanned out twice).
    pub publish_ids_forgotten_early_total: AtomicU64,
}

fn wire_role(row: &RoleRow) -> Role {
    let color = u32::try_from(row.color).unwrap_or(0);
    Role {
        id: sf(row.id),
        name: row.name.clone(),
        color,
        colors: RoleColors {
            primary_color: color,
            secondary_color: None,
            tertiary_color: None,
        },
        hoist: row.hoist,
        icon: None,
        unicode_emoji: None,
        position: i32::try_from(row.position).unwrap_or(0),
        permissions: (row.permissions as u64).to_string(),
        managed: row.bot_id.is_some(),
        mentionable: row.mentionable,
        flags: 0,
        tags: row.bot_id.map(|bot| model::RoleTags {
            bot_id: Some(sf(bot)),
        }),
    }
}

fn wire_member(entry: &MemberEntry, with_user: bool) -> Member {
    Member {
        user: with_user.then(|| wire_user(&entry.user)),
        nick: entry.row.nick.clone(),
        avatar: None,
        roles: entry.roles.iter().map(|r| sf(*r)).collect(),
        joined_at: format_unix_ms(entry.row.joined_ms as u64),
        premium_since: None,
        deaf: false,
        mute: false,
        flags: 0,
        pending: false,
        communication_disabled_until: entry
            .timed_out_until(guildhall_common::state::now_ms())
            .map(format_unix_ms),
    }
}

impl MemberEntry {
    /// When the member's timeout ends (Unix ms), if one runs at `now_ms`:
    /// a past timeout is none, with no write.
    fn timed_out_until(&self, now_ms: u64) -> Option<u64> {
        self.row
            .communication_disabled_until_ms
            .and_then(|until| u64::try_from(until).ok())
            .filter(|until| *until > now_ms)
    }
}

/// Counts the bytes a value encodes to, without keeping them.
#[derive(Default)]
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes `value` takes as JSON (`usize::MAX` if it cannot be encoded,
/// so it never fits anything).
fn encoded_len(value: &impl Serialize) -> usize {
    let mut count = ByteCount::default();
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Keys of a GUILD_CREATE that the REST guild object (and GUILD_UPDATE)
/// does not carry.
const GUILD_CREATE_ONLY_KEYS: [&str; 9] = [
    "members",
    "channels",
    "threads",
    "presences",
    "voice_states",
    "joined_at",
    "large",
    "member_count",
    "unavailable",
];

/// The REST guild object (and GUILD_UPDATE's payload) of `guild`.
fn rest_guild(guild: &model::Guild) -> serde_json::Value {
    let mut value = serde_json::to_value(guild).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        for key in GUILD_CREATE_ONLY_KEYS {
            map.remove(key);
        }
    }
    value
}

/// One gateway node's stream of this guild.
#[derive(Debug, Default)]
struct NodeStream {
    /// The last sequence sent.
    seq: u64,
    /// Subscribed sessions and their users.
    sessions: HashMap<String, i64>,
    /// Messages of this stream the bus refused, oldest first, with their
    /// sequence numbers already in them; while any is here, later ones
    /// queue behind it, so the node receives the stream in order and
    /// without a gap once the bus takes them (at most
    /// `guild_stream_unsent_max`).
    unsent: VecDeque<Unsent>,
    /// When the stream's tail is next due (see [`GuildOwner::send_tails`]);
    /// `None`: the stream is quiet and its tails were sent.
    tail_due_at: Option<tokio::time::Instant>,
    /// Tails sent in this quiet spell (at most `guild_stream_tails_max`).
    tails_sent: u32,
}

/// A member's permissions in a held channel ([`GuildOwner::held_bits`]).
struct HeldBits {
    /// None: not a member.
    bits: Option<u64>,
    /// The channel's slowmode, seconds.
    slowmode_s: i64,
    /// The channel is an active thread.
    thread: bool,
}

/// A stream message waiting for the bus.
#[derive(Debug)]
struct Unsent {
    subject: String,
    bytes: bytes::Bytes,
    /// The publish it belongs to (0: an event of the owner's own).
    publish_id: u64,
}

/// One guild's owner.
pub struct GuildOwner {
    shared: Arc<Shared>,
    bus: Arc<dyn Bus>,
    cluster: Arc<ClusterState>,
    counters: Arc<FanoutCounters>,
    /// This incarnation (streams restart at 1 under a new epoch).
    epoch: u64,
    /// Streams by gateway node (bounded by the cluster's size).
    streams: BTreeMap<String, NodeStream>,
    /// Sessions in all streams together.
    subscriptions: usize,
    guild: guildhall_store::GuildRow,
    channels: Vec<ChannelRow>,
    /// Active threads, by id (at most `guild_active_threads_max`; they
    /// are not in `channels`, as Discord neither counts nor lists them
    /// there).
    threads: Vec<ChannelRow>,
    /// Members of those threads, by thread then user (bounded by the
    /// threads and the member count).
    thread_members: HashMap<i64, BTreeMap<i64, ThreadMemberRow>>,
    /// When each of those threads last had a message (unix ms; bounded by
    /// the threads): with its archive time, when it archives by itself.
    thread_activity_ms: HashMap<i64, i64>,
    /// No held thread archives by itself before this (unix ms; None: none
    /// has a duration). Messages only postpone a thread's time, so an
    /// early wake finds nothing due and looks again.
    archive_check_ms: Option<i64>,
    roles: Vec<RoleRow>,
    members: BTreeMap<i64, MemberEntry>,
    /// Voice states by user (bounded by the member count).
    voice: BTreeMap<i64, serde_json::Value>,
    /// Members' statuses others see, offline ones absent (bounded by the
    /// member count: only members are kept): the presence role's answer
    /// at load, then every change it casts.
    statuses: HashMap<i64, String>,
    /// Set when the guild was deleted: the owner stops.
    deleted: bool,
    /// Set when the store refused a write as stale: the owner stops.
    fenced: bool,
    /// This node (a stopped owner forwards to any other).
    node_name: String,
    /// Set by the directory when placement moved the guild away: the
    /// owner handles nothing more and forwards what its mailbox holds.
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Sessions this incarnation subscribed from the gateways' answers at
    /// load; a Subscribe of theirs that waited behind the load is already
    /// served (one GUILD_CREATE each, not two).
    pulled: std::collections::HashSet<(String, String)>,
    /// Publish ids fanned out, with when (ms), for as long as a caller may
    /// offer one again (`fanout_outbox_event_age_ms_max`, the age its
    /// outbox drops an event at) and at most
    /// `guild_publish_ids_remembered_max`: a retried publish is confirmed,
    /// not fanned out twice, however many other publishes came between.
    published: VecDeque<(u64, u64)>,
    /// Publish ids whose fanout is partly unsent, with how many stream
    /// messages of theirs still wait (bounded by the unsent queues): a
    /// retry of one is answered "not yet", never fanned out again.
    unconfirmed: HashMap<u64, usize>,
    /// The cluster's gateway generation this owner last pruned against.
    gateways_seen: u64,
    /// Bumped by every change that can change who views a channel (any
    /// guild change, a join): cached audiences of an older one are stale.
    view_generation: u64,
    /// Per audience, the members outside it (ascending), as of
    /// `view_generation`; at most `guild_view_cache_channels_max`.
    hidden: HashMap<Audience, (u64, std::sync::Arc<Vec<i64>>)>,
    /// Slowmode clocks: (channel, user) → until when (Unix ms) the user
    /// waits to send there again; at most `guild_slowmode_clocks_max`.
    slowmode: HashMap<(i64, i64), u64>,
}

impl GuildOwner {
    /// `user_id` as the permission function sees them (None: not a
    /// member).
    fn subject<'a>(&self, user_id: i64, entry: &'a MemberEntry) -> perm::Subject<'a> {
        let mut role_bits = 0u64;
        for role in &self.roles {
            if role.id == self.guild.id || entry.roles.contains(&role.id) {
                role_bits |= role.permissions as u64;
            }
        }
        perm::Subject {
            guild_id: self.guild.id,
            user_id,
            is_owner: self.guild.owner_id == user_id,
            role_bits,
            roles: &entry.roles,
            timed_out: entry
                .timed_out_until(guildhall_common::state::now_ms())
                .is_some(),
        }
    }

    /// A member's guild-wide permissions (None: not a member).
    fn permissions(&self, user_id: i64) -> Option<u64> {
        let entry = self.members.get(&user_id)?;
        Some(perm::in_guild(&self.subject(user_id, entry)))
    }

    /// A member's permissions in `channel`, its overwrites applied (None:
    /// not a member).
    fn channel_permissions(&self, user_id: i64, channel: &ChannelRow) -> Option<u64> {
        let entry = self.members.get(&user_id)?;
        let overwrites = perm::Overwrite::parse_stored(&channel.permission_overwrites);
        Some(perm::in_channel(
            &self.subject(user_id, entry),
            channel.kind,
            &overwrites,
        ))
    }

    /// A member's permissions in a thread: theirs in its parent as the
    /// thread's kind, their membership and its lock change them (None:
    /// not a member of the guild; nothing if the parent is gone).
    fn thread_permissions(&self, user_id: i64, thread: &ChannelRow) -> Option<u64> {
        let member = self
            .thread_members
            .get(&thread.id)
            .is_some_and(|m| m.contains_key(&user_id));
        self.thread_permissions_as(user_id, thread, member)
    }

    /// [`Self::thread_permissions`] with the user's membership given (an
    /// archived thread's members are in the store only).
    fn thread_permissions_as(
        &self,
        user_id: i64,
        thread: &ChannelRow,
        member: bool,
    ) -> Option<u64> {
        let parent = self
            .channels
            .iter()
            .find(|c| Some(c.id) == thread.parent_id);
        let Some(parent) = parent else {
            return self.members.contains_key(&user_id).then_some(0);
        };
        let parent_bits = self.channel_permissions(user_id, parent)?;
        Some(perm::in_thread(
            parent_bits,
            perm::ThreadAccess {
                private: thread.kind == 12,
                member,
                locked: thread.locked,
            },
        ))
    }

    /// A thread as `user_id` sees it: with their thread member if they
    /// joined it.
    fn wire_thread_for(&self, thread: &ChannelRow, user_id: i64) -> model::Channel {
        let mut wire = wire_channel(thread, true);
        if let Some(fields) = wire.thread.as_mut() {
            fields.member = self
                .thread_members
                .get(&thread.id)
                .and_then(|m| m.get(&user_id))
                .map(|m| wire_thread_member(m, false));
        }
        wire
    }

    /// A thread of this guild: the active one this owner holds (true), or
    /// an archived one read from the store (false).
    async fn find_thread(&mut self, thread_id: i64) -> Result<(ChannelRow, bool), GuildError> {
        if let Some(thread) = self.threads.iter().find(|t| t.id == thread_id) {
            return Ok((thread.clone(), true));
        }
        match self.shared.store.channel(thread_id).await {
            Ok(Some(row))
                if row.guild_id == Some(self.guild.id)
                    && guildhall_store::THREAD_KINDS.contains(&row.kind) =>
            {
                Ok((row, false))
            }
            Ok(_) => Err(GuildError::UnknownChannel),
            Err(error) => Err(self.store_failed(Some(&error))),
        }
    }

    /// Whether `user_id` joined `thread_id`: from memory for an active
    /// thread, from the store for an archived one.
    async fn joined_thread(
        &mut self,
        thread_id: i64,
        user_id: i64,
        active: bool,
    ) -> Result<bool, GuildError> {
        if active {
            return Ok(self
                .thread_members
                .get(&thread_id)
                .is_some_and(|m| m.contains_key(&user_id)));
        }
        match self.shared.store.thread_member(thread_id, user_id).await {
            Ok(member) => Ok(member.is_some()),
            Err(error) => Err(self.store_failed(Some(&error))),
        }
    }

    /// An unarchived thread's members, read back from the store a page at
    /// a time (a thread has at most the guild's members).
    async fn load_thread_members(&mut self, thread_id: i64) -> Result<(), GuildError> {
        const PAGE_ROWS: i64 = 1_000;
        let mut after = 0;
        let mut members = BTreeMap::new();
        loop {
            let page = match self
                .shared
                .store
                .thread_members(thread_id, after, PAGE_ROWS)
                .await
            {
                Ok(page) => page,
                Err(error) => return Err(self.store_failed(Some(&error))),
            };
            let full = page.len() as i64 == PAGE_ROWS;
            for member in page {
                after = member.user_id;
                members.insert(member.user_id, member);
            }
            if !full || members.len() > self.members.len() {
                break;
            }
        }
        self.thread_members.insert(thread_id, members);
        Ok(())
    }

    /// The active threads `user_id` can view.
    fn visible_threads(&self, user_id: i64) -> Vec<model::Channel> {
        self.threads
            .iter()
            .filter(|t| {
                self.thread_permissions(user_id, t)
                    .is_some_and(|bits| bits & perm::VIEW_CHANNEL != 0)
            })
            .map(|t| self.wire_thread_for(t, user_id))
            .collect()
    }

    /// `bits` in the channel at `index`: MissingAccess if the actor cannot
    /// see it (or is no member), MissingPermissions if a bit is missing.
    fn require_in(&self, actor: i64, index: usize, bits: u64) -> Result<u64, GuildError> {
        let have = self
            .channel_permissions(actor, &self.channels[index])
            .ok_or(GuildError::MissingAccess)?;
        if have & perm::VIEW_CHANNEL == 0 {
            Err(GuildError::MissingAccess)
        } else if have & bits != bits {
            Err(GuildError::MissingPermissions)
        } else {
            Ok(have)
        }
    }

    /// Whether `actor` holds MANAGE_ROLES through an overwrite of the
    /// channel (theirs or one of their roles'): Discord then lets them set
    /// any bit there, not only the ones they hold.
    fn manages_roles_by_overwrite(&self, actor: i64, overwrites: &[perm::Overwrite]) -> bool {
        let roles = self
            .members
            .get(&actor)
            .map(|m| m.roles.as_slice())
            .unwrap_or(&[]);
        overwrites.iter().any(|o| {
            o.allow & perm::MANAGE_ROLES != 0
                && match o.kind {
                    perm::OverwriteKind::Member => o.id == actor,
                    perm::OverwriteKind::Role => roles.contains(&o.id),
                }
        })
    }

    /// Checks a channel's new overwrites against the guild and the actor
    /// (who holds MANAGE_ROLES there, `held` their bits in the channel):
    /// each names a role of the guild or a member, at most one per id and
    /// `channel_overwrites_max` in all, and every bit that changes is one
    /// the actor holds (unless an overwrite gives them MANAGE_ROLES there).
    fn check_overwrites(
        &self,
        actor: i64,
        held: u64,
        old: &[perm::Overwrite],
        new: &[perm::Overwrite],
    ) -> Result<(), GuildError> {
        if new.len() > self.shared.limits.channel_overwrites_max {
            return Err(GuildError::MaxOverwrites);
        }
        let mut seen = std::collections::HashSet::new();
        for overwrite in new {
            if !seen.insert(overwrite.id) {
                return Err(GuildError::InvalidOverwrite);
            }
            match overwrite.kind {
                perm::OverwriteKind::Role if !self.roles.iter().any(|r| r.id == overwrite.id) => {
                    return Err(GuildError::UnknownRole);
                }
                perm::OverwriteKind::Member if !self.members.contains_key(&overwrite.id) => {
                    return Err(GuildError::UnknownMember);
                }
                _ => {}
            }
        }
        if held & perm::ADMINISTRATOR != 0 || self.manages_roles_by_overwrite(actor, old) {
            return Ok(());
        }
        let bits_of = |list: &[perm::Overwrite], id: i64| {
            list.iter()
                .find(|o| o.id == id)
                .map_or((0, 0), |o| (o.allow, o.deny))
        };
        for id in old.iter().chain(new).map(|o| o.id) {
            let (old_allow, old_deny) = bits_of(old, id);
            let (new_allow, new_deny) = bits_of(new, id);
            let changed = (old_allow ^ new_allow) | (old_deny ^ new_deny);
            if changed & !held != 0 {
                return Err(GuildError::MissingPermissions);
            }
        }
        Ok(())
    }

    /// Stores `row` as the channel at `index` and announces
    /// CHANNEL_UPDATE; the old row is kept if the guild would not fit its
    /// GUILD_CREATE or the store refuses.
    async fn replace_channel(
        &mut self,
        index: usize,
        row: ChannelRow,
        grown: Grown,
    ) -> Result<Changed, GuildError> {
        let store = self.shared.store.clone();
        let old = std::mem::replace(&mut self.channels[index], row.clone());
        if !self.fits() {
            self.channels[index] = old;
            return Err(GuildError::SizeLimit(grown));
        }
        match store.update_channel(&row, self.epoch as i64).await {
            Ok(true) => {}
            Ok(false) => {
                self.channels[index] = old;
                return Err(GuildError::UnknownChannel);
            }
            Err(error) => {
                self.channels[index] = old;
                return Err(self.store_failed(Some(&error)));
            }
        }
        let wire = wire_channel(&row, true);
        self.publish("CHANNEL_UPDATE", intents::GUILDS, &wire);
        Ok(Changed::Channel(wire))
    }

    /// Applies `settings` (checked by the api against Discord's bounds and
    /// the channel's type) to `row`: a parent must be a category of this
    /// guild, and a category has none.
    fn apply_settings(
        &self,
        row: &mut ChannelRow,
        settings: &guildhall_proto::guilds::ChannelSettings,
    ) -> Result<(), GuildError> {
        if let Some(kind) = settings.kind {
            row.kind = kind;
            // Announcement channels have no slowmode.
            if kind == 5 {
                row.rate_limit_per_user = 0;
            }
        }
        if let Some(parent) = settings.parent_id {
            if let Some(parent_id) = parent {
                let category = self
                    .channels
                    .iter()
                    .any(|c| c.id == parent_id && c.kind == 4);
                if !category || row.kind == 4 {
                    return Err(GuildError::InvalidParent);
                }
            }
            row.parent_id = parent;
        }
        if let Some(nsfw) = settings.nsfw {
            row.nsfw = nsfw;
        }
        if let Some(seconds) = settings.rate_limit_per_user {
            row.rate_limit_per_user = seconds;
        }
        if let Some(bitrate) = settings.bitrate {
            row.bitrate = bitrate;
        }
        if let Some(limit) = settings.user_limit {
            row.user_limit = limit;
        }
        if let Some(mode) = settings.video_quality_mode {
            row.video_quality_mode = mode;
        }
        if let Some(minutes) = settings.default_auto_archive_duration {
            row.default_auto_archive_duration = (minutes > 0).then_some(minutes);
        }
        if let Some(seconds) = settings.default_thread_rate_limit_per_user {
            row.default_thread_rate_limit_per_user = seconds;
        }
        if let Some(tags) = &settings.available_tags {
            // A tag keeps its id across edits; an id the channel does not
            // hold is refused rather than adopted (the caller mints new
            // tags' ids).
            let held = guildhall_common::wire::stored_tags(&row.available_tags);
            let held_here =
                |tag: &guildhall_proto::model::ForumTag| held.iter().any(|h| h.id == tag.id);
            let fresh = |tag: &guildhall_proto::model::ForumTag| {
                settings.minted_tags.contains(&(tag.id.get() as i64))
            };
            if tags.iter().any(|t| !held_here(t) && !fresh(t)) {
                return Err(GuildError::UnknownTag(
                    guildhall_proto::guilds::TagField::Available,
                ));
            }
            row.available_tags = serde_json::to_string(tags).unwrap_or_else(|_| "[]".into());
        }
        if let Some(reaction) = &settings.default_reaction_emoji {
            row.default_reaction_emoji = reaction
                .as_ref()
                .and_then(|r| serde_json::to_string(r).ok());
        }
        if let Some(order) = settings.default_sort_order {
            row.default_sort_order = order;
        }
        if let Some(layout) = settings.default_forum_layout {
            row.default_forum_layout = layout;
        }
        Ok(())
    }

    /// Edits a thread, as Discord's rules have it: a moderator
    /// (MANAGE_THREADS) changes anything; the thread's starter renames
    /// it, archives it and sets its duration while it is unlocked; anyone
    /// who may talk there unarchives an unlocked thread. Only fields that
    /// differ count. An archived thread changes only if this unarchives it
    /// (50083). Archiving takes the thread and its members out of this
    /// owner's memory; unarchiving brings them back.
    async fn update_thread(
        &mut self,
        actor: i64,
        thread_id: i64,
        patch: guildhall_proto::guilds::ThreadPatch,
    ) -> Result<Changed, GuildError> {
        if !self.members.contains_key(&actor) {
            return Err(GuildError::MissingAccess);
        }
        let (mut row, active) = self.find_thread(thread_id).await?;
        let joined = self.joined_thread(thread_id, actor, active).await?;
        let bits = self.thread_permissions_as(actor, &row, joined).unwrap_or(0);
        if bits & perm::VIEW_CHANNEL == 0 {
            return Err(GuildError::MissingAccess);
        }
        let name = patch.name.filter(|n| *n != row.name);
        let archived = patch.archived.filter(|a| *a != row.archived);
        let locked = patch.locked.filter(|l| *l != row.locked);
        let minutes = patch
            .auto_archive_duration
            .filter(|m| Some(*m) != row.auto_archive_duration);
        let slowmode = patch
            .rate_limit_per_user
            .filter(|s| *s != row.rate_limit_per_user);
        let invitable = patch.invitable.filter(|i| *i != row.invitable);
        if invitable.is_some() && row.kind != 12 {
            return Err(GuildError::WrongChannelType);
        }
        let before_tags: Vec<i64> = guildhall_common::wire::stored_applied_tags(&row.applied_tags)
            .iter()
            .map(|t| t.get() as i64)
            .collect();
        let applied_tags = match patch.applied_tags.filter(|tags| *tags != before_tags) {
            None => None,
            Some(tags) => {
                let parent = row
                    .parent_id
                    .and_then(|p| self.channels.iter().find(|c| c.id == p))
                    .filter(|c| matches!(c.kind, 15 | 16))
                    .ok_or(GuildError::WrongChannelType)?;
                Some(self.applied_tags(
                    parent,
                    &before_tags,
                    &tags,
                    bits & perm::MANAGE_THREADS != 0,
                )?)
            }
        };
        let edits = name.is_some()
            || applied_tags.is_some()
            || locked.is_some()
            || minutes.is_some()
            || slowmode.is_some()
            || invitable.is_some();
        if !edits && archived.is_none() {
            return Ok(Changed::Channel(self.wire_thread_for(&row, actor)));
        }
        if row.archived && archived != Some(false) {
            return Err(GuildError::ThreadArchived);
        }
        let moderator = bits & perm::MANAGE_THREADS != 0;
        let starter = row.owner_id == Some(actor) && !row.locked;
        let locked_after = locked.unwrap_or(row.locked);
        let moderators_only = locked.is_some()
            || invitable.is_some()
            || slowmode.is_some()
            || (archived == Some(false) && locked_after);
        let starters_too =
            name.is_some() || minutes.is_some() || applied_tags.is_some() || archived == Some(true);
        if (moderators_only && !moderator)
            || (starters_too && !(moderator || starter))
            || (archived == Some(false) && !moderator && bits & perm::SEND_MESSAGES == 0)
        {
            return Err(GuildError::MissingPermissions);
        }
        if archived == Some(false)
            && self.threads.len() >= self.shared.limits.guild_active_threads_max
        {
            return Err(GuildError::MaxActiveThreads);
        }
        if let Some(name) = name {
            row.name = name;
        }
        if let Some(locked) = locked {
            row.locked = locked;
        }
        if let Some(minutes) = minutes {
            row.auto_archive_duration = Some(minutes);
            // Changing the duration is activity, as documented.
            self.thread_activity_ms
                .insert(thread_id, guildhall_common::state::now_ms() as i64);
        }
        if let Some(seconds) = slowmode {
            row.rate_limit_per_user = seconds;
        }
        if let Some(invitable) = invitable {
            row.invitable = invitable;
        }
        if let Some(tags) = applied_tags {
            row.applied_tags = tags;
        }
        if let Some(archived) = archived {
            row.archived = archived;
            row.archive_ms = Some(guildhall_common::state::now_ms() as i64);
        }
        // Held while active: its name must still fit the GUILD_CREATE.
        let index = self.threads.iter().position(|t| t.id == thread_id);
        let previous = match index {
            Some(index) => Some(std::mem::replace(&mut self.threads[index], row.clone())),
            None if !row.archived => {
                self.threads.push(row.clone());
                None
            }
            None => None,
        };
        let undo = |this: &mut Self| match (index, previous.clone()) {
            (Some(index), Some(previous)) => this.threads[index] = previous,
            _ => this.threads.retain(|t| t.id != thread_id),
        };
        if !row.archived && !self.fits() {
            undo(self);
            return Err(GuildError::SizeLimit(Grown::Name));
        }
        match self
            .shared
            .store
            .update_thread(&row, self.epoch as i64)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                undo(self);
                return Err(GuildError::UnknownChannel);
            }
            Err(error) => {
                undo(self);
                return Err(self.store_failed(Some(&error)));
            }
        }
        if !active && !row.archived {
            // Unarchived: its members come back with it.
            if let Err(error) = self.load_thread_members(thread_id).await {
                // Written already: the thread is active in the store, and
                // a reload of the guild brings its members back.
                self.thread_members.entry(thread_id).or_default();
                guildhall_common::throttled!(
                    warn,
                    "guilds.thread_members",
                    guild_id = self.guild.id,
                    thread_id,
                    ?error,
                    "an unarchived thread's members could not be read"
                );
            }
        }
        self.view_generation += 1;
        let wire = wire_channel(&row, true);
        // Published while the thread is still held, so its viewers are
        // the audience; an archived thread then leaves memory.
        self.publish_in(thread_id, "THREAD_UPDATE", intents::GUILDS, &wire);
        let answer = self.wire_thread_for(&row, actor);
        if row.archived {
            self.forget_thread(thread_id);
        } else {
            self.schedule_archive(thread_id);
        }
        Ok(Changed::Channel(answer))
    }

    /// A post's applied tags checked against its forum `parent` (JSON for
    /// the row): at most 5, each one of the forum's tags; adding or
    /// removing a moderated tag (against `before`) takes a moderator.
    fn applied_tags(
        &self,
        parent: &ChannelRow,
        before: &[i64],
        tags: &[i64],
        moderator: bool,
    ) -> Result<String, GuildError> {
        const APPLIED_TAGS_MAX: usize = 5;
        let available = guildhall_common::wire::stored_tags(&parent.available_tags);
        let mut ids = Vec::with_capacity(tags.len());
        for tag in tags {
            let Some(known) = available.iter().find(|t| t.id.get() as i64 == *tag) else {
                return Err(GuildError::UnknownTag(
                    guildhall_proto::guilds::TagField::Applied,
                ));
            };
            if known.moderated && !moderator && !before.contains(tag) {
                return Err(GuildError::MissingPermissions);
            }
            if !ids.contains(&known.id) {
                ids.push(known.id);
            }
        }
        let removes_moderated = before.iter().any(|tag| {
            !tags.contains(tag)
                && available
                    .iter()
                    .any(|t| t.id.get() as i64 == *tag && t.moderated)
        });
        if removes_moderated && !moderator {
            return Err(GuildError::MissingPermissions);
        }
        if ids.len() > APPLIED_TAGS_MAX {
            return Err(GuildError::UnknownTag(
                guildhall_proto::guilds::TagField::Applied,
            ));
        }
        Ok(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
    }

    /// `user_id`'s permissions in a channel this owner holds (a channel, an
    /// active thread, or [`GUILD_WIDE`]: the guild), read in one pass with
    /// its slowmode; None: not held.
    fn held_bits(&self, user_id: i64, channel_id: i64) -> Option<HeldBits> {
        if channel_id == GUILD_WIDE {
            return Some(HeldBits {
                bits: self.permissions(user_id),
                slowmode_s: 0,
                thread: false,
            });
        }
        if let Some(c) = self.channels.iter().find(|c| c.id == channel_id) {
            return Some(HeldBits {
                bits: self.channel_permissions(user_id, c),
                slowmode_s: c.rate_limit_per_user,
                thread: false,
            });
        }
        let t = self.threads.iter().find(|t| t.id == channel_id)?;
        Some(HeldBits {
            bits: self.thread_permissions(user_id, t),
            slowmode_s: t.rate_limit_per_user,
            thread: true,
        })
    }

    /// `user_id`'s permissions in `thread_id` when it is an archived
    /// thread of this guild (None: no such thread, or it was unarchived
    /// and is now held). Sending a message (`send`) unarchives it, as
    /// Discord does, unless it is locked and the sender no moderator;
    /// anything but viewing, reading history and deleting messages is
    /// refused with 50083 while it stays archived.
    async fn archived_thread_bits(
        &mut self,
        user_id: i64,
        thread_id: i64,
        need: u64,
        send: bool,
    ) -> Result<Option<Option<u64>>, GuildError> {
        let row = match self.find_thread(thread_id).await {
            Ok((row, _)) => row,
            Err(GuildError::UnknownChannel) => return Ok(None),
            Err(error) => return Err(error),
        };
        let joined = self.joined_thread(thread_id, user_id, false).await?;
        let bits = self.thread_permissions_as(user_id, &row, joined);
        let viewer = bits.is_some_and(|b| b & perm::VIEW_CHANNEL != 0);
        if send && viewer {
            let unarchive = guildhall_proto::guilds::ThreadPatch {
                archived: Some(false),
                ..Default::default()
            };
            return match self.update_thread(user_id, thread_id, unarchive).await {
                Ok(_) => Ok(None),
                Err(GuildError::MissingPermissions) if row.locked => {
                    Err(GuildError::ThreadArchived)
                }
                Err(error) => Err(error),
            };
        }
        // Deleting messages is the one change an archived thread takes
        // (the threads topic): a moderator's MANAGE_MESSAGES passes.
        let readable = perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY | perm::MANAGE_MESSAGES;
        if viewer && need & !readable != 0 {
            return Err(GuildError::ThreadArchived);
        }
        Ok(Some(bits))
    }

    /// A deleted category's channels move out of it (CHANNEL_UPDATE each,
    /// as Discord does). A failed write leaves that channel naming the
    /// gone category, which reads as none and is counted.
    async fn orphan_children(&mut self, category_id: i64) {
        let children: Vec<i64> = self
            .channels
            .iter()
            .filter(|c| c.parent_id == Some(category_id))
            .map(|c| c.id)
            .collect();
        for child_id in children {
            let Ok(index) = self.channel_index(child_id) else {
                continue;
            };
            let row = ChannelRow {
                parent_id: None,
                ..self.channels[index].clone()
            };
            let _ = self.replace_channel(index, row, Grown::Name).await;
        }
    }

    /// A send by `user_id` (holding `bits` there) in `channel_id`, whose
    /// slowmode is `seconds`: Err
    /// with the milliseconds left while their slowmode clock runs, else
    /// Ok and the clock starts. Bots and holders of BYPASS_SLOWMODE are
    /// unaffected, as Discord documents. At `guild_slowmode_clocks_max`
    /// clocks the run-out ones go; if none has, the send passes
    /// unrecorded (counted) instead of growing the map.
    fn slowmode_clock(
        &mut self,
        user_id: i64,
        channel_id: i64,
        seconds: i64,
        bits: u64,
    ) -> Result<(), u64> {
        let bot = self.members.get(&user_id).is_some_and(|m| m.user.bot);
        if seconds <= 0 || bot || bits & perm::BYPASS_SLOWMODE != 0 {
            return Ok(());
        }
        let now = guildhall_common::state::now_ms();
        let key = (channel_id, user_id);
        if let Some(until) = self.slowmode.get(&key)
            && *until > now
        {
            return Err(until - now);
        }
        if self.slowmode.len() >= self.shared.limits.guild_slowmode_clocks_max
            && !self.slowmode.contains_key(&key)
        {
            self.slowmode.retain(|_, until| *until > now);
            if self.slowmode.len() >= self.shared.limits.guild_slowmode_clocks_max {
                self.counters
                    .slowmode_unrecorded_total
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.slowmode.insert(key, now + seconds as u64 * 1_000);
        Ok(())
    }

    /// The highest role position of `user_id` (the owner outranks all).
    fn rank(&self, user_id: i64) -> i64 {
        if user_id == self.guild.owner_id {
            return i64::MAX;
        }
        let Some(entry) = self.members.get(&user_id) else {
            return -1;
        };
        self.roles
            .iter()
            .filter(|r| entry.roles.contains(&r.id))
            .map(|r| r.position)
            .max()
            .unwrap_or(0)
    }

    /// `bits` guild-wide; the actor's permissions if they hold them.
    fn require(&self, actor: i64, bits: u64) -> Result<u64, GuildError> {
        match self.permissions(actor) {
            None => Err(GuildError::MissingAccess),
            Some(have) if have & bits != bits => Err(GuildError::MissingPermissions),
            Some(have) => Ok(have),
        }
    }

    /// Where the channel `channel_id` is in this guild's list.
    fn channel_index(&self, channel_id: i64) -> Result<usize, GuildError> {
        self.channels
            .iter()
            .position(|c| c.id == channel_id)
            .ok_or(GuildError::UnknownChannel)
    }

    fn member_event(&self, member_id: i64) -> Option<serde_json::Value> {
        let entry = self.members.get(&member_id)?;
        let mut value = serde_json::to_value(wire_member(entry, true)).ok()?;
        value["guild_id"] = serde_json::Value::String(self.guild.id.to_string());
        Some(value)
    }

    /// The error a failed owner write answers. A write refused as stale
    /// means a newer owner claimed the guild: this one stops (the request
    /// is answered `Overloaded`, which the caller may retry at the new
    /// owner) and the node claims nothing for a while.
    fn store_failed(&mut self, error: Option<&guildhall_store::StoreError>) -> GuildError {
        if matches!(error, Some(guildhall_store::StoreError::StaleEpoch)) {
            self.fenced = true;
            self.counters.fenced_total.fetch_add(1, Ordering::Relaxed);
            self.cluster
                .hold_claims(guildhall_common::state::monotonic_ms());
            guildhall_common::throttled!(
                warn,
                "guilds.fenced",
                guild_id = self.guild.id,
                epoch = self.epoch,
                "a newer owner claimed the guild; this owner stops"
            );
            GuildError::Overloaded
        } else {
            GuildError::Store
        }
    }

    async fn change(&mut self, actor: i64, change: GuildChange) -> Result<Changed, GuildError> {
        // Roles, overwrites, members and channels decide who views what.
        self.view_generation += 1;
        let store = self.shared.store.clone();
        let guild_id = self.guild.id;
        let epoch = self.epoch as i64;
        match change {
            GuildChange::UpdateChannel {
                channel_id,
                name,
                topic,
                position,
                permission_overwrites,
                settings,
            } => {
                let index = self.channel_index(channel_id)?;
                let held = self.require_in(actor, index, perm::MANAGE_CHANNELS)?;
                let mut row = self.channels[index].clone();
                self.apply_settings(&mut row, &settings)?;
                let grown = if topic.is_some() {
                    Grown::Topic
                } else {
                    Grown::Name
                };
                if let Some(name) = name {
                    row.name = name;
                }
                if let Some(topic) = topic {
                    row.topic = topic;
                }
                if let Some(position) = position {
                    row.position = position;
                }
                if let Some(wire) = permission_overwrites {
                    if held & perm::MANAGE_ROLES == 0 {
                        return Err(GuildError::MissingPermissions);
                    }
                    let new = parse_overwrites(&wire)?;
                    let old = perm::Overwrite::parse_stored(&row.permission_overwrites);
                    self.check_overwrites(actor, held, &old, &new)?;
                    row.permission_overwrites = perm::Overwrite::to_stored(&new);
                }
                self.replace_channel(index, row, grown).await
            }
            GuildChange::SetOverwrite {
                channel_id,
                overwrite,
            } => {
                let index = self.channel_index(channel_id)?;
                let held = self.require_in(actor, index, perm::MANAGE_ROLES)?;
                let overwrite =
                    perm::Overwrite::from_wire(&overwrite).ok_or(GuildError::InvalidOverwrite)?;
                let mut row = self.channels[index].clone();
                let old = perm::Overwrite::parse_stored(&row.permission_overwrites);
                let mut new = old.clone();
                match new.iter_mut().find(|o| o.id == overwrite.id) {
                    Some(existing) => *existing = overwrite,
                    None => new.push(overwrite),
                }
                self.check_overwrites(actor, held, &old, &new)?;
                row.permission_overwrites = perm::Overwrite::to_stored(&new);
                self.replace_channel(index, row, Grown::Name).await
            }
            GuildChange::DeleteOverwrite {
                channel_id,
                overwrite_id,
            } => {
                let index = self.channel_index(channel_id)?;
                let held = self.require_in(actor, index, perm::MANAGE_ROLES)?;
                let mut row = self.channels[index].clone();
                let old = perm::Overwrite::parse_stored(&row.permission_overwrites);
                if !old.iter().any(|o| o.id == overwrite_id) {
                    return Ok(Changed::Nothing);
                }
                let new: Vec<perm::Overwrite> = old
                    .iter()
                    .copied()
                    .filter(|o| o.id != overwrite_id)
                    .collect();
                self.check_overwrites(actor, held, &old, &new)?;
                row.permission_overwrites = perm::Overwrite::to_stored(&new);
                self.replace_channel(index, row, Grown::Name).await
            }
            GuildChange::ChannelPositions { moves } => {
                self.require(actor, perm::MANAGE_CHANNELS)?;
                let mut rows: Vec<ChannelRow> = Vec::with_capacity(moves.len());
                for entry in &moves {
                    let index = self.channel_index(entry.id)?;
                    let held = self.require_in(actor, index, perm::MANAGE_CHANNELS)?;
                    let mut row = self.channels[index].clone();
                    if let Some(position) = entry.position {
                        row.position = position;
                    }
                    let settings = guildhall_proto::guilds::ChannelSettings {
                        parent_id: entry.parent_id,
                        ..Default::default()
                    };
                    self.apply_settings(&mut row, &settings)?;
                    if entry.lock_permissions
                        && let Some(parent_id) = row.parent_id
                    {
                        // Syncing writes overwrites: MANAGE_ROLES there.
                        if held & perm::MANAGE_ROLES == 0 {
                            return Err(GuildError::MissingPermissions);
                        }
                        row.permission_overwrites = self.channels[self.channel_index(parent_id)?]
                            .permission_overwrites
                            .clone();
                    }
                    rows.push(row);
                }
                match store.update_channels(guild_id, &rows, epoch).await {
                    Ok(true) => {}
                    Ok(false) => return Err(GuildError::UnknownChannel),
                    Err(error) => return Err(self.store_failed(Some(&error))),
                }
                for row in rows {
                    if let Ok(index) = self.channel_index(row.id) {
                        let wire = wire_channel(&row, true);
                        self.channels[index] = row;
                        self.publish("CHANNEL_UPDATE", intents::GUILDS, &wire);
                    }
                }
                self.channels.sort_by_key(|c| (c.position, c.id));
                Ok(Changed::Nothing)
            }
            GuildChange::RolePositions { moves } => {
                self.require(actor, perm::MANAGE_ROLES)?;
                let rank = self.rank(actor);
                let mut target: HashMap<i64, i64> = HashMap::new();
                for (role_id, position) in &moves {
                    let role = self
                        .roles
                        .iter()
                        .find(|r| r.id == *role_id)
                        .ok_or(GuildError::UnknownRole)?;
                    // @everyone stays at the bottom; nobody moves a role
                    // at or above their own, nor to there.
                    if *role_id == guild_id || role.position >= rank || *position >= rank {
                        return Err(GuildError::MissingPermissions);
                    }
                    target.insert(*role_id, (*position).max(1));
                }
                // A moved role takes its position and the others keep
                // their order around it (as Discord inserts), then the
                // positions are renumbered 1..n above @everyone.
                let mut order: Vec<(i64, u8, i64, i64)> = self
                    .roles
                    .iter()
                    .filter(|r| r.id != guild_id)
                    .map(|r| match target.get(&r.id) {
                        Some(position) => (*position, 0, r.position, r.id),
                        None => (r.position, 1, r.position, r.id),
                    })
                    .collect();
                order.sort_unstable();
                let mut changed: Vec<(i64, i64)> = vec![];
                for (index, (_, _, old, role_id)) in order.iter().enumerate() {
                    let new = index as i64 + 1;
                    if new != *old {
                        if *old >= rank || new >= rank {
                            return Err(GuildError::MissingPermissions);
                        }
                        changed.push((*role_id, new));
                    }
                }
                if let Err(error) = store.set_role_positions(guild_id, &changed, epoch).await {
                    return Err(self.store_failed(Some(&error)));
                }
                for (role_id, position) in &changed {
                    if let Some(role) = self.roles.iter_mut().find(|r| r.id == *role_id) {
                        role.position = *position;
                    }
                }
                for (role_id, _) in &changed {
                    if let Some(role) = self.roles.iter().find(|r| r.id == *role_id) {
                        let wire = wire_role(role);
                        self.publish(
                            "GUILD_ROLE_UPDATE",
                            intents::GUILDS,
                            &serde_json::json!({"guild_id": guild_id.to_string(), "role": wire}),
                        );
                    }
                }
                let mut roles: Vec<&RoleRow> = self.roles.iter().collect();
                roles.sort_by_key(|r| (r.position, r.id));
                Ok(Changed::Roles(roles.into_iter().map(wire_role).collect()))
            }
            GuildChange::DeleteChannel { channel_id } => {
                let index = self.channel_index(channel_id)?;
                self.require_in(actor, index, perm::MANAGE_CHANNELS)?;
                let deleted = match store.delete_channel(guild_id, channel_id, epoch).await {
                    Ok(deleted) => deleted,
                    Err(error) => return Err(self.store_failed(Some(&error))),
                };
                if !deleted {
                    return Err(GuildError::UnknownChannel);
                }
                let row = self.channels.remove(index);
                // Its threads went with it in the store.
                let gone: Vec<i64> = self
                    .threads
                    .iter()
                    .filter(|t| t.parent_id == Some(channel_id))
                    .map(|t| t.id)
                    .collect();
                self.threads.retain(|t| t.parent_id != Some(channel_id));
                for thread_id in gone {
                    self.thread_members.remove(&thread_id);
                    self.thread_activity_ms.remove(&thread_id);
                }
                let wire = wire_channel(&row, true);
                self.publish("CHANNEL_DELETE", intents::GUILDS, &wire);
                if row.kind == 4 {
                    self.orphan_children(channel_id).await;
                }
                Ok(Changed::Channel(wire))
            }
            GuildChange::CreateThread { thread } => {
                let index = self.channel_index(thread.parent_id)?;
                let parent = &self.channels[index];
                // Text channels hold public and private threads,
                // announcement channels announcement threads.
                // Forum and media channels hold posts (public threads).
                let forum = matches!(parent.kind, 15 | 16);
                let fits_parent = match thread.kind {
                    10 => parent.kind == 5,
                    11 => parent.kind == 0 || forum,
                    12 => parent.kind == 0,
                    _ => false,
                };
                if !fits_parent {
                    return Err(GuildError::WrongChannelType);
                }
                // A post needs SEND_MESSAGES in its forum, as documented
                // (CREATE_PUBLIC_THREADS is ignored there).
                let need = if forum {
                    perm::SEND_MESSAGES
                } else if thread.kind == 12 {
                    perm::CREATE_PRIVATE_THREADS
                } else {
                    perm::CREATE_PUBLIC_THREADS
                };
                let need = if thread.from_message {
                    need | perm::READ_MESSAGE_HISTORY
                } else {
                    need
                };
                let held = self.require_in(actor, index, need)?;
                if !thread.applied_tags.is_empty() && !forum {
                    return Err(GuildError::WrongChannelType);
                }
                let applied_tags = self.applied_tags(
                    &self.channels[index],
                    &[],
                    &thread.applied_tags,
                    held & perm::MANAGE_THREADS != 0,
                )?;
                if self.threads.iter().any(|t| t.id == thread.id) {
                    return Err(GuildError::ThreadExists);
                }
                if self.threads.len() >= self.shared.limits.guild_active_threads_max {
                    return Err(GuildError::MaxActiveThreads);
                }
                let parent = &self.channels[index];
                let now_ms = guildhall_common::state::now_ms() as i64;
                let row = ChannelRow {
                    id: thread.id,
                    guild_id: Some(guild_id),
                    kind: thread.kind,
                    name: thread.name,
                    nsfw: parent.nsfw,
                    rate_limit_per_user: thread
                        .rate_limit_per_user
                        .unwrap_or(parent.default_thread_rate_limit_per_user),
                    parent_id: Some(parent.id),
                    owner_id: Some(actor),
                    invitable: thread.kind != 12 || thread.invitable,
                    // Discord's clients default to the parent's choice;
                    // a day when it has none.
                    auto_archive_duration: Some(
                        thread
                            .auto_archive_duration
                            .or(parent.default_auto_archive_duration)
                            .unwrap_or(1_440),
                    ),
                    archive_ms: Some(now_ms),
                    thread_created_ms: Some(now_ms),
                    member_count: 1,
                    applied_tags,
                    ..ChannelRow::default()
                };
                let first = ThreadMemberRow {
                    thread_id: row.id,
                    user_id: actor,
                    guild_id,
                    join_ms: now_ms,
                    flags: 0,
                };
                self.threads.push(row.clone());
                if !self.fits() {
                    self.threads.pop();
                    return Err(GuildError::MaxActiveThreads);
                }
                match store.create_thread(&row, &first, epoch).await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.threads.pop();
                        return Err(GuildError::ThreadExists);
                    }
                    Err(error) => {
                        self.threads.pop();
                        return Err(self.store_failed(Some(&error)));
                    }
                }
                self.thread_members
                    .entry(row.id)
                    .or_default()
                    .insert(actor, first);
                // Who views the thread changed (a private one's member).
                self.view_generation += 1;
                self.schedule_archive(row.id);
                let mut wire = wire_channel(&row, true);
                if let Some(fields) = wire.thread.as_mut() {
                    fields.newly_created = Some(true);
                }
                self.publish_in(row.id, "THREAD_CREATE", intents::GUILDS, &wire);
                Ok(Changed::Channel(self.wire_thread_for(&row, actor)))
            }
            GuildChange::UpdateThread { thread_id, patch } => {
                self.update_thread(actor, thread_id, patch).await
            }
            GuildChange::DeleteThread { thread_id } => {
                if !self.members.contains_key(&actor) {
                    return Err(GuildError::MissingAccess);
                }
                let (row, active) = self.find_thread(thread_id).await?;
                let joined = self.joined_thread(thread_id, actor, active).await?;
                let bits = self.thread_permissions_as(actor, &row, joined).unwrap_or(0);
                if bits & perm::VIEW_CHANNEL == 0 {
                    return Err(GuildError::MissingAccess);
                }
                if bits & perm::MANAGE_THREADS == 0 {
                    return Err(GuildError::MissingPermissions);
                }
                match store.delete_channel(guild_id, thread_id, epoch).await {
                    Ok(true) => {}
                    Ok(false) => return Err(GuildError::UnknownChannel),
                    Err(error) => return Err(self.store_failed(Some(&error))),
                }
                // THREAD_DELETE as documented: the id, guild, parent and
                // type only. An active thread's viewers hear it; an
                // archived one's audience is its parent's.
                let data = serde_json::json!({
                    "id": thread_id.to_string(),
                    "guild_id": guild_id.to_string(),
                    "parent_id": row.parent_id.map(|p| p.to_string()),
                    "type": row.kind,
                });
                let audience = if active {
                    thread_id
                } else {
                    row.parent_id.unwrap_or(0)
                };
                self.publish_in(audience, "THREAD_DELETE", intents::GUILDS, &data);
                self.forget_thread(thread_id);
                Ok(Changed::Channel(wire_channel(&row, true)))
            }
            GuildChange::ThreadMember {
                thread_id,
                user_id,
                add,
            } => {
                // Not a member of the guild: nothing to see here.
                if !self.members.contains_key(&actor) {
                    return Err(GuildError::MissingAccess);
                }
                if !self.threads.iter().any(|t| t.id == thread_id) {
                    // Not held: an archived thread's members do not
                    // change (50083), anything else is unknown.
                    self.find_thread(thread_id).await?;
                    return Err(GuildError::ThreadArchived);
                }
                let thread = self
                    .threads
                    .iter()
                    .find(|t| t.id == thread_id)
                    .ok_or(GuildError::UnknownChannel)?;
                let (kind, thread_owner, invitable, parent_id) = (
                    thread.kind,
                    thread.owner_id,
                    thread.invitable,
                    thread.parent_id,
                );
                let bits = self.thread_permissions(actor, thread).unwrap_or(0);
                if bits & perm::VIEW_CHANNEL == 0 {
                    return Err(GuildError::MissingAccess);
                }
                let moderator = bits & perm::MANAGE_THREADS != 0;
                let joined = self
                    .thread_members
                    .get(&thread_id)
                    .is_some_and(|m| m.contains_key(&user_id));
                if user_id != actor {
                    if !self.members.contains_key(&user_id) {
                        return Err(GuildError::UnknownMember);
                    }
                    if add {
                        // Adding needs the right to talk there; a private
                        // thread that is not invitable takes a moderator.
                        if bits & perm::SEND_MESSAGES == 0
                            || (kind == 12 && !invitable && !moderator)
                        {
                            return Err(GuildError::MissingPermissions);
                        }
                        // Whom they add must see the channel it is in.
                        let parent_bits = parent_id
                            .and_then(|p| self.channels.iter().find(|c| c.id == p))
                            .and_then(|c| self.channel_permissions(user_id, c))
                            .unwrap_or(0);
                        if parent_bits & perm::VIEW_CHANNEL == 0 {
                            return Err(GuildError::MissingAccess);
                        }
                    } else if !(moderator || (kind == 12 && thread_owner == Some(actor))) {
                        return Err(GuildError::MissingPermissions);
                    }
                }
                if add == joined {
                    // Already in (or already out): 204, nothing announced.
                    return Ok(Changed::Nothing);
                }
                if add {
                    let row = ThreadMemberRow {
                        thread_id,
                        user_id,
                        guild_id,
                        join_ms: guildhall_common::state::now_ms() as i64,
                        flags: 0,
                    };
                    match store.add_thread_member(&row, epoch).await {
                        Ok(_) => {}
                        Err(error) => return Err(self.store_failed(Some(&error))),
                    }
                    self.thread_members
                        .entry(thread_id)
                        .or_default()
                        .insert(user_id, row.clone());
                    if let Some(thread) = self.threads.iter_mut().find(|t| t.id == thread_id) {
                        thread.member_count += 1;
                    }
                    self.view_generation += 1;
                    // Whoever is added learns of the thread first, as
                    // Discord's gateway does for any thread.
                    if let Some(thread) = self.threads.iter().find(|t| t.id == thread_id) {
                        let wire = self.wire_thread_for(thread, user_id);
                        let others: Vec<i64> = self
                            .members
                            .keys()
                            .copied()
                            .filter(|id| *id != user_id)
                            .collect();
                        self.publish_hidden(others, "THREAD_CREATE", intents::GUILDS, &wire);
                    }
                    self.announce_thread_member(thread_id, user_id, Some(&row));
                } else {
                    match store
                        .remove_thread_member(guild_id, thread_id, user_id, epoch)
                        .await
                    {
                        Ok(_) => {}
                        Err(error) => return Err(self.store_failed(Some(&error))),
                    }
                    if let Some(members) = self.thread_members.get_mut(&thread_id) {
                        members.remove(&user_id);
                    }
                    if let Some(thread) = self.threads.iter_mut().find(|t| t.id == thread_id) {
                        thread.member_count -= 1;
                    }
                    self.view_generation += 1;
                    self.announce_thread_member(thread_id, user_id, None);
                }
                Ok(Changed::Nothing)
            }
            GuildChange::CreateChannel { channel } => {
                self.require(actor, perm::MANAGE_CHANNELS)?;
                if self.channels.len() >= self.shared.limits.guild_channels_max {
                    return Err(GuildError::MaxChannels);
                }
                let wire_overwrites = channel.permission_overwrites.clone();
                let settings = channel.settings.clone();
                let mut channel = ChannelRow {
                    guild_id: Some(guild_id),
                    ..ChannelRow::from(channel)
                };
                self.apply_settings(&mut channel, &settings)?;
                if !wire_overwrites.is_empty() {
                    // As Discord: setting overwrites at creation needs
                    // MANAGE_ROLES, and only bits the creator holds.
                    let held = self.require(actor, perm::MANAGE_ROLES)?;
                    let new = parse_overwrites(&wire_overwrites)?;
                    self.check_overwrites(actor, held, &[], &new)?;
                }
                self.channels.push(channel.clone());
                if !self.fits() {
                    self.channels.pop();
                    return Err(GuildError::MaxChannels);
                }
                if let Err(error) = store.create_channel(&channel, epoch).await {
                    self.channels.pop();
                    return Err(self.store_failed(Some(&error)));
                }
                let wire = wire_channel(&channel, true);
                self.publish("CHANNEL_CREATE", intents::GUILDS, &wire);
                Ok(Changed::Channel(wire))
            }
            GuildChange::CreateRole { role } => {
                self.require(actor, perm::MANAGE_ROLES)?;
                if role.permissions as u64 & !self.permissions(actor).unwrap_or(0) != 0 {
                    return Err(GuildError::MissingPermissions);
                }
                if self.roles.len() >= self.shared.limits.guild_roles_max {
                    return Err(GuildError::MaxRoles);
                }
                let mut role = RoleRow {
                    guild_id,
                    ..RoleRow::from(role)
                };
                role.position = self.roles.iter().map(|r| r.position).max().unwrap_or(0) + 1;
                if role.position >= self.rank(actor) {
                    role.position = self.rank(actor).saturating_sub(1).max(1);
                }
                self.roles.push(role.clone());
                if !self.fits() {
                    self.roles.pop();
                    return Err(GuildError::MaxRoles);
                }
                // False: the id is another guild's role (never, for a fresh
                // snowflake); either way nothing of it is kept here.
                let upserted = store.upsert_role(&role, epoch).await;
                if !matches!(upserted, Ok(true)) {
                    self.roles.pop();
                    return Err(self.store_failed(upserted.as_ref().err()));
                }
                let wire = wire_role(&role);
                self.publish(
                    "GUILD_ROLE_CREATE",
                    intents::GUILDS,
                    &serde_json::json!({"guild_id": guild_id.to_string(), "role": wire}),
                );
                Ok(Changed::Role(wire))
            }
            GuildChange::UpdateRole {
                role_id,
                name,
                permissions,
                color,
                hoist,
                mentionable,
            } => {
                self.require(actor, perm::MANAGE_ROLES)?;
                let index = self
                    .roles
                    .iter()
                    .position(|r| r.id == role_id)
                    .ok_or(GuildError::UnknownRole)?;
                let mut role = self.roles[index].clone();
                if role.position >= self.rank(actor) && role.id != guild_id {
                    return Err(GuildError::MissingPermissions);
                }
                if let Some(name) = name.filter(|_| role.id != guild_id) {
                    role.name = name;
                }
                if let Some(bits) = permissions {
                    if bits as u64 & !self.permissions(actor).unwrap_or(0) != 0 {
                        return Err(GuildError::MissingPermissions);
                    }
                    role.permissions = bits;
                }
                role.color = color.unwrap_or(role.color);
                role.hoist = hoist.unwrap_or(role.hoist);
                role.mentionable = mentionable.unwrap_or(role.mentionable);
                let old = std::mem::replace(&mut self.roles[index], role.clone());
                if !self.fits() {
                    self.roles[index] = old;
                    return Err(GuildError::SizeLimit(Grown::Name));
                }
                let upserted = store.upsert_role(&role, epoch).await;
                if !matches!(upserted, Ok(true)) {
                    self.roles[index] = old;
                    return Err(self.store_failed(upserted.as_ref().err()));
                }
                let wire = wire_role(&role);
                self.publish(
                    "GUILD_ROLE_UPDATE",
                    intents::GUILDS,
                    &serde_json::json!({"guild_id": guild_id.to_string(), "role": wire}),
                );
                Ok(Changed::Role(wire))
            }
            GuildChange::DeleteRole { role_id } => {
                self.require(actor, perm::MANAGE_ROLES)?;
                let index = self
                    .roles
                    .iter()
                    .position(|r| r.id == role_id)
                    .ok_or(GuildError::UnknownRole)?;
                // A bot's managed role goes with the bot, not by hand.
                if role_id == guild_id
                    || self.roles[index].position >= self.rank(actor)
                    || self.roles[index].bot_id.is_some()
                {
                    return Err(GuildError::MissingPermissions);
                }
                if let Err(error) = store.delete_role(guild_id, role_id, epoch).await {
                    return Err(self.store_failed(Some(&error)));
                }
                self.roles.remove(index);
                for member in self.members.values_mut() {
                    member.roles.retain(|r| *r != role_id);
                }
                self.publish(
                    "GUILD_ROLE_DELETE",
                    intents::GUILDS,
                    &serde_json::json!({"guild_id": guild_id.to_string(), "role_id": role_id.to_string()}),
                );
                Ok(Changed::Nothing)
            }
            GuildChange::UpdateMember {
                member_id,
                nick,
                roles,
                communication_disabled_until_ms: timeout,
            } => {
                // A role named twice is assigned once.
                let roles = roles.map(|mut roles| {
                    roles.sort_unstable();
                    roles.dedup();
                    roles
                });
                let target_rank = self.rank(member_id);
                if !self.members.contains_key(&member_id) {
                    return Err(GuildError::UnknownMember);
                }
                if nick.is_some() && member_id != actor {
                    self.require(actor, perm::MANAGE_NICKNAMES)?;
                }
                if let Some(roles) = &roles {
                    self.require(actor, perm::MANAGE_ROLES)?;
                    // A managed role is its bot's alone: neither given nor
                    // taken by hand.
                    let held = self
                        .members
                        .get(&member_id)
                        .map(|m| m.roles.clone())
                        .unwrap_or_default();
                    let managed =
                        |id: &i64| self.roles.iter().any(|r| r.id == *id && r.bot_id.is_some());
                    if roles.iter().filter(|r| !held.contains(r)).any(managed)
                        || held.iter().filter(|r| !roles.contains(r)).any(managed)
                    {
                        return Err(GuildError::MissingPermissions);
                    }
                    let actor_rank = self.rank(actor);
                    for role_id in roles {
                        let role = self
                            .roles
                            .iter()
                            .find(|r| r.id == *role_id)
                            .ok_or(GuildError::UnknownRole)?;
                        if role.position >= actor_rank || role.id == guild_id {
                            return Err(GuildError::MissingPermissions);
                        }
                    }
                }
                if let Some(until) = timeout {
                    // Nobody times out the owner or themselves, and an
                    // administrator cannot be timed out (Discord's rules).
                    self.require(actor, perm::MODERATE_MEMBERS)?;
                    if member_id == self.guild.owner_id || member_id == actor {
                        return Err(GuildError::MissingPermissions);
                    }
                    if until.is_some()
                        && self.permissions(member_id).unwrap_or(0) & perm::ADMINISTRATOR != 0
                    {
                        return Err(GuildError::MissingPermissions);
                    }
                }
                if member_id != actor && target_rank >= self.rank(actor) {
                    return Err(GuildError::MissingPermissions);
                }
                let Some(entry) = self.members.get_mut(&member_id) else {
                    return Err(GuildError::UnknownMember);
                };
                let new_nick = nick.unwrap_or_else(|| entry.row.nick.clone());
                let new_roles = roles.unwrap_or_else(|| entry.roles.clone());
                let new_timeout = timeout.unwrap_or(entry.row.communication_disabled_until_ms);
                if let Err(error) = store
                    .update_member(
                        guild_id,
                        member_id,
                        new_nick.as_deref(),
                        &new_roles,
                        new_timeout,
                        epoch,
                    )
                    .await
                {
                    return Err(self.store_failed(Some(&error)));
                }
                entry.row.nick = new_nick;
                entry.roles = new_roles;
                entry.row.communication_disabled_until_ms = new_timeout;
                let wire = wire_member(entry, true);
                if let Some(event) = self.member_event(member_id) {
                    self.publish("GUILD_MEMBER_UPDATE", intents::GUILD_MEMBERS, &event);
                }
                Ok(Changed::Member(wire))
            }
            GuildChange::MemberRole {
                member_id,
                role_id,
                add,
            } => {
                // Another guild's role (or none) is unknown here, to give
                // as much as to take.
                if !self.roles.iter().any(|r| r.id == role_id) {
                    return Err(GuildError::UnknownRole);
                }
                let current = self
                    .members
                    .get(&member_id)
                    .ok_or(GuildError::UnknownMember)?
                    .roles
                    .clone();
                let mut roles: Vec<i64> = current.into_iter().filter(|r| *r != role_id).collect();
                if add {
                    roles.push(role_id);
                }
                Box::pin(self.change(
                    actor,
                    GuildChange::UpdateMember {
                        member_id,
                        nick: None,
                        roles: Some(roles),
                        communication_disabled_until_ms: None,
                    },
                ))
                .await
            }
            GuildChange::UpdateGuild { name } => {
                self.require(actor, perm::MANAGE_GUILD)?;
                if !(2..=self.shared.limits.guild_name_chars_max).contains(&name.chars().count()) {
                    return Err(GuildError::InvalidName);
                }
                let old = std::mem::replace(&mut self.guild.name, name.clone());
                if !self.fits() {
                    self.guild.name = old;
                    return Err(GuildError::SizeLimit(Grown::Name));
                }
                if let Err(error) = store.rename_guild(guild_id, &name, epoch).await {
                    self.guild.name = old;
                    return Err(self.store_failed(Some(&error)));
                }
                let guild = rest_guild(&self.guild_object(actor, false));
                self.publish("GUILD_UPDATE", intents::GUILDS, &guild);
                Ok(Changed::Guild(guild))
            }
            GuildChange::DeleteGuild => {
                if actor != self.guild.owner_id {
                    return Err(GuildError::MissingPermissions);
                }
                store
                    .delete_guild(guild_id)
                    .await
                    .map_err(|_| GuildError::Store)?;
                // Every node's sessions lose the guild.
                self.remove_users(vec![]);
                self.deleted = true;
                Ok(Changed::Nothing)
            }
            GuildChange::AuthorizeBot {
                bot,
                role_id,
                permissions,
            } => {
                let held = self.require(actor, perm::MANAGE_GUILD)?;
                if permissions as u64 & !held != 0 {
                    return Err(GuildError::MissingPermissions);
                }
                if !self.members.contains_key(&bot.id) {
                    return Err(GuildError::UnknownMember);
                }
                let existing = self.roles.iter().position(|r| r.bot_id == Some(bot.id));
                if permissions == 0 && existing.is_none() {
                    return Ok(Changed::Nothing);
                }
                let (role, created) = match existing {
                    Some(index) => {
                        let mut role = self.roles[index].clone();
                        role.permissions = permissions;
                        (role, false)
                    }
                    None => {
                        if self.roles.len() >= self.shared.limits.guild_roles_max {
                            return Err(GuildError::MaxRoles);
                        }
                        // Just below the authorizer's highest role (the
                        // top for the owner), as Discord places it.
                        let top = self.roles.iter().map(|r| r.position).max().unwrap_or(0) + 1;
                        let position = top.min(self.rank(actor).saturating_sub(1)).max(1);
                        let name: String = bot
                            .username
                            .chars()
                            .take(self.shared.limits.role_name_chars_max)
                            .collect();
                        let role = RoleRow {
                            id: role_id,
                            guild_id,
                            name,
                            permissions,
                            position,
                            color: 0,
                            hoist: false,
                            mentionable: false,
                            bot_id: Some(bot.id),
                        };
                        (role, true)
                    }
                };
                let old = existing.map(|i| self.roles[i].clone());
                match existing {
                    Some(index) => self.roles[index] = role.clone(),
                    None => self.roles.push(role.clone()),
                }
                let undo = |owner: &mut Self| match (existing, &old) {
                    (Some(index), Some(old)) => owner.roles[index] = old.clone(),
                    _ => {
                        owner.roles.pop();
                    }
                };
                if !self.fits() {
                    undo(self);
                    return Err(GuildError::MaxRoles);
                }
                let upserted = store.upsert_role(&role, epoch).await;
                if !matches!(upserted, Ok(true)) {
                    undo(self);
                    return Err(self.store_failed(upserted.as_ref().err()));
                }
                let wire = wire_role(&role);
                self.publish(
                    if created {
                        "GUILD_ROLE_CREATE"
                    } else {
                        "GUILD_ROLE_UPDATE"
                    },
                    intents::GUILDS,
                    &serde_json::json!({"guild_id": guild_id.to_string(), "role": wire}),
                );
                if created {
                    let Some(entry) = self.members.get(&bot.id) else {
                        return Err(GuildError::UnknownMember);
                    };
                    let mut roles = entry.roles.clone();
                    roles.push(role.id);
                    let (nick, timeout) = (
                        entry.row.nick.clone(),
                        entry.row.communication_disabled_until_ms,
                    );
                    if let Err(error) = store
                        .update_member(guild_id, bot.id, nick.as_deref(), &roles, timeout, epoch)
                        .await
                    {
                        return Err(self.store_failed(Some(&error)));
                    }
                    if let Some(entry) = self.members.get_mut(&bot.id) {
                        entry.roles = roles;
                    }
                    if let Some(event) = self.member_event(bot.id) {
                        self.publish("GUILD_MEMBER_UPDATE", intents::GUILD_MEMBERS, &event);
                    }
                }
                Ok(Changed::Role(wire))
            }
            GuildChange::Ban {
                user,
                delete_since_id,
                reason,
            } => {
                self.require(actor, perm::BAN_MEMBERS)?;
                // Banned already: 204 as well, and nothing changes.
                self.ban_one(actor, user, delete_since_id, reason).await?;
                Ok(Changed::Nothing)
            }
            GuildChange::BulkBan {
                users,
                delete_since_id,
                reason,
            } => {
                self.require(actor, perm::BAN_MEMBERS | perm::MANAGE_GUILD)?;
                let (mut banned, mut failed) = (vec![], vec![]);
                for user in users {
                    let user_id = user.id;
                    match self
                        .ban_one(actor, user, delete_since_id, reason.clone())
                        .await
                    {
                        Ok(true) => banned.push(user_id),
                        Ok(false) | Err(GuildError::MissingPermissions) => failed.push(user_id),
                        // The store failed or the owner was fenced: what
                        // was banned stays banned; the rest is not tried.
                        Err(error) => return Err(error),
                    }
                }
                Ok(Changed::Banned { banned, failed })
            }
            GuildChange::Unban { user } => {
                self.require(actor, perm::BAN_MEMBERS)?;
                match store.unban_member(guild_id, user.id, epoch).await {
                    Ok(true) => {}
                    Ok(false) => return Err(GuildError::UnknownBan),
                    Err(error) => return Err(self.store_failed(Some(&error))),
                }
                let user = UserRow::from(user);
                self.publish(
                    "GUILD_BAN_REMOVE",
                    intents::GUILD_MODERATION,
                    &serde_json::json!({"guild_id": guild_id.to_string(), "user": wire_user(&user)}),
                );
                Ok(Changed::Nothing)
            }
            GuildChange::RemoveMember { member_id } => {
                if member_id == self.guild.owner_id {
                    return Err(GuildError::MissingPermissions);
                }
                if member_id != actor {
                    self.require(actor, perm::KICK_MEMBERS)?;
                    if self.rank(member_id) >= self.rank(actor) {
                        return Err(GuildError::MissingPermissions);
                    }
                }
                let entry = self
                    .members
                    .get(&member_id)
                    .cloned()
                    .ok_or(GuildError::UnknownMember)?;
                if let Err(error) = store.remove_member(guild_id, member_id, epoch).await {
                    return Err(self.store_failed(Some(&error)));
                }
                self.forget_member(&entry.user).await;
                Ok(Changed::Nothing)
            }
        }
    }

    /// Bans `user` for `actor` (who holds BAN_MEMBERS): never the owner or
    /// the actor, nor a member ranked at or above the actor. A member is
    /// removed (GUILD_MEMBER_REMOVE, their sessions lose the guild), the
    /// ban announced (GUILD_BAN_ADD) and their messages from
    /// `delete_since_id` on deleted (MESSAGE_DELETE_BULK per channel), at
    /// most `ban_delete_messages_max`, newest first. False: banned
    /// already (nothing changes).
    async fn ban_one(
        &mut self,
        actor: i64,
        user: guildhall_proto::users::UserRecord,
        delete_since_id: i64,
        reason: Option<String>,
    ) -> Result<bool, GuildError> {
        let guild_id = self.guild.id;
        if user.id == self.guild.owner_id || user.id == actor {
            return Err(GuildError::MissingPermissions);
        }
        if self.members.contains_key(&user.id) && self.rank(user.id) >= self.rank(actor) {
            return Err(GuildError::MissingPermissions);
        }
        let store = self.shared.store.clone();
        let row = guildhall_store::BanRow {
            guild_id,
            user_id: user.id,
            reason,
            created_ms: guildhall_common::state::now_ms() as i64,
        };
        let write = match store.ban_member(&row, self.epoch as i64).await {
            Ok(write) => write,
            Err(error) => return Err(self.store_failed(Some(&error))),
        };
        let user = UserRow::from(user);
        if write.was_member {
            self.forget_member(&user).await;
        }
        if write.banned {
            self.publish(
                "GUILD_BAN_ADD",
                intents::GUILD_MODERATION,
                &serde_json::json!({"guild_id": guild_id.to_string(), "user": wire_user(&user)}),
            );
        }
        if delete_since_id > 0 {
            self.delete_messages_of(user.id, delete_since_id).await;
        }
        Ok(write.banned)
    }

    /// The object `change` will alter, as it is now.
    fn audit_before(&self, change: &GuildChange) -> AuditBefore {
        let channel = |id: i64| {
            self.channels
                .iter()
                .find(|c| c.id == id)
                .and_then(|c| serde_json::to_value(wire_channel(c, true)).ok())
        };
        let value = match change {
            GuildChange::UpdateChannel { channel_id, .. }
            | GuildChange::DeleteChannel { channel_id }
            | GuildChange::SetOverwrite { channel_id, .. }
            | GuildChange::DeleteOverwrite { channel_id, .. } => channel(*channel_id),
            GuildChange::UpdateRole { role_id, .. } | GuildChange::DeleteRole { role_id } => self
                .roles
                .iter()
                .find(|r| r.id == *role_id)
                .and_then(|r| serde_json::to_value(wire_role(r)).ok()),
            GuildChange::UpdateMember { member_id, .. }
            | GuildChange::MemberRole { member_id, .. } => self
                .members
                .get(member_id)
                .and_then(|m| serde_json::to_value(wire_member(m, false)).ok()),
            GuildChange::UpdateGuild { .. } => Some(serde_json::json!({"name": self.guild.name})),
            // An archived thread is not held: its entry lists the new
            // values only.
            GuildChange::UpdateThread { thread_id, .. }
            | GuildChange::DeleteThread { thread_id } => self
                .threads
                .iter()
                .find(|t| t.id == *thread_id)
                .and_then(|t| serde_json::to_value(wire_channel(t, true)).ok())
                .map(|v| thread_audit_value(&v)),
            _ => None,
        };
        AuditBefore(value.unwrap_or(serde_json::Value::Null))
    }

    /// The audit log entries a successful change makes (action, target,
    /// changes, options), as Discord records them.
    fn audit_entries(
        &self,
        actor: i64,
        change: &GuildChange,
        before: &AuditBefore,
        changed: &Changed,
    ) -> Vec<PlannedEntry> {
        use guildhall_proto::audit::{self, changes};
        let old = &before.0;
        let after = match changed {
            Changed::Channel(c) => serde_json::to_value(c).unwrap_or_default(),
            Changed::Role(r) => serde_json::to_value(r).unwrap_or_default(),
            Changed::Member(m) => serde_json::to_value(m).unwrap_or_default(),
            Changed::Guild(g) => g.clone(),
            _ => serde_json::Value::Null,
        };
        let id_of = |v: &serde_json::Value| v["id"].as_str().and_then(|s| s.parse::<i64>().ok());
        let mut entries = vec![];
        match change {
            GuildChange::CreateChannel { .. } => {
                let mut keys = CHANNEL_AUDIT_KEYS.to_vec();
                keys.push("permission_overwrites");
                entries.push((
                    audit::CHANNEL_CREATE,
                    id_of(&after),
                    changes(old, &after, &keys),
                    None,
                ));
            }
            GuildChange::UpdateChannel { channel_id, .. }
            | GuildChange::SetOverwrite { channel_id, .. }
            | GuildChange::DeleteOverwrite { channel_id, .. } => {
                if after.is_null() {
                    return entries;
                }
                let listed = changes(old, &after, CHANNEL_AUDIT_KEYS);
                if !listed.is_empty() {
                    entries.push((audit::CHANNEL_UPDATE, Some(*channel_id), listed, None));
                }
                entries.extend(self.overwrite_entries(*channel_id, old, &after));
            }
            GuildChange::CreateThread { .. } => entries.push((
                audit::THREAD_CREATE,
                id_of(&after),
                changes(old, &thread_audit_value(&after), THREAD_AUDIT_KEYS),
                None,
            )),
            GuildChange::UpdateThread { thread_id, .. } => {
                let listed = changes(old, &thread_audit_value(&after), THREAD_AUDIT_KEYS);
                if !listed.is_empty() {
                    entries.push((audit::THREAD_UPDATE, Some(*thread_id), listed, None));
                }
            }
            GuildChange::DeleteThread { thread_id } => {
                // Not held when archived: the answer is the thread as it was.
                let gone = if old.is_null() {
                    thread_audit_value(&after)
                } else {
                    old.clone()
                };
                entries.push((
                    audit::THREAD_DELETE,
                    Some(*thread_id),
                    changes(&gone, &serde_json::Value::Null, THREAD_AUDIT_KEYS),
                    None,
                ));
            }
            GuildChange::DeleteChannel { channel_id } => entries.push((
                audit::CHANNEL_DELETE,
                Some(*channel_id),
                changes(old, &serde_json::Value::Null, CHANNEL_AUDIT_KEYS),
                None,
            )),
            GuildChange::CreateRole { .. } => entries.push((
                audit::ROLE_CREATE,
                id_of(&after),
                changes(old, &after, ROLE_AUDIT_KEYS),
                None,
            )),
            GuildChange::UpdateRole { role_id, .. } => entries.push((
                audit::ROLE_UPDATE,
                Some(*role_id),
                changes(old, &after, ROLE_AUDIT_KEYS),
                None,
            )),
            GuildChange::DeleteRole { role_id } => entries.push((
                audit::ROLE_DELETE,
                Some(*role_id),
                changes(old, &serde_json::Value::Null, ROLE_AUDIT_KEYS),
                None,
            )),
            GuildChange::UpdateMember { member_id, .. }
            | GuildChange::MemberRole { member_id, .. } => {
                let listed = changes(old, &after, MEMBER_AUDIT_KEYS);
                if !listed.is_empty() {
                    entries.push((audit::MEMBER_UPDATE, Some(*member_id), listed, None));
                }
                let roles = |v: &serde_json::Value| -> Vec<i64> {
                    v["roles"]
                        .as_array()
                        .map(|r| {
                            r.iter()
                                .filter_map(|id| id.as_str()?.parse().ok())
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let (was, now) = (roles(old), roles(&after));
                let named = |ids: Vec<i64>| -> serde_json::Value {
                    ids.iter()
                        .map(|id| {
                            let name = self
                                .roles
                                .iter()
                                .find(|r| r.id == *id)
                                .map(|r| r.name.clone())
                                .unwrap_or_default();
                            serde_json::json!({"id": id.to_string(), "name": name})
                        })
                        .collect()
                };
                let added: Vec<i64> = now.iter().copied().filter(|r| !was.contains(r)).collect();
                let removed: Vec<i64> = was.iter().copied().filter(|r| !now.contains(r)).collect();
                let mut listed = vec![];
                if !added.is_empty() {
                    listed.push(serde_json::json!({"key": "$add", "new_value": named(added)}));
                }
                if !removed.is_empty() {
                    listed.push(serde_json::json!({"key": "$remove", "new_value": named(removed)}));
                }
                if !listed.is_empty() {
                    entries.push((audit::MEMBER_ROLE_UPDATE, Some(*member_id), listed, None));
                }
            }
            GuildChange::RemoveMember { member_id } if *member_id != actor => {
                entries.push((audit::MEMBER_KICK, Some(*member_id), vec![], None));
            }
            GuildChange::Ban { user, .. } => {
                entries.push((audit::MEMBER_BAN_ADD, Some(user.id), vec![], None));
            }
            GuildChange::BulkBan { .. } => {
                if let Changed::Banned { banned, .. } = changed {
                    for user_id in banned {
                        entries.push((audit::MEMBER_BAN_ADD, Some(*user_id), vec![], None));
                    }
                }
            }
            GuildChange::Unban { user } => {
                entries.push((audit::MEMBER_BAN_REMOVE, Some(user.id), vec![], None));
            }
            GuildChange::AuthorizeBot { bot, .. } => {
                entries.push((audit::BOT_ADD, Some(bot.id), vec![], None));
            }
            GuildChange::UpdateGuild { .. } => entries.push((
                audit::GUILD_UPDATE,
                Some(self.guild.id),
                changes(
                    old,
                    &serde_json::json!({"name": self.guild.name}),
                    &["name"],
                ),
                None,
            )),
            _ => {}
        }
        entries
    }

    /// One entry per overwrite a channel change created, changed or
    /// removed (13, 14, 15), with Discord's options (`id`, `type` as a
    /// string, `role_name` for a role's).
    fn overwrite_entries(
        &self,
        channel_id: i64,
        old: &serde_json::Value,
        new: &serde_json::Value,
    ) -> Vec<PlannedEntry> {
        use guildhall_proto::audit::{self, changes};
        let list = |v: &serde_json::Value| -> Vec<serde_json::Value> {
            v["permission_overwrites"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let (old, new) = (list(old), list(new));
        let find = |list: &[serde_json::Value], id: &serde_json::Value| {
            list.iter().find(|o| o["id"] == *id).cloned()
        };
        let options = |o: &serde_json::Value| {
            let mut options = serde_json::json!({"id": o["id"], "type": o["type"].to_string()});
            if o["type"] == 0 {
                let name = self
                    .roles
                    .iter()
                    .find(|r| Some(r.id.to_string().as_str()) == o["id"].as_str())
                    .map(|r| r.name.clone())
                    .unwrap_or_default();
                options["role_name"] = serde_json::Value::String(name);
            }
            options
        };
        let keys = ["id", "type", "allow", "deny"];
        let mut entries = vec![];
        for o in &new {
            match find(&old, &o["id"]) {
                None => entries.push((
                    audit::CHANNEL_OVERWRITE_CREATE,
                    Some(channel_id),
                    changes(&serde_json::Value::Null, o, &keys),
                    Some(options(o)),
                )),
                Some(was) if was != *o => entries.push((
                    audit::CHANNEL_OVERWRITE_UPDATE,
                    Some(channel_id),
                    changes(&was, o, &["allow", "deny"]),
                    Some(options(o)),
                )),
                Some(_) => {}
            }
        }
        for o in &old {
            if find(&new, &o["id"]).is_none() {
                entries.push((
                    audit::CHANNEL_OVERWRITE_DELETE,
                    Some(channel_id),
                    changes(o, &serde_json::Value::Null, &keys),
                    Some(options(o)),
                ));
            }
        }
        entries
    }

    /// Stores the audit log entries of a successful change and announces
    /// each (GUILD_AUDIT_LOG_ENTRY_CREATE, GUILD_MODERATION) to members
    /// holding VIEW_AUDIT_LOG. A failed write is logged: the change
    /// itself stands.
    async fn record_audit(
        &mut self,
        actor: i64,
        change: &GuildChange,
        before: &AuditBefore,
        changed: &Changed,
        reason: Option<String>,
    ) {
        let entries = self.audit_entries(actor, change, before, changed);
        if entries.is_empty() || matches!(change, GuildChange::DeleteGuild) {
            return;
        }
        self.store_audit(actor, entries, reason).await;
    }

    /// Stores `entries` by `actor` (pruning past the retention and the
    /// per-guild bound) and announces each to VIEW_AUDIT_LOG holders. A
    /// failed write is logged (rate-limited) and announces nothing.
    async fn store_audit(
        &mut self,
        actor: i64,
        entries: Vec<PlannedEntry>,
        reason: Option<String>,
    ) {
        let store = self.shared.store.clone();
        let limits = &self.shared.limits;
        let retention_ms = limits.audit_log_retention_ms;
        let keep_max = limits.audit_log_entries_max as i64;
        let oldest_ms = guildhall_common::state::now_ms()
            .saturating_sub(retention_ms)
            .saturating_sub(guildhall_proto::snowflake::DISCORD_EPOCH_MS);
        let oldest_id = (oldest_ms << 22) as i64;
        for (action_type, target_id, changes, options) in entries {
            let entry = guildhall_proto::audit::AuditEntry {
                id: self.shared.next_id().get() as i64,
                guild_id: self.guild.id,
                user_id: actor,
                target_id,
                action_type,
                changes,
                options,
                reason: reason.clone(),
            };
            let row = guildhall_store::AuditRow {
                id: entry.id,
                guild_id: entry.guild_id,
                user_id: entry.user_id,
                target_id: entry.target_id,
                action_type: i64::from(entry.action_type),
                changes: serde_json::to_string(&entry.changes).unwrap_or_else(|_| "[]".into()),
                options: entry.options.as_ref().map(|o| o.to_string()),
                reason: entry.reason.clone(),
            };
            if let Err(error) = store.add_audit_entry(&row, oldest_id, keep_max).await {
                guildhall_common::throttled!(warn, "guilds.audit_write", error = %error, "an audit log entry was not stored");
                continue;
            }
            let mut wire = entry.to_wire();
            wire["guild_id"] = serde_json::Value::String(self.guild.id.to_string());
            self.publish_to(
                Some(Audience::Holding(perm::VIEW_AUDIT_LOG)),
                "GUILD_AUDIT_LOG_ENTRY_CREATE",
                intents::GUILD_MODERATION,
                &wire,
            );
        }
    }

    /// A temporary member whose last session disconnected without a role:
    /// removed as a kick removes (GUILD_MEMBER_REMOVE, their sessions lose
    /// the guild; not audited, as Discord does not). A store failure
    /// leaves them a member, counted, until their next disconnect.
    async fn remove_temporary(&mut self, user_id: i64) {
        let Some(entry) = self.members.get(&user_id).cloned() else {
            return;
        };
        let store = self.shared.store.clone();
        if let Err(error) = store
            .remove_member(self.guild.id, user_id, self.epoch as i64)
            .await
        {
            self.store_failed(Some(&error));
            return;
        }
        self.view_generation += 1;
        self.forget_member(&entry.user).await;
    }

    /// After the store removed `user` (kick, leave, ban): announces
    /// GUILD_MEMBER_REMOVE, forgets the member, takes the guild from their
    /// sessions and a bot's managed role with it.
    async fn forget_member(&mut self, user: &UserRow) {
        self.publish(
            "GUILD_MEMBER_REMOVE",
            intents::GUILD_MEMBERS,
            &serde_json::json!({"guild_id": self.guild.id.to_string(), "user": wire_user(user)}),
        );
        self.members.remove(&user.id);
        self.statuses.remove(&user.id);
        // The store took them out of the guild's threads with them.
        for (thread_id, members) in &mut self.thread_members {
            if members.remove(&user.id).is_some()
                && let Some(thread) = self.threads.iter_mut().find(|t| t.id == *thread_id)
            {
                thread.member_count -= 1;
            }
        }
        self.remove_users(vec![user.id]);
        self.drop_managed_role(user.id).await;
    }

    /// A bot that left (kicked, banned, gone) takes its managed role with
    /// it (GUILD_ROLE_DELETE); a failed delete leaves the role, which
    /// nobody holds, for an administrator to remove.
    async fn drop_managed_role(&mut self, user_id: i64) {
        let Some(index) = self.roles.iter().position(|r| r.bot_id == Some(user_id)) else {
            return;
        };
        let role_id = self.roles[index].id;
        let store = self.shared.store.clone();
        if let Err(error) = store
            .delete_role(self.guild.id, role_id, self.epoch as i64)
            .await
        {
            self.store_failed(Some(&error));
            return;
        }
        self.roles.remove(index);
        self.view_generation += 1;
        self.publish(
            "GUILD_ROLE_DELETE",
            intents::GUILDS,
            &serde_json::json!({"guild_id": self.guild.id.to_string(), "role_id": role_id.to_string()}),
        );
    }

    /// Deletes a banned user's messages from `since_id` on, announcing
    /// each channel's as MESSAGE_DELETE_BULK. A store failure leaves the
    /// rest in place (the ban stands; a moderator can bulk-delete them).
    async fn delete_messages_of(&mut self, user_id: i64, since_id: i64) {
        let store = self.shared.store.clone();
        let limit = self.shared.limits.ban_delete_messages_max as i64;
        let found = match store
            .messages_by_author_since(self.guild.id, user_id, since_id, limit)
            .await
        {
            Ok(found) => found,
            Err(error) => {
                guildhall_common::throttled!(warn, "guilds.ban_delete", error = %error, "a ban's messages were not deleted");
                return;
            }
        };
        let mut by_channel: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (channel_id, id) in found {
            by_channel.entry(channel_id).or_default().push(id);
        }
        for (channel_id, ids) in by_channel {
            let deleted = match store.delete_messages(channel_id, &ids).await {
                Ok(deleted) => deleted,
                Err(error) => {
                    guildhall_common::throttled!(warn, "guilds.ban_delete", error = %error, "a ban's messages were not deleted");
                    continue;
                }
            };
            if deleted.is_empty() {
                continue;
            }
            let ids: Vec<String> = deleted.iter().map(|id| id.to_string()).collect();
            self.publish_in(
                channel_id,
                "MESSAGE_DELETE_BULK",
                intents::GUILD_MESSAGES,
                &serde_json::json!({
                    "ids": ids,
                    "channel_id": channel_id.to_string(),
                    "guild_id": self.guild.id.to_string(),
                }),
            );
        }
    }

    fn voice(
        &mut self,
        user_id: i64,
        session_id: String,
        channel_id: Option<i64>,
        self_mute: bool,
        self_deaf: bool,
    ) -> Result<serde_json::Value, GuildError> {
        self.permissions(user_id).ok_or(GuildError::MissingAccess)?;
        if let Some(channel_id) = channel_id {
            let channel = self
                .channels
                .iter()
                .find(|c| c.id == channel_id)
                .ok_or(GuildError::UnknownChannel)?;
            if channel.kind != 2 {
                return Err(GuildError::UnknownChannel);
            }
            let bits = self
                .channel_permissions(user_id, channel)
                .ok_or(GuildError::MissingAccess)?;
            if bits & (perm::VIEW_CHANNEL | perm::CONNECT) != perm::VIEW_CHANNEL | perm::CONNECT {
                return Err(GuildError::MissingPermissions);
            }
            // A full channel admits only members who may move others (as
            // Discord's user_limit does).
            if channel.user_limit > 0 && bits & perm::MOVE_MEMBERS == 0 {
                let inside = channel_id.to_string();
                let present = self
                    .voice
                    .iter()
                    .filter(|(user, state)| {
                        **user != user_id && state["channel_id"] == inside.as_str()
                    })
                    .count();
                if present as i64 >= channel.user_limit {
                    return Err(GuildError::MissingPermissions);
                }
            }
        }
        let mut member = self
            .members
            .get(&user_id)
            .map(|m| serde_json::to_value(wire_member(m, true)).unwrap_or_default());
        if let Some(m) = member.as_mut() {
            m["guild_id"] = serde_json::Value::String(self.guild.id.to_string());
        }
        let state = serde_json::json!({
            "guild_id": self.guild.id.to_string(),
            "channel_id": channel_id.map(|c| c.to_string()),
            "user_id": user_id.to_string(),
            "member": member,
            "session_id": session_id,
            "deaf": false, "mute": false, "self_deaf": self_deaf, "self_mute": self_mute,
            "self_video": false, "suppress": false, "request_to_speak_timestamp": null,
        });
        if channel_id.is_some() {
            self.voice.insert(user_id, state.clone());
        } else {
            self.voice.remove(&user_id);
        }
        self.publish("VOICE_STATE_UPDATE", intents::GUILD_VOICE_STATES, &state);
        Ok(state)
    }

    /// Bytes the guild's GUILD_CREATE may take; its roles and channels
    /// alone never take more (see [`Self::fits`]).
    fn room_bytes(&self) -> usize {
        let limits = &self.shared.limits;
        limits
            .bus_payload_bytes_max
            .saturating_sub(limits.guild_envelope_reserve_bytes)
    }

    /// Whether the guild with its roles and channels, as GUILD_CREATE
    /// carries them, fits [`Self::room_bytes`]. Every change that grows
    /// them is checked against this before it is stored, so GUILD_CREATE,
    /// the REST guild and the channel list always fit the bus payload
    /// bound. One encoding of at most a few hundred rows, on changes only.
    fn fits(&self) -> bool {
        encoded_len(&self.guild_object(self.guild.owner_id, true)) <= self.room_bytes()
    }

    /// The guild as `user_id` sees it, with channels if `with_channels`,
    /// and no members or voice states: the part of GUILD_CREATE that does
    /// not grow with the member count, and the REST guild object.
    fn guild_object(&self, user_id: i64, with_channels: bool) -> model::Guild {
        let joined = self
            .members
            .get(&user_id)
            .map_or(self.guild.created_ms, |m| m.row.joined_ms);
        let channels = if with_channels {
            self.channels
                .iter()
                .map(|c| wire_channel(c, false))
                .collect()
        } else {
            vec![]
        };
        model::Guild {
            id: sf(self.guild.id),
            name: self.guild.name.clone(),
            icon: None,
            splash: None,
            discovery_splash: None,
            owner_id: sf(self.guild.owner_id),
            afk_channel_id: None,
            afk_timeout: 300,
            verification_level: 0,
            default_message_notifications: 0,
            explicit_content_filter: 0,
            roles: self.roles.iter().map(wire_role).collect(),
            emojis: vec![],
            features: vec![],
            mfa_level: 0,
            application_id: None,
            system_channel_id: None,
            system_channel_flags: 0,
            rules_channel_id: None,
            max_presences: None,
            max_members: 500_000,
            vanity_url_code: None,
            description: None,
            banner: None,
            premium_tier: 0,
            premium_subscription_count: 0,
            preferred_locale: "en-US".into(),
            public_updates_channel_id: None,
            max_video_channel_users: 25,
            max_stage_video_channel_users: 50,
            nsfw_level: 0,
            stickers: vec![],
            premium_progress_bar_enabled: false,
            safety_alerts_channel_id: None,
            joined_at: format_unix_ms(joined as u64),
            large: self.members.len() > self.shared.limits.guild_create_members_max,
            unavailable: false,
            member_count: u32::try_from(self.members.len()).unwrap_or(u32::MAX),
            voice_states: vec![],
            members: vec![],
            channels,
            threads: if with_channels {
                self.visible_threads(user_id)
            } else {
                vec![]
            },
            presences: vec![],
            stage_instances: vec![],
            guild_scheduled_events: vec![],
            soundboard_sounds: vec![],
        }
    }

    /// `user_id`'s GUILD_CREATE: the guild with its channels, then members
    /// (theirs first, at most `guild_create_members_max`) and voice states
    /// while they fit [`Self::room_bytes`]. A guild whose members do not
    /// all fit is `large`, so clients ask for them with op 8 (Discord sends
    /// large guilds' members the same way).
    ///
    /// Which members, as Discord's gateway documents it: a session without
    /// GUILD_PRESENCES gets its own member and those in voice only; one
    /// with it gets every member of a guild within its `large_threshold`
    /// (IDENTIFY's, read again through the proto crate's 50-to-250 rule
    /// whatever a bus message says) and, of a larger (`large`) one, those
    /// "online, [who] have a role, have a nickname, or are in a voice
    /// channel", up to the threshold. With GUILD_PRESENCES the
    /// carried members' presences come along (offline ones left out, as
    /// Discord does).
    fn snapshot(&self, user_id: i64, intents: u64, large_threshold: u32) -> model::Guild {
        let mut guild = self.guild_object(user_id, true);
        let room = self.room_bytes();
        let mut used = encoded_len(&guild);
        let with_presences = intents & intents::GUILD_PRESENCES != 0;
        let threshold = guildhall_proto::gateway::large_threshold(Some(large_threshold.into()));
        let members_max = (threshold as usize).min(self.shared.limits.guild_create_members_max);
        guild.large |= self.members.len() > members_max;
        let large = guild.large;
        let own = self.members.get(&user_id);
        let others = self.members.values().filter(|m| {
            let id = m.user.id;
            let in_voice = self.voice.contains_key(&id);
            let notable =
                self.statuses.contains_key(&id) || !m.roles.is_empty() || m.row.nick.is_some();
            id != user_id && (in_voice || (with_presences && (!large || notable)))
        });
        for entry in own.into_iter().chain(others).take(members_max) {
            let member = wire_member(entry, true);
            let presence = with_presences
                .then(|| self.statuses.get(&entry.user.id))
                .flatten()
                .map(|status| model::Presence::of(sf(entry.user.id), None, status));
            // The member and the comma before it, and its presence.
            used = used
                .saturating_add(encoded_len(&member) + 1)
                .saturating_add(presence.as_ref().map_or(0, |p| encoded_len(p) + 1));
            if used > room {
                // Cut for room: the client must ask for the rest.
                guild.large = true;
                break;
            }
            guild.members.push(member);
            guild.presences.extend(presence);
        }
        for state in self.voice.values() {
            used = used.saturating_add(encoded_len(state) + 1);
            if used > room {
                break;
            }
            guild.voice_states.push(state.clone());
        }
        guild
    }

    fn encode(name: &str, data: &impl serde::Serialize) -> Option<Box<RawValue>> {
        match serde_json::value::to_raw_value(data) {
            Ok(raw) => Some(raw),
            Err(error) => {
                guildhall_common::throttled!(error, "guilds.encode_failed", %error, event = name, "cannot encode dispatch");
                None
            }
        }
    }

    /// Sends the next event of `node`'s stream (an event of the owner's
    /// own, no publish id).
    fn send(&mut self, node: &str, body: StreamBody) {
        self.send_for(node, body, 0);
    }

    /// Sends the next event of `node`'s stream for the publish `publish_id`
    /// (0: none); `false` when it waits in the stream's unsent queue (the
    /// bus refused it, or an earlier one waits). A refused message keeps
    /// its sequence number and is published again before anything later
    /// on the stream, so the node sees no gap and no reordering; a
    /// refused publish is never confirmed (finding: a fanout that failed
    /// during a bus reconnect used to be counted and confirmed, and the
    /// message was lost to every session on that node).
    fn send_for(&mut self, node: &str, body: StreamBody, publish_id: u64) -> bool {
        let guild_id = self.guild.id;
        let unsent_max = self.shared.limits.guild_stream_unsent_max;
        let Some(stream) = self.streams.get_mut(node) else {
            return true;
        };
        stream.seq += 1;
        stream.tail_due_at = Some(
            tokio::time::Instant::now()
                + Duration::from_millis(self.shared.limits.guild_stream_tail_after_ms),
        );
        stream.tails_sent = 0;
        let event = NodeEvent::new(NodeEventBody::Stream(StreamEvent {
            guild_id,
            epoch: self.epoch,
            seq: stream.seq,
            body,
        }));
        let partitions = self.shared.limits.gateway_event_partitions;
        let subject = gateway_events_subject(node, partition_of(guild_id, partitions));
        let Ok(bytes) = event.encode() else {
            // Our own types always encode; if one did not, the node sees
            // the gap and resynchronises.
            self.counters
                .stream_publish_failed_total
                .fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let bytes = bytes::Bytes::from(bytes);
        if stream.unsent.is_empty() && self.bus.publish(&subject, None, bytes.clone()).is_ok() {
            self.counters
                .stream_messages_total
                .fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.counters
            .stream_publish_failed_total
            .fetch_add(1, Ordering::Relaxed);
        let dropped = if stream.unsent.len() >= unsent_max {
            stream.unsent.pop_front()
        } else {
            None
        };
        stream.unsent.push_back(Unsent {
            subject,
            bytes,
            publish_id,
        });
        if let Some(dropped) = dropped {
            self.give_up(dropped);
        }
        false
    }

    /// An unsent message given up at `guild_stream_unsent_max`: its
    /// publish counts it as settled (the node resynchronises at the gap).
    fn give_up(&mut self, dropped: Unsent) {
        self.counters
            .stream_unsent_dropped_total
            .fetch_add(1, Ordering::Relaxed);
        guildhall_common::throttled!(
            warn,
            "guilds.stream_unsent_dropped",
            guild_id = self.guild.id,
            subject = dropped.subject,
            "a stream message waited past guild_stream_unsent_max and was given up; \
             its gateway node resynchronises the guild"
        );
        self.settle(dropped.publish_id);
    }

    /// One stream message of `publish_id` left the unsent queue.
    fn settle(&mut self, publish_id: u64) {
        if publish_id == 0 {
            return;
        }
        if let Some(waiting) = self.unconfirmed.get_mut(&publish_id) {
            *waiting = waiting.saturating_sub(1);
            if *waiting == 0 {
                self.unconfirmed.remove(&publish_id);
                self.remember_published(publish_id);
            }
        }
    }

    fn remember_published(&mut self, publish_id: u64) {
        if publish_id == 0 {
            return;
        }
        let now = guildhall_common::state::monotonic_ms();
        let age_max = self.shared.limits.fanout_outbox_event_age_ms_max;
        while self
            .published
            .front()
            .is_some_and(|(_, at)| now.saturating_sub(*at) >= age_max)
        {
            self.published.pop_front();
        }
        if self.published.len() >= self.shared.limits.guild_publish_ids_remembered_max {
            // Forgotten while a caller may still offer it: a retry of it
            // now would be fanned out twice.
            self.published.pop_front();
            self.counters
                .publish_ids_forgotten_early_total
                .fetch_add(1, Ordering::Relaxed);
        }
        self.published.push_back((publish_id, now));
    }

    /// Drops the sessions of gateway nodes whose lease ended, once per
    /// change of the live gateway set: they counted toward
    /// `guild_subscriptions_max` for good (a dead node never unsubscribes),
    /// and past it new subscriptions were refused. A node that comes back
    /// re-subscribes its sessions itself (it resyncs every guild when it
    /// announces itself again). Each stream keeps its numbering.
    fn prune_dead_gateways(&mut self) {
        let generation = self.cluster.gateways_generation.load(Ordering::Relaxed);
        if generation == self.gateways_seen {
            return;
        }
        self.gateways_seen = generation;
        let live = self.cluster.gateways();
        if live.is_empty() {
            return;
        }
        let mut dropped = 0;
        for (node, stream) in &mut self.streams {
            if !live.contains(node) {
                dropped += stream.sessions.len();
                stream.sessions.clear();
            }
        }
        if dropped > 0 {
            self.subscriptions = self.subscriptions.saturating_sub(dropped);
            self.counters
                .dead_gateway_sessions_dropped_total
                .fetch_add(dropped as u64, Ordering::Relaxed);
        }
    }

    /// Stream messages waiting for the bus, over every stream.
    fn unsent(&self) -> usize {
        self.streams.values().map(|s| s.unsent.len()).sum()
    }

    /// When the first stream's tail is due.
    /// When the next thread may archive by itself, on the runtime's clock.
    fn next_archive_at(&self) -> Option<tokio::time::Instant> {
        let at_ms = self.archive_check_ms?;
        let wait_ms = at_ms.saturating_sub(guildhall_common::state::now_ms() as i64);
        Some(tokio::time::Instant::now() + Duration::from_millis(wait_ms.max(0) as u64))
    }

    /// Archives the threads inactive for their `auto_archive_duration`,
    /// as Discord does: written, THREAD_UPDATE to their viewers, then out
    /// of memory. A failed write keeps the thread active and tries again
    /// after `thread_archive_retry_ms`.
    async fn archive_due(&mut self) {
        let now_ms = guildhall_common::state::now_ms() as i64;
        if self.archive_check_ms.is_none_or(|at| at > now_ms) {
            return;
        }
        let (due, next) = threads_due(&self.threads, &self.thread_activity_ms, now_ms);
        self.archive_check_ms = next;
        for thread_id in due {
            let Some(index) = self.threads.iter().position(|t| t.id == thread_id) else {
                continue;
            };
            let row = ChannelRow {
                archived: true,
                archive_ms: Some(now_ms),
                ..self.threads[index].clone()
            };
            match self
                .shared
                .store
                .update_thread(&row, self.epoch as i64)
                .await
            {
                Ok(true) => {}
                // Gone from the store (deleted meanwhile): not held either.
                Ok(false) => {
                    self.forget_thread(thread_id);
                    continue;
                }
                Err(error) => {
                    self.store_failed(Some(&error));
                    guildhall_common::throttled!(
                        warn,
                        "guilds.auto_archive",
                        guild_id = self.guild.id,
                        thread_id,
                        ?error,
                        "a thread due to archive could not be written; trying again later"
                    );
                    let retry_ms = now_ms + self.shared.limits.thread_archive_retry_ms as i64;
                    self.archive_check_ms = Some(
                        self.archive_check_ms
                            .map_or(retry_ms, |at| at.min(retry_ms)),
                    );
                    if self.fenced {
                        return;
                    }
                    continue;
                }
            }
            self.threads[index] = row.clone();
            self.view_generation += 1;
            self.publish_in(
                thread_id,
                "THREAD_UPDATE",
                intents::GUILDS,
                &wire_channel(&row, true),
            );
            self.forget_thread(thread_id);
        }
    }

    /// Drops a thread that is no longer active from memory.
    fn forget_thread(&mut self, thread_id: i64) {
        self.threads.retain(|t| t.id != thread_id);
        self.thread_members.remove(&thread_id);
        self.thread_activity_ms.remove(&thread_id);
        self.view_generation += 1;
    }

    /// A held thread's auto-archive time may have come nearer (it was
    /// created, unarchived, or its duration shortened).
    fn schedule_archive(&mut self, thread_id: i64) {
        let at = self
            .threads
            .iter()
            .find(|t| t.id == thread_id)
            .and_then(|t| auto_archive_at_ms(t, self.thread_activity_ms.get(&thread_id).copied()));
        if let Some(at) = at {
            self.archive_check_ms = Some(self.archive_check_ms.map_or(at, |now| now.min(at)));
        }
    }

    fn next_tail_at(&self) -> Option<tokio::time::Instant> {
        self.streams.values().filter_map(|s| s.tail_due_at).min()
    }

    /// Sends the tails due at `now`: the epoch and last sequence of each
    /// stream quiet for `guild_stream_tail_after_ms`, so a gateway node
    /// that lost the stream's last messages in transit (the bus is at most
    /// once) finds the gap now, not at the guild's next event there, which
    /// may never come. A quiet spell gets at most `guild_stream_tails_max`
    /// tails, each twice as far from the last, so an idle guild costs the
    /// bus nothing once they are sent. A tail is not numbered and not
    /// retried: a lost one is covered by the next. A stream with unsent
    /// messages waits for them (a tail would overtake them), and a stopped
    /// owner sends none.
    fn send_tails(&mut self, now: tokio::time::Instant) {
        let after_ms = self.shared.limits.guild_stream_tail_after_ms;
        let tails_max = self.shared.limits.guild_stream_tails_max;
        let stopped = self.fenced || self.stop.load(Ordering::Relaxed);
        let partitions = self.shared.limits.gateway_event_partitions;
        let guild_id = self.guild.id;
        for (node, stream) in &mut self.streams {
            let Some(due) = stream.tail_due_at else {
                continue;
            };
            if due > now {
                continue;
            }
            if stopped || stream.sessions.is_empty() {
                stream.tail_due_at = None;
                continue;
            }
            if !stream.unsent.is_empty() {
                stream.tail_due_at = Some(now + Duration::from_millis(after_ms));
                continue;
            }
            let tail = NodeEvent::new(NodeEventBody::StreamTail {
                guild_id,
                epoch: self.epoch,
                seq: stream.seq,
            });
            if let Ok(bytes) = tail.encode() {
                let subject = gateway_events_subject(node, partition_of(guild_id, partitions));
                if self.bus.publish(&subject, None, bytes.into()).is_ok() {
                    self.counters
                        .stream_tails_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            stream.tails_sent += 1;
            stream.tail_due_at = (stream.tails_sent < tails_max).then(|| {
                now + Duration::from_millis(
                    after_ms.saturating_mul(1u64 << stream.tails_sent.min(20)),
                )
            });
        }
    }

    /// Publishes what the streams' unsent queues hold, oldest first, each
    /// stream until the bus refuses again.
    fn flush_unsent(&mut self) {
        let mut settled = Vec::new();
        for stream in self.streams.values_mut() {
            while let Some(front) = stream.unsent.front() {
                if self
                    .bus
                    .publish(&front.subject, None, front.bytes.clone())
                    .is_err()
                {
                    break;
                }
                self.counters
                    .stream_resent_total
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(sent) = stream.unsent.pop_front() {
                    settled.push(sent.publish_id);
                }
            }
        }
        for publish_id in settled {
            self.settle(publish_id);
        }
    }

    /// Sends `body` to every node with subscribed sessions.
    fn fanout(&mut self, body: &StreamBody) {
        self.fanout_for(body, 0, None);
    }

    /// The members outside `audience` (ascending; empty when every member
    /// is in it, or for a channel this guild does not have), computed once
    /// per `view_generation` with the permission function.
    fn hidden_from(&mut self, audience: Audience) -> std::sync::Arc<Vec<i64>> {
        if let Some((generation, hidden)) = self.hidden.get(&audience)
            && *generation == self.view_generation
        {
            return hidden.clone();
        }
        let channel_id = match audience {
            Audience::Channel(channel_id, _) => channel_id,
            Audience::Holding(_) => 0,
        };
        let hidden: Vec<i64> = match (audience, self.channels.iter().find(|c| c.id == channel_id)) {
            (Audience::Holding(bits), _) => self
                .members
                .iter()
                .filter(|(user_id, entry)| {
                    perm::in_guild(&self.subject(**user_id, entry)) & bits != bits
                })
                .map(|(user_id, _)| *user_id)
                .collect(),
            (Audience::Channel(_, bits), None) => {
                match self.threads.iter().find(|t| t.id == channel_id) {
                    // BTreeMap order: ascending ids.
                    Some(thread) => self
                        .members
                        .keys()
                        .filter(|user_id| {
                            self.thread_permissions(**user_id, thread).unwrap_or(0) & bits != bits
                        })
                        .copied()
                        .collect(),
                    // A channel this owner does not hold (an archived
                    // thread, a channel just deleted): nobody's to see.
                    // Failing closed loses at most a live event the
                    // history still holds; failing open would show a
                    // private thread's traffic to the whole guild.
                    None => self.members.keys().copied().collect(),
                }
            }
            (Audience::Channel(_, bits), Some(channel)) => {
                let overwrites = perm::Overwrite::parse_stored(&channel.permission_overwrites);
                // BTreeMap order: ascending ids.
                self.members
                    .iter()
                    .filter(|(user_id, entry)| {
                        perm::in_channel(&self.subject(**user_id, entry), channel.kind, &overwrites)
                            & bits
                            != bits
                    })
                    .map(|(user_id, _)| *user_id)
                    .collect()
            }
        };
        if self.hidden.len() >= self.shared.limits.guild_view_cache_channels_max {
            // Recomputed on demand: dropping all is as correct as any
            // eviction order, and a guild with that many private
            // channels in active use pays one pass per channel.
            self.hidden.clear();
        }
        let hidden = std::sync::Arc::new(hidden);
        self.hidden
            .insert(audience, (self.view_generation, hidden.clone()));
        hidden
    }

    /// Sends `body` for the publish `publish_id` to every node with
    /// subscribed sessions; returns how many of those messages wait unsent.
    /// An event of channel `channel_id` (0: the guild's) carries, per node,
    /// the users there who may not view it; a node whose sessions all may
    /// not is sent nothing.
    fn fanout_for(
        &mut self,
        body: &StreamBody,
        publish_id: u64,
        audience: Option<Audience>,
    ) -> usize {
        let hidden = audience.map(|audience| self.hidden_from(audience));
        self.fanout_hidden(body, publish_id, hidden)
    }

    /// [`Self::fanout_for`] with the hidden members (ascending) given.
    fn fanout_hidden(
        &mut self,
        body: &StreamBody,
        publish_id: u64,
        hidden: Option<std::sync::Arc<Vec<i64>>>,
    ) -> usize {
        let hidden = hidden.filter(|h| !h.is_empty());
        let nodes: Vec<(String, Vec<i64>)> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.sessions.is_empty())
            .filter_map(|(node, stream)| {
                let Some(hidden) = &hidden else {
                    return Some((node.clone(), vec![]));
                };
                let mut here: Vec<i64> = stream
                    .sessions
                    .values()
                    .copied()
                    .filter(|user| hidden.binary_search(user).is_ok())
                    .collect();
                here.sort_unstable();
                here.dedup();
                let everyone_hidden = stream
                    .sessions
                    .values()
                    .all(|user| here.binary_search(user).is_ok());
                (!everyone_hidden).then(|| (node.clone(), here))
            })
            .collect();
        let mut waiting = 0;
        for (node, here) in nodes {
            let mut body = body.clone();
            if let StreamBody::Dispatch { hidden_from, .. } = &mut body {
                *hidden_from = here;
            }
            if !self.send_for(&node, body, publish_id) {
                waiting += 1;
            }
        }
        waiting
    }

    fn subscribe(
        &mut self,
        node: String,
        session_id: String,
        user_id: i64,
        intents: u64,
        large_threshold: u32,
    ) {
        if !self.streams.contains_key(&node)
            && self.streams.len() >= self.shared.limits.ring_members_max
        {
            self.counters
                .subscriptions_refused_total
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !self.members.contains_key(&user_id) {
            // Not (or no longer) a member: the node stops asking.
            self.streams.entry(node.clone()).or_default();
            self.send(
                &node,
                StreamBody::Remove {
                    user_ids: vec![user_id],
                },
            );
            return;
        }
        let stream = self.streams.entry(node.clone()).or_default();
        if !stream.sessions.contains_key(&session_id) {
            if self.subscriptions >= self.shared.limits.guild_subscriptions_max {
                self.counters
                    .subscriptions_refused_total
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            stream.sessions.insert(session_id.clone(), user_id);
            self.subscriptions += 1;
        }
        let mut guild_create = if intents & intents::GUILDS != 0 {
            Self::encode(
                "GUILD_CREATE",
                &self.snapshot(user_id, intents, large_threshold),
            )
        } else {
            None
        };
        // Never hit while changes are checked against `fits` (kept as the
        // last guard: a GUILD_CREATE the bus would refuse is not sent).
        let room = self.room_bytes();
        if guild_create.as_ref().is_some_and(|g| g.get().len() > room) {
            self.counters
                .guild_create_too_large_total
                .fetch_add(1, Ordering::Relaxed);
            guild_create = None;
        }
        self.send(
            &node,
            StreamBody::Subscribe {
                session_id,
                guild_create,
            },
        );
    }

    fn move_session(
        &mut self,
        from: String,
        to: String,
        session_id: String,
        user_id: i64,
        (intents, large_threshold): (u64, u32),
    ) {
        let held = self
            .streams
            .get_mut(&from)
            .and_then(|s| s.sessions.remove(&session_id))
            .is_some();
        if held {
            self.subscriptions -= 1;
        }
        // Always confirmed, so the giver never waits out its timeout for a
        // guild that had not subscribed the session yet.
        if self.streams.contains_key(&from)
            || self.streams.len() < self.shared.limits.ring_members_max
        {
            self.streams.entry(from.clone()).or_default();
            self.send(
                &from,
                StreamBody::Moved {
                    session_id: session_id.clone(),
                },
            );
        }
        if !held || !self.members.contains_key(&user_id) {
            // Nothing to continue: subscribe afresh (or refuse a non-member).
            self.subscribe(to, session_id, user_id, intents, large_threshold);
            return;
        }
        if !self.streams.contains_key(&to)
            && self.streams.len() >= self.shared.limits.ring_members_max
        {
            self.counters
                .subscriptions_refused_total
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Counted once: the session may be subscribed there already (its
        // new node subscribed it while the move ran).
        let fresh = self
            .streams
            .entry(to.clone())
            .or_default()
            .sessions
            .insert(session_id.clone(), user_id)
            .is_none();
        if fresh {
            self.subscriptions += 1;
        }
        self.send(&to, StreamBody::Adopt { session_id });
    }

    fn unsubscribe(&mut self, node: &str, session_id: &str) {
        if let Some(stream) = self.streams.get_mut(node)
            && stream.sessions.remove(session_id).is_some()
        {
            self.subscriptions -= 1;
        }
        // The session ended for good (its resume window passed): its user
        // leaves voice, as on Discord when a client is gone.
        let in_voice: Vec<i64> = self
            .voice
            .iter()
            .filter(|(_, state)| state["session_id"].as_str() == Some(session_id))
            .map(|(user_id, _)| *user_id)
            .collect();
        for user_id in in_voice {
            self.leave_voice(user_id);
        }
    }

    /// `user_id` leaves voice without an op 4 of theirs (their session
    /// ended, or they left the guild): the state is dropped, the guild
    /// hears VOICE_STATE_UPDATE with `channel_id: null`, and the guild's
    /// voice coordinator is told (one publish that never waits; a lost one
    /// leaves the SFU's admission to lapse and its connection to time out).
    fn leave_voice(&mut self, user_id: i64) {
        let Some(mut state) = self.voice.remove(&user_id) else {
            return;
        };
        let session_id = state["session_id"].as_str().unwrap_or_default().to_owned();
        state["channel_id"] = serde_json::Value::Null;
        self.publish("VOICE_STATE_UPDATE", intents::GUILD_VOICE_STATES, &state);
        if let Some(node) = self.cluster.voice_node_of(self.guild.id) {
            let request = guildhall_proto::voice::VoiceEnvelope::new(
                guildhall_proto::voice::VoiceRequest::Leave {
                    guild_id: self.guild.id,
                    user_id,
                    session_id,
                },
            );
            let _ = self.bus.publish(
                &guildhall_proto::voice::voice_requests_subject(&node),
                None,
                request.encode().into(),
            );
        }
    }

    /// Users lost the guild (everyone, when `user_ids` is empty).
    fn remove_users(&mut self, user_ids: Vec<i64>) {
        let leaving: Vec<i64> = self
            .voice
            .keys()
            .copied()
            .filter(|u| user_ids.is_empty() || user_ids.contains(u))
            .collect();
        for user_id in leaving {
            self.leave_voice(user_id);
        }
        self.fanout(&StreamBody::Remove {
            user_ids: user_ids.clone(),
        });
        let mut removed = 0;
        for stream in self.streams.values_mut() {
            let before = stream.sessions.len();
            stream
                .sessions
                .retain(|_, user| !user_ids.is_empty() && !user_ids.contains(user));
            removed += before - stream.sessions.len();
        }
        self.subscriptions -= removed;
    }

    fn publish(&mut self, name: &str, required_intent: u64, data: &impl serde::Serialize) {
        self.publish_in(0, name, required_intent, data);
    }

    /// Publishes an event of channel `channel_id` (0: the guild's) to the
    /// sessions whose user may view it.
    fn publish_in(
        &mut self,
        channel_id: i64,
        name: &str,
        required_intent: u64,
        data: &impl serde::Serialize,
    ) {
        let audience =
            (channel_id != 0).then_some(Audience::Channel(channel_id, perm::VIEW_CHANNEL));
        self.publish_to(audience, name, required_intent, data);
    }

    /// Publishes an event to the sessions of every member but `hidden`
    /// (ascending).
    fn publish_hidden(
        &mut self,
        hidden: Vec<i64>,
        name: &str,
        required_intent: u64,
        data: &impl serde::Serialize,
    ) {
        if let Some(data) = Self::encode(name, data) {
            self.fanout_hidden(
                &StreamBody::Dispatch {
                    name: name.to_owned(),
                    required_intent,
                    data,
                    blanked: None,
                    content_exempt: vec![],
                    hidden_from: vec![],
                    publish_id: 0,
                },
                0,
                Some(std::sync::Arc::new(hidden)),
            );
        }
    }

    /// THREAD_MEMBERS_UPDATE of `thread` for `user_id` added (with their
    /// thread member) or removed, as documented: to the thread's viewers
    /// whose sessions hold GUILD_MEMBERS, and to the user themself
    /// whatever their intents (once: their sessions are left out of the
    /// first).
    fn announce_thread_member(
        &mut self,
        thread_id: i64,
        user_id: i64,
        added: Option<&ThreadMemberRow>,
    ) {
        let Some(thread) = self.threads.iter().find(|t| t.id == thread_id) else {
            return;
        };
        let mut data = serde_json::json!({
            "id": thread_id.to_string(),
            "guild_id": self.guild.id.to_string(),
            "member_count": thread.member_count.clamp(0, 50),
        });
        match added {
            Some(row) => {
                let mut member = serde_json::to_value(wire_thread_member(row, true))
                    .unwrap_or(serde_json::Value::Null);
                if let Some(entry) = self.members.get(&user_id) {
                    member["member"] = serde_json::to_value(wire_member(entry, true))
                        .unwrap_or(serde_json::Value::Null);
                }
                member["presence"] = serde_json::Value::Null;
                data["added_members"] = serde_json::json!([member]);
            }
            None => data["removed_member_ids"] = serde_json::json!([user_id.to_string()]),
        }
        let viewers_hidden = self.hidden_from(Audience::Channel(thread_id, perm::VIEW_CHANNEL));
        let mut hidden: Vec<i64> = viewers_hidden.iter().copied().chain([user_id]).collect();
        hidden.sort_unstable();
        hidden.dedup();
        self.publish_hidden(
            hidden,
            "THREAD_MEMBERS_UPDATE",
            intents::GUILD_MEMBERS,
            &data,
        );
        let others: Vec<i64> = self
            .members
            .keys()
            .copied()
            .filter(|id| *id != user_id)
            .collect();
        self.publish_hidden(others, "THREAD_MEMBERS_UPDATE", intents::GUILDS, &data);
    }

    /// Publishes an event to the sessions of the members in `audience`
    /// (None: every member).
    fn publish_to(
        &mut self,
        audience: Option<Audience>,
        name: &str,
        required_intent: u64,
        data: &impl serde::Serialize,
    ) {
        if let Some(data) = Self::encode(name, data) {
            self.fanout_for(
                &StreamBody::Dispatch {
                    name: name.to_owned(),
                    required_intent,
                    data,
                    blanked: None,
                    content_exempt: vec![],
                    hidden_from: vec![],
                    publish_id: 0,
                },
                0,
                audience,
            );
        }
    }

    /// Tells every gateway node that `user_id` joined, so its sessions there
    /// subscribe (the owner does not know where a user's sessions are).
    fn announce_join(&self, user_id: i64) {
        let refused = guildhall_common::gateways::to_gateways(
            self.bus.as_ref(),
            &self.cluster.gateways(),
            self.shared.limits.gateway_event_partitions,
            self.guild.id,
            NodeEventBody::Joined {
                guild_id: self.guild.id,
                user_id,
            },
        );
        self.counters
            .stream_publish_failed_total
            .fetch_add(refused, Ordering::Relaxed);
    }

    /// Carries out `call`; `None` for calls nobody waits on.
    async fn handle(&mut self, call: GuildCall) -> Option<Result<GuildAnswer, GuildError>> {
        match call {
            GuildCall::Subscribe {
                node,
                session_id,
                user_id,
                intents,
                large_threshold,
            } => {
                self.subscribe(node, session_id, user_id, intents, large_threshold);
                None
            }
            GuildCall::Unsubscribe { node, session_id } => {
                self.unsubscribe(&node, &session_id);
                None
            }
            GuildCall::Move {
                from,
                to,
                session_id,
                user_id,
                intents,
                large_threshold,
            } => {
                self.move_session(from, to, session_id, user_id, (intents, large_threshold));
                None
            }
            GuildCall::Authorize {
                user_id,
                channel_id,
                need,
                slowmode,
            } => {
                let mut held = self.held_bits(user_id, channel_id);
                let mut archived_bits = None;
                if held.is_none() && channel_id != GUILD_WIDE && self.members.contains_key(&user_id)
                {
                    // Not held: maybe an archived thread (in the store
                    // only). A send unarchives it, and it is held then.
                    match self
                        .archived_thread_bits(user_id, channel_id, need, slowmode)
                        .await
                    {
                        Err(error) => return Some(Err(error)),
                        Ok(Some(bits)) => archived_bits = Some(bits),
                        Ok(None) => held = self.held_bits(user_id, channel_id),
                    }
                }
                let (bits, slowmode_s, in_thread) = match held {
                    Some(held) => (Some(held.bits), held.slowmode_s, held.thread),
                    None => (archived_bits, 0, false),
                };
                // Not a member: no access, whichever channel is named.
                let member = self.members.contains_key(&user_id);
                let result = match (member, bits) {
                    (false, _) | (true, Some(None)) => Err(GuildError::MissingAccess),
                    (true, None) => Err(GuildError::UnknownChannel),
                    (true, Some(Some(bits))) if bits & perm::VIEW_CHANNEL == 0 => {
                        Err(GuildError::MissingAccess)
                    }
                    (true, Some(Some(bits))) if bits & need != need => {
                        Err(GuildError::MissingPermissions)
                    }
                    (true, Some(Some(bits)))
                        if slowmode
                            && let Err(wait_ms) =
                                self.slowmode_clock(user_id, channel_id, slowmode_s, bits) =>
                    {
                        Err(GuildError::Slowmode(wait_ms))
                    }
                    (true, Some(Some(bits))) => Ok(SendGrant {
                        guild_id: self.guild.id,
                        permissions: bits,
                        timed_out: self.members.get(&user_id).is_some_and(|m| {
                            m.timed_out_until(guildhall_common::state::now_ms())
                                .is_some()
                        }),
                        member: self
                            .members
                            .get(&user_id)
                            .map(|m| wire_member(m, false))
                            .unwrap_or_else(|| {
                                wire_member(
                                    &MemberEntry {
                                        row: MemberRow {
                                            temporary: false,
                                            communication_disabled_until_ms: None,
                                            guild_id: self.guild.id,
                                            user_id,
                                            joined_ms: 0,
                                            nick: None,
                                        },
                                        user: UserRow {
                                            id: user_id,
                                            username: String::new(),
                                            password_hash: None,
                                            bot: false,
                                            global_name: None,
                                            created_ms: 0,
                                        },
                                        roles: vec![],
                                    },
                                    false,
                                )
                            }),
                    }),
                };
                // A send granted in a thread is activity from now: its
                // message, published a moment later, must not find the
                // thread archived by its clock meanwhile.
                if slowmode && result.is_ok() && in_thread {
                    self.thread_activity_ms
                        .insert(channel_id, guildhall_common::state::now_ms() as i64);
                }
                Some(result.map(GuildAnswer::Granted))
            }
            GuildCall::Publish(event) => {
                let id = event.publish_id;
                if id != 0 && self.unconfirmed.contains_key(&id) {
                    // A retry of a fanout still partly unsent: try the
                    // bus again, never fan out twice.
                    self.flush_unsent();
                }
                if id != 0 && self.published.iter().any(|(known, _)| *known == id) {
                    self.counters
                        .publish_repeats_total
                        .fetch_add(1, Ordering::Relaxed);
                    return Some(Ok(GuildAnswer::Published));
                }
                if id != 0 && self.unconfirmed.contains_key(&id) {
                    self.counters
                        .publish_unconfirmed_total
                        .fetch_add(1, Ordering::Relaxed);
                    return Some(Err(GuildError::Overloaded));
                }
                // A first publish (repeats returned above): a message in a
                // thread counts in this copy, which answers GUILD_CREATE
                // and the active list (the store counted it already).
                if event.name == "MESSAGE_CREATE"
                    && let Some(thread) = self.threads.iter_mut().find(|t| t.id == event.channel_id)
                {
                    thread.message_count += 1;
                    thread.total_message_sent += 1;
                    // Its auto-archive clock starts again (a later time
                    // only: the scheduled check stays a lower bound).
                    self.thread_activity_ms
                        .insert(thread.id, guildhall_common::state::now_ms() as i64);
                }
                let waiting = self.fanout_for(
                    &StreamBody::Dispatch {
                        name: event.name,
                        required_intent: event.required_intent,
                        data: event.data,
                        blanked: event.blanked,
                        content_exempt: event.content_exempt,
                        hidden_from: vec![],
                        publish_id: id,
                    },
                    id,
                    (event.channel_id != 0).then_some(Audience::Channel(
                        event.channel_id,
                        perm::VIEW_CHANNEL | event.channel_permissions,
                    )),
                );
                if waiting > 0 {
                    // Not confirmed: the caller holds the event and asks
                    // again; this owner publishes the rest on its own.
                    if id != 0 {
                        self.unconfirmed.insert(id, waiting);
                    }
                    self.counters
                        .publish_unconfirmed_total
                        .fetch_add(1, Ordering::Relaxed);
                    return Some(Err(GuildError::Overloaded));
                }
                // Confirmed only while no newer owner has claimed the
                // guild: gateway nodes that saw a newer epoch refuse this
                // owner's stream messages, and a confirmed event would be
                // lost live there. Read after the fanout, so a claim made
                // before it is seen; a superseded owner stops and the
                // caller, still holding the event, offers it to the new
                // one (a session that heard this copy too may hear it
                // twice: at least once across an owner change).
                match self.shared.store.owner_epoch(self.guild.id).await {
                    Ok(Some(epoch)) if epoch == self.epoch as i64 => {}
                    Ok(_) => {
                        self.counters
                            .superseded_publishes_total
                            .fetch_add(1, Ordering::Relaxed);
                        return Some(Err(
                            self.store_failed(Some(&guildhall_store::StoreError::StaleEpoch))
                        ));
                    }
                    // Unknown: not confirmed; the caller asks again.
                    Err(_) => return Some(Err(GuildError::Overloaded)),
                }
                self.remember_published(id);
                Some(Ok(GuildAnswer::Published))
            }
            GuildCall::AddMember { user, temporary } => {
                if self.members.contains_key(&user.id) {
                    // Present already: a true repeat, or the retry of an
                    // add whose owner died between its commit and its
                    // announcement (this owner loaded the member from the
                    // store). The gateways subscribe only the user's
                    // sessions that do not follow the guild yet, so
                    // announcing again costs a repeat nothing and spares
                    // the joiner's open sessions a guild they never hear
                    // of.
                    self.announce_join(user.id);
                    return Some(Ok(GuildAnswer::Added(false)));
                }
                // A banned user joins by no path (invite, OAuth2, add).
                match self.shared.store.ban(self.guild.id, user.id).await {
                    Ok(None) => {}
                    Ok(Some(_)) => return Some(Err(GuildError::Banned)),
                    Err(error) => return Some(Err(self.store_failed(Some(&error)))),
                }
                let row = MemberRow {
                    communication_disabled_until_ms: None,
                    guild_id: self.guild.id,
                    user_id: user.id,
                    joined_ms: guildhall_common::state::now_ms() as i64,
                    nick: None,
                    temporary,
                };
                if let Err(error) = self.shared.store.add_member(&row, self.epoch as i64).await {
                    return Some(Err(self.store_failed(Some(&error))));
                }
                let entry = MemberEntry {
                    row,
                    user: UserRow::from(user),
                    roles: vec![],
                };
                let mut added = serde_json::to_value(wire_member(&entry, true)).unwrap_or_default();
                added["guild_id"] = serde_json::Value::String(self.guild.id.to_string());
                let user_id = entry.user.id;
                self.members.insert(user_id, entry);
                self.view_generation += 1;
                self.publish("GUILD_MEMBER_ADD", intents::GUILD_MEMBERS, &added);
                // The newcomer's open sessions learn about the guild.
                self.announce_join(user_id);
                Some(Ok(GuildAnswer::Added(true)))
            }
            GuildCall::Guild { user_id } => {
                let result = if self.members.contains_key(&user_id) {
                    let mut guild = rest_guild(&self.guild_object(user_id, false));
                    guild["approximate_member_count"] = serde_json::json!(self.members.len());
                    guild["approximate_presence_count"] = serde_json::json!(self.statuses.len());
                    Ok(GuildAnswer::RestGuild(guild))
                } else {
                    Err(GuildError::MissingAccess)
                };
                Some(result)
            }
            GuildCall::Snapshot { user_id } => {
                let result = if self.members.contains_key(&user_id) {
                    // The REST guild a creation answers, not a session's:
                    // as many members as any GUILD_CREATE carries.
                    let members_max = u32::try_from(self.shared.limits.guild_create_members_max)
                        .unwrap_or(u32::MAX);
                    Ok(GuildAnswer::Guild(Box::new(self.snapshot(
                        user_id,
                        u64::MAX,
                        members_max,
                    ))))
                } else {
                    Err(GuildError::MissingAccess)
                };
                Some(result)
            }
            GuildCall::Members {
                user_id,
                query,
                user_ids,
                after,
                limit,
                nicknames,
            } => {
                let result = if self.members.contains_key(&user_id) {
                    let query = query.to_lowercase();
                    let matches = |m: &&MemberEntry| {
                        if user_ids.is_empty() {
                            m.user.username.to_lowercase().starts_with(&query)
                                || (nicknames
                                    && m.row
                                        .nick
                                        .as_deref()
                                        .is_some_and(|n| n.to_lowercase().starts_with(&query)))
                        } else {
                            user_ids.contains(&m.user.id)
                        }
                    };
                    let matching = self.members.values().filter(matches).count();
                    // Members are keyed by user id: paging is a range scan.
                    let page: Vec<&MemberEntry> = self
                        .members
                        .range(after.saturating_add(1)..)
                        .map(|(_, m)| m)
                        .filter(matches)
                        .take(limit.min(self.shared.limits.members_per_page_max))
                        .collect();
                    let statuses = page
                        .iter()
                        .filter_map(|m| {
                            let status = self.statuses.get(&m.user.id)?;
                            Some((m.user.id, status.clone()))
                        })
                        .collect();
                    let members = page.into_iter().map(|m| wire_member(m, true)).collect();
                    Ok(GuildAnswer::Members(MemberPage {
                        members,
                        matching,
                        statuses,
                    }))
                } else {
                    Err(GuildError::MissingAccess)
                };
                Some(result)
            }
            GuildCall::Change {
                actor,
                change,
                reason,
            } => {
                let change = *change;
                let before = self.audit_before(&change);
                let result = self.change(actor, change.clone()).await;
                if let Ok(changed) = &result {
                    self.record_audit(actor, &change, &before, changed, reason)
                        .await;
                }
                Some(result.map(GuildAnswer::Changed))
            }
            GuildCall::Audit {
                actor,
                action_type,
                target_id,
                changes,
                options,
                reason,
            } => {
                if !self.members.contains_key(&actor) {
                    return Some(Err(GuildError::MissingAccess));
                }
                self.store_audit(
                    actor,
                    vec![(action_type, target_id, changes, options)],
                    reason,
                )
                .await;
                Some(Ok(GuildAnswer::Changed(Changed::Nothing)))
            }
            GuildCall::Presence {
                user_id,
                status,
                disconnected,
            } => {
                let entry = self.members.get(&user_id)?;
                if disconnected && entry.row.temporary && entry.roles.is_empty() {
                    self.remove_temporary(user_id).await;
                    return None;
                }
                let changed = if status == "offline" {
                    self.statuses.remove(&user_id).is_some()
                } else {
                    self.statuses.insert(user_id, status.clone()).as_ref() != Some(&status)
                };
                if changed {
                    let data = model::Presence::of(sf(user_id), Some(sf(self.guild.id)), &status);
                    self.publish("PRESENCE_UPDATE", intents::GUILD_PRESENCES, &data);
                }
                None
            }
            GuildCall::Voice {
                user_id,
                session_id,
                channel_id,
                self_mute,
                self_deaf,
            } => Some(
                self.voice(user_id, session_id, channel_id, self_mute, self_deaf)
                    .map(GuildAnswer::Voice),
            ),
            GuildCall::Roles { user_id } => {
                let result = if self.members.contains_key(&user_id) {
                    Ok(GuildAnswer::Roles(
                        self.roles.iter().map(wire_role).collect(),
                    ))
                } else {
                    Err(GuildError::MissingAccess)
                };
                Some(result)
            }
            GuildCall::ActiveThreads { user_id } => Some(if self.members.contains_key(&user_id) {
                Ok(GuildAnswer::Channels(self.visible_threads(user_id)))
            } else {
                Err(GuildError::MissingAccess)
            }),
            GuildCall::Channels { user_id } => {
                let result = if self.members.contains_key(&user_id) {
                    Ok(GuildAnswer::Channels(
                        self.channels
                            .iter()
                            .map(|c| wire_channel(c, true))
                            .collect(),
                    ))
                } else {
                    Err(GuildError::MissingAccess)
                };
                Some(result)
            }
        }
    }

    /// Serves the mailbox until the guild is deleted, or the owner is
    /// stopped (placement moved the guild, or a write was fenced). A
    /// stopped owner handles nothing more: what its mailbox still holds is
    /// forwarded to the owner in this node's view, so every event after
    /// the stop comes from the new owner's stream alone.
    async fn run(mut self, mut mailbox: mpsc::Receiver<Envelope>) {
        let retry = Duration::from_millis(self.shared.limits.guild_stream_retry_ms.max(1));
        loop {
            // Only this task changes the unsent queues: counted once a pass.
            let waiting = self.unsent() > 0;
            // Stream messages wait for the bus: try again every
            // `guild_stream_retry_ms` even when nothing else arrives (the
            // stream may be idle from now on); quiet streams' tails are
            // sent when due.
            let retry_at = waiting.then(|| tokio::time::Instant::now() + retry);
            let wake_at = retry_at
                .into_iter()
                .chain(self.next_tail_at())
                .chain(self.next_archive_at())
                .min();
            let envelope = if let Some(wake_at) = wake_at {
                tokio::select! {
                    envelope = mailbox.recv() => envelope,
                    () = tokio::time::sleep_until(wake_at) => {
                        if waiting && !self.stop.load(Ordering::Relaxed) {
                            self.flush_unsent();
                        }
                        self.send_tails(tokio::time::Instant::now());
                        if !self.stop.load(Ordering::Relaxed) && !self.fenced {
                            self.archive_due().await;
                        }
                        continue;
                    }
                }
            } else {
                mailbox.recv().await
            };
            let Some(envelope) = envelope else {
                break;
            };
            if waiting {
                self.flush_unsent();
            }
            self.prune_dead_gateways();
            if self.fenced || self.stop.load(Ordering::Relaxed) {
                self.hand_over(envelope, &mut mailbox);
                return;
            }
            let Envelope {
                call,
                reply,
                deadline,
                hops: _,
                queued,
                late,
            } = envelope;
            if late
                && let GuildCall::Subscribe {
                    node, session_id, ..
                } = &call
                && self
                    .streams
                    .get(node)
                    .is_some_and(|s| s.sessions.contains_key(session_id))
            {
                continue;
            }
            if deadline.is_some_and(|deadline| deadline <= tokio::time::Instant::now()) {
                // Its caller gave up while it waited in the mailbox: nobody
                // reads the answer, and a publish is held and offered again
                // by its caller, so handling this one too would fan the
                // event out twice, the second time after other events.
                self.counters
                    .requests_expired_total
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if queued
                && let GuildCall::Subscribe {
                    node, session_id, ..
                } = &call
                && self.pulled.remove(&(node.clone(), session_id.clone()))
            {
                continue;
            }
            let result = self.handle(call).await;
            if let (Some(reply), Some(result)) = (reply, result) {
                answer(self.bus.as_ref(), &reply, result);
            }
            if self.deleted {
                // Dropping the mailbox makes the directory forget this owner.
                break;
            }
            if self.fenced {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Forwards `first` and everything left in the mailbox (closed first,
    /// so nothing more arrives) to the guild's owner in this node's view.
    fn hand_over(&self, first: Envelope, mailbox: &mut mpsc::Receiver<Envelope>) {
        self.stop.store(true, Ordering::Relaxed);
        mailbox.close();
        let target = self.cluster.owner_of(self.guild.id);
        let mut next = Some(first);
        while let Some(envelope) = next {
            forward(
                self.bus.as_ref(),
                &self.cluster,
                &self.shared.limits,
                &self.counters,
                target.as_deref().filter(|t| *t != self.node_name.as_str()),
                self.guild.id,
                envelope,
            );
            next = mailbox.try_recv().ok();
        }
    }
}

/// Sends `envelope` on to `target`'s guilds role (one more hop; the owner
/// there answers the original caller's inbox), or refuses it with
/// `Overloaded` when there is no other owner to go to, the hop bound is
/// reached or the bus refuses: never dropped without an answer.
fn forward(
    bus: &dyn Bus,
    cluster: &ClusterState,
    limits: &guildhall_limits::Limits,
    counters: &FanoutCounters,
    target: Option<&str>,
    guild_id: i64,
    envelope: Envelope,
) {
    let refuse = |reply: Option<String>| {
        counters
            .forward_refused_total
            .fetch_add(1, Ordering::Relaxed);
        if let Some(reply) = reply {
            answer(bus, &reply, Err(GuildError::Overloaded));
        }
    };
    // Its caller gave up (it waited in a mailbox, or in this process's
    // buffers through a pause): nobody reads an answer, so nothing is sent.
    if envelope
        .deadline
        .is_some_and(|deadline| deadline <= tokio::time::Instant::now())
    {
        counters
            .requests_expired_total
            .fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(target) = target else {
        return refuse(envelope.reply);
    };
    if !cluster.guild_node_live(target) {
        // Its lease ended (it is on the ring only until membership
        // removes it): nobody would answer; refuse now, not at the
        // caller's timeout.
        return refuse(envelope.reply);
    }
    if envelope.hops >= limits.guild_forward_hops_max {
        return refuse(envelope.reply);
    }
    let request = GuildRequest {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        guild_id,
        call: envelope.call,
        hops: envelope.hops + 1,
    };
    let Ok(bytes) = serde_json::to_vec(&request) else {
        return refuse(envelope.reply);
    };
    // The caller's deadline goes along, so the next node sees it too.
    match bus.publish_request(
        &guild_requests_subject(target),
        envelope.reply.as_deref(),
        bytes.into(),
        envelope.deadline,
    ) {
        Ok(()) => {
            counters.forwarded_total.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => refuse(envelope.reply),
    }
}

/// A call in an owner's mailbox, with where to answer.
struct Envelope {
    call: GuildCall,
    reply: Option<String>,
    /// When its caller stops waiting (a request's; casts have none).
    deadline: Option<tokio::time::Instant>,
    /// Times it was forwarded between guilds nodes already.
    hops: u32,
    /// It waited behind the guild's load (so it may be a subscription the
    /// load's pull served already).
    queued: bool,
    /// A subscription learnt from a gateway node that answered the new
    /// owner's question late: skipped if the session subscribed meanwhile.
    late: bool,
}

/// Publishes `result` to `reply` (best effort: a caller that gave up has
/// no inbox left, which the bus counts as no responders).
fn answer(bus: &dyn Bus, reply: &str, result: Result<GuildAnswer, GuildError>) {
    let envelope = GuildReply {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        result,
    };
    if let Ok(bytes) = serde_json::to_vec(&envelope) {
        let _ = bus.publish(reply, None, bytes.into());
    }
}

/// Counters of the directory's loads, read by `/metrics`.
#[derive(Debug, Default)]
pub struct LoadCounters {
    /// Loads started.
    pub started_total: AtomicU64,
    /// Loads running now.
    pub in_flight: AtomicUsize,
    /// Most loads that ran at once.
    pub in_flight_peak: AtomicUsize,
    /// Requests waiting now behind their guild's load.
    pub waiters: AtomicUsize,
    /// Requests refused at `guild_requests_in_flight_max` loads or
    /// `guild_load_waiters_max` waiters.
    pub refused_total: AtomicU64,
}

/// Guilds being loaded: one load per guild (single-flight), the requests
/// that arrived meanwhile numbered in arrival order.
struct Loads {
    /// Guild → the arrival numbers of its waiting requests, in order.
    flights: SingleFlight<i64, u64>,
    /// The waiting requests by arrival number (bounded by the flights'
    /// bounds: loads × waiters per load).
    queued: HashMap<u64, Envelope>,
    next_arrival: u64,
}

/// The directory's hold on a running owner.
struct OwnerHandle {
    mailbox: mpsc::Sender<Envelope>,
    /// Set to stop the owner (it forwards what is left); also set by the
    /// owner itself when fenced.
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl OwnerHandle {
    fn running(&self) -> bool {
        !self.mailbox.is_closed() && !self.stop.load(Ordering::Relaxed)
    }
}

/// Finds guild owners, starting them on first use.
pub struct GuildDirectory {
    shared: Arc<Shared>,
    client: Arc<GuildsClient>,
    bus: Arc<dyn Bus>,
    cluster: Arc<ClusterState>,
    node_name: String,
    /// Fanout counters of this node's owners.
    pub counters: Arc<FanoutCounters>,
    /// Load counters.
    pub loads: LoadCounters,
    // Loaded owners, read without awaiting: requests to a loaded guild never
    // wait behind the load of another one.
    owners: std::sync::RwLock<HashMap<i64, OwnerHandle>>,
    // Loads in flight and the requests waiting behind each. Held only for
    // non-waiting steps (a lookup, a queue push, handing the queue to a
    // loaded owner), never across an await; distinct guilds load at once.
    loading: std::sync::Mutex<Loads>,
    /// Late pull tasks running (at most `guild_late_pull_tasks_max`).
    late_pull_tasks: Arc<AtomicUsize>,
}

impl GuildDirectory {
    /// A directory for this node.
    pub fn new(
        shared: Arc<Shared>,
        bus: Arc<dyn Bus>,
        cluster: Arc<ClusterState>,
        node_name: String,
        client: Arc<GuildsClient>,
    ) -> Self {
        Self {
            client,
            bus,
            cluster,
            node_name,
            counters: Arc::new(FanoutCounters::default()),
            loads: LoadCounters::default(),
            owners: std::sync::RwLock::new(HashMap::new()),
            late_pull_tasks: Arc::new(AtomicUsize::new(0)),
            loading: std::sync::Mutex::new(Loads {
                flights: SingleFlight::new(
                    shared.limits.guild_requests_in_flight_max,
                    shared.limits.guild_load_waiters_max,
                ),
                queued: HashMap::new(),
                next_arrival: 0,
            }),
            shared,
        }
    }

    /// The members' users, from the users role over the bus in batches of
    /// `users_batch_ids_max` (one store query each, wherever the role runs).
    async fn load_users(&self, state: &GuildState) -> Result<HashMap<i64, UserRow>, GuildError> {
        let mut users = HashMap::with_capacity(state.members.len());
        let timeout = Duration::from_millis(self.shared.limits.users_lookup_timeout_ms);
        let ids: Vec<i64> = state.members.iter().map(|m| m.user_id).collect();
        for batch in ids.chunks(self.shared.limits.users_batch_ids_max.max(1)) {
            let call = guildhall_proto::users::UsersCall::Load {
                ids: batch.to_vec(),
            };
            let rows = guildhall_common::users::ask(self.bus.as_ref(), call, timeout)
                .await
                .map_err(|e| match e {
                    guildhall_proto::users::UsersError::Overloaded => GuildError::Overloaded,
                    guildhall_proto::users::UsersError::Store => GuildError::Store,
                })?;
            users.extend(rows.into_iter().map(|u| (u.id, u)));
        }
        Ok(users)
    }

    fn loaded(&self, guild_id: i64) -> Option<mpsc::Sender<Envelope>> {
        let owners = self
            .owners
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners
            .get(&guild_id)
            .filter(|h| h.running())
            .map(|h| h.mailbox.clone())
    }

    /// Loads `guild_id` and starts its owner; the caller makes it
    /// reachable (see [`GuildDirectory::loaded_or_queue`]).
    async fn load(&self, guild_id: i64) -> Result<OwnerHandle, GuildError> {
        {
            let mut owners = self
                .owners
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Forget owners that stopped (deleted guilds), then check the bound.
            owners.retain(|_, h| h.running());
            if owners.len() >= self.shared.limits.guild_owners_max {
                return Err(GuildError::Overloaded);
            }
        }
        // Fencing: an owner acts only under an epoch it claimed while its
        // lease was live. The claim comes before the read, so every write
        // of the previous owner is either in what this load reads or
        // refused (the previous owner's epoch is no longer the row's).
        if !self
            .cluster
            .may_claim(guildhall_common::state::monotonic_ms())
        {
            self.counters
                .claims_refused_total
                .fetch_add(1, Ordering::Relaxed);
            return Err(GuildError::Overloaded);
        }
        let epoch = match self.shared.store.claim_guild(guild_id).await {
            Ok(Some(epoch)) => epoch,
            Ok(None) => return Err(GuildError::UnknownGuild),
            Err(_) => return Err(GuildError::Store),
        };
        if epoch > 1 {
            self.counters.moved_in_total.fetch_add(1, Ordering::Relaxed);
        }
        let state = self
            .shared
            .store
            .load_guild(guild_id)
            .await
            .map_err(|_| GuildError::Store)?;
        let Some(guild) = state.guild.clone() else {
            return Err(GuildError::UnknownGuild);
        };
        let users = self.load_users(&state).await?;
        let mut members = BTreeMap::new();
        for row in &state.members {
            if let Some(user) = users.get(&row.user_id) {
                let roles = state
                    .member_roles
                    .iter()
                    .filter(|(u, _)| *u == row.user_id)
                    .map(|(_, r)| *r)
                    .collect();
                members.insert(
                    row.user_id,
                    MemberEntry {
                        row: row.clone(),
                        user: user.clone(),
                        roles,
                    },
                );
            }
        }
        let mut owner = GuildOwner {
            shared: self.shared.clone(),
            bus: self.bus.clone(),
            cluster: self.cluster.clone(),
            counters: self.counters.clone(),
            epoch: epoch as u64,
            streams: BTreeMap::new(),
            subscriptions: 0,
            guild,
            channels: state.channels,
            threads: state.threads,
            thread_members: {
                let mut by_thread: HashMap<i64, BTreeMap<i64, ThreadMemberRow>> = HashMap::new();
                for member in state.thread_members {
                    by_thread
                        .entry(member.thread_id)
                        .or_default()
                        .insert(member.user_id, member);
                }
                by_thread
            },
            thread_activity_ms: state
                .thread_last_messages
                .iter()
                .filter_map(|(thread, message)| {
                    let ms = guildhall_proto::Snowflake::new(*message as u64)?.unix_ms();
                    Some((*thread, ms as i64))
                })
                .collect(),
            archive_check_ms: None,
            roles: state.roles,
            members,
            voice: BTreeMap::new(),
            statuses: HashMap::new(),
            deleted: false,
            fenced: false,
            node_name: self.node_name.clone(),
            stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            pulled: std::collections::HashSet::new(),
            published: VecDeque::new(),
            unconfirmed: HashMap::new(),
            gateways_seen: self.cluster.gateways_generation.load(Ordering::Relaxed),
            view_generation: 0,
            hidden: HashMap::new(),
            slowmode: HashMap::new(),
        };
        owner.archive_check_ms = threads_due(&owner.threads, &owner.thread_activity_ms, i64::MIN).1;
        let unanswered = self.pull(&mut owner).await;
        let (sender, mailbox) = mpsc::channel(self.shared.limits.guild_mailbox_messages_max);
        if !unanswered.is_empty() {
            self.pull_late(
                owner.guild.id,
                unanswered,
                sender.clone(),
                owner.stop.clone(),
            );
        }
        let handle = OwnerHandle {
            mailbox: sender,
            stop: owner.stop.clone(),
        };
        tokio::spawn(owner.run(mailbox));
        Ok(handle)
    }

    /// Asks the gateway nodes that did not answer a new owner's question in
    /// time again, with full-jitter backoff, at most `guild_pull_retries_max`
    /// times, while they are live and the owner runs; their sessions are
    /// subscribed through the owner's mailbox. Without this, a gateway node
    /// that missed the question (paused, slow) got no stream, never saw the
    /// new epoch, and its sessions heard nothing of the guild until another
    /// session there subscribed. One task per such load, at most
    /// `guild_late_pull_tasks_max` at once (past it: counted, and the
    /// sessions wait for the gateway's own resync).
    fn pull_late(
        &self,
        guild_id: i64,
        mut nodes: Vec<String>,
        mailbox: mpsc::Sender<Envelope>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let limits = self.shared.limits.clone();
        let tasks = self.late_pull_tasks.clone();
        if tasks.fetch_add(1, Ordering::Relaxed) >= limits.guild_late_pull_tasks_max {
            tasks.fetch_sub(1, Ordering::Relaxed);
            self.counters
                .late_pulls_refused_total
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (bus, cluster, counters) = (
            self.bus.clone(),
            self.cluster.clone(),
            self.counters.clone(),
        );
        tokio::spawn(async move {
            let Ok(ask) = serde_json::to_vec(&FollowsAsk { guild_id }) else {
                tasks.fetch_sub(1, Ordering::Relaxed);
                return;
            };
            let ask = bytes::Bytes::from(ask);
            let timeout = Duration::from_millis(limits.guild_pull_timeout_ms.max(1));
            for attempt in 0..limits.guild_pull_retries_max {
                let wait_ms = guildhall_control::retry::backoff_full_jitter_ms(
                    attempt,
                    limits.backoff_base_ms,
                    limits.backoff_cap_ms.min(limits.lease_ttl_ms),
                    guildhall_common::auth::random_unit(),
                );
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                if stop.load(Ordering::Relaxed) || mailbox.is_closed() {
                    break;
                }
                let live = cluster.gateways();
                nodes.retain(|node| live.contains(node));
                let mut still = Vec::new();
                for node in nodes {
                    counters.pulls_retried_total.fetch_add(1, Ordering::Relaxed);
                    let followers = bus
                        .request(&follows_subject(&node), ask.clone(), timeout)
                        .await
                        .ok()
                        .and_then(|m| serde_json::from_slice::<Vec<Follower>>(&m.payload).ok());
                    let Some(followers) = followers else {
                        still.push(node);
                        continue;
                    };
                    counters
                        .pulled_sessions_total
                        .fetch_add(followers.len() as u64, Ordering::Relaxed);
                    for follower in followers {
                        let envelope = Envelope {
                            call: GuildCall::Subscribe {
                                node: node.clone(),
                                session_id: follower.session_id,
                                user_id: follower.user_id,
                                intents: follower.intents,
                                large_threshold: follower.large_threshold,
                            },
                            reply: None,
                            deadline: None,
                            hops: 0,
                            queued: false,
                            late: true,
                        };
                        if mailbox.try_send(envelope).is_err() {
                            // A full mailbox: the gateway's own resync
                            // subscribes this session when the stream
                            // reaches it.
                            counters
                                .mailbox_refusals_total
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                nodes = still;
                if nodes.is_empty() {
                    break;
                }
            }
            tasks.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// A new owner asks every gateway node which of its sessions follow the
    /// guild, and at the same time the presence role for its members'
    /// statuses (the GUILD_CREATEs it then sends carry them; asked beside
    /// the gateways, so a slow presence role adds nothing to the load's
    /// wait beyond the pull's own bound: seed 001, presence never on the
    /// critical path), and subscribes them before it serves anything: each gets a
    /// fresh GUILD_CREATE first in the new epoch's stream, so the events of
    /// the requests that follow (a message posted right after a move) reach
    /// them. A gateway that does not answer within `guild_pull_timeout_ms`
    /// resubscribes its sessions itself when the new epoch's stream starts.
    /// Returns the gateway nodes that did not answer.
    async fn pull(&self, owner: &mut GuildOwner) -> Vec<String> {
        let gateways = self.cluster.gateways();
        let Ok(ask) = serde_json::to_vec(&FollowsAsk {
            guild_id: owner.guild.id,
        }) else {
            return Vec::new();
        };
        let ask = bytes::Bytes::from(ask);
        // Inside the wait of the caller whose request started the load.
        let limits = &self.shared.limits;
        let timeout = Duration::from_millis(
            limits
                .guild_pull_timeout_ms
                .min(limits.guild_reply_timeout_ms / 2)
                .max(1),
        );
        // One question per gateway node, all at once (bounded by the view),
        // and the presence role's, beside them.
        let subjects: Vec<String> = gateways.iter().map(|n| follows_subject(n)).collect();
        let user_ids: Vec<i64> = owner.members.keys().copied().collect();
        let (statuses, answers) = tokio::join!(
            self.client.ask_presence(owner.guild.id, &user_ids),
            futures_util::future::join_all(subjects.iter().map(|subject| self.bus.request(
                subject,
                ask.clone(),
                timeout
            )),)
        );
        owner.statuses = statuses
            .into_iter()
            .filter(|(id, _)| owner.members.contains_key(id))
            .collect();
        let mut unanswered = Vec::new();
        for (node, answer) in gateways.iter().zip(answers) {
            let followers = answer
                .ok()
                .and_then(|m| serde_json::from_slice::<Vec<Follower>>(&m.payload).ok());
            let Some(followers) = followers else {
                self.counters
                    .pulls_failed_total
                    .fetch_add(1, Ordering::Relaxed);
                unanswered.push(node.clone());
                continue;
            };
            self.counters
                .pulled_sessions_total
                .fetch_add(followers.len() as u64, Ordering::Relaxed);
            for follower in followers {
                owner
                    .pulled
                    .insert((node.clone(), follower.session_id.clone()));
                owner.subscribe(
                    node.clone(),
                    follower.session_id,
                    follower.user_id,
                    follower.intents,
                    follower.large_threshold,
                );
            }
        }
        unanswered
    }

    /// Stops the owners whose guild placement now puts elsewhere, and all
    /// of them when this node's lease is no longer vouched for (renewed
    /// within its TTL): an owner acts only while the registry would call
    /// it one. Each stopped owner forwards what its mailbox holds.
    /// `now_ms` is on [`guildhall_common::state::monotonic_ms`], the
    /// clock leases are timed on.
    pub fn rebalance(&self, now_ms: u64) -> usize {
        let vouched = self.cluster.ring().is_empty() || self.cluster.lease_live(now_ms);
        let mut stopped = 0;
        let mut owners = self
            .owners
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.retain(|guild_id, handle| {
            if !handle.running() {
                return false;
            }
            let mine = self
                .cluster
                .owner_of(*guild_id)
                .is_none_or(|node| node == self.node_name);
            // A guild created since this node's last listing was placed
            // here by a node that listed it (a forwarded request, served
            // ahead of the listing): this node's answer for it is only the
            // plain ring primary's fallback, so it waits for the listing
            // (at most `placement_refresh_interval_ms`) rather than move
            // the guild away and back.
            if vouched && (mine || self.cluster.guild_newer_than_listing(*guild_id)) {
                return true;
            }
            handle.stop.store(true, Ordering::Relaxed);
            stopped += 1;
            false
        });
        drop(owners);
        self.counters
            .moved_out_total
            .fetch_add(stopped as u64, Ordering::Relaxed);
        stopped
    }

    /// Runs [`GuildDirectory::rebalance`] whenever placement changes, and
    /// every `lease_renew_interval_ms` (the lease check).
    pub fn start_rebalance(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let directory = self.clone();
        let period = Duration::from_millis(self.shared.limits.lease_renew_interval_ms.max(1));
        tokio::spawn(async move {
            let mut changes = directory.cluster.placement_changes.subscribe();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = tick.tick() => {}
                }
                directory.rebalance(guildhall_common::state::monotonic_ms());
            }
        })
    }

    fn lock_loads(&self) -> std::sync::MutexGuard<'_, Loads> {
        self.loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands `envelope` to the owner of its guild if it is loaded, else
    /// queues it behind the guild's load; returns it when this request must
    /// start that load.
    fn loaded_or_queue(&self, guild_id: i64, mut envelope: Envelope) -> Option<Envelope> {
        if let Some(owner) = self.loaded(guild_id) {
            self.deliver(&owner, envelope);
            return None;
        }
        let mut loads = self.lock_loads();
        // A load that finished since the look above has handed its queue
        // over already: this request goes after it.
        if let Some(owner) = self.loaded(guild_id) {
            drop(loads);
            self.deliver(&owner, envelope);
            return None;
        }
        let arrival = loads.next_arrival;
        loads.next_arrival += 1;
        match loads.flights.join(guild_id, arrival) {
            Join::Lead => {
                // Gauges are set under the lock, so they never go stale.
                let in_flight = loads.flights.len();
                self.loads.in_flight.store(in_flight, Ordering::Relaxed);
                self.loads
                    .in_flight_peak
                    .fetch_max(in_flight, Ordering::Relaxed);
                drop(loads);
                self.loads.started_total.fetch_add(1, Ordering::Relaxed);
                envelope.queued = true;
                Some(envelope)
            }
            Join::Follow => {
                envelope.queued = true;
                loads.queued.insert(arrival, envelope);
                self.loads
                    .waiters
                    .store(loads.queued.len(), Ordering::Relaxed);
                None
            }
            Join::Rejected(_) => {
                drop(loads);
                self.loads.refused_total.fetch_add(1, Ordering::Relaxed);
                self.refuse(envelope, GuildError::Overloaded);
                None
            }
        }
    }

    /// The load of `guild_id` ended: the request that started it, then
    /// those that waited, in arrival order, go to the new owner (or are
    /// refused with the load's error). The owner becomes reachable only
    /// after its queue is handed over, so nothing overtakes a waiter.
    fn loaded_now(&self, guild_id: i64, first: Envelope, result: Result<OwnerHandle, GuildError>) {
        let mut loads = self.lock_loads();
        let waiting = loads.flights.complete(&guild_id);
        let envelopes: Vec<Envelope> = std::iter::once(first)
            .chain(waiting.iter().filter_map(|a| loads.queued.remove(a)))
            .collect();
        self.loads
            .in_flight
            .store(loads.flights.len(), Ordering::Relaxed);
        self.loads
            .waiters
            .store(loads.queued.len(), Ordering::Relaxed);
        match result {
            Ok(owner) => {
                for envelope in envelopes {
                    self.deliver(&owner.mailbox, envelope);
                }
                self.owners
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(guild_id, owner);
            }
            Err(error) => {
                for envelope in envelopes {
                    self.refuse(envelope, error);
                }
            }
        }
    }

    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Owners running on this node.
    pub fn owners_loaded(&self) -> usize {
        self.owners
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter(|h| h.running())
            .count()
    }

    /// The client other roles reach this node's view of the owners with.
    pub fn client(&self) -> &Arc<GuildsClient> {
        &self.client
    }

    /// Serves this node's guilds role: requests from the bus go to the
    /// owners' mailboxes in the order they arrive. A loaded owner is reached
    /// without awaiting. A guild that is not loaded is loaded once, in a
    /// task of its own (at most `guild_requests_in_flight_max` guilds load at
    /// once); its requests wait behind the load in arrival order (at most
    /// `guild_load_waiters_max`). Beyond either bound: `Overloaded` at once.
    pub async fn serve(
        self: &Arc<Self>,
    ) -> Result<tokio::task::JoinHandle<()>, guildhall_cluster::BusError> {
        // A request the full subscription cannot take is refused at once
        // with Overloaded (503), not left to time out.
        let overloaded = serde_json::to_vec(&GuildReply {
            v: guildhall_proto::bus::ENVELOPE_VERSION,
            result: Err(GuildError::Overloaded),
        })
        .unwrap_or_default();
        let mut requests = self
            .bus
            .subscribe_shedding(
                &guild_requests_subject(&self.node_name),
                None,
                self.shared.limits.bus_subscription_messages_max,
                overloaded.into(),
            )
            .await?;
        let directory = self.clone();
        Ok(tokio::spawn(async move {
            while let Some(message) = requests.next().await {
                let request: GuildRequest =
                    match serde_json::from_slice::<GuildRequest>(&message.payload) {
                        Ok(r) if r.v == guildhall_proto::bus::ENVELOPE_VERSION => r,
                        _ => {
                            directory
                                .counters
                                .malformed_requests_total
                                .fetch_add(1, Ordering::Relaxed);
                            guildhall_common::throttled!(
                                warn,
                                "guilds.malformed_request",
                                "malformed guild request dropped"
                            );
                            continue;
                        }
                    };
                // Nobody waits for the answer (the caller timed out while
                // this process was paused or behind): no load, no claim.
                if message.expired() {
                    directory
                        .counters
                        .requests_expired_total
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let envelope = Envelope {
                    call: request.call,
                    reply: message.reply,
                    deadline: message.deadline,
                    hops: request.hops,
                    queued: false,
                    late: false,
                };
                let guild_id = request.guild_id;
                // A request for a guild placement puts elsewhere (this node
                // gave it up, or the sender's view differs) goes on to the
                // owner in this node's view: answered there, or refused
                // here, never dropped.
                // Except a forwarded request for a guild this node has not
                // listed yet (created since its last listing): the node
                // that forwarded it listed it more recently and placed it
                // here. Sending it back to the plain ring primary would
                // bounce it until the hop limit refuses it.
                let forwarded_ahead_of_listing =
                    request.hops > 0 && directory.cluster.guild_newer_than_listing(guild_id);
                if let Some(owner) = directory.cluster.owner_of(guild_id)
                    && owner != directory.node_name
                    && !forwarded_ahead_of_listing
                {
                    forward(
                        directory.bus.as_ref(),
                        &directory.cluster,
                        &directory.shared.limits,
                        &directory.counters,
                        Some(&owner),
                        guild_id,
                        envelope,
                    );
                    continue;
                }
                let Some(first) = directory.loaded_or_queue(guild_id, envelope) else {
                    continue;
                };
                // Bounded: one task per guild in flight, at most
                // `guild_requests_in_flight_max` of them.
                let directory = directory.clone();
                tokio::spawn(async move {
                    let result = directory.load(guild_id).await;
                    directory.loaded_now(guild_id, first, result);
                });
            }
        }))
    }

    fn deliver(&self, owner: &mpsc::Sender<Envelope>, envelope: Envelope) {
        if let Err(refused) = owner.try_send(envelope) {
            let envelope = match refused {
                mpsc::error::TrySendError::Full(e) | mpsc::error::TrySendError::Closed(e) => e,
            };
            self.counters
                .mailbox_refusals_total
                .fetch_add(1, Ordering::Relaxed);
            self.refuse(envelope, GuildError::Overloaded);
        }
    }

    fn refuse(&self, envelope: Envelope, error: GuildError) {
        if let Some(reply) = envelope.reply {
            answer(self.bus.as_ref(), &reply, Err(error));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HOUR_MS: i64 = 3_600_000;

    fn thread(id: i64, minutes: Option<i64>, archive_ms: i64) -> ChannelRow {
        ChannelRow {
            id,
            kind: 11,
            auto_archive_duration: minutes,
            archive_ms: Some(archive_ms),
            ..ChannelRow::default()
        }
    }

    #[test]
    fn threads_archive_after_their_duration_of_inactivity() {
        let threads = vec![
            thread(1, Some(60), 0),
            thread(2, Some(1_440), 0),
            thread(3, None, 0),
            thread(4, Some(60), 0),
        ];
        // Thread 4 had a message half an hour in: its clock restarted.
        let activity = HashMap::from([(4, HOUR_MS / 2)]);
        assert_eq!(
            threads_due(&threads, &activity, HOUR_MS - 1),
            (vec![], Some(HOUR_MS))
        );
        assert_eq!(
            threads_due(&threads, &activity, HOUR_MS),
            (vec![1], Some(HOUR_MS + HOUR_MS / 2))
        );
        assert_eq!(
            threads_due(&threads, &activity, 24 * HOUR_MS),
            (vec![1, 2, 4], None)
        );
        // Unarchiving (a newer archive time) restarts the clock too.
        assert_eq!(
            auto_archive_at_ms(&thread(1, Some(60), 10 * HOUR_MS), Some(HOUR_MS)),
            Some(11 * HOUR_MS)
        );
        // An archived thread is never due again.
        let archived = ChannelRow {
            archived: true,
            ..thread(1, Some(60), 0)
        };
        assert_eq!(
            threads_due(&[archived], &activity, 24 * HOUR_MS),
            (vec![], None)
        );
    }
}
