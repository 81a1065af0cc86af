//! The drain of a gateway process (SIGTERM) with real processes over real
//! NATS, etcd and PostgreSQL: a few thousand sessions on gateway A, a
//! message stream flowing through gateway B's REST to a guild owned by a
//! third process. A marks itself draining, sends op 7 paced by the drain
//! planner, and every client resumes on B, where the session is taken over
//! across the bus, with no missed and no repeated sequence number, within
//! the grace period; then A exits on its own.
//!
//! Every wait is bounded (polls, the client's read timeout); figures are
//! printed, not asserted on time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../guildhall-node/tests/it/common.rs"]
mod common;

use common::{Client, TestNode};
use guildhall_proto::intents;
use guildhall_sandbox::{Node, Service, Services};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sessions on the drained node: `GUILDHALL_TEST_DRAIN_SESSIONS`, else
/// the "a few thousand".
const SESSIONS_DEFAULT: usize = 2_000;
/// Sessions identifying at once (the client side's own bound; the node's
/// handshake admission takes 2,000/s).
const IDENTIFY_CONCURRENCY: usize = 64;
const INTENTS: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;
const DRAIN_GRACE_MS: u64 = 20_000;
/// Polls (every 100 ms) before a wait gives up: a bound, not a timing.
const POLLS_MAX: u32 = 1_200;

const ENV: [(&str, &str); 6] = [
    ("GUILDHALL_REST_RATE_LIMIT_PER_WINDOW", "1000000"),
    // Every client of the test comes from 127.0.0.1.
    ("GUILDHALL_HTTP_CONNECTIONS_PER_IP_MAX", "16384"),
    // `GET /gateway` and the takeover see the draining flag soon.
    ("GUILDHALL_GATEWAY_ANNOUNCE_INTERVAL_MS", "100"),
    ("GUILDHALL_DRAIN_GRACE_MS", "20000"),
    ("GUILDHALL_DRAIN_MARGIN_MS", "3000"),
    ("GUILDHALL_GATEWAY_INBOUND_PER_MINUTE_MAX", "100000"),
];

fn spawn(services: &Services, name: &str, worker: u16, roles: &str) -> Node {
    Node::spawn_with_env(
        std::path::Path::new(env!("CARGO_BIN_EXE_guildhall")),
        services,
        name,
        worker,
        roles,
        &[],
        &ENV,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// [`common::until`] with this file's bound.
async fn until(what: &str, check: impl AsyncFnMut() -> bool) {
    common::until(what, POLLS_MAX, check).await;
}

fn seq(frame: &Value) -> u64 {
    frame["s"].as_u64().expect("a dispatch has a sequence")
}

/// What one client saw.
#[derive(Debug, Default)]
struct Outcome {
    got_op7: bool,
    resumed: bool,
    missed: u64,
    repeated: u64,
    resumed_at: Option<Instant>,
}

impl Outcome {
    fn check(&mut self, frame: &Value, last: &mut u64) {
        let s = seq(frame);
        if s <= *last {
            self.repeated += 1;
        } else {
            self.missed += s - *last - 1;
            *last = s;
        }
    }
}

/// Identifies on A, waits for op 7, resumes on B, reads until "end".
async fn session(
    a_ws: String,
    b_ws: String,
    token: String,
    identify: Arc<tokio::sync::Semaphore>,
    ready: Arc<tokio::sync::Barrier>,
) -> Outcome {
    let permit = identify.acquire_owned().await.unwrap();
    let mut client = Client::connect(&a_ws).await;
    let ready_frame = client.identify(&token, INTENTS).await;
    let session_id = ready_frame["d"]["session_id"].as_str().unwrap().to_owned();
    let mut last = seq(&ready_frame);
    let mut outcome = Outcome::default();
    let created = client.dispatch("GUILD_CREATE").await;
    outcome.check(&created, &mut last);
    drop(permit);
    ready.wait().await;
    // Identifying every session takes a while; the heartbeat keeps this
    // one alive through it.
    client.send(json!({"op": 1, "d": last})).await;
    loop {
        let Ok(frame) = client.next().await else {
            break;
        };
        if frame["op"] == 7 {
            assert_eq!(frame["d"], Value::Null, "op 7 carries d: null");
            outcome.got_op7 = true;
            break;
        }
        if frame["op"] == 0 {
            outcome.check(&frame, &mut last);
        }
    }
    drop(client);
    if !outcome.got_op7 {
        return outcome;
    }
    let mut client = Client::connect(&b_ws).await;
    let hello = client.next().await.unwrap();
    assert_eq!(hello["op"], 10);
    client
        .send(json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": session_id, "seq": last}}))
        .await;
    loop {
        let Ok(frame) = client.next().await else {
            return outcome;
        };
        if frame["op"] == 9 {
            return outcome;
        }
        if frame["op"] != 0 {
            continue;
        }
        outcome.check(&frame, &mut last);
        if frame["t"] == "RESUMED" {
            outcome.resumed = true;
            outcome.resumed_at = Some(Instant::now());
        }
        if frame["t"] == "MESSAGE_CREATE" && frame["d"]["content"] == "end" {
            return outcome;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_a_gateway_process_resumes_every_session_on_another() {
    let sessions: usize = std::env::var("GUILDHALL_TEST_DRAIN_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SESSIONS_DEFAULT);
    let services = Services::start(&[Service::Nats, Service::Etcd, Service::Postgres])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut a = spawn(&services, "gw-a", 1, "gateway,api");
    let b = spawn(&services, "gw-b", 2, "gateway,api");
    let _core = spawn(&services, "core", 3, "guilds,users,presence");
    let (a_api, b_api) = (TestNode::remote(a.addr()), TestNode::remote(b.addr()));
    until("the guilds member on both gateways' rings", async || {
        a_api.metric("guildhall_ring_members").await == 1
            && b_api.metric("guildhall_ring_members").await == 1
    })
    .await;
    let (token, _) = b_api.register("alice").await;
    let (guild_id, channel_id) = b_api.guild(&token, "drained").await;
    until("the guild to answer", async || {
        a_api
            .call("GET", &format!("/guilds/{guild_id}"), Some(&token), None)
            .await
            .0
            == 200
    })
    .await;

    let identify = Arc::new(tokio::sync::Semaphore::new(IDENTIFY_CONCURRENCY));
    let barrier = Arc::new(tokio::sync::Barrier::new(sessions + 1));
    let identify_started = Instant::now();
    let clients: Vec<_> = (0..sessions)
        .map(|_| {
            tokio::spawn(session(
                a_api.ws.clone(),
                b_api.ws.clone(),
                token.clone(),
                identify.clone(),
                barrier.clone(),
            ))
        })
        .collect();
    // A bound, not a timing check: a client that failed would leave the
    // barrier waiting for ever.
    tokio::time::timeout(Duration::from_secs(240), barrier.wait())
        .await
        .expect("every session identified on A");
    let identified_in = identify_started.elapsed();
    assert_eq!(a_api.metric("guildhall_sessions").await, sessions as u64);

    // Messages keep coming through B's REST while A drains.
    let poster = {
        let (b_api, token, channel_id) = (
            TestNode::remote(b.addr()),
            token.clone(),
            channel_id.clone(),
        );
        tokio::spawn(async move {
            for i in 0.. {
                let (status, body) = b_api
                    .call(
                        "POST",
                        &format!("/channels/{channel_id}/messages"),
                        Some(&token),
                        Some(json!({"content": format!("live-{i}")})),
                    )
                    .await;
                assert_eq!(status, 200, "{body}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let drain_started = Instant::now();
    a.signal("TERM");
    until("every session on B", async || {
        b_api.metric("guildhall_sessions").await >= sessions as u64
    })
    .await;
    poster.abort();
    let (status, body) = b_api
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "end"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut outcomes = Vec::new();
    for client in clients {
        outcomes.push(client.await.unwrap());
    }
    let exit = tokio::task::spawn_blocking(move || a.wait()).await.unwrap();
    let exited_after = drain_started.elapsed();

    let grace = Duration::from_millis(DRAIN_GRACE_MS);
    let op7 = outcomes.iter().filter(|o| o.got_op7).count();
    let resumed = outcomes.iter().filter(|o| o.resumed).count();
    let within_grace = outcomes
        .iter()
        .filter(|o| {
            o.resumed_at
                .is_some_and(|t| t.duration_since(drain_started) <= grace)
        })
        .count();
    let missed: u64 = outcomes.iter().map(|o| o.missed).sum();
    let repeated: u64 = outcomes.iter().map(|o| o.repeated).sum();
    let last = outcomes
        .iter()
        .filter_map(|o| o.resumed_at)
        .max()
        .map(|t| t.duration_since(drain_started));
    eprintln!(
        "SIGTERM of a gateway process with {sessions} sessions (identified in {identified_in:?}): op 7 {op7}, \
         resumed on B {resumed} ({:.4}), within the {grace:?} grace {within_grace} ({:.4}), \
         missed sequence numbers {missed}, repeated {repeated}, last resume {last:?} after SIGTERM, \
         A exited ({exit:?}) {exited_after:?} after SIGTERM; sessions taken over by B {}",
        resumed as f64 / sessions as f64,
        within_grace as f64 / sessions as f64,
        b_api.metric("guildhall_sessions_taken_total").await,
    );
    assert_eq!(op7, sessions, "every session was told to reconnect");
    assert!(
        within_grace * 100 >= sessions * 99,
        "{within_grace} of {sessions} resumed within the grace"
    );
    assert_eq!((missed, repeated), (0, 0));
    assert!(
        exit.is_some_and(|s| s.success()),
        "A exited cleanly: {exit:?}"
    );
}
