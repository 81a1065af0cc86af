//! The gateway side of guild streams spawns nothing without a bound: with
//! one resync task allowed, a bus loss that hits many guilds at once still
//! ends with a fresh GUILD_CREATE for every guild (resyncs that found no
//! task wait for the next interval), never more than one task at a time;
//! and a join subscribes the user's sessions without a task per join.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_cluster::bus::{DroppingBus, LocalBus};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const GUILDS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resyncs_of_many_guilds_run_within_the_task_bound() {
    let limits = Limits {
        rest_rate_limit_per_window: 1_000_000,
        event_resync_tasks_max: 1,
        ..Limits::default()
    };
    let local = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let lossy = Arc::new(DroppingBus::new(local, "gw.", 0, 1));
    let node = TestNode::with_bus(limits, None, Some(lossy.clone())).await;
    let (token, _) = node.register("alice").await;
    let mut guilds = Vec::new();
    for i in 0..GUILDS {
        guilds.push(node.guild(&token, &format!("g{i}")).await);
    }
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&token, intents::GUILDS | intents::GUILD_MESSAGES)
        .await;
    for _ in 0..GUILDS {
        client.dispatch("GUILD_CREATE").await;
    }
    let post = async |channel: &str, content: &str| {
        let (status, body) = node
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&token),
                Some(json!({"content": content})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    };
    // One event of every guild is lost on its way to the gateway ...
    lossy.set_drop_per_million(1_000_000);
    for (guild, channel) in &guilds {
        post(channel, "lost").await;
        // The 200 only says the owner was handed the event (a cast): it
        // publishes to the gateway later, from its own task. A read through
        // the same owner is answered after it, from the same mailbox, so
        // once it is back the event has gone out on the lossy transport;
        // healing before that lets the last guild's event through, and that
        // guild has nothing to resync.
        let (status, body) = node
            .call("GET", &format!("/guilds/{guild}/roles"), Some(&token), None)
            .await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(lossy.dropped_total.load(Ordering::Relaxed) >= GUILDS as u64);
    lossy.set_drop_per_million(0);
    // ... so the next one shows a gap in every guild's stream at once.
    for (_, channel) in &guilds {
        post(channel, "gap").await;
    }
    let mut resynced = BTreeSet::new();
    while resynced.len() < GUILDS {
        let frame = client.dispatch("GUILD_CREATE").await;
        resynced.insert(frame["d"]["id"].as_str().unwrap().to_owned());
    }
    assert!(node.metric("guildhall_stream_resyncs_total").await >= GUILDS as u64);
    assert_eq!(node.metric("guildhall_stream_resync_tasks_peak").await, 1);
    // Live again everywhere.
    post(&guilds[0].1, "live").await;
    let live = client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(live["d"]["content"], "live");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_subscribes_the_users_sessions() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "joined").await;
    let code = node.invite(&owner, &channel).await;
    let (token, _) = node.register("bob").await;
    let mut client = Client::connect(&node.ws).await;
    client.identify(&token, intents::GUILDS).await;
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&token), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(guild_create["d"]["name"], "joined");
    assert_eq!(node.metric("guildhall_joined_subscriptions_total").await, 1);
    node.stop().await;
}
