//! Voice in embedded mode, over real sockets: op 4 → VOICE_STATE_UPDATE and
//! VOICE_SERVER_UPDATE with the SFU's endpoint, the voice gateway v8
//! handshake, UDP IP discovery, and audio forwarded between two
//! participants, each decrypting with their own key (one in each
//! documented mode); the voice states as Discord documents them; a call
//! released when its last participant leaves.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::{Client, TestNode};
use guildhall_loadgen::voice::{GatewaySession, Mode, VoiceClient};
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::time::Duration;

/// A guild with a voice channel and a second member: (owner token, owner
/// id, member token, member id, guild id, voice channel id).
async fn voice_guild(node: &TestNode) -> (String, String, String, String, String, String) {
    let (owner, owner_id) = node.register("alice").await;
    let (guild_id, general) = node.guild(&owner, "Voice").await;
    let (status, voice) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "Lounge", "type": 2})),
        )
        .await;
    assert_eq!(status, 200, "{voice}");
    let code = node.invite(&owner, &general).await;
    let (member, member_id) = node.register("bob").await;
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&member), None)
        .await;
    assert_eq!(status, 200, "{body}");
    (
        owner,
        owner_id,
        member,
        member_id,
        guild_id,
        voice["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn audio_is_forwarded_and_decrypted_by_the_other_participant() {
    let node = TestNode::start().await;
    let (owner, owner_id, member, member_id, guild_id, channel) = voice_guild(&node).await;
    let host = node.base.trim_start_matches("http://").to_owned();

    let mut a = GatewaySession::identify(&host, &owner).await.unwrap();
    let server_a = a.join(&guild_id, &channel).await.unwrap();
    assert!(
        server_a.endpoint.ends_with("/voice") && server_a.token.len() >= 32,
        "{server_a:?}"
    );
    let mut speaker = VoiceClient::connect(&server_a, &owner_id, &a.session_id, Mode::XChaCha20)
        .await
        .unwrap();
    let mut b = GatewaySession::identify(&host, &member).await.unwrap();
    let server_b = match b.join(&guild_id, &channel).await {
        Ok(server) => server,
        Err(error) => {
            let text = node.metrics_text().await;
            let voice: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with('#') && (l.contains("voice") || l.contains("sfu")))
                .collect();
            panic!("second join: {error}\n{}", voice.join("\n"));
        }
    };
    assert_eq!(server_b.endpoint, server_a.endpoint, "one call, one SFU");
    assert_ne!(server_b.token, server_a.token, "a token per participant");
    let mut listener = VoiceClient::connect(&server_b, &member_id, &b.session_id, Mode::Aes256Gcm)
        .await
        .unwrap();
    assert_ne!(speaker.ssrc, listener.ssrc);

    speaker.speak().await.unwrap();
    // The listener learns the speaker's SSRC (op 5 with the user id).
    let mut speaking = None;
    for _ in 0..20 {
        listener.pump(Duration::from_millis(100)).await;
        speaking = listener
            .events
            .iter()
            .find(|e| e["op"] == 5)
            .map(|e| e["d"].clone());
        if speaking.is_some() {
            break;
        }
    }
    let speaking = speaking.expect("op 5 speaking relayed");
    assert_eq!(
        (speaking["user_id"].as_str(), speaking["ssrc"].as_u64()),
        (Some(owner_id.as_str()), Some(u64::from(speaker.ssrc)))
    );

    const FRAMES: u32 = 50;
    for i in 0..FRAMES {
        speaker
            .send_frame(format!("frame-{i:04}").as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut got = Vec::new();
    while got.len() < FRAMES as usize {
        match listener.recv_frame(Duration::from_secs(5)).await {
            Some(Ok((ssrc, payload))) => {
                assert_eq!(ssrc, speaker.ssrc, "the sender's SSRC is kept");
                got.push(String::from_utf8(payload).unwrap());
            }
            Some(Err(())) => panic!("a forwarded packet did not decrypt with the listener's key"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..FRAMES).map(|i| format!("frame-{i:04}")).collect();
    assert_eq!(got, expected, "every frame, in order, byte for byte");
    assert!(node.metric("guildhall_sfu_decrypted_total").await >= u64::from(FRAMES));
    assert_eq!(node.metric("guildhall_sfu_auth_failures_total").await, 0);
    assert_eq!(node.metric("guildhall_sfu_calls").await, 1);

    // Both leave: the call is released on the SFU.
    a.leave(&guild_id).await.unwrap();
    b.leave(&guild_id).await.unwrap();
    let mut calls = 1;
    for _ in 0..50 {
        calls = node.metric("guildhall_sfu_calls").await;
        if calls == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(calls, 0, "the empty call's allocation is released");
    drop((speaker, listener));
    node.stop().await;
}

/// The fields Discord's voice state object documents.
fn assert_voice_state(state: &Value, guild_id: &str, user_id: &str, channel: Option<&str>) {
    let d = &state["d"];
    for field in [
        "guild_id",
        "channel_id",
        "user_id",
        "member",
        "session_id",
        "deaf",
        "mute",
        "self_deaf",
        "self_mute",
        "self_video",
        "suppress",
        "request_to_speak_timestamp",
    ] {
        assert!(d.get(field).is_some(), "voice state lacks {field}: {d}");
    }
    assert_eq!(d["guild_id"], guild_id);
    assert_eq!(d["user_id"], user_id);
    assert_eq!(d["channel_id"].as_str(), channel);
    assert!(d["session_id"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn voice_states_follow_the_documented_payloads() {
    let node = TestNode::start().await;
    let (owner, owner_id, member, _member_id, guild_id, channel) = voice_guild(&node).await;
    let (status, second) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "Stage left", "type": 2})),
        )
        .await;
    assert_eq!(status, 200);
    let second = second["id"].as_str().unwrap().to_owned();
    let wanted = intents::GUILDS | intents::GUILD_VOICE_STATES;
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&member, wanted).await;
    watcher.dispatch("GUILD_CREATE").await;
    let mut joiner = Client::connect(&node.ws).await;
    joiner.identify(&owner, wanted).await;
    joiner.dispatch("GUILD_CREATE").await;

    // Join: the guild hears it; the joiner gets VOICE_SERVER_UPDATE.
    joiner
        .send(json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": channel, "self_mute": false, "self_deaf": false}}))
        .await;
    let state = watcher.dispatch("VOICE_STATE_UPDATE").await;
    assert_voice_state(&state, &guild_id, &owner_id, Some(&channel));
    let server = joiner.dispatch("VOICE_SERVER_UPDATE").await;
    assert_eq!(server["d"]["guild_id"], guild_id.as_str());
    assert!(
        server["d"]["endpoint"]
            .as_str()
            .is_some_and(|e| !e.contains("://")),
        "{server}"
    );
    assert!(server["d"]["token"].as_str().is_some_and(|t| !t.is_empty()));

    // Mute and deafen: the same channel, the flags changed.
    joiner
        .send(json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": channel, "self_mute": true, "self_deaf": true}}))
        .await;
    let state = watcher.dispatch("VOICE_STATE_UPDATE").await;
    assert_voice_state(&state, &guild_id, &owner_id, Some(&channel));
    assert_eq!(
        (
            state["d"]["self_mute"].as_bool(),
            state["d"]["self_deaf"].as_bool()
        ),
        (Some(true), Some(true))
    );

    // A new session of the guild sees the state in GUILD_CREATE.
    let mut late = Client::connect(&node.ws).await;
    late.identify(&member, wanted).await;
    let create = late.dispatch("GUILD_CREATE").await;
    let states = create["d"]["voice_states"].as_array().unwrap();
    assert_eq!(states.len(), 1, "{states:?}");
    assert_eq!(states[0]["user_id"], owner_id.as_str());
    assert_eq!(states[0]["channel_id"], channel.as_str());

    // Move to the other voice channel: a state for it, and a new server.
    joiner
        .send(json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": second, "self_mute": false, "self_deaf": false}}))
        .await;
    let state = watcher.dispatch("VOICE_STATE_UPDATE").await;
    assert_voice_state(&state, &guild_id, &owner_id, Some(&second));
    joiner.dispatch("VOICE_SERVER_UPDATE").await;

    // Leave: channel_id null; the call is released.
    joiner
        .send(json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": null, "self_mute": false, "self_deaf": false}}))
        .await;
    let state = watcher.dispatch("VOICE_STATE_UPDATE").await;
    assert_voice_state(&state, &guild_id, &owner_id, None);
    let mut calls = 1;
    for _ in 0..50 {
        calls = node.metric("guildhall_sfu_calls").await;
        if calls == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(calls, 0, "no call is left allocated after everyone left");
    node.stop().await;
}

/// A node whose voice role can spawn one guild's coordinator and syncer at
/// once and one more each second, and whose gateway makes
/// `voice_attempts_max` attempts at an op 4.
fn scarce_voice(voice_attempts_max: u32) -> guildhall_limits::Limits {
    guildhall_limits::Limits {
        voice_spawn_burst: 2,
        voice_spawn_rate_per_s: 1,
        voice_spawn_guild_burst: 2,
        voice_spawn_guild_rate_per_s: 1,
        voice_attempts_max,
        ..guildhall_limits::Limits::default()
    }
}

/// A second guild with a voice channel, owned by `owner`: (guild id,
/// voice channel id).
async fn second_voice_guild(node: &TestNode, owner: &str) -> (String, String) {
    let (guild_id, _) = node.guild(owner, "Voice 2").await;
    let (status, voice) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(owner),
            Some(json!({"name": "Stage", "type": 2})),
        )
        .await;
    assert_eq!(status, 200, "{voice}");
    (guild_id, voice["id"].as_str().unwrap().to_owned())
}

/// Libraries send op 4 once and wait (discord.py 30 s, discord.js 15 s):
/// a join the voice role refuses for a reason that passes (its spawn
/// budget, spent by another guild's call) is tried again by the gateway,
/// after the refusal's `retry_after_ms`, until it is served.
#[tokio::test]
async fn a_join_refused_for_a_passing_reason_is_retried_until_served() {
    let node = TestNode::with_limits(scarce_voice(10)).await;
    let (owner, _, _, _, guild_a, channel_a) = voice_guild(&node).await;
    let (guild_b, channel_b) = second_voice_guild(&node, &owner).await;
    let host = node.base.trim_start_matches("http://").to_owned();
    let mut session = GatewaySession::identify(&host, &owner).await.unwrap();
    session.join(&guild_a, &channel_a).await.unwrap();
    // Guild A's call took the whole burst: B's first attempt is refused.
    let server_b = session.join(&guild_b, &channel_b).await.unwrap();
    assert!(server_b.endpoint.ends_with("/voice"), "{server_b:?}");
    assert!(node.metric("guildhall_voice_refused_total").await >= 1);
    assert!(node.metric("guildhall_voice_retries_total").await >= 1);
    assert_eq!(node.metric("guildhall_voice_gave_up_total").await, 0);
    assert_eq!(node.metric("guildhall_voice_servers_total").await, 2);
}

/// With one attempt allowed, the same refusal is the op 4's end: counted
/// as given up, never retried, no VOICE_SERVER_UPDATE.
#[tokio::test]
async fn a_refused_join_beyond_its_attempts_is_counted_as_given_up() {
    let node = TestNode::with_limits(scarce_voice(1)).await;
    let (owner, _, _, _, guild_a, channel_a) = voice_guild(&node).await;
    let (guild_b, channel_b) = second_voice_guild(&node, &owner).await;
    let host = node.base.trim_start_matches("http://").to_owned();
    let mut session = GatewaySession::identify(&host, &owner).await.unwrap();
    session.join(&guild_a, &channel_a).await.unwrap();
    let mut ws = Client::connect(&node.ws).await;
    ws.identify(&owner, intents::GUILDS | intents::GUILD_VOICE_STATES)
        .await;
    // Subscribed to both guilds before the op 4, so its state is seen.
    for _ in 0..2 {
        ws.dispatch("GUILD_CREATE").await;
    }
    ws.send(
        json!({"op": 4, "d": {"guild_id": guild_b, "channel_id": channel_b,
        "self_mute": false, "self_deaf": false}}),
    )
    .await;
    // The owner's part still happens: the voice state is recorded (a user
    // is in one call at a time, so guild A's state, now empty, may come
    // first).
    let state = loop {
        let state = ws.dispatch("VOICE_STATE_UPDATE").await["d"].take();
        if state["guild_id"] == guild_b.as_str() {
            break state;
        }
    };
    assert_eq!(state["channel_id"], channel_b.as_str());
    common::until("the join to be given up", 100, async || {
        node.metric("guildhall_voice_gave_up_total").await == 1
    })
    .await;
    assert_eq!(node.metric("guildhall_voice_retries_total").await, 0);
    assert_eq!(node.metric("guildhall_voice_servers_total").await, 1);
}
