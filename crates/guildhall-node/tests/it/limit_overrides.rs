//! `Limits` overrides reach the code that enforces them: the member and
//! message page sizes (REST), the members GUILD_CREATE carries, and the log throttle's
//! interval, each set below its default and observed over real sockets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_cluster::Bus;
use guildhall_cluster::bus::LocalBus;
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const PAGE_MAX: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_size_overrides_bound_what_get_returns() {
    let limits = Limits {
        members_per_page_max: PAGE_MAX,
        messages_per_page_max: PAGE_MAX,
        guild_create_members_max: PAGE_MAX,
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (token, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&token, "paged").await;
    let code = node.invite(&token, &channel).await;
    node.join_all(&code, &["m1", "m2", "m3"]).await;
    for i in 0..3 {
        let (status, body) = node
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&token),
                Some(json!({"content": format!("m{i}")})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    let (status, members) = node
        .call(
            "GET",
            &format!("/guilds/{guild}/members?limit=1000"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{members}");
    assert_eq!(members.as_array().unwrap().len(), PAGE_MAX, "{members}");

    let (status, messages) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages?limit=100"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{messages}");
    assert_eq!(messages.as_array().unwrap().len(), PAGE_MAX, "{messages}");

    // GUILD_PRESENCES: Discord sends other members only with it. Four
    // members are more than the override lets GUILD_CREATE carry, so the
    // guild is `large` and carries its online members only: the session's
    // own (m1..m3 never connect).
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&token, intents::GUILDS | intents::GUILD_PRESENCES)
        .await;
    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(guild_create["d"]["member_count"], 4);
    assert_eq!(guild_create["d"]["large"], true);
    assert_eq!(guild_create["d"]["members"].as_array().unwrap().len(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_throttle_interval_override_is_applied() {
    const LINES: u64 = 5;
    // A 1 ms interval: lines of one key written 5 ms apart are never held
    // back (with the default 1 s interval all but the first would be).
    let limits = Limits {
        log_throttle_interval_ms: 1,
        ..Limits::default()
    };
    let bus = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let node = TestNode::with_bus(limits, None, Some(bus.clone())).await;
    let suppressed_before = node.metric("guildhall_log_lines_suppressed_total").await;
    for line in 1..=LINES {
        // Each is logged once, under one key ("guilds.malformed_request").
        bus.publish("guilds.test-node.requests", None, "not json".into())
            .unwrap();
        // The next one goes out only after this one was handled, and well
        // over the 1 ms interval later.
        let mut malformed = 0;
        for _ in 0..500 {
            malformed = node
                .metric("guildhall_guild_requests_malformed_total")
                .await;
            if malformed == line {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(malformed, line);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.metric("guildhall_log_lines_suppressed_total").await,
        suppressed_before,
        "a 1 ms throttle held lines back"
    );
    node.stop().await;
}
