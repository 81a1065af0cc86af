//! REST rate limits: a fixed window per (caller, route, major id), and
//! Discord's headers on every response.
//!
//! Without `X-RateLimit-Scope`, twilight retries a 429 in ~19 ms forever;
//! without `Via`, discord.py refuses to retry at all; so every header is
//! always present.

use crate::api::{ApiError, AppState};
use crate::state::now_ms;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

#[derive(Clone, Copy)]
struct Window {
    start_ms: u64,
    count: u32,
}

/// The buckets.
pub struct RateLimiter {
    windows: Mutex<HashMap<u64, Window>>,
    limit: u32,
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

const OVERFLOW_KEY: u64 = u64::MAX;

impl RateLimiter {
    /// Buckets of `limit` requests per `window_ms`, at most `buckets_max`.
    pub fn new(limit: u32, window_ms: u64, buckets_max: usize) -> Self {
        Self {
            windows: Mutex::new(HashMap::new()),
            limit,
            window_ms: window_ms.max(1),
            buckets_max,
        }
    }

    /// Counts one request of bucket `key` at `now_ms`.
    pub fn check(&self, key: u64, now_ms: u64) -> Decision {
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut key = key;
        if !windows.contains_key(&key) && windows.len() >= self.buckets_max {
            let window_ms = self.window_ms;
            windows.retain(|_, w| now_ms < w.start_ms + window_ms);
            if windows.len() >= self.buckets_max {
                key = OVERFLOW_KEY;
            }
        }
        let window = windows.entry(key).or_insert(Window {
            start_ms: now_ms,
            count: 0,
        });
        if now_ms >= window.start_ms + self.window_ms {
            *window = Window {
                start_ms: now_ms,
                count: 0,
            };
        }
        let reset_after_ms = window.start_ms + self.window_ms - now_ms;
        if window.count >= self.limit {
            return Decision {
                allowed: false,
                remaining: 0,
                reset_after_ms,
            };
        }
        window.count += 1;
        Decision {
            allowed: true,
            remaining: self.limit - window.count,
            reset_after_ms,
        }
    }

    /// The limit per window.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// The middleware.
pub async fn layer(State(node): State<AppState>, request: Request, next: Next) -> Response {
    node.counters.requests_total.fetch_add(1, Ordering::Relaxed);
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
        .unwrap_or("");
    let caller = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let method = request.method().as_str().to_owned();
    let key = hash_of(&[caller, &method, &route, major]);
    let bucket = format!("{:016x}", hash_of(&[&method, &route]));
    let now = now_ms();
    let decision = node.rate.check(key, now);
    let started = std::time::Instant::now();
    let mut response = if decision.allowed {
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
    let headers = response.headers_mut();
    let reset = (now + decision.reset_after_ms) as f64 / 1000.0;
    for (name, value) in [
        ("x-ratelimit-limit", node.rate.limit().to_string()),
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
    // A handler's `shared` scope (the node was busy, not the caller) stays.
    if !headers.contains_key("x-ratelimit-scope") {
        headers.insert("x-ratelimit-scope", HeaderValue::from_static("user"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_and_resets() {
        let limiter = RateLimiter::new(2, 1_000, 10);
        assert!(limiter.check(1, 0).allowed);
        let second = limiter.check(1, 10);
        assert!(second.allowed && second.remaining == 0);
        let third = limiter.check(1, 20);
        assert!(!third.allowed);
        assert_eq!(third.reset_after_ms, 980);
        assert!(limiter.check(2, 20).allowed, "buckets are independent");
        assert!(limiter.check(1, 1_000).allowed, "a new window");
    }

    #[test]
    fn bucket_map_is_bounded() {
        let limiter = RateLimiter::new(1, 1_000, 3);
        for key in 0..3 {
            assert!(limiter.check(key, 0).allowed);
        }
        assert!(limiter.check(100, 1).allowed, "overflow bucket");
        assert!(
            !limiter.check(101, 2).allowed,
            "new keys share the overflow bucket"
        );
        assert!(
            limiter.check(102, 1_001).allowed,
            "expired buckets are forgotten"
        );
    }
}
