//! The HTTP edge under adversarial clients, over real sockets: slow and
//! oversized heads, late bodies, connection caps per node and per client
//! address, password-hash floods, and REST callers with bad tokens.
//!
//! Every client here is on loopback. 127.0.0.0/8 is all local, so a socket
//! bound to 127.0.0.2 is a second client address.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The node's address (from the REST base URL).
fn addr_of(node: &TestNode) -> SocketAddr {
    node.base
        .trim_start_matches("http://")
        .trim_end_matches("/api/v10")
        .parse()
        .unwrap()
}

/// A TCP connection to `node` from `local` (any port).
async fn connect_from(node: &TestNode, local: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((local, 0)))
        .expect("loopback alias bindable");
    socket.connect(addr_of(node)).await.unwrap()
}

/// Everything the server sends until it closes (or resets) the
/// connection, or `within` passes: (bytes, closed).
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (out, false),
            Ok(Ok(0) | Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// One keep-alive `GET path` on `stream`: the status line, or `None` if the
/// connection was closed or reset without an answer.
async fn get(stream: &mut TcpStream, path: &str) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    head.lines().next().map(str::to_owned)
}

fn status_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn a_head_trickled_byte_by_byte_is_cut_off_at_the_header_bound() {
    let node = TestNode::with_limits(Limits {
        http_header_read_timeout_ms: 1_000,
        ..Limits::default()
    })
    .await;
    let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ")
        .await
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    // One byte every 200 ms, for at most 15 s (the bound is 1 s).
    while started.elapsed() < Duration::from_secs(15) {
        if stream.write_all(b"a").await.is_err() {
            closed = true;
            break;
        }
        let (_, eof) = read_until_closed(&mut stream, Duration::from_millis(200)).await;
        if eof {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled head was still open after 15 s");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before the bound: {:?}",
        started.elapsed()
    );
    assert_eq!(node.metric("guildhall_http_header_timeouts_total").await, 1);
    node.stop().await;
}

#[tokio::test]
async fn a_head_over_the_byte_bound_gets_431() {
    let node = TestNode::start().await;
    let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
    let big = "a".repeat(guildhall_limits::HTTP_HEADER_BYTES_MAX + 1_000);
    let request = format!("GET /healthz HTTP/1.1\r\nhost: test\r\nx-big: {big}\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let (bytes, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(
        status_of(&bytes).starts_with("HTTP/1.1 431"),
        "{}",
        status_of(&bytes)
    );
    assert!(closed, "the connection is closed after the 431");
    assert_eq!(
        node.metric("guildhall_http_headers_too_large_total").await,
        1
    );
    // A head within the bound is served.
    let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
    assert_eq!(
        get(&mut stream, "/healthz").await.as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    node.stop().await;
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_gets_408_at_the_body_bound() {
    let node = TestNode::with_limits(Limits {
        http_body_read_timeout_ms: 1_000,
        ..Limits::default()
    })
    .await;
    let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
    let started = Instant::now();
    stream
        .write_all(
            b"POST /api/v10/auth/login HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"login\": \"abc\",",
        )
        .await
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut stream, Duration::from_secs(15)).await;
    assert!(
        status_of(&bytes).starts_with("HTTP/1.1 408"),
        "{:?} after {:?}",
        status_of(&bytes),
        started.elapsed()
    );
    assert!(closed, "the connection is closed after the 408");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(node.metric("guildhall_http_body_timeouts_total").await, 1);
    node.stop().await;
}

#[tokio::test]
async fn connections_over_the_address_and_node_caps_are_refused_at_once() {
    let node = TestNode::with_limits(Limits {
        http_connections_per_ip_max: 3,
        http_connections_max: 5,
        ..Limits::default()
    })
    .await;
    // Three from 127.0.0.1, each served (so each is counted).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
        assert_eq!(
            get(&mut stream, "/healthz").await.as_deref(),
            Some("HTTP/1.1 200 OK")
        );
        held.push(stream);
    }
    // A fourth from the same address: a 503 and a close, without waiting.
    let mut refused = connect_from(&node, [127, 0, 0, 1]).await;
    let (bytes, closed) = read_until_closed(&mut refused, Duration::from_secs(10)).await;
    assert!(
        status_of(&bytes).starts_with("HTTP/1.1 503"),
        "{}",
        status_of(&bytes)
    );
    assert!(closed);
    // Another address still gets in, up to the node's cap of five.
    for _ in 0..2 {
        let mut stream = connect_from(&node, [127, 0, 0, 2]).await;
        assert_eq!(
            get(&mut stream, "/healthz").await.as_deref(),
            Some("HTTP/1.1 200 OK")
        );
        held.push(stream);
    }
    let mut refused = connect_from(&node, [127, 0, 0, 2]).await;
    let (bytes, _) = read_until_closed(&mut refused, Duration::from_secs(10)).await;
    assert!(status_of(&bytes).starts_with("HTTP/1.1 503"));
    // A closed connection frees its slot (noticed by the server shortly).
    drop(held.remove(0));
    let started = Instant::now();
    loop {
        let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
        if get(&mut stream, "/healthz").await.as_deref() == Some("HTTP/1.1 200 OK") {
            held.push(stream);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "slot never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    let started = Instant::now();
    let (node_refused, address_refused) = loop {
        // reqwest's own connection needs a free slot too.
        let text = tokio::time::timeout(Duration::from_secs(5), node.metrics_text()).await;
        if let Ok(text) = text {
            let value = |name: &str| -> u64 {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} ")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            break (
                value("guildhall_http_refused_node_total"),
                value("guildhall_http_refused_address_total"),
            );
        }
        assert!(started.elapsed() < Duration::from_secs(20));
    };
    assert!(node_refused >= 1 && address_refused >= 1);
    node.stop().await;
}

#[tokio::test]
async fn a_gateway_socket_holds_a_node_slot_but_leaves_its_address_count() {
    let node = TestNode::with_limits(Limits {
        http_connections_per_ip_max: 2,
        http_connections_max: 3,
        ..Limits::default()
    })
    .await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let mut client = Client::connect(&node.ws).await;
        assert_eq!(client.next().await.unwrap()["op"], 10, "HELLO");
        sessions.push(client);
    }
    // Both sockets left 127.0.0.1's count at their 101: HTTP still gets in.
    let mut stream = connect_from(&node, [127, 0, 0, 1]).await;
    assert_eq!(
        get(&mut stream, "/healthz").await.as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    // But they hold node slots: a fourth connection is over the cap.
    let mut refused = connect_from(&node, [127, 0, 0, 2]).await;
    let (bytes, _) = read_until_closed(&mut refused, Duration::from_secs(10)).await;
    assert!(status_of(&bytes).starts_with("HTTP/1.1 503"));
    drop(sessions);
    node.stop().await;
}

/// This process's resident set, in bytes (the node runs in the test's own
/// process).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap()
}

/// A client whose connections come from `local` (a second loopback address).
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(local))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_register_and_login_flood_is_refused_fast_within_the_hashing_memory() {
    const PERMITS: usize = 2;
    const FLOOD: usize = 64;
    const ARGON2_BYTES: u64 = 19 * 1024 * 1024;
    // Only the hashing permits may refuse here: the per-address windows
    // are opened wide.
    let node = TestNode::with_limits(Limits {
        password_hash_concurrency_max: PERMITS,
        rest_rate_limit_per_window: 1_000_000,
        rest_auth_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let canary = client_from([127, 0, 0, 2]);
    let gateway_url = format!("{}/gateway", node.base);
    let mut idle_ms = 0.0f64;
    for _ in 0..20 {
        let started = Instant::now();
        assert_eq!(canary.get(&gateway_url).send().await.unwrap().status(), 200);
        idle_ms = idle_ms.max(started.elapsed().as_secs_f64() * 1000.0);
    }
    let idle_rss = rss_bytes();
    node.register("victim").await;
    // Sample the resident set while the flood runs.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let http = reqwest::Client::new();
            let base = node.base.clone();
            tokio::spawn(async move {
                let (path, body) = if i % 2 == 0 {
                    (
                        "/auth/register",
                        serde_json::json!({"username": format!("flood{i}"), "password": "password123"}),
                    )
                } else {
                    (
                        "/auth/login",
                        serde_json::json!({"login": "victim", "password": "password123"}),
                    )
                };
                let started = Instant::now();
                let response = http
                    .post(format!("{base}{path}"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                (status, headers, body, started.elapsed())
            })
        })
        .collect();
    let mut canary_ms = 0.0f64;
    let mut results = Vec::new();
    for request in flood {
        let started = Instant::now();
        assert_eq!(canary.get(&gateway_url).send().await.unwrap().status(), 200);
        canary_ms = canary_ms.max(started.elapsed().as_secs_f64() * 1000.0);
        results.push(request.await.unwrap());
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.await.unwrap();
    let refused: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    let served = results.iter().filter(|r| r.0 == 200).count();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let bound = idle_rss + PERMITS as u64 * ARGON2_BYTES + 64 * 1024 * 1024;
    eprintln!(
        "idle RSS {} MiB, peak {} MiB, bound {} MiB; {served} served, {} refused; canary max {idle_ms:.1} ms idle, {canary_ms:.1} ms under the flood",
        idle_rss >> 20,
        peak >> 20,
        bound >> 20,
        refused.len()
    );
    assert_eq!(refused.len() + served, FLOOD, "only 200s and 429s");
    assert!(
        refused.len() >= FLOOD / 2,
        "{} of {FLOOD} refused",
        refused.len()
    );
    for (_, headers, body, elapsed) in &refused {
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers["x-ratelimit-scope"], "shared");
        assert_eq!(body["message"], "You are being rate limited.");
        assert_eq!(body["global"], false);
        assert!(
            *elapsed < Duration::from_secs(5),
            "a refusal took {elapsed:?}"
        );
    }
    assert!(
        peak <= bound,
        "peak RSS {} MiB over {} MiB",
        peak >> 20,
        bound >> 20
    );
    // Generous: the canary shares two cores with the hashes; what matters
    // is that it is answered at all while the flood runs.
    assert!(canary_ms < 2_000.0, "canary took {canary_ms:.1} ms");
    assert!(node.metric("guildhall_password_hash_refused_total").await >= (FLOOD / 2) as u64);
    node.stop().await;
}

/// A token shaped like the server's, never issued.
fn made_up_token(i: usize) -> String {
    format!("MTIz.{i:06}.made-up-secret-{i:08}-xxxxxxxxxxxx")
}

async fn get_with(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bot {token}"));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap_or_default())
}

#[tokio::test]
async fn fresh_made_up_tokens_share_their_address_bucket_and_reach_the_invalid_limit() {
    const LIMIT: u32 = 10;
    const INVALID_MAX: u32 = 40;
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: LIMIT,
        rest_rate_window_ms: 600_000,
        rest_invalid_requests_max: INVALID_MAX,
        ..Limits::default()
    })
    .await;
    let (token, _) = node.register("alice").await;
    let reads_before = node.metric("guildhall_users_store_reads_total").await;
    let me = format!("{}/users/@me", node.base);
    let attacker = client_from([127, 0, 0, 1]);
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    let mut banned = None;
    for i in 0..100 {
        let (status, headers, body) = get_with(&attacker, &me, Some(&made_up_token(i))).await;
        *statuses.entry(status).or_default() += 1;
        if body["global"] == true {
            banned = Some((i, headers));
            break;
        }
    }
    let (banned_at, headers) = banned.unwrap_or_else(|| panic!("never banned: {statuses:?}"));
    assert_eq!(statuses[&401], LIMIT, "the address's bucket: {statuses:?}");
    assert!(statuses[&429] >= 1, "{statuses:?}");
    assert_eq!(banned_at as u32, INVALID_MAX, "banned at the invalid limit");
    assert_eq!(headers["x-ratelimit-global"], "true");
    assert_eq!(headers["x-ratelimit-scope"], "global");
    assert!(headers.contains_key("retry-after"));
    let reads = node.metric("guildhall_users_store_reads_total").await - reads_before;
    assert!(
        reads <= u64::from(LIMIT),
        "{reads} store reads for {banned_at} made-up tokens"
    );
    // The banned address is refused everywhere, with or without a token.
    let gateway = format!("{}/gateway", node.base);
    assert_eq!(get_with(&attacker, &gateway, None).await.0, 429);
    assert_eq!(get_with(&attacker, &me, Some(&token)).await.0, 429);
    // Another address is not.
    let other = client_from([127, 0, 0, 2]);
    assert_eq!(get_with(&other, &gateway, None).await.0, 200);
    assert_eq!(get_with(&other, &me, Some(&token)).await.0, 200);
    assert!(node.metric("guildhall_rest_invalid_banned_total").await >= 2);
    node.stop().await;
}

#[tokio::test]
async fn an_anonymous_flood_from_one_address_does_not_lock_out_another() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 5,
        rest_auth_rate_limit_per_window: 5,
        rest_rate_window_ms: 600_000,
        ..Limits::default()
    })
    .await;
    let gateway = format!("{}/gateway", node.base);
    let flooder = client_from([127, 0, 0, 1]);
    let mut refused = 0;
    for _ in 0..20 {
        if get_with(&flooder, &gateway, None).await.0 == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 15);
    let login = format!("{}/auth/login", node.base);
    let body = serde_json::json!({"login": "nobody", "password": "password123"});
    for _ in 0..10 {
        flooder.post(&login).json(&body).send().await.unwrap();
    }
    // A different address has its own buckets, for the gateway URL and
    // for the auth routes.
    let other = client_from([127, 0, 0, 2]);
    assert_eq!(get_with(&other, &gateway, None).await.0, 200);
    let response = other.post(&login).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 400, "answered, not rate limited");
    node.stop().await;
}

#[tokio::test]
async fn a_repeated_bad_token_costs_one_store_read() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("owner").await;
    let me = format!("{}/users/@me", node.base);
    let http = client_from([127, 0, 0, 1]);
    let reads_before = node.metric("guildhall_users_store_reads_total").await;
    for _ in 0..30 {
        assert_eq!(get_with(&http, &me, Some(&made_up_token(7))).await.0, 401);
    }
    let reads = node.metric("guildhall_users_store_reads_total").await - reads_before;
    assert_eq!(reads, 1, "one read, then the negative cache");
    assert!(node.metric("guildhall_users_negative_hits_total").await >= 29);
    // A token made after that (a bot's, through a reset) is never shadowed:
    // its digest was never seen.
    let (guild_id, _) = node.guild(&owner, "Guild").await;
    let (_, bot) = node.bot_in(&owner, &guild_id).await;
    assert_eq!(get_with(&http, &me, Some(&bot)).await.0, 200);
    node.stop().await;
}
