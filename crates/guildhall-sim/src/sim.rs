//! The simulation kernel: seeded randomness, an event queue in virtual time,
//! and the small statistics helpers every scenario shares.

use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::collections::VecDeque;

/// Virtual time, in microseconds since the start of the run.
pub type Micros = u64;

/// Microseconds in a millisecond.
pub const MS: Micros = 1_000;
/// Microseconds in a second.
pub const S: Micros = 1_000_000;

/// The one source of randomness of a run. PCG's output for a seed is fixed
/// by its specification, so runs replay exactly on any platform.
pub struct Rng(Pcg64Mcg);

impl Rng {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Pcg64Mcg::seed_from_u64(seed))
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    /// Uniform in `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    /// A random u64.
    pub fn next_u64(&mut self) -> u64 {
        self.0.random::<u64>()
    }

    /// Exponential with the given mean (for Poisson arrivals).
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// Width of one timing-wheel bucket.
const BUCKET_US: Micros = 1_000;

/// Events ordered by time, ties by insertion order.
///
/// A timing wheel of 1 ms buckets indexed by time, not a binary heap: with a
/// million pending events (one per simulated session) a heap's pops walk
/// ~20 cache-missing levels each, which made the million-session herd
/// memory-bound. Buckets are sorted by (time, sequence) when they are
/// reached, so the order is exactly the heap's. Memory: one `Vec` header per
/// millisecond of simulated time up to the latest event (≈ 3 MB for 120 s).
pub struct Queue<E> {
    buckets: Vec<Vec<(Micros, u64, E)>>,
    /// Index of the bucket being drained.
    cursor: usize,
    /// The drained bucket, sorted, front first.
    current: VecDeque<(Micros, u64, E)>,
    seq: u64,
    len: usize,
    /// Events handled so far.
    pub handled: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self {
            buckets: Vec::new(),
            cursor: 0,
            current: VecDeque::new(),
            seq: 0,
            len: 0,
            handled: 0,
        }
    }
}

impl<E> Queue<E> {
    /// Schedules `event` at `at` (an event in the past runs next).
    pub fn push(&mut self, at: Micros, event: E) {
        self.seq += 1;
        self.len += 1;
        let index = (at / BUCKET_US) as usize;
        if index <= self.cursor
            && !(self.current.is_empty() && index == self.cursor && self.cursor_unopened())
        {
            // Into the bucket being drained: keep it sorted.
            let key = (at, self.seq);
            let pos = self.current.partition_point(|(t, s, _)| (*t, *s) < key);
            self.current.insert(pos, (at, self.seq, event));
            return;
        }
        if self.buckets.len() <= index {
            self.buckets.resize_with(index + 1, Vec::new);
        }
        self.buckets[index].push((at, self.seq, event));
    }

    fn cursor_unopened(&self) -> bool {
        self.buckets.get(self.cursor).is_some_and(|b| !b.is_empty())
    }

    /// The next event, if any, not after `until`.
    pub fn pop_until(&mut self, until: Micros) -> Option<(Micros, E)> {
        while self.current.is_empty() {
            if self.cursor_unopened() {
                let mut bucket = std::mem::take(&mut self.buckets[self.cursor]);
                bucket.sort_unstable_by_key(|(t, s, _)| (*t, *s));
                self.current = bucket.into();
                break;
            }
            if self.cursor + 1 >= self.buckets.len() {
                return None;
            }
            self.cursor += 1;
        }
        let (at, _, _) = self.current.front()?;
        if *at > until {
            return None;
        }
        let (at, _, event) = self.current.pop_front()?;
        self.len -= 1;
        self.handled += 1;
        Some((at, event))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The `p`-th percentile (0–100) of `samples` (sorted in place); 0 when empty.
pub fn percentile(samples: &mut [u64], p: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Rounds for the report, so tiny float noise never reaches the JSON.
pub fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Counts per fixed window (for "max per second" figures), bounded by the
/// run's length.
#[derive(Default)]
pub struct Windows {
    width: Micros,
    counts: Vec<u64>,
}

impl Windows {
    /// Windows of `width`.
    pub fn new(width: Micros) -> Self {
        Self {
            width: width.max(1),
            counts: Vec::new(),
        }
    }

    /// Adds `n` at `at`.
    pub fn add(&mut self, at: Micros, n: u64) {
        let index = (at / self.width) as usize;
        if self.counts.len() <= index {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += n;
    }

    /// The largest window.
    pub fn max(&self) -> u64 {
        self.counts.iter().copied().max().unwrap_or(0)
    }

    /// Every window's count, from time 0.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_orders_by_time_then_insertion() {
        let mut q = Queue::default();
        q.push(5, "b");
        q.push(1, "a");
        q.push(5, "c");
        let order: Vec<_> = std::iter::from_fn(|| q.pop_until(10))
            .map(|(_, e)| e)
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    fn queue_handles_pushes_into_the_bucket_being_drained_and_the_past() {
        let mut q = Queue::default();
        q.push(1_500, 2);
        q.push(1_200, 1);
        q.push(9_000, 5);
        assert_eq!(q.pop_until(u64::MAX), Some((1_200, 1)));
        q.push(1_300, 3); // same bucket, before the next one
        q.push(1_500, 4); // same time as an earlier event: after it
        q.push(100, 0); // in the past: runs next
        let rest: Vec<_> = std::iter::from_fn(|| q.pop_until(u64::MAX)).collect();
        assert_eq!(
            rest,
            [(100, 0), (1_300, 3), (1_500, 2), (1_500, 4), (9_000, 5)]
        );
        assert!(q.is_empty());
        assert_eq!(q.pop_until(8_000), None);
    }

    #[test]
    fn queue_matches_a_heap_on_random_schedules() {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut rng = Rng::new(42);
        let mut q = Queue::default();
        let mut heap = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for _ in 0..20_000 {
            if rng.below(3) > 0 || heap.is_empty() {
                let at = now + rng.below(5_000);
                seq += 1;
                q.push(at, seq);
                heap.push(Reverse((at, seq)));
            } else {
                let Reverse((at, id)) = heap.pop().unwrap();
                assert_eq!(q.pop_until(u64::MAX), Some((at, id)));
                now = at;
            }
        }
    }

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&mut v, 99.0), 99);
        assert_eq!(percentile(&mut v, 50.0), 50);
        assert_eq!(percentile(&mut [], 99.0), 0);
    }
}
