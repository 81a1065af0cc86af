//! The wire objects of store rows that more than one role answers with
//! (the guild owner's GUILD_CREATE, REST, interactions, webhooks): built in
//! one place so a field cannot differ between them.

use crate::state::sf;
use guildhall_proto::model::{
    Channel, DefaultReaction, ForumChannelFields, ForumTag, ThreadFields, ThreadMember,
    ThreadMetadata, User, VoiceChannelFields,
};
use guildhall_proto::timestamp::format_unix_ms;
use guildhall_store::{ChannelRow, ThreadMemberRow, UserRow};

/// Builds the wire user of a row.
pub fn wire_user(user: &UserRow) -> User {
    User {
        id: sf(user.id),
        username: user.username.clone(),
        discriminator: "0".into(),
        global_name: user.global_name.clone(),
        avatar: None,
        bot: user.bot,
        mfa_enabled: false,
        verified: true,
        flags: 0,
        public_flags: 0,
    }
}

/// Builds the wire channel of a row.
pub fn wire_channel(row: &ChannelRow, with_guild: bool) -> Channel {
    Channel {
        id: sf(row.id),
        kind: u8::try_from(row.kind).unwrap_or(0),
        guild_id: if with_guild {
            row.guild_id.map(sf)
        } else {
            None
        },
        name: row.name.clone(),
        position: i32::try_from(row.position).unwrap_or(0),
        permission_overwrites: guildhall_proto::permissions::Overwrite::parse_stored(
            &row.permission_overwrites,
        )
        .iter()
        .map(guildhall_proto::permissions::Overwrite::to_wire)
        .collect(),
        topic: row.topic.clone(),
        nsfw: row.nsfw,
        last_message_id: None,
        rate_limit_per_user: u32::try_from(row.rate_limit_per_user).unwrap_or(0),
        parent_id: row.parent_id.map(sf),
        flags: 0,
        default_auto_archive_duration: row
            .default_auto_archive_duration
            .and_then(|m| u32::try_from(m).ok()),
        default_thread_rate_limit_per_user: matches!(row.kind, 0 | 5 | 15 | 16)
            .then(|| u32::try_from(row.default_thread_rate_limit_per_user).unwrap_or(0)),
        forum: matches!(row.kind, 15 | 16).then(|| ForumChannelFields {
            available_tags: stored_tags(&row.available_tags),
            default_reaction_emoji: row
                .default_reaction_emoji
                .as_deref()
                .and_then(|json| serde_json::from_str::<DefaultReaction>(json).ok()),
            default_sort_order: row
                .default_sort_order
                .and_then(|order| u8::try_from(order).ok()),
            default_forum_layout: u8::try_from(row.default_forum_layout).unwrap_or(0),
        }),
        // Voice and stage channels (no region choice here: automatic).
        voice: matches!(row.kind, 2 | 13).then_some(VoiceChannelFields {
            bitrate: u32::try_from(row.bitrate).unwrap_or(64_000),
            user_limit: u32::try_from(row.user_limit).unwrap_or(0),
            rtc_region: None,
            video_quality_mode: u8::try_from(row.video_quality_mode).unwrap_or(1),
        }),
        thread: guildhall_store::THREAD_KINDS
            .contains(&row.kind)
            .then(|| wire_thread_fields(row)),
    }
}

/// A forum's stored tags (the wire form's JSON; unreadable reads as none,
/// as overwrites do).
pub fn stored_tags(json: &str) -> Vec<ForumTag> {
    serde_json::from_str(json).unwrap_or_default()
}

/// A post's stored applied tag ids.
pub fn stored_applied_tags(json: &str) -> Vec<guildhall_proto::Snowflake> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Discord counts a thread's members up to this (an approximation its
/// clients show).
const THREAD_MEMBER_COUNT_SHOWN_MAX: i64 = 50;

/// A thread row's own fields (no `member`: that is the caller's to add).
fn wire_thread_fields(row: &ChannelRow) -> ThreadFields {
    let created_ms = row.thread_created_ms.unwrap_or(0);
    let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
    ThreadFields {
        owner_id: sf(row.owner_id.unwrap_or(0)),
        thread_metadata: ThreadMetadata {
            archived: row.archived,
            auto_archive_duration: row
                .auto_archive_duration
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(1440),
            archive_timestamp: format_unix_ms(
                u64::try_from(row.archive_ms.unwrap_or(created_ms)).unwrap_or(0),
            ),
            locked: row.locked,
            invitable: (row.kind == 12).then_some(row.invitable),
            create_timestamp: row
                .thread_created_ms
                .map(|ms| format_unix_ms(u64::try_from(ms).unwrap_or(0))),
        },
        message_count: count(row.message_count),
        member_count: count(row.member_count.min(THREAD_MEMBER_COUNT_SHOWN_MAX)),
        total_message_sent: count(row.total_message_sent),
        applied_tags: stored_applied_tags(&row.applied_tags),
        member: None,
        newly_created: None,
    }
}

/// The wire thread member of a row; `with_ids` false inside GUILD_CREATE
/// and a channel's own `member` field, where Discord omits `id` and
/// `user_id`.
pub fn wire_thread_member(row: &ThreadMemberRow, with_ids: bool) -> ThreadMember {
    ThreadMember {
        id: with_ids.then(|| sf(row.thread_id)),
        user_id: with_ids.then(|| sf(row.user_id)),
        join_timestamp: format_unix_ms(u64::try_from(row.join_ms).unwrap_or(0)),
        flags: u64::try_from(row.flags).unwrap_or(0),
        member: None,
    }
}
