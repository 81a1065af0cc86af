//! The gateway socket task under hostile or broken clients, over real
//! sockets: sockets that never identify, invalid shards, clients that stop
//! reading, WebSocket protocol errors, and an op 8 larger than the session's
//! own queue.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use futures_util::StreamExt;
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// Generous: every bound in these tests is configured far below it.
const WITHIN: Duration = Duration::from_secs(15);

/// HELLO, then IDENTIFY with `shard`: the first answer (READY's `t`, or the
/// close code).
async fn identify_with(
    client: &mut Client,
    token: &str,
    shard: Option<Value>,
) -> Result<Value, Option<u16>> {
    assert_eq!(client.next().await.unwrap()["op"], 10);
    let mut d = json!({"token": format!("Bot {token}"), "intents": intents::GUILDS,
        "properties": {"os": "linux", "browser": "test", "device": "test"}});
    if let Some(shard) = shard {
        d["shard"] = shard;
    }
    client.send(json!({"op": 2, "d": d})).await;
    client.next().await
}

#[tokio::test]
async fn identify_with_an_invalid_shard_closes_with_4010() {
    let node = TestNode::start().await;
    let (token, _) = node.register("alice").await;
    for shard in [
        json!([5, 2]),
        json!([0, 0]),
        json!([4294967295u64, 1]),
        json!([0, 65_537]),
    ] {
        let mut client = Client::connect(&node.ws).await;
        let answer = identify_with(&mut client, &token, Some(shard.clone())).await;
        assert_eq!(answer.err(), Some(Some(4010)), "shard {shard}");
    }
    let mut client = Client::connect(&node.ws).await;
    let ready = identify_with(&mut client, &token, Some(json!([1, 2])))
        .await
        .unwrap();
    assert_eq!(ready["t"], "READY");
    assert_eq!(ready["d"]["shard"], json!([1, 2]));
    assert_eq!(
        node.metric("guildhall_gateway_closes_total{code=\"4010\"}")
            .await,
        4
    );
    node.stop().await;
}

#[tokio::test]
async fn a_socket_that_only_heartbeats_is_closed_with_4003() {
    let limits = Limits {
        gateway_identify_timeout_ms: 1_000,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    let started = tokio::time::Instant::now();
    // A heartbeat every 250 ms (well inside the inbound rate limit), and
    // every ack read, until the server closes.
    let mut heartbeat = tokio::time::interval(Duration::from_millis(250));
    let code = loop {
        assert!(started.elapsed() < WITHIN, "still open after {WITHIN:?}");
        tokio::select! {
            _ = heartbeat.tick() => client.send(json!({"op": 1, "d": null})).await,
            frame = client.ws.next() => match frame {
                Some(Ok(Message::Text(_))) => {}
                Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                other => panic!("unexpected {other:?}"),
            },
        }
    };
    assert_eq!(code, Some(4003));
    node.stop().await;
}

/// Waits (bounded by [`WITHIN`]) until metric `name` is `value`.
async fn metric_becomes(node: &TestNode, name: &str, value: u64) {
    let started = tokio::time::Instant::now();
    loop {
        let now = node.metric(name).await;
        if now == value {
            return;
        }
        assert!(
            started.elapsed() < WITHIN,
            "{name} is {now}, not {value}, after {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gateway client whose socket has a 4 KiB receive buffer, so a client
/// that stops reading closes its TCP window after a few frames.
async fn small_window_client(node: &TestNode) -> Client {
    let addr = node.ws.trim_start_matches("ws://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(
        format!("{}/?v=10&encoding=json", node.ws),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await
    .unwrap();
    Client { ws }
}

/// Seed 001 itself: sessions that stop reading while messages are posted
/// are dropped within the write-stall bound (their TCP windows stay shut,
/// the heartbeat timeout is far away), stay resumable, and a RESUME from a
/// new connection gets exactly what the stuck socket never delivered.
#[tokio::test]
async fn sessions_that_stop_reading_are_dropped_and_resume_exactly() {
    const STUCK: usize = 3;
    // 60 KB each: at most 24 MB per session, past any kernel's socket
    // buffers (Linux's default maximum is 4 MB), within the replay buffer.
    const MESSAGES_MAX: u64 = 400;
    let limits = Limits {
        session_write_stall_ms_max: 500,
        session_queue_messages_max: 8,
        message_content_chars_max: 60_000,
        rest_body_bytes_max: 128 * 1024,
        rest_rate_limit_per_window: 1_000_000,
        replay_buffer_bytes_max: 32 * 1024 * 1024,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("alice").await;
    let (_, channel_id) = node.guild(&owner, "Stuck").await;
    let wanted = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;
    let mut stuck = Vec::new();
    for _ in 0..STUCK {
        let mut client = small_window_client(&node).await;
        let ready = client.identify(&owner, wanted).await;
        let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
        assert_eq!(client.dispatch("GUILD_CREATE").await["s"], 2);
        stuck.push((client, session_id));
    }
    // The clients stop reading; messages are posted until the kernel's
    // buffers are full and the server gives up on all of them.
    let padding = "x".repeat(59_000);
    let mut posted = 0;
    while posted < MESSAGES_MAX && node.metric("guildhall_sockets_open").await > 0 {
        let i = posted;
        posted += 1;
        let (status, body) = node
            .call(
                "POST",
                &format!("/channels/{channel_id}/messages"),
                Some(&owner),
                Some(json!({"content": format!("m{i} {padding}")})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    metric_becomes(&node, "guildhall_sockets_open", 0).await;
    assert_eq!(
        node.metric("guildhall_sessions").await,
        STUCK as u64,
        "resumable"
    );
    let dropped = node.metric("guildhall_session_write_stalls_total").await
        + node.metric("guildhall_slow_consumer_closes_total").await;
    assert!(dropped >= STUCK as u64, "{dropped} drops counted");

    // The first stuck client reads what reached it before the drop.
    let (mut client, session_id) = stuck.remove(0);
    drop(stuck);
    let mut last_seq = 2;
    loop {
        match tokio::time::timeout(WITHIN, client.ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                let frame: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(frame["s"], last_seq + 1, "in order, nothing twice");
                last_seq += 1;
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => break,
            Err(_) => panic!("the dropped socket never reached its end"),
        }
    }
    assert!(
        last_seq < posted + 2,
        "the socket was dropped before the end"
    );

    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    client
        .send(json!({"op": 6, "d": {"token": owner, "session_id": session_id, "seq": last_seq}}))
        .await;
    for seq in last_seq + 1..=posted + 2 {
        let frame = client.next().await.unwrap();
        assert_eq!(
            (frame["t"].as_str(), frame["s"].as_u64()),
            (Some("MESSAGE_CREATE"), Some(seq))
        );
        let index = seq - 3;
        assert!(
            frame["d"]["content"]
                .as_str()
                .unwrap()
                .starts_with(&format!("m{index} "))
        );
    }
    let resumed = client.next().await.unwrap();
    assert_eq!(
        (resumed["t"].as_str(), resumed["s"].as_u64()),
        (Some("RESUMED"), Some(posted + 3))
    );
    node.stop().await;
}

/// Unidentified sockets count against the session cap: with room for three
/// sessions, three sockets that only got HELLO make the next upgrade a 503
/// with `Retry-After`, and closing one frees its place.
#[tokio::test]
async fn unidentified_sockets_count_against_the_session_cap() {
    let limits = Limits {
        sessions_per_node_max: 3,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut client = Client::connect(&node.ws).await;
        assert_eq!(client.next().await.unwrap()["op"], 10);
        open.push(client);
    }
    match tokio_tungstenite::connect_async(format!("{}/?v=10&encoding=json", node.ws)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            assert!(response.headers().contains_key("retry-after"));
        }
        other => panic!(
            "expected 503 before the upgrade, got {:?}",
            other.map(|_| ())
        ),
    }
    assert_eq!(node.metric("guildhall_sockets_unattached").await, 3);
    drop(open.pop());
    metric_becomes(&node, "guildhall_sockets_unattached", 2).await;
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    node.stop().await;
}

/// An op 8 whose chunks outnumber the session's queue: the request runs
/// beside the socket task and waits for room, so every chunk arrives and
/// the session stays open. A second op 8 sent at once either runs after it
/// or is answered with RATE_LIMITED, never with a close.
#[tokio::test]
async fn op8_larger_than_the_queue_delivers_every_chunk_and_keeps_the_session() {
    const MEMBERS: usize = 10;
    let limits = Limits {
        members_per_page_max: 1,
        session_queue_messages_max: 4,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Chunky").await;
    let code = node.invite(&owner, &channel_id).await;
    let names: Vec<String> = (1..MEMBERS).map(|i| format!("member{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    node.join_all(&code, &names).await;
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&owner, intents::GUILDS | intents::GUILD_MEMBERS)
        .await;
    client.dispatch("GUILD_CREATE").await;
    let request = |nonce: &str| json!({"op": 8, "d": {"guild_id": guild_id, "query": "", "limit": 0, "nonce": nonce}});
    client.send(request("first")).await;
    client.send(request("second")).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut second = (0, false);
    while seen.len() < MEMBERS || !(second.1 || second.0 == MEMBERS) {
        let frame = client
            .next()
            .await
            .unwrap_or_else(|code| panic!("closed with {code:?}"));
        match (frame["t"].as_str(), frame["d"]["nonce"].as_str()) {
            (Some("GUILD_MEMBERS_CHUNK"), Some("first")) => {
                assert_eq!(frame["d"]["chunk_index"], seen.len());
                assert_eq!(frame["d"]["chunk_count"], MEMBERS);
                let member = &frame["d"]["members"][0]["user"]["id"];
                assert!(
                    seen.insert(member.as_str().unwrap().to_owned()),
                    "sent twice"
                );
            }
            (Some("GUILD_MEMBERS_CHUNK"), Some("second")) => second.0 += 1,
            (Some("RATE_LIMITED"), _) => {
                let d = &frame["d"];
                assert_eq!(
                    (d["opcode"].as_u64(), d["meta"]["nonce"].as_str()),
                    (Some(8), Some("second"))
                );
                assert_eq!(d["meta"]["guild_id"], guild_id.as_str());
                assert!(d["retry_after"].as_f64().unwrap() > 0.0);
                second.1 = true;
            }
            _ => {}
        }
    }
    client.send(json!({"op": 1, "d": null})).await;
    loop {
        if client.next().await.expect("still open")["op"] == 11 {
            break;
        }
    }
    assert_eq!(node.metric("guildhall_slow_consumer_closes_total").await, 0);
    node.stop().await;
}

/// A masked client frame: `first` is FIN, RSV and opcode.
fn masked_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut frame = vec![first, 0x80 | u8::try_from(payload.len()).unwrap()];
    frame.extend(mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// Frames the WebSocket layer refuses get a close frame with RFC 6455's
/// code before the socket goes: 1007 for invalid UTF-8 in a text frame,
/// 1002 for a reserved bit or an undefined opcode.
#[tokio::test]
async fn websocket_protocol_errors_get_a_close_frame_with_the_right_code() {
    use tokio::io::AsyncWriteExt;
    let node = TestNode::start().await;
    let cases = [
        (
            "invalid UTF-8",
            masked_frame(0x81, &[0xff, 0xfe, 0xfd]),
            1007,
        ),
        ("reserved bit", masked_frame(0xc1, b"{}"), 1002),
        ("undefined data opcode", masked_frame(0x83, b""), 1002),
        ("undefined control opcode", masked_frame(0x8b, b""), 1002),
    ];
    for (name, frame, code) in &cases {
        let mut client = Client::connect(&node.ws).await;
        assert_eq!(client.next().await.unwrap()["op"], 10);
        match client.ws.get_mut() {
            tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.write_all(frame).await.unwrap(),
            _ => unreachable!("plain TCP"),
        }
        assert_eq!(client.close_code().await, Some(*code), "{name}");
    }
    assert_eq!(
        node.metric("guildhall_protocol_error_closes_total").await,
        cases.len() as u64
    );
    node.stop().await;
}

/// A RESUME from a second connection while the first is still open moves
/// the session and closes the first (resumable), so a forgotten socket
/// does not live on on its heartbeats holding nothing; the session then
/// delivers on the new socket only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_elsewhere_closes_the_socket_that_held_the_session() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (token, _) = node.register("owner").await;
    let (_, channel) = node.guild(&token, "moved").await;
    let mut first = Client::connect(&node.ws).await;
    let ready = first
        .identify(&token, intents::GUILDS | intents::GUILD_MESSAGES)
        .await;
    let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
    let guild_create = first.dispatch("GUILD_CREATE").await;
    let seq = guild_create["s"].as_u64().unwrap();

    let mut second = Client::connect(&node.ws).await;
    assert_eq!(second.next().await.unwrap()["op"], 10);
    second
        .send(json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": session_id, "seq": seq}}))
        .await;
    assert_eq!(second.dispatch("RESUMED").await["t"], "RESUMED");
    assert_eq!(first.close_code().await, Some(4000));

    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&token),
            Some(json!({"content": "here now"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let created = second.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["content"], "here now");
    node.stop().await;
}

/// An identified session whose heartbeats stop is closed with 4009 once
/// its heartbeat timeout passes (the socket's clock keeps running after
/// READY at a quarter of the heartbeat interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identified_session_without_heartbeats_times_out_with_4009() {
    let node = TestNode::with_limits(Limits {
        heartbeat_interval_ms: 1_000,
        heartbeat_timeout_ms: 1_500,
        ..Limits::default()
    })
    .await;
    let (token, _) = node.register("quiet").await;
    node.guild(&token, "quiet").await;
    let mut client = Client::connect(&node.ws).await;
    let hello = client.next().await.unwrap();
    assert_eq!(hello["d"]["heartbeat_interval"], 1_000);
    client
        .send(
            json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": intents::GUILDS,
            "properties": {"os": "linux", "browser": "test", "device": "test"}}}),
        )
        .await;
    client.dispatch("READY").await;
    // No heartbeat from here on.
    assert_eq!(client.close_code().await, Some(4009));
    node.stop().await;
}
