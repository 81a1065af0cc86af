//! A fail-fast permit pool.
//!
//! Seed 000's router could serve one request at a time because it awaited
//! each shard reply in its receive loop. The fix is a task per request under a
//! concurrency cap, and the cap must *never wait*: a full pool answers
//! [`Overloaded`] at once (Discord's `semaphore` library), because a waiting
//! semaphore is just an unbounded queue with extra steps.
//!
//! The pool's size can change at run time (an adaptive limit drives it); a
//! shrink below the current occupancy takes effect as permits are released.

use crate::{Criticality, Overloaded};

/// Counts permits in use against a size.
#[derive(Clone, Debug)]
pub struct PermitPool {
    size: u32,
    in_use: u32,
    in_use_max: u32,
    rejected_total: u64,
}

impl PermitPool {
    /// A pool of `size` permits.
    ///
    /// ```
    /// use guildhall_control::{Criticality, permit::PermitPool};
    /// let mut pool = PermitPool::new(1);
    /// assert!(pool.try_acquire(Criticality::Critical).is_ok());
    /// assert!(pool.try_acquire(Criticality::Critical).is_err()); // never waits
    /// pool.release();
    /// assert!(pool.try_acquire(Criticality::Critical).is_ok());
    /// ```
    pub fn new(size: u32) -> Self {
        Self {
            size,
            in_use: 0,
            in_use_max: 0,
            rejected_total: 0,
        }
    }

    /// Takes a permit for a request of `criticality`, or fails at once. Lower
    /// classes may only fill their share of the pool.
    pub fn try_acquire(&mut self, criticality: Criticality) -> Result<(), Overloaded> {
        let share = u64::from(self.size) * u64::from(criticality.admit_share_permille()) / 1000;
        if u64::from(self.in_use) >= share.max(1).min(u64::from(self.size)) {
            self.rejected_total += 1;
            return Err(Overloaded);
        }
        self.in_use += 1;
        self.in_use_max = self.in_use_max.max(self.in_use);
        Ok(())
    }

    /// Returns a permit. Releasing more than was acquired is a caller bug; it
    /// saturates at zero rather than underflowing.
    pub fn release(&mut self) {
        debug_assert!(self.in_use > 0, "release without acquire");
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// Changes the size (for example, to an adaptive limit's new value).
    pub fn set_size(&mut self, size: u32) {
        self.size = size;
    }

    /// The size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Permits in use.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Highest occupancy seen.
    pub fn in_use_max(&self) -> u32 {
        self.in_use_max
    }

    /// Requests refused so far.
    pub fn rejected_total(&self) -> u64 {
        self.rejected_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lower_classes_are_shed_first() {
        let mut pool = PermitPool::new(10);
        for _ in 0..5 {
            pool.try_acquire(Criticality::Sheddable).unwrap();
        }
        assert_eq!(pool.try_acquire(Criticality::Sheddable), Err(Overloaded));
        for _ in 0..4 {
            pool.try_acquire(Criticality::Send).unwrap();
        }
        assert_eq!(pool.try_acquire(Criticality::Send), Err(Overloaded));
        pool.try_acquire(Criticality::Critical).unwrap();
        assert_eq!(pool.try_acquire(Criticality::Critical), Err(Overloaded));
        assert_eq!(pool.in_use(), 10);
        assert_eq!(pool.rejected_total(), 3);
    }

    proptest! {
        /// Occupancy never exceeds the size, for any interleaving.
        #[test]
        fn never_exceeds_size(
            size in 1u32..50,
            ops in proptest::collection::vec((0u8..3, 0usize..6), 0..300),
        ) {
            let mut pool = PermitPool::new(size);
            let mut held = 0u32;
            for (op, class) in ops {
                match op {
                    0 | 1 => if pool.try_acquire(Criticality::ALL[class]).is_ok() { held += 1 },
                    _ => if held > 0 { pool.release(); held -= 1 },
                }
                prop_assert!(pool.in_use() <= size);
                prop_assert_eq!(pool.in_use(), held);
            }
        }
    }
}
