//! Handshake admission over real sockets, decided by the control crate's
//! `HandshakeAdmission` with the node's `Limits`: refusals come before the
//! 101 with the configured `Retry-After`. (The rate and the hold are
//! property-tested on the pure type, where time is an argument.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;

/// The `Retry-After` of an upgrade refused before the 101.
async fn refused_retry_after_s(node: &TestNode) -> u64 {
    match tokio_tungstenite::connect_async(format!("{}/?v=10&encoding=json", node.ws)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        }
        other => panic!("expected 503 before the 101, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_answers_with_the_configured_retry_after() {
    let limits = Limits {
        sessions_per_node_max: 1,
        sessions_full_retry_after_s: 7,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (token, _) = node.register("alice").await;
    let mut first = Client::connect(&node.ws).await;
    first.identify(&token, intents::GUILDS).await;
    assert_eq!(refused_retry_after_s(&node).await, 7);
    node.stop().await;
}
