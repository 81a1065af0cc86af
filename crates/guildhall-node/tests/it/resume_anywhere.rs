//! RESUME on any gateway node, the drain of a gateway node, and where
//! `GET /gateway` sends clients: nodes in one process over one in-process
//! registry and bus, sharing one database (as `tests/cluster.rs`).
//!
//! Every wait is bounded by a number of polls or by the client's own read
//! timeout; no assertion is about how long something took (figures are
//! printed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLLS_MAX: usize = 400;
const POLL_MS: u64 = 25;
const INTENTS: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;

fn limits() -> Limits {
    Limits {
        rest_rate_limit_per_window: 1_000_000,
        // Every client of the test comes from 127.0.0.1.
        http_connections_per_ip_max: 4_096,
        // Announcements refreshed often, so `GET /gateway` sees counts
        // and the draining flag soon (polls below, never timed checks).
        gateway_announce_interval_ms: 100,
        drain_grace_ms: 10_000,
        drain_margin_ms: 2_000,
        ..Limits::default()
    }
}

/// Two nodes with every role over one registry and bus, each seeing both.
async fn pair(dir: &std::path::Path, limits: Limits) -> (TestNode, TestNode) {
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let a = TestNode::member_with(
        "gw-a",
        1,
        dir,
        registry.clone(),
        bus.clone(),
        limits.clone(),
    )
    .await;
    // A's store is migrated before B opens the same file.
    a.metric("guildhall_ring_members").await;
    let b = TestNode::member_with("gw-b", 2, dir, registry, bus, limits).await;
    let mut polls = 0;
    while a.metric("guildhall_ring_members").await < 2
        || b.metric("guildhall_ring_members").await < 2
    {
        polls += 1;
        assert!(polls < POLLS_MAX, "the nodes never saw each other");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    (a, b)
}

/// A guild of `token`'s user whose owner the ring put on `on` (so it
/// outlives the other node). Bounded: at most `GUILDS_TRIED_MAX` guilds.
async fn guild_on(on: &TestNode, token: &str) -> String {
    const GUILDS_TRIED_MAX: usize = 64;
    for i in 0..GUILDS_TRIED_MAX {
        let before = on.metric("guildhall_guild_owners").await;
        let (_, channel_id) = on.guild(token, &format!("g{i}")).await;
        if on.metric("guildhall_guild_owners").await > before {
            return channel_id;
        }
    }
    panic!("no guild landed on the node");
}

/// Waits (bounded) until `node` has no socket open: its sessions are
/// detached, so a drain has no one to tell to reconnect.
async fn sockets_closed(node: &TestNode) {
    let mut polls = 0;
    while node.metric("guildhall_sockets_open").await > 0 {
        polls += 1;
        assert!(polls < POLLS_MAX, "sockets never closed");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

async fn post(node: &TestNode, token: &str, channel_id: &str, content: &str) {
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(token),
            Some(json!({ "content": content })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

async fn resume(client: &mut Client, token: &str, session_id: &str, seq: u64) {
    let hello = client.next().await.unwrap();
    assert_eq!(hello["op"], 10);
    client
        .send(json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": session_id, "seq": seq}}))
        .await;
}

/// A dispatch's sequence number.
fn seq(frame: &Value) -> u64 {
    frame["s"].as_u64().expect("a dispatch has a sequence")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_identified_on_a_resumes_on_b_with_exact_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), limits()).await;
    let (token, _) = a.register("alice").await;
    let (_, channel_id) = a.guild(&token, "moving").await;

    let mut client = Client::connect(&a.ws).await;
    let ready = client.identify(&token, INTENTS).await;
    let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
    assert!(
        session_id
            .bytes()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    );
    client.dispatch("GUILD_CREATE").await;
    post(&a, &token, &channel_id, "m1").await;
    let m1 = client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(m1["d"]["content"], "m1");
    let seen = seq(&m1);
    // The client goes away without a word; two messages are posted while
    // it is gone (the second may still be in flight to A when B asks).
    drop(client);
    post(&a, &token, &channel_id, "m2").await;
    post(&b, &token, &channel_id, "m3").await;

    let mut client = Client::connect(&b.ws).await;
    let started = Instant::now();
    resume(&mut client, &token, &session_id, seen).await;
    let mut frames = Vec::new();
    let mut resumed_after = None;
    loop {
        let frame = client.next().await.expect("the session lives on B");
        if frame["op"] != 0 {
            continue;
        }
        if frame["t"] == "RESUMED" && resumed_after.is_none() {
            resumed_after = Some(started.elapsed());
            post(&b, &token, &channel_id, "m4").await;
        }
        let last = frame["t"] == "MESSAGE_CREATE" && frame["d"]["content"] == "m4";
        frames.push(frame);
        if last {
            break;
        }
    }
    let seqs: Vec<u64> = frames.iter().map(seq).collect();
    let expected: Vec<u64> = (seen + 1..=seen + frames.len() as u64).collect();
    assert_eq!(
        seqs, expected,
        "numbering continues without a gap or a repeat"
    );
    let contents: Vec<&str> = frames
        .iter()
        .filter(|f| f["t"] == "MESSAGE_CREATE")
        .map(|f| f["d"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        ["m2", "m3", "m4"],
        "each missed message once, in order"
    );
    assert_eq!(frames.iter().filter(|f| f["t"] == "RESUMED").count(), 1);
    assert!(
        frames.iter().all(|f| f["t"] != "GUILD_CREATE"),
        "the guild's stream moved without a resync"
    );
    assert_eq!(b.metric("guildhall_sessions_taken_total").await, 1);
    assert_eq!(a.metric("guildhall_sessions_given_total").await, 1);
    assert_eq!(
        a.metric("guildhall_sessions").await,
        0,
        "A forgot the session"
    );
    eprintln!(
        "cross-node RESUME: RESUME sent -> RESUMED received in {:?}",
        resumed_after.unwrap()
    );
    drop(client);
    sockets_closed(&b).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_b_of_a_session_of_a_stopped_node_or_a_forged_one_gets_op_9() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), limits()).await;
    let (token, _) = a.register("alice").await;
    let (mallory, _) = a.register("mallory").await;
    a.guild(&token, "doomed").await;

    let mut client = Client::connect(&a.ws).await;
    let ready = client.identify(&token, INTENTS).await;
    let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
    let created = client.dispatch("GUILD_CREATE").await;
    let seen = seq(&created);

    // Another user's token for a live session of A: refused like an
    // unknown session, and the session stays where it is.
    let mut thief = Client::connect(&b.ws).await;
    resume(&mut thief, &mallory, &session_id, seen).await;
    let answer = thief.next().await.unwrap();
    assert_eq!(answer, json!({"op": 9, "d": false, "s": null, "t": null}));
    assert_eq!(a.metric("guildhall_sessions").await, 1);

    drop(client);
    drop(thief);
    // Detached before the drain, so A stops at once (a session told to
    // reconnect would keep A alive, and taking over from a draining node is
    // what should happen).
    sockets_closed(&a).await;
    a.stop().await;
    let mut client = Client::connect(&b.ws).await;
    resume(&mut client, &token, &session_id, seen).await;
    let answer = client.next().await.unwrap();
    assert_eq!(answer, json!({"op": 9, "d": false, "s": null, "t": null}));

    // A made-up id names no node at all.
    let mut forger = Client::connect(&b.ws).await;
    resume(
        &mut forger,
        &token,
        "0123456789abcdef0123456789abcdef0123456789abcdef",
        1,
    )
    .await;
    let answer = forger.next().await.unwrap();
    assert_eq!(answer["op"], 9);
    assert_eq!(answer["d"], false);
    assert!(
        b.metric("guildhall_session_takeover_unknown_holder_total")
            .await
            >= 1
    );
    b.stop().await;
}

/// What one drained session saw.
struct Drained {
    got_op7: bool,
    resumed: bool,
    missed: u64,
    repeated: u64,
    resumed_at: Option<Instant>,
}

/// One session: identify on A, follow the guild, on op 7 resume on B,
/// then read until the `end` message, checking every sequence number.
async fn drained_session(
    a_ws: String,
    b_ws: String,
    token: String,
    ready: Arc<tokio::sync::Barrier>,
) -> Drained {
    let mut client = Client::connect(&a_ws).await;
    let ready_frame = client.identify(&token, INTENTS).await;
    let session_id = ready_frame["d"]["session_id"].as_str().unwrap().to_owned();
    let mut last = seq(&ready_frame);
    let mut outcome = Drained {
        got_op7: false,
        resumed: false,
        missed: 0,
        repeated: 0,
        resumed_at: None,
    };
    let check = |frame: &Value, last: &mut u64, outcome: &mut Drained| {
        let s = seq(frame);
        if s <= *last {
            outcome.repeated += 1;
        } else {
            outcome.missed += s - *last - 1;
            *last = s;
        }
    };
    let created = client.dispatch("GUILD_CREATE").await;
    check(&created, &mut last, &mut outcome);
    ready.wait().await;
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
            check(&frame, &mut last, &mut outcome);
        }
    }
    drop(client);
    if !outcome.got_op7 {
        return outcome;
    }
    let mut client = Client::connect(&b_ws).await;
    resume(&mut client, &token, &session_id, last).await;
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
        check(&frame, &mut last, &mut outcome);
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
async fn draining_a_moves_every_session_to_b_without_a_missed_sequence_number() {
    const SESSIONS: usize = 300;
    let limits = limits();
    let grace = Duration::from_millis(limits.drain_grace_ms);
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = pair(dir.path(), limits).await;
    let (token, _) = a.register("alice").await;
    let channel_id = guild_on(&b, &token).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(SESSIONS + 1));
    let clients: Vec<_> = (0..SESSIONS)
        .map(|_| {
            tokio::spawn(drained_session(
                a.ws.clone(),
                b.ws.clone(),
                token.clone(),
                barrier.clone(),
            ))
        })
        .collect();
    // A bound, not a timing check: a client that failed would leave the
    // barrier waiting for ever.
    tokio::time::timeout(Duration::from_secs(120), barrier.wait())
        .await
        .expect("every session identified on A");
    assert_eq!(a.metric("guildhall_sessions").await, SESSIONS as u64);

    // Messages keep coming through B's REST while A drains.
    let poster = {
        let (base, http, token, channel_id) = (
            b.base.clone(),
            b.http.clone(),
            token.clone(),
            channel_id.clone(),
        );
        tokio::spawn(async move {
            for i in 0.. {
                let response = http
                    .post(format!("{base}/channels/{channel_id}/messages"))
                    .header("authorization", format!("Bot {token}"))
                    .json(&json!({"content": format!("live-{i}")}))
                    .send()
                    .await;
                assert!(response.is_ok_and(|r| r.status() == 200));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let drain_started = Instant::now();
    a.begin_stop();
    // Every session is on B once the drain is over.
    let mut polls = 0;
    while b.metric("guildhall_sessions").await < SESSIONS as u64 {
        polls += 1;
        assert!(polls < POLLS_MAX * 4, "sessions never all reached B");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    poster.abort();
    post(&b, &token, &channel_id, "end").await;
    let mut outcomes = Vec::new();
    for client in clients {
        outcomes.push(client.await.unwrap());
    }
    a.stopped().await;
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
        "drain of {SESSIONS} sessions: op 7 {op7}, resumed on B {resumed} ({:.3}), within the {grace:?} grace {within_grace} ({:.3}), missed sequence numbers {missed}, repeated {repeated}, last resume {last:?} after the drain began; unconfirmed guild moves {}",
        resumed as f64 / SESSIONS as f64,
        within_grace as f64 / SESSIONS as f64,
        b.metric("guildhall_session_move_unconfirmed_guilds_total")
            .await,
    );
    assert_eq!(op7, SESSIONS, "every session was told to reconnect");
    assert_eq!(resumed, SESSIONS, "every session resumed on B");
    assert_eq!((missed, repeated), (0, 0));
    b.stop().await;
}

async fn gateway_url(node: &TestNode) -> String {
    let (status, body) = node.call("GET", "/gateway", None, None).await;
    assert_eq!(status, 200, "{body}");
    body["url"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_gateway_picks_the_least_loaded_node_and_never_a_draining_one() {
    let dir = tempfile::tempdir().unwrap();
    // A short grace: B stays draining for it (a session it never sees
    // again), then leaves.
    let limits = Limits {
        drain_grace_ms: 3_000,
        drain_margin_ms: 1_000,
        ..limits()
    };
    let (a, mut b) = pair(dir.path(), limits).await;
    let (token, _) = a.register("alice").await;
    let mut on_a = Vec::new();
    for _ in 0..3 {
        let mut client = Client::connect(&a.ws).await;
        client.identify(&token, INTENTS).await;
        on_a.push(client);
    }
    // A holds three sessions, B none: both api nodes send clients to B.
    let mut polls = 0;
    while gateway_url(&a).await != b.ws || gateway_url(&b).await != b.ws {
        polls += 1;
        assert!(
            polls < POLLS_MAX,
            "the session counts never reached the view"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    let (status, bot) = a.call("GET", "/gateway/bot", Some(&token), None).await;
    assert_eq!((status, bot["url"].as_str()), (200, Some(b.ws.as_str())));
    // READY's resume_gateway_url follows the same rule.
    let mut client = Client::connect(&a.ws).await;
    let ready = client.identify(&token, INTENTS).await;
    assert_eq!(ready["d"]["resume_gateway_url"], b.ws.as_str());
    on_a.push(client);

    // B drains with a session that never resumes, so it stays draining
    // (announced, still alive) for its grace period.
    let mut stays = Client::connect(&b.ws).await;
    stays.identify(&token, INTENTS).await;
    b.begin_stop();
    let mut polls = 0;
    while gateway_url(&a).await != a.ws {
        polls += 1;
        assert!(
            polls < POLLS_MAX,
            "the draining flag never reached the view"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    for _ in 0..10 {
        assert_eq!(gateway_url(&a).await, a.ws, "never the draining node");
    }
    drop(stays);
    drop(on_a);
    b.stopped().await;
    sockets_closed(&a).await;
    a.stop().await;
}
