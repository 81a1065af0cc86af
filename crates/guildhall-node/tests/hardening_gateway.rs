//! The gateway socket task under hostile or broken clients, over real
//! sockets: sockets that never identify, invalid shards, clients that stop
//! reading, WebSocket protocol errors, and an op 8 larger than the session's
//! own queue.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Client, TestNode};
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
