//! REST rate limits: a fixed window per (caller, route, major id), Discord's
//! invalid-request limit per client address, and Discord's headers on every
//! response.
//!
//! The caller is who the token says, once the token has been checked: a
//! valid token's user, or else the client address (no token, a bad token,
//! or a token the users role could not check). Keying on the raw header let
//! every made-up token open a fresh bucket, while every caller without one
//! shared a single bucket per route, so one client could lock every
//! anonymous user out of login and the gateway URL. A token not yet known
//! (in neither of the users role's caches) costs a store read, so it is
//! only looked up while the address's bucket for the route has room.
//!
//! Every 401, 403 and 429 (except a `shared` 429: the node was busy, not
//! the caller) counts against the address; past `rest_invalid_requests_max`
//! in `rest_invalid_window_ms` the address is refused before any lookup or
//! handler until the window ends (Discord's "Cloudflare ban").
//!
//! Buckets expire in the order they were opened (all windows have one
//! length), so forgetting them is a pop from a queue, never a scan.
//!
//! Without `X-RateLimit-Scope`, twilight retries a 429 in ~19 ms forever;
//! without `Via`, discord.py refuses to retry at all; so every header is
//! always present.

use crate::{ApiError, AppState, TokenLookup, bearer};
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use guildhall_common::state::now_ms;
use guildhall_proto::error::RateLimitedBody;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy)]
struct Window {
    start_ms: u64,
    count: u32,
}

/// Fixed windows of one length, keyed by a hash, at most `buckets_max`.
struct Windows {
    map: HashMap<u64, Window>,
    /// (key, start) of every window in the order opened: the front is the
    /// first to expire. An entry whose window was since reopened is stale
    /// and skipped.
    expiry: VecDeque<(u64, u64)>,
    window_ms: u64,
    buckets_max: usize,
}

/// One decision and what the headers say about it.
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// Requests left in the window.
    pub remaining: u32,
    /// Milliseconds until the window resets.
    pub reset_after_ms: u64,
}

impl Windows {
    fn new(window_ms: u64, buckets_max: usize) -> Self {
        Self {
            map: HashMap::new(),
            expiry: VecDeque::new(),
            window_ms: window_ms.max(1),
            buckets_max: buckets_max.max(1),
        }
    }

    /// Forgets the windows that ended by `now_ms`: amortised O(1), each
    /// window is queued once and popped once.
    fn expire(&mut self, now_ms: u64) {
        while let Some(&(key, start_ms)) = self.expiry.front() {
            if now_ms < start_ms + self.window_ms {
                break;
            }
            self.expiry.pop_front();
            if self.map.get(&key).is_some_and(|w| w.start_ms == start_ms) {
                self.map.remove(&key);
            }
        }
    }

    /// Makes room for a new key when the map is full by forgetting the
    /// oldest window. Sharing one overflow window among every newcomer
    /// would let whoever filled the map (with made-up ids or a range of
    /// addresses) lock out every caller that came after; forgetting the
    /// oldest only lets that one caller start a fresh window early.
    fn make_room(&mut self) {
        while self.map.len() >= self.buckets_max {
            let Some((key, start_ms)) = self.expiry.pop_front() else {
                return;
            };
            if self.map.get(&key).is_some_and(|w| w.start_ms == start_ms) {
                self.map.remove(&key);
            }
        }
    }

    /// The live window of `key`, if any.
    fn peek(&mut self, key: u64, now_ms: u64) -> Option<Window> {
        self.expire(now_ms);
        self.map
            .get(&key)
            .copied()
            .filter(|w| now_ms < w.start_ms + self.window_ms)
    }

    /// Counts one request of `key` against `limit` at `now_ms`.
    fn check(&mut self, key: u64, limit: u32, now_ms: u64) -> Decision {
        self.expire(now_ms);
        if !self.map.contains_key(&key) {
            self.make_room();
        }
        let window_ms = self.window_ms;
        let window = match self.map.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                self.expiry.push_back((key, now_ms));
                entry.insert(Window {
                    start_ms: now_ms,
                    count: 0,
                })
            }
        };
        // Only when the clock stepped back can a window outlive its queue
        // entry; reopen it.
        if now_ms >= window.start_ms + window_ms {
            *window = Window {
                start_ms: now_ms,
                count: 0,
            };
            self.expiry.push_back((key, now_ms));
        }
        let reset_after_ms = window.start_ms + window_ms - now_ms;
        let decision = if window.count >= limit {
            Decision {
                allowed: false,
                remaining: 0,
                reset_after_ms,
            }
        } else {
            window.count += 1;
            Decision {
                allowed: true,
                remaining: limit - window.count,
                reset_after_ms,
            }
        };
        // Stale queue entries come only from reopenings; drop them if they
        // pile up (amortised over the pushes that made them).
        if self.expiry.len() > self.buckets_max.saturating_mul(2) {
            let map = &self.map;
            self.expiry
                .retain(|(k, start)| map.get(k).is_some_and(|w| w.start_ms == *start));
        }
        decision
    }
}

/// Counters of the rate limiter.
#[derive(Debug, Default)]
pub struct RateCounters {
    /// Invalid requests counted (401, 403, non-shared 429).
    pub invalid_total: AtomicU64,
    /// Requests refused because their address is over the invalid limit.
    pub banned_total: AtomicU64,
    /// Unknown tokens not looked up because the address's bucket was spent.
    pub lookups_refused_total: AtomicU64,
}

/// The buckets and the invalid-request windows.
pub struct RateLimiter {
    buckets: Mutex<Windows>,
    invalid: Mutex<Windows>,
    /// Keys are hashed with a per-process key, so nobody can aim a key at
    /// another caller's bucket.
    hasher: RandomState,
    limit: u32,
    auth_limit: u32,
    webhook_limit: u32,
    invalid_max: u32,
    /// Counters.
    pub counters: RateCounters,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Who a bucket belongs to.
#[derive(Hash)]
enum Who {
    User(i64),
    Address(IpAddr),
    /// A webhook's token routes: the webhook id and the presented token's
    /// digest (the token routes need no account; see [`webhook_of`]).
    Webhook(String, [u8; 32]),
}

/// The webhook id and token of a request to a token route
/// (`/webhooks/{id}/{token}...`), if it is one. Discord buckets these per
/// webhook; keying on the token as well keeps a caller who only knows the
/// id (ids are public: every webhook message carries one) from spending
/// the owner's bucket, while every wrong token is a 401 that counts
/// against its address like any invalid request.
fn webhook_of(route: &str, path: &str) -> Option<Who> {
    if !route.contains("/webhooks/{id}/{token}") {
        return None;
    }
    let mut segments = path.split('/').skip_while(|s| *s != "webhooks").skip(1);
    let id = segments.next()?;
    let token = segments.next()?;
    Some(Who::Webhook(
        id.to_owned(),
        guildhall_common::auth::token_digest(token),
    ))
}

impl RateLimiter {
    /// The limiter `limits` describe.
    pub fn new(limits: &guildhall_limits::Limits) -> Self {
        Self {
            buckets: Mutex::new(Windows::new(
                limits.rest_rate_window_ms,
                limits.rest_rate_buckets_max,
            )),
            invalid: Mutex::new(Windows::new(
                limits.rest_invalid_window_ms,
                limits.rest_invalid_addresses_max,
            )),
            hasher: RandomState::new(),
            limit: limits.rest_rate_limit_per_window,
            auth_limit: limits.rest_auth_rate_limit_per_window,
            webhook_limit: limits.webhook_rate_limit_per_window,
            invalid_max: limits.rest_invalid_requests_max,
            counters: RateCounters::default(),
        }
    }

    /// Counts one request of bucket `key` (limit `limit`) at `now_ms`.
    fn check(&self, key: u64, limit: u32, now_ms: u64) -> Decision {
        lock(&self.buckets).check(key, limit, now_ms)
    }

    /// Milliseconds until bucket `key` has room again, if it has none now.
    fn spent(&self, key: u64, limit: u32, now_ms: u64) -> Option<u64> {
        let mut buckets = lock(&self.buckets);
        let window_ms = buckets.window_ms;
        buckets
            .peek(key, now_ms)
            .filter(|w| w.count >= limit)
            .map(|w| w.start_ms + window_ms - now_ms)
    }

    /// Milliseconds until `address` may call again, if it is over the
    /// invalid-request limit.
    fn banned(&self, address: IpAddr, now_ms: u64) -> Option<u64> {
        let key = self.hasher.hash_one(address);
        let mut invalid = lock(&self.invalid);
        let window_ms = invalid.window_ms;
        invalid
            .peek(key, now_ms)
            .filter(|w| w.count >= self.invalid_max)
            .map(|w| w.start_ms + window_ms - now_ms)
    }

    /// Counts one invalid request of `address`.
    fn invalid(&self, address: IpAddr, now_ms: u64) {
        self.counters.invalid_total.fetch_add(1, Ordering::Relaxed);
        let key = self.hasher.hash_one(address);
        lock(&self.invalid).check(key, self.invalid_max, now_ms);
    }

    fn key(&self, who: &Who, method: &str, route: &str, major: &str) -> u64 {
        self.hasher.hash_one((who, method, route, major))
    }

    /// The `/metrics` lines of the limiter.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, value) in [
            (
                "guildhall_rest_invalid_requests_total",
                "REST answers counted against the caller's address (401, 403, non-shared 429).",
                &self.counters.invalid_total,
            ),
            (
                "guildhall_rest_invalid_banned_total",
                "REST requests refused because their address is over rest_invalid_requests_max.",
                &self.counters.banned_total,
            ),
            (
                "guildhall_rest_token_lookups_refused_total",
                "Unknown tokens not looked up because the address's bucket was spent.",
                &self.counters.lookups_refused_total,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
    }
}

/// A stable bucket id for the `X-RateLimit-Bucket` header (the same on
/// every node, so it cannot use the limiter's keyed hash).
fn hash_of(parts: &[&str]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

fn banned_response(reset_after_ms: u64) -> Response {
    let retry_after_s = reset_after_ms as f64 / 1000.0;
    let mut response = crate::json_response(
        StatusCode::TOO_MANY_REQUESTS,
        &RateLimitedBody::new(retry_after_s, true),
    );
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::RETRY_AFTER,
        HeaderValue::from(retry_after_s.ceil().max(1.0) as u64),
    );
    headers.insert(
        axum::http::header::VIA,
        HeaderValue::from_static("1.1 guildhall"),
    );
    headers.insert("x-ratelimit-global", HeaderValue::from_static("true"));
    headers.insert("x-ratelimit-scope", HeaderValue::from_static("global"));
    response
}

/// The middleware.
pub async fn layer(State(node): State<AppState>, mut request: Request, next: Next) -> Response {
    node.counters.requests_total.fetch_add(1, Ordering::Relaxed);
    let now = now_ms();
    let rate = &node.rate;
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| {
            guildhall_common::http::client_key(c.0.ip())
        });
    if let Some(reset_after_ms) = rate.banned(address, now) {
        rate.counters.banned_total.fetch_add(1, Ordering::Relaxed);
        return banned_response(reset_after_ms);
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", |p| p.as_str())
        .to_owned();
    let major = request
        .uri()
        .path()
        .split('/')
        .find(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("")
        .to_owned();
    let method = request.method().as_str().to_owned();
    let webhook = webhook_of(&route, request.uri().path());
    let limit = if route.contains("/auth/") {
        rate.auth_limit
    } else if webhook.is_some() {
        rate.webhook_limit
    } else {
        rate.limit
    };
    let address_key = rate.key(&Who::Address(address), &method, &route, &major);
    let lookup = match bearer(request.headers()) {
        None => None,
        Some(token) => {
            let digest = guildhall_common::auth::token_digest(token);
            match node.users.cached(&digest) {
                Some(known) => Some(Ok(known)),
                // An unknown token costs a store read: only while the
                // address could still be answered.
                None => match rate.spent(address_key, limit, now) {
                    Some(_) => {
                        rate.counters
                            .lookups_refused_total
                            .fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    None => Some(node.users.by_token(digest).await),
                },
            }
        }
    };
    let key = match (&webhook, &lookup) {
        (Some(webhook), _) => rate.key(webhook, &method, &route, &major),
        (None, Some(Ok(Some(user)))) => rate.key(&Who::User(user.id), &method, &route, &major),
        _ => address_key,
    };
    let bucket = format!("{:016x}", hash_of(&[&method, &route]));
    let decision = rate.check(key, limit, now);
    let started = std::time::Instant::now();
    let mut response = if decision.allowed {
        if let Some(lookup) = lookup {
            request.extensions_mut().insert(TokenLookup(lookup));
        }
        next.run(request).await
    } else {
        node.counters
            .rate_limited_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::RateLimited(decision.reset_after_ms as f64 / 1000.0).into_response()
    };
    node.counters
        .request_seconds
        .record_us(started.elapsed().as_micros() as u64);
    let shared = response
        .headers()
        .get("x-ratelimit-scope")
        .is_some_and(|v| v == "shared");
    if matches!(response.status().as_u16(), 401 | 403 | 429) && !shared {
        rate.invalid(address, now);
    }
    let headers = response.headers_mut();
    let reset = (now + decision.reset_after_ms) as f64 / 1000.0;
    for (name, value) in [
        ("x-ratelimit-limit", limit.to_string()),
        ("x-ratelimit-remaining", decision.remaining.to_string()),
        ("x-ratelimit-reset", format!("{reset:.3}")),
        (
            "x-ratelimit-reset-after",
            format!("{:.3}", decision.reset_after_ms as f64 / 1000.0),
        ),
        ("x-ratelimit-bucket", bucket),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    if !shared {
        headers.insert("x-ratelimit-scope", HeaderValue::from_static("user"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_token_routes_are_keyed_by_webhook_and_token() {
        let route = "/api/v10/webhooks/{id}/{token}";
        let Some(Who::Webhook(id, digest)) = webhook_of(route, "/api/v10/webhooks/123/abc") else {
            panic!("a token route")
        };
        assert_eq!(id, "123");
        assert_eq!(digest, guildhall_common::auth::token_digest("abc"));
        let messages = "/api/v9/webhooks/{id}/{token}/messages/{message}";
        assert!(webhook_of(messages, "/api/v9/webhooks/1/t/messages/2").is_some());
        assert!(webhook_of("/api/v10/webhooks/{id}", "/api/v10/webhooks/1").is_none());
    }

    #[test]
    fn window_counts_and_resets() {
        let mut windows = Windows::new(1_000, 10);
        assert!(windows.check(1, 2, 0).allowed);
        let second = windows.check(1, 2, 10);
        assert!(second.allowed && second.remaining == 0);
        let third = windows.check(1, 2, 20);
        assert!(!third.allowed);
        assert_eq!(third.reset_after_ms, 980);
        assert!(windows.check(2, 2, 20).allowed, "buckets are independent");
        assert!(windows.check(1, 2, 1_000).allowed, "a new window");
    }

    #[test]
    fn bucket_map_is_bounded_and_expires_in_order() {
        let mut windows = Windows::new(1_000, 3);
        for key in 0..3 {
            assert!(windows.check(key, 1, 0).allowed);
        }
        // Full: a newcomer gets its own window, and the oldest is forgotten
        // (never one window shared by every newcomer, which whoever filled
        // the map could exhaust for everyone).
        assert!(
            windows.check(100, 1, 1).allowed,
            "a newcomer has its own window"
        );
        assert!(windows.check(101, 1, 2).allowed, "so does the next one");
        assert!(
            !windows.check(100, 1, 3).allowed,
            "and each is still limited"
        );
        assert!(windows.map.len() <= 3);
        assert!(!windows.map.contains_key(&0) && !windows.map.contains_key(&1));
        assert!(
            windows.check(102, 1, 1_001).allowed,
            "expired buckets are forgotten"
        );
        assert!(
            windows.map.len() <= 2,
            "every window of time 0 ended by 1_001"
        );
        assert!(windows.expiry.len() <= 2 * 3);
    }

    #[test]
    fn a_stepped_back_clock_neither_leaks_nor_panics() {
        let mut windows = Windows::new(100, 4);
        for now in [1_000, 500, 2_000, 10, 5_000] {
            windows.check(7, 1, now);
            assert!(windows.peek(7, now).is_some());
        }
        assert!(windows.expiry.len() <= 8 && windows.map.len() <= 4);
    }
}
