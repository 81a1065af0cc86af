//! `guildhall-loadgen`: drives a running Guildhall server the way a fleet of
//! bots would, and reports what it measured.
//!
//! ```sh
//! GUILDHALL_REST_RATE_LIMIT_PER_WINDOW=1000000 guildhall serve --listen 127.0.0.1:18080 &
//! guildhall-loadgen --base 127.0.0.1:18080 --sessions 3000 --messages 500 --server-pid $!
//! ```
//!
//! 1. registers a user and a guild, opens `sessions` gateway sessions
//!    (IDENTIFY with `concurrency` in flight) and records IDENTIFY → READY;
//! 2. reads the server's RSS before and after (with `--server-pid`), for the
//!    RSS per idle session;
//! 3. posts `messages` messages over REST (`post-concurrency` in flight) and
//!    counts MESSAGE_CREATE deliveries on every session, for messages per
//!    second through REST → gateway and deliveries per second.
//!
//! Bounded: every wait has a timeout and the run ends by itself.
//!
//! `guildhall-loadgen --serve-raw-baseline ADDR` runs the raw broadcast
//! baseline instead (see `raw`); run the same load against it and against
//! Guildhall, alternating, and report Guildhall's figures as ratios.
//!
//! `guildhall-loadgen probe SCENARIO --base HOST:PORT --server-pid PID` runs
//! one adversarial probe instead (see `probe`).
//!
//! `guildhall-loadgen voice-bench --base HOST:PORT --server-pid PID` measures
//! voice (see `voice_bench`).

mod bus_bench;
mod probe;
mod raw;
mod voice_bench;

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// host:port of the server.
    #[arg(long, default_value = "127.0.0.1:8080")]
    base: String,
    /// Gateway nodes (host:port, comma separated) the sessions are spread
    /// over, round robin; `--base` when absent. In cluster mode REST goes to
    /// `--base` and the sessions to these.
    #[arg(long, value_delimiter = ',')]
    gateway: Vec<String>,
    /// Gateway sessions to open.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// IDENTIFYs in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Messages to post.
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// POSTs in flight at once.
    #[arg(long, default_value_t = 16)]
    post_concurrency: usize,
    /// The server's PID, to read its RSS from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Serve the raw broadcast baseline on this address instead of
    /// generating load.
    #[arg(long)]
    serve_raw_baseline: Option<String>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// One adversarial probe, printing one JSON object of figures.
    Probe(probe::ProbeArgs),
    /// A request over NATS: the users role against an echo baseline (P10).
    BusBench(bus_bench::BusBenchArgs),
    /// Voice: op 4 → VOICE_SERVER_UPDATE, and SFU forwarding per CPU-second
    /// against a raw UDP relay.
    VoiceBench(voice_bench::VoiceBenchArgs),
    /// The raw UDP relay `voice-bench` compares the SFU with.
    UdpRelay {
        /// Address to bind.
        listen: String,
    },
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1].as_secs_f64() * 1000.0
}

async fn post(http: &reqwest::Client, url: String, token: &str, body: Value) -> Result<Value> {
    let response = http
        .post(url)
        .header("authorization", token)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    let value: Value = response.json().await?;
    if !status.is_success() {
        bail!("{status}: {value}");
    }
    Ok(value)
}

/// Opens one session; returns IDENTIFY → READY and the socket.
async fn open_session(
    ws_url: &str,
    token: &str,
) -> Result<(
    Duration,
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
)> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await?;
    let hello = tokio::time::timeout(Duration::from_secs(30), ws.next())
        .await?
        .context("closed before HELLO")??;
    if !hello.to_text()?.contains("\"op\":10") {
        bail!("expected HELLO, got {hello}");
    }
    let identify = json!({"op": 2, "d": {"token": token, "intents": 513, "properties": {"os": "linux", "browser": "loadgen", "device": "loadgen"}}});
    let sent = Instant::now();
    ws.send(Message::Text(identify.to_string().into())).await?;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await?
            .context("closed before READY")??;
        if let Message::Text(text) = &frame
            && text.contains("\"t\":\"READY\"")
        {
            return Ok((sent.elapsed(), ws));
        }
        if let Message::Close(close) = frame {
            bail!("closed before READY: {close:?}");
        }
    }
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    match args.command.take() {
        Some(Command::Probe(probe)) => return probe::run(probe),
        Some(Command::BusBench(bench)) => return bus_bench::run(bench),
        Some(Command::VoiceBench(bench)) => return voice_bench::run(bench),
        Some(Command::UdpRelay { listen }) => return voice_bench::relay(&listen),
        None => {}
    }
    if let Some(listen) = &args.serve_raw_baseline {
        return raw::serve(listen);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(load(args))
}

async fn load(args: Args) -> Result<()> {
    let http = reqwest::Client::new();
    let rest = format!("http://{}/api/v10", args.base);
    let gateways = if args.gateway.is_empty() {
        vec![args.base.clone()]
    } else {
        args.gateway.clone()
    };
    let ws_urls: Vec<String> = gateways
        .iter()
        .map(|g| format!("ws://{g}/?v=10&encoding=json"))
        .collect();
    let suffix = std::process::id();
    let user = post(
        &http,
        format!("{rest}/auth/register"),
        "",
        json!({"username": format!("load{suffix}"), "password": "loadgen-password"}),
    )
    .await?;
    let token = user["token"].as_str().context("token")?.to_owned();
    let guild = post(
        &http,
        format!("{rest}/guilds"),
        &token,
        json!({"name": "Load Guild"}),
    )
    .await?;
    let channel = guild["channels"][0]["id"]
        .as_str()
        .context("channel")?
        .to_owned();
    let rss_before = args.server_pid.and_then(rss_kib);

    // Phase 1: sessions.
    let started = Instant::now();
    let deliveries = Arc::new(AtomicU64::new(0));
    let semaphore = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let mut tasks = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let permit = semaphore.clone().acquire_owned().await?;
        let (ws_url, token, deliveries) = (
            ws_urls[i % ws_urls.len()].clone(),
            token.clone(),
            deliveries.clone(),
        );
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let opened = open_session(&ws_url, &token).await;
            drop(permit);
            let (latency, mut ws) = match opened {
                Ok(ok) => ok,
                Err(error) => {
                    let _ = ready_tx.send(Err(error.to_string()));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(latency));
            // Count deliveries until the socket closes (the run ends it).
            while let Ok(Some(Ok(frame))) =
                tokio::time::timeout(Duration::from_secs(120), ws.next()).await
            {
                if let Message::Text(text) = frame
                    && text.contains("\"t\":\"MESSAGE_CREATE\"")
                {
                    deliveries.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        tasks.push(ready_rx);
    }
    let mut ready_ms = Vec::with_capacity(args.sessions);
    let mut failures = 0;
    for task in tasks {
        match task.await {
            Ok(Ok(latency)) => ready_ms.push(latency),
            Ok(Err(error)) => {
                failures += 1;
                if failures <= 3 {
                    eprintln!("session failed: {error}");
                }
            }
            Err(_) => failures += 1,
        }
    }
    let connect_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await; // let the server settle
    let rss_after = args.server_pid.and_then(rss_kib);
    let ready = ready_ms.len();

    // Phase 2: REST → gateway.
    let started = Instant::now();
    let post_semaphore = Arc::new(tokio::sync::Semaphore::new(args.post_concurrency.max(1)));
    let mut posts = Vec::new();
    for i in 0..args.messages {
        let permit = post_semaphore.clone().acquire_owned().await?;
        let (http, url, token) = (
            http.clone(),
            format!("{rest}/channels/{channel}/messages"),
            token.clone(),
        );
        posts.push(tokio::spawn(async move {
            let result = post(&http, url, &token, json!({"content": format!("load {i}")})).await;
            drop(permit);
            result.is_ok()
        }));
    }
    let mut posted = 0;
    for p in posts {
        if p.await.unwrap_or(false) {
            posted += 1;
        }
    }
    let post_s = started.elapsed().as_secs_f64();
    let expected = (posted * ready) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while deliveries.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deliver_s = started.elapsed().as_secs_f64();
    let delivered = deliveries.load(Ordering::Relaxed);

    let report = json!({
        "sessions_requested": args.sessions,
        "sessions_ready": ready,
        "session_failures": failures,
        "identify_to_ready_ms": {"p50": percentile_ms(&mut ready_ms, 50.0), "p99": percentile_ms(&mut ready_ms, 99.0), "max": percentile_ms(&mut ready_ms, 100.0)},
        "sessions_per_s": ready as f64 / connect_s,
        "server_rss_kib": {"before": rss_before, "after": rss_after},
        "server_rss_per_session_kib": match (rss_before, rss_after) {
            (Some(b), Some(a)) if ready > 0 => json!((a.saturating_sub(b)) as f64 / ready as f64),
            _ => Value::Null,
        },
        "messages_posted": posted,
        "rest_messages_per_s": posted as f64 / post_s,
        "deliveries": delivered,
        "deliveries_expected": expected,
        "deliveries_per_s": delivered as f64 / deliver_s,
        "all_delivered_s": deliver_s,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    // Sockets close when the process exits.
    std::process::exit(0);
}
