//! A guild whose owner cannot be reached at READY is listed `unavailable`
//! and becomes available later with its GUILD_CREATE, as on Discord: the
//! lost subscription is asked for again off the READY path once the owner
//! is reachable.
//!
//! The guild requests of the session's READY are lost on the bus (every one
//! of them, not a sample), then the transport heals.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_cluster::bus::{DroppingBus, LocalBus};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guild_unavailable_at_ready_arrives_once_its_owner_is_reachable() {
    let limits = Limits {
        // Retries come after this plus jitter: short, so the test is quick.
        guild_reply_timeout_ms: 200,
        backoff_base_ms: 50,
        ..Limits::default()
    };
    let local = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let lossy = Arc::new(DroppingBus::new(local, "guilds.", 0, 1));
    let node = TestNode::with_bus(limits, None, Some(lossy.clone())).await;
    let (token, _) = node.register("alice").await;
    let (guild, _) = node.guild(&token, "late").await;

    lossy.set_drop_per_million(1_000_000);
    let mut client = Client::connect(&node.ws).await;
    let ready = client.identify(&token, intents::GUILDS).await;
    assert_eq!(ready["d"]["guilds"][0]["id"], guild.as_str());
    assert_eq!(ready["d"]["guilds"][0]["unavailable"], true);
    // READY reaches the socket from the writer task, which may run before
    // the session's task publishes its subscriptions: heal only once the
    // bus has lost one, so only a retry can get through.
    let lost_by = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while lossy
        .dropped_total
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        assert!(
            std::time::Instant::now() < lost_by,
            "the READY subscription was never sent"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    lossy.set_drop_per_million(0);

    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(guild_create["d"]["id"], guild.as_str());
    assert_eq!(guild_create["d"]["unavailable"], false);
    assert!(node.metric("guildhall_guild_subscribe_retries_total").await >= 1);
    node.stop().await;
}
