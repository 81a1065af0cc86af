//! Gateway sharding: which sessions hear an event. One rule, used by every
//! path that puts an event in front of a session (READY's guild list, the
//! GUILD_CREATEs after it, later subscriptions, user events), so a sharded
//! bot never sees a guild on two shards or a DM on any shard but 0.
//!
//! Discord's formula ("Sharding"): a guild's events go to shard
//! `(guild_id >> 22) % num_shards`; events without a `guild_id` (direct
//! messages, USER_UPDATE) go only to shard 0. A session without `shard`
//! hears everything. Sessions with different `num_shards` each apply their
//! own, which is what lets a bot hand traffic to a differently sharded
//! deployment.

/// The shard of `num_shards` that `guild_id`'s events go to. `num_shards`
/// of 0 (refused at IDENTIFY with 4010) is treated as 1.
pub fn shard_of(guild_id: i64, num_shards: u32) -> u32 {
    // A snowflake is positive; `unsigned_abs` keeps the shift logical
    // for any other value instead of spreading the sign bit.
    ((guild_id.unsigned_abs() >> 22) % u64::from(num_shards.max(1))) as u32
}

/// Whether a session identified with `shard` (`[shard_id, num_shards]`,
/// `None`: not sharded) receives an event of `guild_id` (`None`: an event
/// without a guild, such as a direct message or USER_UPDATE).
pub fn receives(shard: Option<[u32; 2]>, guild_id: Option<i64>) -> bool {
    match (shard, guild_id) {
        (None, _) => true,
        (Some([shard_id, _]), None) => shard_id == 0,
        (Some([shard_id, num_shards]), Some(guild_id)) => {
            shard_of(guild_id, num_shards) == shard_id
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A guild id whose timestamp part (the bits above 22) is `t`.
    fn guild(t: i64) -> i64 {
        (t << 22) | 0x3f_ffff
    }

    #[test]
    fn guild_events_follow_the_documented_formula() {
        // (shard, guild id, received): the worker, process and increment
        // bits below 22 never matter.
        let cases = [
            ([0, 2], guild(4), true),
            ([1, 2], guild(4), false),
            ([0, 2], guild(5), false),
            ([1, 2], guild(5), true),
            ([2, 3], guild(8), true),
            ([0, 3], guild(8), false),
            ([0, 1], guild(5), true),
            ([0, 1], guild(0), true),
            // Discord's docs' example id: 41771983423143937 >> 22 = 9959216934.
            ([4, 10], 41_771_983_423_143_937, true),
        ];
        for (shard, guild_id, expected) in cases {
            assert_eq!(
                receives(Some(shard), Some(guild_id)),
                expected,
                "{shard:?} {guild_id}"
            );
        }
    }

    #[test]
    fn events_without_a_guild_go_to_shard_zero_only() {
        assert!(receives(Some([0, 1]), None));
        assert!(receives(Some([0, 4]), None));
        for shard_id in 1..4 {
            assert!(!receives(Some([shard_id, 4]), None), "shard {shard_id}");
        }
    }

    #[test]
    fn an_unsharded_session_hears_everything() {
        assert!(receives(None, None));
        assert!(receives(None, Some(guild(7))));
    }

    proptest! {
        /// Exactly one shard of any `num_shards` receives each guild's
        /// events, and one shard (0) those without a guild; `n = 1` is
        /// everything on shard 0.
        #[test]
        fn each_event_reaches_exactly_one_shard(guild_id in 1i64..i64::MAX, num_shards in 1u32..64) {
            let guild_hits = (0..num_shards)
                .filter(|i| receives(Some([*i, num_shards]), Some(guild_id)))
                .count();
            prop_assert_eq!(guild_hits, 1);
            let user_hits: Vec<u32> = (0..num_shards)
                .filter(|i| receives(Some([*i, num_shards]), None))
                .collect();
            prop_assert_eq!(user_hits, vec![0]);
            prop_assert!(receives(Some([0, 1]), Some(guild_id)));
        }
    }
}
