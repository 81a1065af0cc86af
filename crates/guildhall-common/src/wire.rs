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
        nsfw: false,
        last_message_id: None,
        rate_limit_per_user: 0,
        parent_id: None,
        flags: 0,
        // Voice channels: Discord's defaults (this server does not store a
        // bitrate or a user limit yet).
        voice: (row.kind == 2).then_some(VoiceChannelFields {
            bitrate: 64_000,
            user_limit: 0,
            rtc_region: None,
            video_quality_mode: 1,
        }),
    }
}
