//! At most one log line per key per interval.
//!
//! Seed 000: a warning per NATS slow-consumer event, ~134 a second, burned
//! the CPU the router needed and deepened the backlog that caused them.
//! Counters carry the totals; the log carries one line per (kind, subject)
//! per interval with the number of lines it stood in for.
//!
//! Bounded: at most `keys_max` keys are tracked; beyond that every new key
//! shares one overflow entry, so a flood of distinct subjects still produces
//! one line per interval.

use std::collections::HashMap;
use std::hash::Hash;

/// Whether to write the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Write it, saying how many lines of this key were suppressed since the
    /// last one.
    Emit {
        /// Lines not written since the previous emitted one.
        suppressed: u64,
    },
    /// Count it, do not write it.
    Suppress,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    last_emit_ms: Option<u64>,
    suppressed: u64,
}

impl Entry {
    fn check(&mut self, now_ms: u64, interval_ms: u64) -> Verdict {
        match self.last_emit_ms {
            Some(last) if now_ms < last.saturating_add(interval_ms) => {
                self.suppressed += 1;
                Verdict::Suppress
            }
            _ => {
                self.last_emit_ms = Some(now_ms);
                Verdict::Emit {
                    suppressed: std::mem::take(&mut self.suppressed),
                }
            }
        }
    }
}

/// Per-key log throttle.
#[derive(Debug)]
pub struct LogThrottle<K> {
    interval_ms: u64,
    keys_max: usize,
    entries: HashMap<K, Entry>,
    overflow: Entry,
}

impl<K: Hash + Eq + Clone> LogThrottle<K> {
    /// A throttle letting one line per key through every `interval_ms`.
    ///
    /// ```
    /// use guildhall_control::log_throttle::{LogThrottle, Verdict};
    /// let mut throttle = LogThrottle::new(1_000, 16);
    /// assert_eq!(throttle.check("slow_consumer", 0), Verdict::Emit { suppressed: 0 });
    /// assert_eq!(throttle.check("slow_consumer", 10), Verdict::Suppress);
    /// assert_eq!(throttle.check("slow_consumer", 1_000), Verdict::Emit { suppressed: 1 });
    /// ```
    pub fn new(interval_ms: u64, keys_max: usize) -> Self {
        Self {
            interval_ms,
            keys_max,
            entries: HashMap::new(),
            overflow: Entry::default(),
        }
    }

    /// Decides for one line of `key` at `now_ms`.
    pub fn check(&mut self, key: K, now_ms: u64) -> Verdict {
        if let Some(entry) = self.entries.get_mut(&key) {
            return entry.check(now_ms, self.interval_ms);
        }
        if self.entries.len() >= self.keys_max {
            // Forget keys that are quiet and owe no suppressed count.
            let interval_ms = self.interval_ms;
            self.entries.retain(|_, e| {
                e.suppressed > 0
                    || e.last_emit_ms
                        .is_some_and(|t| now_ms < t.saturating_add(interval_ms))
            });
        }
        if self.entries.len() >= self.keys_max {
            return self.overflow.check(now_ms, self.interval_ms);
        }
        let mut entry = Entry::default();
        let verdict = entry.check(now_ms, self.interval_ms);
        self.entries.insert(key, entry);
        verdict
    }

    /// Keys that owe a summary line (suppressed lines and a quiet interval):
    /// returns them with their counts and resets the counts. Call once per
    /// interval so the last burst of a key is not left unsaid.
    pub fn flush(&mut self, now_ms: u64) -> Vec<(K, u64)> {
        let interval_ms = self.interval_ms;
        let mut owed = Vec::new();
        for (key, entry) in &mut self.entries {
            if entry.suppressed > 0
                && entry
                    .last_emit_ms
                    .is_none_or(|t| now_ms >= t.saturating_add(interval_ms))
            {
                owed.push((key.clone(), std::mem::take(&mut entry.suppressed)));
                entry.last_emit_ms = Some(now_ms);
            }
        }
        owed
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000's figure: 100k slow-consumer events in 30 s make at most 30
    /// lines, and the suppressed counts add up to the rest.
    #[test]
    fn hundred_thousand_events_in_thirty_seconds_make_thirty_lines() {
        let mut throttle = LogThrottle::new(1_000, 64);
        let (mut lines, mut accounted) = (0u64, 0u64);
        for i in 0..100_000u64 {
            let now_ms = i * 30_000 / 100_000;
            if let Verdict::Emit { suppressed } =
                throttle.check(("slow_consumer", "users.load"), now_ms)
            {
                lines += 1;
                accounted += 1 + suppressed;
            }
        }
        for (_, suppressed) in throttle.flush(31_000) {
            lines += 1;
            accounted += suppressed;
        }
        assert!(lines <= 31, "{lines} lines");
        assert_eq!(accounted, 100_000);
    }

    #[test]
    fn distinct_keys_beyond_the_bound_share_one_line() {
        let mut throttle = LogThrottle::new(1_000, 4);
        let emitted = (0..1000u32)
            .filter(|k| matches!(throttle.check(*k, 5), Verdict::Emit { .. }))
            .count();
        assert_eq!(emitted, 5, "4 tracked keys + 1 overflow line");
        assert_eq!(throttle.len(), 4);
    }
}
