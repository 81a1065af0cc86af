//! Which SFU hosts a call: pure, so it is unit-tested and the same choice
//! is made by every syncer of a channel.
//!
//! Seed 003: placement that ignores load drowns the few healthy members.
//! An SFU is a candidate when it has room (announced `sessions` below
//! `sessions_max`) and the caller has not excluded it (open breaker, too
//! many allocations in flight, the SFU that just died). Among candidates,
//! those whose load (sessions / sessions_max) is within `slack_permille` of
//! the least loaded are equally good; the channel then picks among them by
//! rendezvous hashing (highest hash of channel and SFU), so two syncers of
//! one channel choose the same SFU, and channels spread over the good ones.

use guildhall_ring::hash::{key_point, member_id_of};

/// One SFU as placement sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The SFU's node name.
    pub node: &'a str,
    /// Sessions as last announced.
    pub sessions: u32,
    /// Sessions it admits at most.
    pub sessions_max: u32,
    /// Whether the caller may use it now (breaker closed, allocations in
    /// flight under their cap, not the SFU being left).
    pub usable: bool,
}

/// Load in permille of capacity; `None` when full or without capacity.
fn load_permille(c: &Candidate<'_>) -> Option<u64> {
    if c.sessions_max == 0 || c.sessions >= c.sessions_max {
        return None;
    }
    Some(u64::from(c.sessions) * 1000 / u64::from(c.sessions_max))
}

/// The index of the SFU for `channel_id`, or `None` when no usable SFU has
/// room.
///
/// ```
/// use guildhall_voice::placement::{choose, Candidate};
/// let sfus = [
///     Candidate { node: "a", sessions: 90, sessions_max: 100, usable: true },
///     Candidate { node: "b", sessions: 10, sessions_max: 100, usable: true },
///     Candidate { node: "c", sessions: 100, sessions_max: 100, usable: true },
/// ];
/// assert_eq!(choose(&sfus, 42, 100), Some(1)); // the least loaded, not full
/// ```
pub fn choose(candidates: &[Candidate<'_>], channel_id: i64, slack_permille: u32) -> Option<usize> {
    let loads: Vec<Option<u64>> = candidates
        .iter()
        .map(|c| if c.usable { load_permille(c) } else { None })
        .collect();
    let least = loads.iter().flatten().min().copied()?;
    let ceiling = least + u64::from(slack_permille);
    let channel_point = key_point(channel_id as u64);
    candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| loads[*i].is_some_and(|l| l <= ceiling))
        .max_by_key(|(_, c)| {
            // Ties (practically impossible) go to the lower node name.
            (
                key_point(channel_point ^ member_id_of(c.node).0),
                std::cmp::Reverse(c.node),
            )
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sfu(node: &str, sessions: u32, usable: bool) -> Candidate<'_> {
        Candidate {
            node,
            sessions,
            sessions_max: 100,
            usable,
        }
    }

    #[test]
    fn skips_full_and_unusable_and_prefers_the_least_loaded() {
        assert_eq!(choose(&[], 1, 100), None);
        assert_eq!(choose(&[sfu("a", 100, true)], 1, 100), None);
        assert_eq!(choose(&[sfu("a", 0, false)], 1, 100), None);
        let sfus = [sfu("a", 0, false), sfu("b", 50, true), sfu("c", 99, true)];
        for channel in 0..100 {
            assert_eq!(choose(&sfus, channel, 100), Some(1));
        }
    }

    #[test]
    fn equally_loaded_sfus_share_channels_deterministically() {
        let sfus = [sfu("a", 10, true), sfu("b", 12, true), sfu("c", 15, true)];
        let mut counts = [0u32; 3];
        for channel in 0..3_000 {
            let i = choose(&sfus, channel, 100).unwrap_or(usize::MAX);
            assert_eq!(choose(&sfus, channel, 100), Some(i), "deterministic");
            counts[i] += 1;
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
        // Removing one SFU moves only its channels (rendezvous hashing).
        let two = [sfus[0], sfus[1]];
        for channel in 0..3_000 {
            let before = choose(&sfus, channel, 100);
            if before != Some(2) {
                assert_eq!(choose(&two, channel, 100), before);
            }
        }
    }
}
