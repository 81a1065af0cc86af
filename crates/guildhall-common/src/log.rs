//! Rate-limited logging for lines that can fire per request or per event.
//!
//! Seed 000: an unthrottled warning per slow-consumer event burned the CPU
//! the router needed. Every such line goes through [`throttled!`]: at most
//! one line per key per interval (the control crate's `LogThrottle`), with
//! the number of lines it stood in for. Counters carry the totals.
//!
//! The throttle is process-wide (a log is): [`configure`] sets it from a
//! node's `Limits` when the node starts; lines written before that use the
//! defaults.

use guildhall_control::log_throttle::{LogThrottle, Verdict};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Lines the throttle held back, all keys together (for `/metrics`).
pub static SUPPRESSED_TOTAL: AtomicU64 = AtomicU64::new(0);

fn throttle() -> &'static Mutex<LogThrottle<&'static str>> {
    static THROTTLE: OnceLock<Mutex<LogThrottle<&'static str>>> = OnceLock::new();
    THROTTLE.get_or_init(|| {
        Mutex::new(LogThrottle::new(
            guildhall_limits::LOG_THROTTLE_INTERVAL_MS,
            guildhall_limits::LOG_THROTTLE_KEYS_MAX,
        ))
    })
}

/// Applies `log_throttle_interval_ms` and `log_throttle_keys_max` (a fresh
/// throttle: what the old one had suppressed is already counted).
pub fn configure(limits: &guildhall_limits::Limits) {
    *throttle()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = LogThrottle::new(
        limits.log_throttle_interval_ms,
        limits.log_throttle_keys_max,
    );
}

/// Whether a line of `key` may be written now, and how many were
/// suppressed since the last one.
pub fn admit(key: &'static str) -> Option<u64> {
    let verdict = throttle()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .check(key, crate::state::now_ms());
    match verdict {
        Verdict::Emit { suppressed } => Some(suppressed),
        Verdict::Suppress => {
            SUPPRESSED_TOTAL.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// `throttled!(warn, "key", field = value, ..., "message")`: a tracing event
/// at most once per key per interval, with a `suppressed` count.
#[macro_export]
macro_rules! throttled {
    ($level:ident, $key:literal, $($rest:tt)+) => {
        if let Some(suppressed) = $crate::log::admit($key) {
            tracing::$level!(suppressed, $($rest)+);
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_line_per_key_per_interval() {
        let emitted = (0..1000)
            .filter(|_| super::admit("test.flood").is_some())
            .count();
        assert_eq!(emitted, 1);
        assert!(super::admit("test.other").is_some(), "keys are independent");
    }
}
