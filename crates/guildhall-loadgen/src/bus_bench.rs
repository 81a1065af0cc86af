//! Performance gate P10: a users-role request over NATS against a NATS
//! echo baseline measured in the same run, through the same client
//! (`NatsBus`), so the ratio is the users role's own cost: decoding, the
//! permit pool, the shard's cache and store read, encoding the answer.
//!
//! `--target echo` answers from a responder in this process on a second
//! connection (the least work a request can cost over this NATS server);
//! `--target users` asks the `users.requests` subject, served by a running
//! `guildhall serve --roles users` process over the same NATS server.

use anyhow::{Result, bail};
use guildhall_cluster::{Bus, NatsBus, NatsOptions};
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for one answer before it counts as a failure.
const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Subject of the echo baseline.
const ECHO_SUBJECT: &str = "bench.echo";

/// Arguments of `bus-bench`.
#[derive(clap::Args)]
pub struct BusBenchArgs {
    /// NATS server URL.
    #[arg(long)]
    nats: String,
    /// `echo` (the baseline) or `users` (a running users role).
    #[arg(long)]
    target: String,
    /// Requests per phase (the c=1 phase and the concurrent phase).
    #[arg(long, default_value_t = 2_000)]
    requests: u64,
    /// Requests in flight in the throughput phase.
    #[arg(long, default_value_t = 64)]
    concurrency: u64,
}

/// A users-role batch load of ten ids that need not exist (the role reads
/// its shards' caches and the store for them either way).
fn users_request(i: u64) -> bytes::Bytes {
    let ids: Vec<i64> = (0..10)
        .map(|k| 1_000_000 + ((i * 10 + k) % 5_000) as i64)
        .collect();
    json!({"v": 1, "call": {"Load": {"ids": ids}}})
        .to_string()
        .into()
}

/// Whether a users-role answer is a refusal (`{"result":{"Err":...}}`);
/// the echo's answer is the request itself, never one.
fn refuses(payload: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(payload)
        .is_ok_and(|reply| reply["result"].get("Err").is_some())
}

/// Runs the benchmark and prints one JSON object.
pub fn run(args: BusBenchArgs) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(args))
}

async fn bench(args: BusBenchArgs) -> Result<()> {
    let bus = Arc::new(NatsBus::connect(&args.nats, NatsOptions::default()).await?);
    let subject = match args.target.as_str() {
        "echo" => {
            let responder = NatsBus::connect(&args.nats, NatsOptions::default()).await?;
            let mut requests = responder.subscribe(ECHO_SUBJECT, None, 4_096).await?;
            tokio::spawn(async move {
                while let Some(message) = requests.next().await {
                    if let Some(reply) = message.reply.as_deref() {
                        let _ = responder.publish(reply, None, message.payload.clone());
                    }
                }
            });
            ECHO_SUBJECT
        }
        "users" => "users.requests",
        other => bail!("--target {other}: echo or users"),
    };
    // The same bytes to either target, so both move the same request.
    let payload = users_request;
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    // Warm-up: connections, subscriptions, the role's caches.
    for i in 0..100 {
        let _ = bus.request(subject, payload(i), timeout).await;
    }
    // c = 1: latency.
    let mut samples = Vec::with_capacity(args.requests as usize);
    let mut failures = 0u64;
    for i in 0..args.requests {
        let started = Instant::now();
        match bus.request(subject, payload(i), timeout).await {
            Ok(answer) if !refuses(&answer.payload) => samples.push(started.elapsed()),
            _ => failures += 1,
        }
    }
    let p50 = crate::percentile_ms(&mut samples, 50.0);
    let p99 = crate::percentile_ms(&mut samples, 99.0);
    // c = concurrency: throughput.
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (bus, next, failed) = (bus.clone(), next.clone(), failed.clone());
        let total = args.requests;
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                match bus.request(subject, payload(i), timeout).await {
                    // An answer that refuses (the role's Overloaded) is not
                    // throughput.
                    Ok(answer) if !refuses(&answer.payload) => {}
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        json!({
            "target": args.target,
            "requests": args.requests,
            "c1_p50_ms": p50,
            "c1_p99_ms": p99,
            "c1_failures": failures,
            "concurrency": args.concurrency,
            "throughput_per_s": (args.requests - failed) as f64 / elapsed_s,
            "concurrent_failures": failed,
        })
    )?;
    Ok(())
}
