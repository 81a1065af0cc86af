//! `sim flood`: seed 000's users router under a cache-miss flood.
//!
//! Clients (the API) ask a users router for keys (user ids) over the bus; the
//! router answers from its L1 cache or loads from a backend (the shards and
//! their database) of `capacity_rps` (`capacity_rps × backend_latency` servers,
//! each taking 0.8–1.2 × `backend_latency_ms`). Each client request carries a
//! deadline of `deadline_ms` from its first send.
//!
//! Timeline: 5 s of baseline (half the capacity in requests, 95 % of them
//! for a warm set the L1 cache holds, as in the incident: "under normal
//! conditions our L1 cache absorbed the hits"), then the flood: its first
//! second asks each of `keys` cold keys `dup` times (a guilds node restarted
//! and its members are reloaded), the rest is `offered_rps` of cold keys until
//! `duration_s`, then 30 s of baseline again to measure recovery.
//!
//! Hardened router (the server's design): a receive loop that never waits
//! (2 µs per message), L1 cache, single-flight per key, a fail-fast permit
//! pool sized by a Vegas adaptive limit, deadlines checked before a request
//! is started at every hop, an `overloaded` reply that clients retry only
//! within a retry budget and their deadline, one log line per second.
//! Naive router (the incident): the same cache but a receive loop that awaits
//! each backend round trip (concurrency 1), no coalescing, no deadlines, a
//! subscription of 65,536 pending messages that drops when full (a
//! slow-consumer warning logged per drop), clients that time out after the
//! deadline and retry up to twice at once.

use crate::sim::{MS, Micros, Queue, Rng, S, percentile, round4};
use guildhall_control::Criticality;
use guildhall_control::adaptive::{AdaptiveLimit, LimitBounds, Outcome, Vegas};
use guildhall_control::log_throttle::{LogThrottle, Verdict};
use guildhall_control::permit::PermitPool;
use guildhall_control::retry::{RetryBudget, backoff_full_jitter_ms};
use guildhall_control::singleflight::{Join, SingleFlight};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Cold keys asked in the first second of the flood.
    pub keys: u64,
    /// Times each of them is asked in that second.
    pub dup: u64,
    /// Backend capacity, requests per second.
    pub capacity_rps: u64,
    /// Offered load during the flood, requests per second.
    pub offered_rps: u64,
    /// Flood length.
    pub duration_s: u64,
    /// Client deadline.
    pub deadline_ms: u64,
    /// Backend latency at no load.
    pub backend_latency_ms: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            keys: 1_000,
            dup: 20,
            capacity_rps: 2_000,
            offered_rps: 20_000,
            duration_s: 60,
            deadline_ms: 200,
            backend_latency_ms: 5,
        }
    }
}

/// What `sim flood` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "flood".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Client requests (first attempts), all phases.
    pub requests: u64,
    /// Backend fetches started in the flood's first second (the dup burst).
    pub backend_fetches_first_second: u64,
    /// Distinct keys of the dup burst that were fetched in that second.
    pub distinct_keys_fetched_first_second: u64,
    /// Most calls at the backend at once (in service and queued there).
    pub backend_inflight_max: u64,
    /// Times the backend held more calls than the router's limit allowed.
    pub inflight_over_limit: u64,
    /// Highest adaptive limit (1 for the naive serial router).
    pub limit_max: u32,
    /// Backend fetches completed within a waiting client's deadline during
    /// the flood, over capacity × duration.
    pub goodput_ratio: f64,
    /// Client requests answered successfully within their deadline, over all
    /// client requests of the flood.
    pub success_ratio_during_flood: f64,
    /// p99 time to answer `overloaded`, in milliseconds (null if none).
    pub reject_p99_ms: Option<f64>,
    /// Overloaded answers.
    pub rejected: u64,
    /// Backend calls started after their deadline had passed.
    pub expired_started: u64,
    /// Requests dropped unstarted because their deadline had passed.
    pub expired_dropped: u64,
    /// Retries clients sent.
    pub retries_sent: u64,
    /// Messages the subscription dropped (slow consumer).
    pub slow_consumer_drops: u64,
    /// Log lines written about overload or slow consumers.
    pub log_lines: u64,
    /// Most messages waiting in the router's subscription.
    pub router_queue_max: u64,
    /// Seconds after the flood until every 100 ms window answers ≥ 99 % of
    /// its requests in time, for good (null: not within 30 s).
    pub recovery_s: Option<f64>,
}

#[derive(Clone, Copy)]
struct Req {
    key: u64,
    arrival: Micros,
    /// When the current attempt was sent.
    sent: Micros,
    deadline: Micros,
    attempt: u8,
    done: bool,
    ok: bool,
}

enum Ev {
    /// A client sends attempt `attempt` of request `req`.
    Send { req: u32, attempt: u8 },
    /// The router's receive loop handles a message (hardened).
    Process { req: u32, attempt: u8 },
    /// A backend call finished.
    BackendDone { call: u32 },
    /// A naive client's attempt timed out.
    Timeout { req: u32, attempt: u8 },
}

struct Call {
    key: u64,
    deadline: Micros,
    issued: Micros,
    /// Dropped unstarted at the backend because its deadline had passed.
    skipped: bool,
    /// Naive: the message this call answers.
    naive_msg: Option<(u32, u8)>,
}

const ROUTER_CPU: Micros = 2;
const CACHE_TTL: Micros = 600 * S;
const WARM_KEYS: u64 = 10_000;
const WARM_HIT_RATIO: f64 = 0.95;
const CACHE_ENTRIES_MAX: usize = 200_000;
const SUB_PENDING_MAX: usize = 65_536;
const BASELINE_S: u64 = 5;
const RECOVERY_OBSERVE_S: u64 = 30;
const WINDOW: Micros = 100 * MS;

struct World {
    rng: Rng,
    naive: bool,
    q: Queue<Ev>,
    reqs: Vec<Req>,
    calls: Vec<Call>,
    servers_free: u64,
    backend_queue: VecDeque<u32>,
    backend_inflight: u64,
    cache: HashMap<u64, Micros>,
    cache_order: VecDeque<u64>,
    flights: SingleFlight<u64, (u32, u8)>,
    leaders: HashMap<u64, (u32, u8)>,
    pool: PermitPool,
    limit: AdaptiveLimit,
    budget: RetryBudget,
    throttle: LogThrottle<&'static str>,
    router_free: Micros,
    sub: VecDeque<(u32, u8)>,
    router_busy: bool,
    latency: (f64, f64),
    r: Report,
    reject_us: Vec<u64>,
    flood: (Micros, Micros),
    good_fetches: u64,
    windows: Vec<(u64, u64)>,
    deadline: Micros,
}

impl World {
    fn service_time(&mut self) -> Micros {
        let (base, spread) = self.latency;
        ((base * (0.8 + spread * self.rng.unit())) * 1000.0) as Micros
    }

    fn cache_get(&self, key: u64, now: Micros) -> bool {
        self.cache.get(&key).is_some_and(|exp| *exp > now)
    }

    fn cache_put(&mut self, key: u64, now: Micros) {
        if self.cache.insert(key, now + CACHE_TTL).is_none() {
            self.cache_order.push_back(key);
            if self.cache_order.len() > CACHE_ENTRIES_MAX
                && let Some(old) = self.cache_order.pop_front()
            {
                self.cache.remove(&old);
            }
        }
    }

    fn window(&mut self, arrival: Micros) -> &mut (u64, u64) {
        let i = (arrival / WINDOW) as usize;
        if self.windows.len() <= i {
            self.windows.resize(i + 1, (0, 0));
        }
        &mut self.windows[i]
    }

    /// Answers message (req, attempt) at `now`.
    fn answer(&mut self, now: Micros, req: u32, attempt: u8, ok: bool) -> bool {
        let r = self.reqs[req as usize];
        if r.done || r.attempt != attempt {
            return false;
        }
        if ok && now <= r.deadline {
            self.reqs[req as usize].done = true;
            self.reqs[req as usize].ok = true;
            self.window(r.arrival).1 += 1;
            return true;
        }
        if ok || self.naive {
            // Late answers are lost: the client gave up.
            return false;
        }
        // Overloaded: retry within the budget and the deadline, else fail.
        self.r.rejected += 1;
        let unit = self.rng.unit();
        let backoff = backoff_full_jitter_ms(u32::from(attempt), 10, 100, unit) * MS;
        if now + backoff < r.deadline && self.budget.try_retry(now / MS) {
            self.r.retries_sent += 1;
            self.reqs[req as usize].attempt += 1;
            self.q.push(
                now + backoff,
                Ev::Send {
                    req,
                    attempt: attempt + 1,
                },
            );
        } else {
            self.reqs[req as usize].done = true;
        }
        false
    }

    fn start_backend(&mut self, now: Micros) {
        while self.servers_free > 0 {
            let Some(call) = self.backend_queue.pop_front() else {
                return;
            };
            let c = &self.calls[call as usize];
            if !self.naive && now >= c.deadline {
                // Hardened: expired work is never started.
                self.r.expired_dropped += 1;
                self.calls[call as usize].skipped = true;
                self.q.push(now, Ev::BackendDone { call });
                continue;
            }
            if now >= c.deadline {
                self.r.expired_started += 1;
            }
            if (self.flood.0..self.flood.0 + S).contains(&now) {
                self.r.backend_fetches_first_second += 1;
            }
            self.servers_free -= 1;
            let t = self.service_time();
            self.q.push(now + t, Ev::BackendDone { call });
        }
    }

    fn issue(&mut self, now: Micros, key: u64, deadline: Micros, naive_msg: Option<(u32, u8)>) {
        self.calls.push(Call {
            key,
            deadline,
            issued: now,
            skipped: false,
            naive_msg,
        });
        self.backend_queue.push_back((self.calls.len() - 1) as u32);
        self.backend_inflight += 1;
        self.r.backend_inflight_max = self.r.backend_inflight_max.max(self.backend_inflight);
        if !self.naive && self.backend_inflight > u64::from(self.pool.size()) {
            self.r.inflight_over_limit += 1;
        }
        self.start_backend(now);
    }

    fn log(&mut self, kind: &'static str, now: Micros) {
        if self.naive || matches!(self.throttle.check(kind, now / MS), Verdict::Emit { .. }) {
            self.r.log_lines += 1;
        }
    }

    /// Hardened receive loop: never waits on the backend.
    fn process(&mut self, now: Micros, req: u32, attempt: u8) {
        let r = self.reqs[req as usize];
        if r.done || r.attempt != attempt {
            return;
        }
        if self.cache_get(r.key, now) {
            self.answer(now, req, attempt, true);
            return;
        }
        if now >= r.deadline {
            self.r.expired_dropped += 1;
            self.reqs[req as usize].done = true;
            return;
        }
        match self.flights.join(r.key, (req, attempt)) {
            Join::Follow => {}
            Join::Rejected(_) => self.reject(now, req, attempt),
            Join::Lead => {
                self.pool.set_size(self.limit.limit());
                self.r.limit_max = self.r.limit_max.max(self.limit.limit());
                if self.pool.try_acquire(Criticality::Critical).is_ok() {
                    self.leaders.insert(r.key, (req, attempt));
                    self.issue(now, r.key, r.deadline, None);
                } else {
                    self.reject(now, req, attempt);
                    for (fr, fa) in self.flights.complete(&r.key) {
                        self.reject(now, fr, fa);
                    }
                }
            }
        }
    }

    fn reject(&mut self, now: Micros, req: u32, attempt: u8) {
        let sent = self.reqs[req as usize].sent;
        self.reject_us.push(now - sent);
        self.log("overloaded", now);
        self.answer(now, req, attempt, false);
    }

    /// Naive receive loop: handles messages one at a time, awaiting each
    /// backend round trip before taking the next message.
    fn naive_pump(&mut self, now: Micros) {
        while !self.router_busy {
            let Some((req, attempt)) = self.sub.pop_front() else {
                return;
            };
            let r = self.reqs[req as usize];
            if self.cache_get(r.key, now) {
                self.answer(now, req, attempt, true);
                continue;
            }
            self.router_busy = true;
            self.r.limit_max = 1;
            self.issue(now, r.key, r.deadline, Some((req, attempt)));
        }
    }

    fn backend_done(&mut self, now: Micros, call: u32) {
        let (key, issued, naive_msg, expired) = {
            let c = &self.calls[call as usize];
            (c.key, c.issued, c.naive_msg, c.skipped)
        };
        self.backend_inflight -= 1;
        if !expired {
            self.servers_free += 1;
        }
        let in_flood = (self.flood.0..self.flood.1).contains(&now);
        if self.naive {
            self.router_busy = false;
            self.cache_put(key, now);
            if let Some((req, attempt)) = naive_msg
                && self.answer(now, req, attempt, true)
                && in_flood
            {
                self.good_fetches += 1;
            }
            self.start_backend(now);
            self.naive_pump(now);
            return;
        }
        let inflight = self.pool.in_use();
        self.pool.release();
        let outcome = if expired {
            Outcome::Dropped
        } else {
            Outcome::Success
        };
        if !expired {
            self.limit.on_sample(now - issued, inflight, outcome);
            self.cache_put(key, now);
        }
        let mut waiters = self.flights.complete(&key);
        if let Some(leader) = self.leaders.remove(&key) {
            waiters.insert(0, leader);
        }
        let mut good = false;
        for (req, attempt) in waiters {
            if expired {
                self.answer(now, req, attempt, false);
            } else {
                good |= self.answer(now, req, attempt, true);
            }
        }
        if good && in_flood {
            self.good_fetches += 1;
        }
        self.start_backend(now);
    }
}

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let capacity = params.capacity_rps.max(1);
    let latency_ms = params.backend_latency_ms.max(1) as f64;
    let servers = ((capacity as f64 * latency_ms / 1000.0).round() as u64).max(1);
    let flood_start = BASELINE_S * S;
    let flood_end = flood_start + params.duration_s.max(1) * S;
    let end = flood_end + RECOVERY_OBSERVE_S * S;
    let deadline = params.deadline_ms * MS;
    let mut w = World {
        rng: Rng::new(seed),
        naive,
        q: Queue::default(),
        reqs: Vec::new(),
        calls: Vec::new(),
        servers_free: servers,
        backend_queue: VecDeque::new(),
        backend_inflight: 0,
        cache: HashMap::new(),
        cache_order: VecDeque::new(),
        flights: SingleFlight::new(
            guildhall_limits::SINGLEFLIGHT_KEYS_MAX,
            guildhall_limits::SINGLEFLIGHT_WAITERS_PER_KEY_MAX,
        ),
        leaders: HashMap::new(),
        pool: PermitPool::new(guildhall_limits::ADAPTIVE_LIMIT_START),
        limit: AdaptiveLimit::Vegas(Vegas::new(LimitBounds::default())),
        budget: RetryBudget::with_defaults(),
        throttle: LogThrottle::new(
            guildhall_limits::LOG_THROTTLE_INTERVAL_MS,
            guildhall_limits::LOG_THROTTLE_KEYS_MAX,
        ),
        router_free: 0,
        sub: VecDeque::new(),
        router_busy: false,
        latency: (latency_ms, 0.4),
        r: Report {
            scenario: "flood",
            mode: if naive { "naive" } else { "hardened" },
            seed,
            requests: 0,
            backend_fetches_first_second: 0,
            distinct_keys_fetched_first_second: 0,
            backend_inflight_max: 0,
            inflight_over_limit: 0,
            limit_max: 0,
            goodput_ratio: 0.0,
            success_ratio_during_flood: 0.0,
            reject_p99_ms: None,
            rejected: 0,
            expired_started: 0,
            expired_dropped: 0,
            retries_sent: 0,
            slow_consumer_drops: 0,
            log_lines: 0,
            router_queue_max: 0,
            recovery_s: None,
        },
        reject_us: Vec::new(),
        flood: (flood_start, flood_end),
        good_fetches: 0,
        windows: Vec::new(),
        deadline,
    };

    // Arrivals: (time, key). Baseline and flood are Poisson over cold keys;
    // the dup burst is keys × dup uniform in the flood's first second.
    let mut arrivals: Vec<(Micros, u64)> = Vec::new();
    // Warm keys live in [2^62, 2^62 + WARM_KEYS); cold keys have bit 63 set.
    let poisson = |w: &mut World,
                   from: Micros,
                   to: Micros,
                   rps: u64,
                   warm: bool,
                   out: &mut Vec<(Micros, u64)>| {
        let mean_gap = S as f64 / rps.max(1) as f64;
        let mut t = from as f64;
        loop {
            t += w.rng.exp(mean_gap);
            if t >= to as f64 {
                break;
            }
            let key = if warm && w.rng.unit() < WARM_HIT_RATIO {
                (1 << 62) + w.rng.below(WARM_KEYS)
            } else {
                w.rng.next_u64() | (1 << 63)
            };
            out.push((t as Micros, key));
        }
    };
    for k in 0..WARM_KEYS {
        w.cache_put((1 << 62) + k, 0);
    }
    poisson(&mut w, 0, flood_start, capacity / 2, true, &mut arrivals);
    for i in 0..params.keys * params.dup {
        arrivals.push((flood_start + w.rng.below(S), i % params.keys.max(1)));
    }
    poisson(
        &mut w,
        flood_start + S,
        flood_end,
        params.offered_rps,
        false,
        &mut arrivals,
    );
    poisson(&mut w, flood_end, end, capacity / 2, true, &mut arrivals);
    arrivals.sort_unstable();
    for (t, key) in arrivals {
        let id = w.reqs.len() as u32;
        w.reqs.push(Req {
            key,
            arrival: t,
            sent: t,
            deadline: t + deadline,
            attempt: 0,
            done: false,
            ok: false,
        });
        w.q.push(
            t,
            Ev::Send {
                req: id,
                attempt: 0,
            },
        );
    }
    w.r.requests = w.reqs.len() as u64;

    let mut first_second_keys = std::collections::BTreeSet::new();
    while let Some((now, ev)) = w.q.pop_until(end + 10 * S) {
        match ev {
            Ev::Send { req, attempt } => {
                let r = w.reqs[req as usize];
                if r.done {
                    continue;
                }
                w.reqs[req as usize].sent = now;
                if attempt == 0 {
                    w.window(r.arrival).0 += 1;
                    w.budget.on_first_attempt(now / MS);
                }
                if w.naive {
                    // Per-attempt client timeout, then the subscription.
                    w.reqs[req as usize].deadline = now + w.deadline;
                    w.q.push(now + w.deadline, Ev::Timeout { req, attempt });
                    if w.sub.len() >= SUB_PENDING_MAX {
                        w.r.slow_consumer_drops += 1;
                        w.log("slow_consumer", now);
                    } else {
                        w.sub.push_back((req, attempt));
                        w.r.router_queue_max = w.r.router_queue_max.max(w.sub.len() as u64);
                    }
                    w.naive_pump(now);
                } else {
                    w.router_free = w.router_free.max(now) + ROUTER_CPU;
                    w.q.push(w.router_free, Ev::Process { req, attempt });
                }
            }
            Ev::Process { req, attempt } => {
                let key = w.reqs[req as usize].key;
                let before = w.calls.len();
                w.process(now, req, attempt);
                if w.calls.len() > before
                    && (flood_start..flood_start + S).contains(&now)
                    && key < params.keys
                {
                    first_second_keys.insert(key);
                }
            }
            Ev::BackendDone { call } => {
                let (key, issued) = (w.calls[call as usize].key, w.calls[call as usize].issued);
                if w.naive && (flood_start..flood_start + S).contains(&issued) && key < params.keys
                {
                    first_second_keys.insert(key);
                }
                w.backend_done(now, call);
            }
            Ev::Timeout { req, attempt } => {
                let r = w.reqs[req as usize];
                if r.done || r.attempt != attempt {
                    continue;
                }
                if attempt < 2 {
                    w.r.retries_sent += 1;
                    w.reqs[req as usize].attempt += 1;
                    w.q.push(
                        now,
                        Ev::Send {
                            req,
                            attempt: attempt + 1,
                        },
                    );
                } else {
                    w.reqs[req as usize].done = true;
                }
            }
        }
    }
    w.r.distinct_keys_fetched_first_second = first_second_keys.len() as u64;
    w.r.goodput_ratio =
        round4(w.good_fetches as f64 / (capacity * params.duration_s.max(1)) as f64);
    let flood_reqs: Vec<&Req> = w
        .reqs
        .iter()
        .filter(|r| (flood_start..flood_end).contains(&r.arrival))
        .collect();
    let ok = flood_reqs.iter().filter(|r| r.ok).count();
    w.r.success_ratio_during_flood = round4(ok as f64 / flood_reqs.len().max(1) as f64);
    if !w.reject_us.is_empty() {
        w.r.reject_p99_ms = Some(round4(percentile(&mut w.reject_us, 99.0) as f64 / 1000.0));
    }
    // Recovery: first window after the flood from which every window until
    // the end answers ≥ 99 % of its requests in time.
    let first = (flood_end / WINDOW) as usize;
    let last = ((end / WINDOW) as usize).min(w.windows.len());
    let healthy = |(arrived, answered): (u64, u64)| arrived == 0 || answered * 100 >= arrived * 99;
    let mut recovered_at = None;
    for i in (first..last).rev() {
        if healthy(w.windows[i]) {
            recovered_at = Some(i);
        } else {
            break;
        }
    }
    w.r.recovery_s =
        recovered_at.map(|i| round4((i as u64 * WINDOW - flood_end) as f64 / S as f64));
    w.r
}
