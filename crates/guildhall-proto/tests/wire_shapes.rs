//! Snapshot tests of the wire payloads against the shapes every bot library
//! accepted (fixtures: payloads that discord.py, discord.js, twilight and
//! serenity all accepted unmodified). A payload must carry every field of
//! its fixture with the same JSON type (null matches anything nullable);
//! extra fields are allowed only where listed.

// Helpers of a test file: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use guildhall_proto::error::{ErrorBody, ErrorCode, RateLimitedBody};
use guildhall_proto::model::*;
use guildhall_proto::timestamp::format_unix_ms;
use guildhall_proto::{Snowflake, gateway::EncodedDispatch};
use serde_json::Value;

fn id(n: u64) -> Snowflake {
    Snowflake::new(n).unwrap()
}

fn user(n: u64, name: &str, bot: bool) -> User {
    User {
        id: id(n),
        username: name.into(),
        discriminator: "0".into(),
        global_name: None,
        avatar: None,
        bot,
        mfa_enabled: false,
        verified: true,
        flags: 0,
        public_flags: 0,
    }
}

fn member(u: Option<User>) -> Member {
    Member {
        communication_disabled_until: None,
        user: u,
        nick: None,
        avatar: None,
        roles: vec![],
        joined_at: format_unix_ms(1_704_067_200_000),
        premium_since: None,
        deaf: false,
        mute: false,
        flags: 0,
        pending: false,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every key of `want` is in `got` with a compatible type, recursively.
fn check_shape(path: &str, want: &Value, got: &Value, extra_ok: &[&str]) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g.get(k).unwrap_or_else(|| panic!("{path}.{k} is missing"));
                check_shape(&format!("{path}.{k}"), wv, gv, extra_ok);
            }
            for k in g.keys() {
                assert!(
                    w.contains_key(k) || extra_ok.contains(&k.as_str()),
                    "{path}.{k} is not in the accepted shape"
                );
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            if let (Some(w0), Some(g0)) = (w.first(), g.first()) {
                check_shape(&format!("{path}[0]"), w0, g0, extra_ok);
            }
        }
        (Value::Null, _) | (_, Value::Null) => {}
        (w, g) => assert_eq!(kind(w), kind(g), "{path} has the wrong JSON type"),
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn sample_guild() -> Guild {
    let gid = id(2_000_000_000_000_000_001);
    Guild {
        id: gid,
        name: "Test Guild".into(),
        icon: None,
        splash: None,
        discovery_splash: None,
        owner_id: id(1_000_000_000_000_000_002),
        afk_channel_id: None,
        afk_timeout: 300,
        verification_level: 0,
        default_message_notifications: 0,
        explicit_content_filter: 0,
        roles: vec![Role {
            tags: None,
            id: gid,
            name: "@everyone".into(),
            color: 0,
            colors: RoleColors {
                primary_color: 0,
                secondary_color: None,
                tertiary_color: None,
            },
            hoist: false,
            icon: None,
            unicode_emoji: None,
            position: 0,
            permissions: "117824".into(),
            managed: false,
            mentionable: false,
            flags: 0,
        }],
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
        joined_at: format_unix_ms(1_704_067_200_000),
        large: false,
        unavailable: false,
        member_count: 1,
        voice_states: vec![],
        members: vec![member(Some(user(
            1_000_000_000_000_000_001,
            "testbot",
            true,
        )))],
        channels: vec![Channel {
            default_auto_archive_duration: None,
            id: id(3_000_000_000_000_000_001),
            kind: 0,
            guild_id: None,
            name: "general".into(),
            position: 0,
            permission_overwrites: vec![],
            topic: None,
            nsfw: false,
            last_message_id: None,
            rate_limit_per_user: 0,
            parent_id: None,
            flags: 0,
            default_thread_rate_limit_per_user: None,
            voice: None,
            forum: None,
            thread: None,
        }],
        threads: vec![],
        presences: vec![],
        stage_instances: vec![],
        guild_scheduled_events: vec![],
        soundboard_sounds: vec![],
    }
}

#[test]
fn ready_matches_the_accepted_shape() {
    let ready = Ready {
        v: 10,
        user: user(1_000_000_000_000_000_001, "testbot", true),
        guilds: vec![UnavailableGuild {
            id: id(2_000_000_000_000_000_001),
            unavailable: true,
        }],
        session_id: "sess1".into(),
        resume_gateway_url: "ws://127.0.0.1:8765".into(),
        shard: Some([0, 1]),
        application: PartialApplication {
            id: id(1_000_000_000_000_000_001),
            flags: 0,
        },
        private_channels: vec![],
        relationships: vec![],
        presences: vec![],
        guild_join_requests: vec![],
        user_settings: Default::default(),
    };
    let got = serde_json::to_value(&ready).unwrap();
    check_shape("READY", &fixture("ready"), &got, &[]);
    assert_eq!(
        got,
        fixture("ready"),
        "READY is byte-for-byte the accepted payload"
    );
}

#[test]
fn guild_create_matches_the_accepted_shape() {
    let got = serde_json::to_value(sample_guild()).unwrap();
    check_shape("GUILD_CREATE", &fixture("guild_create"), &got, &[]);
    assert_eq!(got, fixture("guild_create"));
    assert_eq!(
        got["roles"][0]["id"], got["id"],
        "@everyone's id is the guild's"
    );
}

#[test]
fn message_matches_the_accepted_shape() {
    let mut author = user(1_000_000_000_000_000_002, "alice", false);
    author.global_name = Some("Alice".into());
    let message = Message {
        id: id(4_000_000_000_000_000_001),
        channel_id: id(3_000_000_000_000_000_001),
        guild_id: Some(id(2_000_000_000_000_000_001)),
        author,
        member: Some(member(None)),
        content: "!ping".into(),
        timestamp: format_unix_ms(1_704_067_200_000),
        edited_timestamp: None,
        tts: false,
        mention_everyone: false,
        mentions: vec![],
        mention_roles: vec![],
        attachments: vec![],
        embeds: vec![],
        pinned: false,
        kind: 0,
        flags: 0,
        components: vec![],
        nonce: None,
        webhook_id: None,
        application_id: None,
        interaction_metadata: None,
        message_reference: None,
        referenced_message: None,
        reactions: None,
    };
    let got = serde_json::to_value(&message).unwrap();
    // Authors carry the full user object; the extra user fields are harmless
    // to every library and needed elsewhere.
    check_shape(
        "MESSAGE_CREATE",
        &fixture("message"),
        &got,
        &["mfa_enabled", "verified", "flags"],
    );
    let blank = serde_json::to_value(message.blanked()).unwrap();
    assert_eq!(blank["content"], "");
    assert_eq!(blank["id"], got["id"]);
}

/// A message's `reactions`: Discord's Reaction object with exactly its
/// documented fields (the example message of resources/message), a custom
/// emoji's id as a string; absent, not empty, on a message without any.
#[test]
fn reactions_have_exactly_the_documented_fields() {
    let mut message = message_of(user(1_000_000_000_000_000_002, "alice", false));
    assert!(
        serde_json::to_value(&message)
            .unwrap()
            .get("reactions")
            .is_none()
    );
    let reaction = |id, name: &str, count, me| Reaction {
        count,
        count_details: ReactionCountDetails {
            burst: 0,
            normal: count,
        },
        me,
        me_burst: false,
        emoji: PartialEmoji {
            id,
            name: Some(name.into()),
        },
        burst_colors: vec![],
    };
    message.reactions = Some(vec![
        reaction(None, "🔥", 1, false),
        reaction(Some(id(7_000_000_000_000_000_001)), "blob", 2, true),
    ]);
    let got = serde_json::to_value(&message).unwrap();
    assert_eq!(
        got["reactions"],
        serde_json::json!([
            {"count": 1, "count_details": {"burst": 0, "normal": 1}, "me": false,
             "me_burst": false, "emoji": {"id": null, "name": "🔥"}, "burst_colors": []},
            {"count": 2, "count_details": {"burst": 0, "normal": 2}, "me": true,
             "me_burst": false, "emoji": {"id": "7000000000000000001", "name": "blob"},
             "burst_colors": []}
        ])
    );
    let back: Message = serde_json::from_value(got).unwrap();
    assert_eq!(back, message);
}

/// The Webhook object's field set, exactly (Discord's example Incoming
/// webhook plus `url`): with the creator and token for a caller with
/// MANAGE_WEBHOOKS, and without `user` for a token holder.
#[test]
fn webhook_has_exactly_the_documented_fields() {
    let webhook = Webhook {
        id: id(5_000_000_000_000_000_001),
        kind: WEBHOOK_INCOMING,
        guild_id: Some(id(2_000_000_000_000_000_001)),
        channel_id: Some(id(3_000_000_000_000_000_001)),
        user: Some(user(1_000_000_000_000_000_002, "alice", false)),
        name: Some("hook".into()),
        avatar: None,
        token: Some("t".repeat(68)),
        application_id: None,
        url: Some("http://x/api/webhooks/5000000000000000001/tttt".into()),
    };
    let got = serde_json::to_value(&webhook).unwrap();
    let mut keys: Vec<&str> = got
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "application_id",
            "avatar",
            "channel_id",
            "guild_id",
            "id",
            "name",
            "token",
            "type",
            "url",
            "user"
        ]
    );
    assert_eq!(got["type"], 1);
    assert_eq!(got["id"], "5000000000000000001");
    assert!(got["application_id"].is_null() && got["avatar"].is_null());
    let by_token = Webhook {
        user: None,
        ..webhook
    };
    let got = serde_json::to_value(&by_token).unwrap();
    assert!(got.get("user").is_none());
    assert_eq!(got.as_object().unwrap().len(), 9);
}

/// A webhook's message: `webhook_id`, and an author that is the webhook
/// (discriminator `0000`, `bot: true`), in the accepted message shape.
#[test]
fn webhook_message_carries_webhook_id_and_author() {
    let author = User::webhook(id(5_000_000_000_000_000_001), "hook".into(), None);
    let message = Message {
        id: id(4_000_000_000_000_000_001),
        channel_id: id(3_000_000_000_000_000_001),
        guild_id: Some(id(2_000_000_000_000_000_001)),
        author,
        member: None,
        content: "from a webhook".into(),
        timestamp: format_unix_ms(1_704_067_200_000),
        edited_timestamp: None,
        tts: false,
        mention_everyone: false,
        mentions: vec![],
        mention_roles: vec![],
        attachments: vec![],
        embeds: vec![],
        pinned: false,
        kind: 0,
        flags: 0,
        components: vec![],
        nonce: None,
        webhook_id: Some(id(5_000_000_000_000_000_001)),
        application_id: None,
        interaction_metadata: None,
        message_reference: None,
        referenced_message: None,
        reactions: None,
    };
    let got = serde_json::to_value(&message).unwrap();
    let mut want = fixture("message");
    want.as_object_mut().unwrap().remove("member");
    check_shape(
        "MESSAGE_CREATE",
        &want,
        &got,
        &["mfa_enabled", "verified", "flags", "webhook_id"],
    );
    assert_eq!(got["webhook_id"], "5000000000000000001");
    assert_eq!(got["author"]["id"], got["webhook_id"]);
    assert_eq!(got["author"]["discriminator"], "0000");
    assert_eq!(got["author"]["bot"], true);
}

#[test]
fn dispatch_frame_wraps_the_payload_unchanged() {
    let event = EncodedDispatch::new("GUILD_CREATE", &sample_guild()).unwrap();
    let frame: Value = serde_json::from_str(&event.frame(42)).unwrap();
    assert_eq!(frame["op"], 0);
    assert_eq!(frame["t"], "GUILD_CREATE");
    assert_eq!(frame["s"], 42);
    assert_eq!(frame["d"], fixture("guild_create"));
}

#[test]
fn error_bodies_follow_discord() {
    let body = serde_json::to_value(ErrorBody::new(ErrorCode::UnknownChannel)).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"code": 10003, "message": "Unknown Channel"})
    );
    assert_eq!(ErrorCode::InvalidJson.status(), 400);
    assert_eq!(ErrorCode::MissingAccess.status(), 403);
    assert_eq!(ErrorCode::Unauthorized.status(), 401);
    let limited = serde_json::to_value(RateLimitedBody::new(1.5, false)).unwrap();
    assert_eq!(
        limited,
        serde_json::json!({"message": "You are being rate limited.", "retry_after": 1.5, "global": false, "code": 0})
    );
}

fn message_of(author: User) -> Message {
    Message {
        id: id(4_000_000_000_000_000_002),
        channel_id: id(3_000_000_000_000_000_001),
        guild_id: Some(id(2_000_000_000_000_000_001)),
        author,
        member: None,
        content: "pong".into(),
        timestamp: format_unix_ms(1_704_067_200_000),
        edited_timestamp: None,
        tts: false,
        mention_everyone: false,
        mentions: vec![],
        mention_roles: vec![],
        attachments: vec![],
        embeds: vec![],
        pinned: false,
        kind: 20,
        flags: 0,
        components: vec![],
        nonce: None,
        webhook_id: Some(id(6_000_000_000_000_000_001)),
        application_id: Some(id(6_000_000_000_000_000_001)),
        interaction_metadata: None,
        message_reference: None,
        referenced_message: None,
        reactions: None,
    }
}

/// The Interaction object of a slash command, every documented field with
/// its JSON type (discord-api-docs' Interaction Structure; `guild`,
/// `channel`, `member` as for a guild interaction).
#[test]
fn interaction_has_the_documented_fields() {
    use guildhall_proto::interactions::*;
    let owners = [("0".to_owned(), id(2_000_000_000_000_000_001))].into();
    let interaction = Interaction {
        id: id(7_000_000_000_000_000_001),
        application_id: id(6_000_000_000_000_000_001),
        kind: APPLICATION_COMMAND,
        data: InteractionData::Command(CommandData {
            id: id(8_000_000_000_000_000_001),
            name: "roll".into(),
            kind: 1,
            resolved: Some(Resolved {
                users: [("42".to_owned(), user(42, "who", false))].into(),
                ..Resolved::default()
            }),
            options: Some(vec![DataOption {
                name: "sides".into(),
                kind: 4,
                value: Some(serde_json::json!(6)),
                options: None,
                focused: None,
            }]),
            guild_id: None,
            target_id: None,
        }),
        guild_id: Some(id(2_000_000_000_000_000_001)),
        guild: Some(InteractionGuild {
            id: id(2_000_000_000_000_000_001),
            features: vec![],
            locale: "en-US".into(),
        }),
        channel: serde_json::json!({"id": "3000000000000000001", "type": 0}),
        channel_id: id(3_000_000_000_000_000_001),
        member: Some(InteractionMember {
            member: member(Some(user(1, "alice", false))),
            permissions: "1024".into(),
        }),
        user: None,
        token: "t".into(),
        version: 1,
        message: None,
        app_permissions: "3072".into(),
        locale: "en-US".into(),
        guild_locale: Some("en-US".into()),
        entitlements: vec![],
        authorizing_integration_owners: owners,
        context: CONTEXT_GUILD,
        attachment_size_limit: 10_485_760,
    };
    let got = serde_json::to_value(&interaction).unwrap();
    let want = serde_json::json!({
        "id": "", "application_id": "", "type": 2, "token": "", "version": 1,
        "data": {"id": "", "name": "", "type": 1, "options": [{"name": "", "type": 4, "value": 6}],
                 "resolved": {"users": {"42": got["data"]["resolved"]["users"]["42"].clone()}}},
        "guild": {"id": "", "features": [], "locale": ""}, "guild_id": "", "guild_locale": "",
        "channel": {"id": "", "type": 0}, "channel_id": "",
        "member": got["member"].clone(), "locale": "", "app_permissions": "",
        "entitlements": [], "authorizing_integration_owners": {"0": ""}, "context": 0,
        "attachment_size_limit": 0,
    });
    check_shape("INTERACTION_CREATE", &want, &got, &[]);
    assert_eq!(got["member"]["permissions"], "1024");
    assert_eq!(got["member"]["user"]["id"], "1");
    assert!(got.get("user").is_none() && got.get("message").is_none());
    // The other data shapes.
    let component = serde_json::to_value(InteractionData::Component(ComponentData {
        custom_id: "go".into(),
        component_type: 2,
        values: None,
        resolved: None,
    }))
    .unwrap();
    assert_eq!(
        component,
        serde_json::json!({"custom_id": "go", "component_type": 2})
    );
    let modal = serde_json::to_value(InteractionData::Modal(ModalData {
        custom_id: "m".into(),
        components: vec![],
        resolved: None,
    }))
    .unwrap();
    assert_eq!(
        modal,
        serde_json::json!({"custom_id": "m", "components": []})
    );
}

/// A response message: `interaction_metadata`, `webhook_id` and
/// `application_id` both the application, the bot as author; and the
/// `?with_response` body.
#[test]
fn interaction_response_shapes() {
    use guildhall_proto::interactions::*;
    let owners: std::collections::BTreeMap<_, _> =
        [("0".to_owned(), id(2_000_000_000_000_000_001))].into();
    let mut message = message_of(user(9, "bot", true));
    message.interaction_metadata = Some(InteractionMetadata {
        id: id(7_000_000_000_000_000_001),
        kind: APPLICATION_COMMAND,
        user: user(1, "alice", false),
        authorizing_integration_owners: owners.clone(),
        original_response_message_id: None,
        interacted_message_id: None,
        triggering_interaction_metadata: None,
        name: Some("roll".into()),
        command_type: Some(1),
        target_user: None,
        target_message_id: None,
    });
    let got = serde_json::to_value(&message).unwrap();
    let mut want = fixture("message");
    want.as_object_mut().unwrap().remove("member");
    check_shape(
        "MESSAGE_CREATE",
        &want,
        &got,
        &[
            "mfa_enabled",
            "verified",
            "flags",
            "webhook_id",
            "application_id",
            "interaction_metadata",
        ],
    );
    let metadata = &got["interaction_metadata"];
    assert_eq!(metadata["id"], "7000000000000000001");
    assert_eq!(metadata["type"], 2);
    assert_eq!(metadata["user"]["id"], "1");
    assert_eq!(
        metadata["authorizing_integration_owners"]["0"],
        "2000000000000000001"
    );
    assert_eq!(got["webhook_id"], got["application_id"]);
    assert_eq!(got["author"]["bot"], true);

    let body = CallbackResponse {
        interaction: CallbackInteraction {
            id: id(7_000_000_000_000_000_001),
            kind: APPLICATION_COMMAND,
            response_message_id: Some(id(4_000_000_000_000_000_002)),
            response_message_loading: Some(false),
            response_message_ephemeral: Some(false),
        },
        resource: Some(CallbackResource {
            kind: CHANNEL_MESSAGE_WITH_SOURCE,
            message: Some(message_of(user(9, "bot", true))),
        }),
    };
    let got = serde_json::to_value(&body).unwrap();
    assert_eq!(got["interaction"]["id"], "7000000000000000001");
    assert_eq!(got["interaction"]["type"], 2);
    assert_eq!(
        got["interaction"]["response_message_id"],
        "4000000000000000002"
    );
    assert_eq!(got["interaction"]["response_message_loading"], false);
    assert_eq!(got["resource"]["type"], 4);
    assert_eq!(got["resource"]["message"]["id"], "4000000000000000002");
    let event = serde_json::to_value(UserInteractionEvent {
        id: id(7_000_000_000_000_000_001),
        nonce: Some("n".into()),
    })
    .unwrap();
    assert_eq!(
        event,
        serde_json::json!({"id": "7000000000000000001", "nonce": "n"})
    );
}

/// A reply (type 19): `message_reference` exactly as Discord's Message
/// Reference object is received (`type`, `message_id`, `channel_id`,
/// `guild_id`; `fail_if_not_exists` is a sending option, never echoed) and
/// `referenced_message` one level deep (the referenced message carries no
/// `referenced_message` of its own); `null` once it was deleted; both
/// absent on a plain message. Round-trips through the derive, so a library
/// payload with `"referenced_message": null` keeps its null.
#[test]
fn reply_carries_its_reference_one_level_deep() {
    let reference = MessageReference {
        kind: 0,
        message_id: id(4_000_000_000_000_000_001),
        channel_id: id(3_000_000_000_000_000_001),
        guild_id: Some(id(2_000_000_000_000_000_001)),
    };
    let mut replied_to = message_of(user(1, "alice", false));
    replied_to.id = reference.message_id;
    replied_to.kind = 19;
    replied_to.message_reference = Some(reference.clone());
    let mut reply = message_of(user(2, "bob", false));
    reply.kind = 19;
    reply.message_reference = Some(reference.clone());
    reply.referenced_message = Some(Some(Box::new(replied_to)));
    let got = serde_json::to_value(&reply).unwrap();
    let mut want = fixture("message");
    want.as_object_mut().unwrap().remove("member");
    check_shape(
        "MESSAGE_CREATE",
        &want,
        &got,
        &[
            "mfa_enabled",
            "verified",
            "flags",
            "webhook_id",
            "application_id",
            "message_reference",
            "referenced_message",
        ],
    );
    assert_eq!(got["type"], 19);
    assert_eq!(
        got["message_reference"],
        serde_json::json!({"type": 0, "message_id": "4000000000000000001",
            "channel_id": "3000000000000000001", "guild_id": "2000000000000000001"})
    );
    let referenced = &got["referenced_message"];
    assert_eq!(referenced["id"], "4000000000000000001");
    assert_eq!(referenced["author"]["id"], "1");
    assert_eq!(referenced["message_reference"], got["message_reference"]);
    assert!(
        referenced.get("referenced_message").is_none(),
        "{referenced}"
    );

    // Deleted: null, not absent; a DM's reference has no guild_id.
    reply.referenced_message = Some(None);
    reply.message_reference = Some(MessageReference {
        guild_id: None,
        ..reference
    });
    let got = serde_json::to_value(&reply).unwrap();
    assert!(got["referenced_message"].is_null());
    assert!(got.get("referenced_message").is_some());
    assert!(got["message_reference"].get("guild_id").is_none());
    let back: Message = serde_json::from_value(got).unwrap();
    assert_eq!(back.referenced_message, Some(None));

    // A plain message carries neither field.
    let plain = serde_json::to_value(message_of(user(2, "bob", false))).unwrap();
    assert!(plain.get("message_reference").is_none());
    assert!(plain.get("referenced_message").is_none());
}

/// A presence as GUILD_CREATE, GUILD_MEMBERS_CHUNK and PRESENCE_UPDATE
/// carry it: Discord's Presence Update fields, `guild_id` only where it
/// names the guild, the status per client only for a client that is on.
#[test]
fn presences_have_the_documented_fields() {
    let user = id(1_000_000_000_000_000_002);
    let guild = id(1_000_000_000_000_000_009);
    assert_eq!(
        serde_json::to_value(Presence::of(user, Some(guild), "dnd")).unwrap(),
        serde_json::json!({"user": {"id": "1000000000000000002"}, "guild_id": "1000000000000000009",
            "status": "dnd", "activities": [], "client_status": {"web": "dnd"}})
    );
    assert_eq!(
        serde_json::to_value(Presence::of(user, None, "offline")).unwrap(),
        serde_json::json!({"user": {"id": "1000000000000000002"}, "status": "offline",
            "activities": [], "client_status": {}})
    );
}
