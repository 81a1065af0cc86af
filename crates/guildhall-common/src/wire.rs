//! The wire objects of store rows that more than one role answers with
//! (the guild owner's GUILD_CREATE, REST, interactions, webhooks): built in
//! one place so a field cannot differ between them.

use crate::state::sf;
use guildhall_proto::model::{Channel, User, VoiceChannelFields};
use guildhall_store::{ChannelRow, UserRow};

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
        // Voice and stage channels (no region choice here: automatic).
        voice: matches!(row.kind, 2 | 13).then_some(VoiceChannelFields {
            bitrate: u32::try_from(row.bitrate).unwrap_or(64_000),
            user_limit: u32::try_from(row.user_limit).unwrap_or(0),
            rtc_region: None,
            video_quality_mode: u8::try_from(row.video_quality_mode).unwrap_or(1),
        }),
    }
}
