//! Voice tokens and fencing epochs.
//!
//! A token is 16 bytes from the operating system's generator as 32 hex
//! digits; only its SHA-256 (64 hex digits) travels to the SFU, so neither
//! the bus nor the SFU's memory holds a usable token.
//!
//! An epoch fences the syncers of one call: the SFU refuses requests with
//! an older epoch than the call's and hands the call to a newer one. Epochs
//! are the wall clock in Unix milliseconds at the syncer's creation (or
//! re-placement), made strictly increasing within the process: a syncer
//! that takes a call over after a restart, or on another voice node whose
//! clock agrees to within the time a takeover takes, carries a larger
//! epoch than its predecessor.

use sha2::{Digest, Sha256};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh token, or `None` if the generator failed (the join is refused).
pub fn mint() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex(&bytes))
}

/// SHA-256 of `token`, 64 lowercase hex digits.
pub fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

static LAST_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The next fencing epoch: Unix ms now, or one more than the last epoch
/// this process handed out if that is larger.
pub fn next_epoch() -> u64 {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut last = LAST_EPOCH.load(Ordering::Relaxed);
    loop {
        let next = now_ms.max(last + 1);
        match LAST_EPOCH.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// A random number in `[0, 1)` for jitter (0 if the generator failed:
/// no jitter is better than no answer).
pub fn unit() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_and_digests_64() {
        let a = mint().unwrap_or_default();
        let b = mint().unwrap_or_default();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn epochs_strictly_increase() {
        let mut last = 0;
        for _ in 0..1_000 {
            let e = next_epoch();
            assert!(e > last);
            last = e;
        }
    }
}
