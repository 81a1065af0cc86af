//! `guildhall-loadgen probe SCENARIO`: the adversarial probes behind the
//! hardening figures, one scenario per hardened hole, each printing one JSON
//! object. Run each against the build before a fix and the build after it.
//!
//! ```sh
//! guildhall serve --listen 127.0.0.1:18181 --data-dir "$(mktemp -d)" & pid=$!
//! guildhall-loadgen probe trickle-headers --base 127.0.0.1:18181 --server-pid $pid
//! kill $pid
//! ```
//!
//! Loopback only: several scenarios bind clients to other addresses of
//! 127.0.0.0/8 (`127.0.0.2`, `127.0.1.x`, `127.0.2.x`) to act as other
//! callers. Every scenario is bounded in count and time, every wait has a
//! timeout, and the run ends by itself. The server's CPU time and RSS are
//! read from `/proc/PID`, so the server must run on the same machine.

use crate::{percentile_ms, rss_kib};
use anyhow::{Context, Result, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Scenario {
    /// Gateway sessions that stop reading after READY while the guild is busy.
    StuckReaders,
    /// Connections trickling their request head; a short body; a huge head.
    TrickleHeaders,
    /// Concurrent register/login (password hashing) with a canary request.
    HashFlood,
    /// Requests with ever new bad tokens; a login flood beside another caller.
    FreshTokens,
    /// Invite previews with counts of a guild with many members.
    InvitePreview,
}

#[derive(clap::Args)]
pub struct ProbeArgs {
    #[arg(value_enum)]
    scenario: Scenario,
    /// host:port of the server (loopback).
    #[arg(long, default_value = "127.0.0.1:8080")]
    base: String,
    /// The server's PID, to read its RSS and CPU time from /proc.
    #[arg(long)]
    server_pid: u32,
    /// The scenario's size: sessions (stuck-readers, 50), connections
    /// (trickle-headers, 200), concurrent hashers (hash-flood, 64), fresh
    /// tokens (fresh-tokens, 2000), guild members (invite-preview, 2000).
    #[arg(long)]
    count: Option<usize>,
    /// The scenario's length: observation (trickle-headers, 30), flood
    /// (hash-flood, 20; fresh-tokens' login flood, 10).
    #[arg(long)]
    seconds: Option<u64>,
    /// Messages posted to the guild (stuck-readers).
    #[arg(long, default_value_t = 2500)]
    messages: usize,
    /// Sequential invite previews (invite-preview).
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// Milliseconds between two trickled header bytes (trickle-headers).
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let report = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            // A scenario that hangs is a finding, not a reason to never end.
            tokio::time::timeout(Duration::from_secs(300), probe(&args))
                .await
                .context("probe took longer than 300 s")?
        })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    // Sockets still held close when the process exits.
    std::process::exit(0);
}

async fn probe(args: &ProbeArgs) -> Result<Value> {
    let addr: SocketAddr = args.base.parse().context("--base must be IP:PORT")?;
    if !addr.ip().is_loopback() {
        bail!("probes run against loopback only");
    }
    let probe = Probe {
        addr,
        rest: format!("http://{}/api/v10", args.base),
        http: client(None)?,
        pid: args.server_pid,
    };
    let mut report = match args.scenario {
        Scenario::StuckReaders => stuck_readers(&probe, args.count.unwrap_or(50), args).await?,
        Scenario::TrickleHeaders => trickle_headers(&probe, args).await?,
        Scenario::HashFlood => hash_flood(&probe, args).await?,
        Scenario::FreshTokens => fresh_tokens(&probe, args).await?,
        Scenario::InvitePreview => invite_preview(&probe, args).await?,
    };
    report["server_pid"] = json!(args.server_pid);
    Ok(report)
}

struct Probe {
    addr: SocketAddr,
    rest: String,
    http: reqwest::Client,
    pid: u32,
}

fn client(local: Option<Ipv4Addr>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(60));
    if let Some(ip) = local {
        builder = builder.local_address(IpAddr::V4(ip));
    }
    Ok(builder.build()?)
}

/// The server's CPU time (user + system), in clock ticks (100 per second).
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces): state is field 3,
    // utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// `/metrics`, each name summed over its labels.
async fn metrics(probe: &Probe) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let url = format!("http://{}/metrics", probe.addr);
    let Ok(response) = probe.http.get(url).send().await else {
        return out;
    };
    let Ok(text) = response.text().await else {
        return out;
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name.split('{').next().unwrap_or(name);
        if let Ok(value) = value.parse::<f64>() {
            *out.entry(name.to_owned()).or_insert(0.0) += value;
        }
    }
    out
}

/// The listed metrics' values (null when this build has no such metric).
fn pick(metrics: &BTreeMap<String, f64>, names: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    for name in names {
        out.insert((*name).to_owned(), json!(metrics.get(*name)));
    }
    Value::Object(out)
}

/// The listed metrics' change from `before` to `after` (null when absent).
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, names: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    for name in names {
        let value = after
            .get(*name)
            .map(|a| a - before.get(*name).copied().unwrap_or(0.0));
        out.insert((*name).to_owned(), json!(value));
    }
    Value::Object(out)
}

fn count(statuses: &mut BTreeMap<String, u64>, status: String) {
    *statuses.entry(status).or_insert(0) += 1;
}

fn status_of(result: &reqwest::Result<reqwest::Response>) -> String {
    match result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(error) if error.is_timeout() => "timeout".to_owned(),
        Err(_) => "error".to_owned(),
    }
}

/// Samples the server's RSS every 100 ms until `stop`; returns the peak.
fn rss_sampler(pid: u32, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut peak = 0;
        let deadline = Instant::now() + Duration::from_secs(300);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            peak = peak.max(rss_kib(pid).unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak.max(rss_kib(pid).unwrap_or(0))
    })
}

/// Registers `username`, retrying 429s (hashing busy, or the address's
/// auth window) for up to 60 s. Returns the token.
async fn register(http: &reqwest::Client, rest: &str, username: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response = http
            .post(format!("{rest}/auth/register"))
            .json(&json!({"username": username, "password": "probe-password"}))
            .send()
            .await?;
        let status = response.status();
        if status.as_u16() == 429 && Instant::now() < deadline {
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.1)
                .clamp(0.05, 2.0);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            continue;
        }
        let value: Value = response.json().await?;
        if !status.is_success() {
            bail!("register {username}: {status}: {value}");
        }
        return Ok(value["token"].as_str().context("token")?.to_owned());
    }
}

/// Registers a user and creates a guild; returns (token, channel id).
async fn owner_and_guild(probe: &Probe) -> Result<(String, String)> {
    let name = format!("probe{}", std::process::id());
    let token = register(&probe.http, &probe.rest, &name).await?;
    let guild = crate::post(
        &probe.http,
        format!("{}/guilds", probe.rest),
        &token,
        json!({"name": "Probe Guild"}),
    )
    .await?;
    let channel = guild["channels"][0]["id"]
        .as_str()
        .context("channel")?
        .to_owned();
    Ok((token, channel))
}

// ----- stuck-readers ---------------------------------------------------------

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A session over a socket with a 4 KiB receive buffer, read up to READY;
/// returns the socket and its local port.
async fn stuck_session(addr: SocketAddr, token: &str) -> Result<(Ws, u16)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr)).await??;
    let port = stream.local_addr()?.port();
    let url = format!("ws://{addr}/?v=10&encoding=json");
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::client_async(url, stream),
    )
    .await??;
    // GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT (the author sees its own
    // messages' content either way).
    let identify = json!({"op": 2, "d": {"token": token, "intents": 513 | 32768, "properties": {"os": "linux", "browser": "probe", "device": "probe"}}});
    ws.send(Message::Text(identify.to_string().into())).await?;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await?
            .context("closed before READY")??;
        match frame {
            Message::Text(text) if text.contains("\"t\":\"READY\"") => return Ok((ws, port)),
            Message::Close(close) => bail!("closed before READY: {close:?}"),
            _ => {}
        }
    }
}

/// Of the connections from these client ports to the server's port, how
/// many the server has closed: its end is no longer ESTABLISHED (FIN_WAIT
/// after its close, or gone). Read from /proc/net/tcp because a client
/// that stops reading never sees the FIN queued behind the data it left
/// unread, while the server's end shows the close at once.
fn server_closed(server_port: u16, client_ports: &[u16]) -> usize {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return 0;
    };
    let mut established = std::collections::HashSet::new();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(state)) =
            (fields.get(1), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let port = |a: &str| {
            a.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        if port(local) == Some(server_port)
            && *state == "01"
            && let Some(remote) = port(remote)
        {
            established.insert(remote);
        }
    }
    client_ports
        .iter()
        .filter(|p| !established.contains(p))
        .count()
}

async fn stuck_readers(probe: &Probe, sessions: usize, args: &ProbeArgs) -> Result<Value> {
    let (token, channel) = owner_and_guild(probe).await?;
    let rss_idle = rss_kib(probe.pid);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut opening = Vec::new();
    for _ in 0..sessions {
        let permit = semaphore.clone().acquire_owned().await?;
        let (addr, token) = (probe.addr, token.clone());
        opening.push(tokio::spawn(async move {
            let session = stuck_session(addr, &token).await;
            drop(permit);
            session
        }));
    }
    // Held, never read again: the clients stop reading after READY.
    let mut held = Vec::new();
    let mut failures = 0;
    for task in opening {
        match task.await? {
            Ok(session) => held.push(session),
            Err(error) => {
                failures += 1;
                if failures <= 3 {
                    eprintln!("session failed: {error}");
                }
            }
        }
    }
    let ports: Vec<u16> = held.iter().map(|(_, port)| *port).collect();
    let rss_ready = rss_kib(probe.pid);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = rss_sampler(probe.pid, stop.clone());

    // The guild gets busy: messages of 2,000 characters.
    let content = "x".repeat(2000);
    let started = Instant::now();
    let post_semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut posts = Vec::new();
    for _ in 0..args.messages {
        let permit = post_semaphore.clone().acquire_owned().await?;
        let (http, url, token, content) = (
            probe.http.clone(),
            format!("{}/channels/{channel}/messages", probe.rest),
            token.clone(),
            content.clone(),
        );
        posts.push(tokio::spawn(async move {
            let result = crate::post(&http, url, &token, json!({"content": content})).await;
            drop(permit);
            result.is_ok()
        }));
    }
    let mut posted = 0;
    for task in posts {
        if task.await.unwrap_or(false) {
            posted += 1;
        }
    }
    let post_s = started.elapsed().as_secs_f64();
    let last_post = Instant::now();
    let names = [
        "guildhall_slow_consumer_closes_total",
        "guildhall_session_write_stalls_total",
        "guildhall_sockets_open",
        "guildhall_sessions",
    ];
    let mut checkpoints = serde_json::Map::new();
    for at in [5, 15, 30] {
        tokio::time::sleep_until((last_post + Duration::from_secs(at)).into()).await;
        let closed = server_closed(probe.addr.port(), &ports);
        checkpoints.insert(
            format!("{at}s"),
            json!({
                "closed_by_server": closed,
                "open": ports.len() - closed,
                "metrics": pick(&metrics(probe).await, &names),
                "server_rss_kib": rss_kib(probe.pid),
            }),
        );
    }
    stop.store(true, Ordering::Relaxed);
    let rss_peak = peak.await?;
    drop(held);
    Ok(json!({
        "scenario": "stuck-readers",
        "sessions_requested": sessions,
        "sessions_stuck": ports.len(),
        "session_failures": failures,
        "client_recv_buffer_bytes": 4096,
        "messages_posted": posted,
        "message_chars": 2000,
        "post_s": post_s,
        "after_last_post": checkpoints,
        "server_rss_kib": {"idle": rss_idle, "sessions_ready": rss_ready, "peak": rss_peak, "30s_after_last_post": rss_kib(probe.pid)},
    }))
}

// ----- trickle-headers -------------------------------------------------------

/// Reads one response head within `wait`: its status, or what ended it.
async fn response_status(stream: &mut tokio::net::TcpStream, wait: Duration) -> String {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + wait;
    loop {
        let read = tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await;
        match read {
            Err(_) => return "still waiting".to_owned(),
            Ok(Ok(0)) if head.is_empty() => return "closed without a response".to_owned(),
            Ok(Err(_)) if head.is_empty() => return "reset without a response".to_owned(),
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => head.extend_from_slice(&buf[..n]),
        }
        if head.windows(2).any(|w| w == b"\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&head)
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("unparsable")
        .to_owned()
}

/// One connection sending a byte of its head every `interval` until the
/// server closes it or `until`; returns when it was closed (from `start`).
async fn trickle(
    addr: SocketAddr,
    interval: Duration,
    start: Instant,
    until: Instant,
) -> Option<Duration> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let head = b"GET /api/v10/gateway HTTP/1.1\r\nHost: probe\r\nX-Trickle: ";
    let mut sent = 0;
    let mut buf = [0u8; 1024];
    loop {
        let byte = head.get(sent).copied().unwrap_or(b'a');
        if stream.write_all(&[byte]).await.is_err() {
            return Some(start.elapsed());
        }
        sent += 1;
        let next = (Instant::now() + interval).min(until);
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                // The server answered or closed: either ends the trickle.
                Ok(0) | Err(_) => return Some(start.elapsed()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        if Instant::now() >= until {
            return None;
        }
    }
}

async fn trickle_headers(probe: &Probe, args: &ProbeArgs) -> Result<Value> {
    let connections = args.count.unwrap_or(200);
    let seconds = args.seconds.unwrap_or(30).max(15);
    let interval = Duration::from_millis(args.interval_ms.max(1));
    let rss_idle = rss_kib(probe.pid);
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let closed_at: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(trickle(probe.addr, interval, start, until)))
        .collect();

    // Beside them: a body shorter than its Content-Length, and a 300 KB head.
    let addr = probe.addr;
    let short_body = tokio::spawn(async move {
        let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
            return ("connect failed".to_owned(), 0.0);
        };
        let request = "POST /api/v10/auth/login HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"login\": \"ab\",";
        let sent = Instant::now();
        if stream.write_all(request.as_bytes()).await.is_err() {
            return ("write failed".to_owned(), 0.0);
        }
        let status = response_status(&mut stream, Duration::from_secs(15)).await;
        (status, sent.elapsed().as_secs_f64() * 1000.0)
    });
    let big_head = tokio::spawn(async move {
        let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
            return "connect failed".to_owned();
        };
        let request = format!(
            "GET /api/v10/gateway HTTP/1.1\r\nHost: probe\r\nX-Big: {}\r\n\r\n",
            "a".repeat(300 * 1024)
        );
        // The server may answer and close before it has read everything.
        let _ = stream.write_all(request.as_bytes()).await;
        response_status(&mut stream, Duration::from_secs(15)).await
    });

    let stop = Arc::new(AtomicBool::new(false));
    let peak = rss_sampler(probe.pid, stop.clone());
    tokio::time::sleep_until((start + Duration::from_secs(15)).into()).await;
    let rss_15 = rss_kib(probe.pid);
    let (short_status, short_ms) = short_body.await?;
    let big_status = big_head.await?;
    let mut closes = Vec::new();
    for task in closed_at {
        closes.push(task.await?);
    }
    stop.store(true, Ordering::Relaxed);
    let rss_peak = peak.await?;
    let open_at = |s: u64| {
        closes
            .iter()
            .filter(|c| c.is_none_or(|d| d > Duration::from_secs(s)))
            .count()
    };
    let mut close_ms: Vec<Duration> = closes.iter().flatten().copied().collect();
    let mut report = json!({
        "scenario": "trickle-headers",
        "connections": connections,
        "byte_interval_ms": args.interval_ms,
        "open_at_15s": open_at(15),
        "closed_at_ms": {"count": close_ms.len(), "p50": percentile_ms(&mut close_ms, 50.0), "max": percentile_ms(&mut close_ms, 100.0)},
        "server_rss_kib": {"idle": rss_idle, "at_15s": rss_15, "peak": rss_peak},
        "content_length_100_body_16": {"status": short_status, "after_ms": short_ms},
        "head_300kb": {"status": big_status},
    });
    report[format!("open_at_{seconds}s")] = json!(open_at(seconds));
    Ok(report)
}

// ----- hash-flood ------------------------------------------------------------

async fn hash_flood(probe: &Probe, args: &ProbeArgs) -> Result<Value> {
    let workers = args.count.unwrap_or(64).clamp(1, 250);
    let seconds = args.seconds.unwrap_or(20).min(60);
    let login_name = format!("flood{}", std::process::id());
    register(&probe.http, &probe.rest, &login_name).await?;
    let rss_idle = rss_kib(probe.pid);

    // The canary: another caller (127.0.0.2) asking for the gateway URL.
    let canary_http = client(Some(Ipv4Addr::new(127, 0, 0, 2)))?;
    let flooding = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let canary = {
        let (url, flooding, done) = (
            format!("{}/gateway", probe.rest),
            flooding.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            let (mut idle, mut during, mut failed) = (Vec::new(), Vec::new(), 0u64);
            while !done.load(Ordering::Relaxed) {
                let phase = flooding.load(Ordering::Relaxed);
                let sent = Instant::now();
                let ok = canary_http
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if !ok {
                    failed += 1;
                }
                if phase {
                    during.push(sent.elapsed());
                } else {
                    idle.push(sent.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (idle, during, failed)
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let peak = rss_sampler(probe.pid, stop.clone());
    flooding.store(true, Ordering::Relaxed);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        // Each hasher from an address of its own, so the per-address auth
        // window does not hide what the node-wide hashing bound does.
        let http = client(Some(Ipv4Addr::new(127, 0, 1, w as u8 + 1)))?;
        let (rest, login_name) = (probe.rest.clone(), login_name.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            let mut i = 0;
            while Instant::now() < until {
                i += 1;
                let (route, body) = if i % 2 == 0 {
                    (
                        "login",
                        json!({"login": login_name, "password": "probe-password"}),
                    )
                } else {
                    let name = format!("h{}x{w}x{i}", std::process::id());
                    (
                        "register",
                        json!({"username": name, "password": "probe-password"}),
                    )
                };
                let result = http
                    .post(format!("{rest}/auth/{route}"))
                    .timeout(Duration::from_secs(40))
                    .json(&body)
                    .send()
                    .await;
                count(&mut statuses, format!("{route} {}", status_of(&result)));
            }
            statuses
        }));
    }
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for task in tasks {
        for (status, n) in task.await? {
            *statuses.entry(status).or_insert(0) += n;
        }
    }
    let flood_s = (Instant::now() - until).as_secs_f64() + seconds as f64;
    flooding.store(false, Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let rss_peak = peak.await?;
    let (mut idle, mut during, canary_failed) = canary.await?;
    let rate_limited: u64 = statuses
        .iter()
        .filter(|(s, _)| s.ends_with(" 429"))
        .map(|(_, n)| n)
        .sum();
    let metrics = metrics(probe).await;
    Ok(json!({
        "scenario": "hash-flood",
        "workers": workers,
        "flood_s": flood_s,
        "statuses": statuses,
        "answered_429": rate_limited,
        "server_rss_kib": {"idle": rss_idle, "peak": rss_peak, "rise": rss_peak.saturating_sub(rss_idle.unwrap_or(0))},
        "canary_ms": {
            "idle": {"n": idle.len(), "p50": percentile_ms(&mut idle, 50.0), "p99": percentile_ms(&mut idle, 99.0)},
            "during": {"n": during.len(), "p50": percentile_ms(&mut during, 50.0), "p99": percentile_ms(&mut during, 99.0), "max": percentile_ms(&mut during, 100.0)},
            "failed": canary_failed,
        },
        "metrics": pick(&metrics, &["guildhall_password_hashes_total", "guildhall_password_hash_refused_total"]),
    }))
}

// ----- fresh-tokens ----------------------------------------------------------

/// A token never seen before: shaped like one, random enough never to repeat.
fn fresh_token(i: usize) -> String {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    let a = state.hash_one(i);
    let b = state.hash_one((i, std::process::id()));
    format!("MTA{a:016x}.probe.{b:016x}{i:x}")
}

async fn fresh_tokens(probe: &Probe, args: &ProbeArgs) -> Result<Value> {
    let tokens = args.count.unwrap_or(2000);
    let seconds = args.seconds.unwrap_or(10).min(60);
    let names = [
        "guildhall_users_store_reads_total",
        "guildhall_users_negative_hits_total",
        "guildhall_users_cache_hits_total",
        "guildhall_rest_token_lookups_refused_total",
        "guildhall_rest_unauthorized_total",
        "guildhall_rest_rate_limited_total",
        "guildhall_rest_invalid_requests_total",
        "guildhall_rest_invalid_banned_total",
    ];
    let before = metrics(probe).await;
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, url, next) = (
            probe.http.clone(),
            format!("{}/users/@me", probe.rest),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= tokens {
                    return statuses;
                }
                let result = http
                    .get(&url)
                    .header("authorization", format!("Bot {}", fresh_token(i)))
                    .send()
                    .await;
                count(&mut statuses, status_of(&result));
            }
        }));
    }
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for task in tasks {
        for (status, n) in task.await? {
            *statuses.entry(status).or_insert(0) += n;
        }
    }
    let tokens_s = started.elapsed().as_secs_f64();
    let after = metrics(probe).await;

    // An anonymous login flood from 127.0.0.1 beside a caller on 127.0.0.2.
    let other = client(Some(Ipv4Addr::new(127, 0, 0, 2)))?;
    let other_name = format!("other{}", std::process::id());
    register(&other, &probe.rest, &other_name).await?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut flood = Vec::new();
    for _ in 0..32 {
        let (http, url) = (probe.http.clone(), format!("{}/auth/login", probe.rest));
        flood.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            while Instant::now() < until {
                let result = http
                    .post(&url)
                    .timeout(Duration::from_secs(30))
                    .json(&json!({"login": "nobody-here", "password": "wrong-password"}))
                    .send()
                    .await;
                count(&mut statuses, status_of(&result));
            }
            statuses
        }));
    }
    // The other caller asks for the gateway URL (another route) and logs in
    // with its own account (the flooded route).
    let mut other_gateway: BTreeMap<String, u64> = BTreeMap::new();
    let mut other_login: BTreeMap<String, u64> = BTreeMap::new();
    let mut other_ms = Vec::new();
    while Instant::now() < until {
        let sent = Instant::now();
        let result = other
            .get(format!("{}/gateway", probe.rest))
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        other_ms.push(sent.elapsed());
        count(&mut other_gateway, status_of(&result));
        let result = other
            .post(format!("{}/auth/login", probe.rest))
            .timeout(Duration::from_secs(30))
            .json(&json!({"login": other_name, "password": "probe-password"}))
            .send()
            .await;
        count(&mut other_login, status_of(&result));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut flood_statuses: BTreeMap<String, u64> = BTreeMap::new();
    for task in flood {
        for (status, n) in task.await? {
            *flood_statuses.entry(status).or_insert(0) += n;
        }
    }
    Ok(json!({
        "scenario": "fresh-tokens",
        "tokens": tokens,
        "tokens_s": tokens_s,
        "statuses": statuses,
        "metrics_delta": delta(&before, &after, &names),
        "login_flood": {
            "seconds": seconds,
            "from_127_0_0_1": flood_statuses,
            "gateway_from_127_0_0_2": other_gateway,
            "own_login_from_127_0_0_2": other_login,
            "gateway_from_127_0_0_2_ms": {"p50": percentile_ms(&mut other_ms, 50.0), "p99": percentile_ms(&mut other_ms, 99.0)},
        },
    }))
}

// ----- invite-preview --------------------------------------------------------

async fn invite_preview(probe: &Probe, args: &ProbeArgs) -> Result<Value> {
    let members = args.count.unwrap_or(2000);
    let (owner, channel) = owner_and_guild(probe).await?;
    let invite = crate::post(
        &probe.http,
        format!("{}/channels/{channel}/invites", probe.rest),
        &owner,
        json!({}),
    )
    .await?;
    let code = invite["code"].as_str().context("invite code")?.to_owned();

    // Members join over REST. Registering hashes a password, so it runs a
    // few at once (the server's hashing bound) and each member registers
    // from one of 64 addresses (the per-address auth window).
    let started = Instant::now();
    let clients: Vec<reqwest::Client> = (0..64)
        .map(|i| client(Some(Ipv4Addr::new(127, 0, 2, i + 1))))
        .collect::<Result<_>>()?;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (clients, next, rest, code) = (
            clients.clone(),
            next.clone(),
            probe.rest.clone(),
            code.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= members {
                    return Ok::<_, anyhow::Error>(());
                }
                let http = &clients[i % clients.len()];
                let name = format!("m{}x{i}", std::process::id());
                let token = register(http, &rest, &name).await?;
                crate::post(http, format!("{rest}/invites/{code}"), &token, json!({})).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let join_s = started.elapsed().as_secs_f64();

    let url = format!("{}/invites/{code}?with_counts=true", probe.rest);
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    let mut latencies = Vec::with_capacity(args.requests);
    let mut member_count = Value::Null;
    let cpu_before = cpu_ticks(probe.pid);
    let started = Instant::now();
    for _ in 0..args.requests {
        let sent = Instant::now();
        let result = probe.http.get(&url).send().await;
        latencies.push(sent.elapsed());
        count(&mut statuses, status_of(&result));
        if let Ok(response) = result
            && let Ok(body) = response.json::<Value>().await
        {
            member_count = body["approximate_member_count"].clone();
        }
    }
    let previews_s = started.elapsed().as_secs_f64();
    let cpu_after = cpu_ticks(probe.pid);
    let cpu_ms_per_request = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) if args.requests > 0 => {
            json!((a - b) as f64 * 10.0 / args.requests as f64)
        }
        _ => Value::Null,
    };
    Ok(json!({
        "scenario": "invite-preview",
        "members_joined": members,
        "join_s": join_s,
        "approximate_member_count": member_count,
        "requests": args.requests,
        "statuses": statuses,
        "server_cpu_ms_per_request": cpu_ms_per_request,
        "latency_ms": {"p50": percentile_ms(&mut latencies, 50.0), "p99": percentile_ms(&mut latencies, 99.0)},
        "previews_per_s": args.requests as f64 / previews_s,
    }))
}
