//! Snowflakes: 64-bit ids whose top 42 bits are milliseconds since the
//! Discord epoch (2015-01-01T00:00:00Z), so clients derive `created_at` from
//! them. On the wire they are decimal strings (JavaScript numbers lose
//! precision above 2^53); on input both strings and integers are accepted,
//! because discord.py sends integers in op 4 and op 8.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::num::NonZeroU64;

/// Milliseconds from the Unix epoch to the Discord epoch.
pub const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A non-zero id on the Discord epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Snowflake(pub NonZeroU64);

impl Snowflake {
    /// The id `value`, if non-zero.
    pub fn new(value: u64) -> Option<Self> {
        NonZeroU64::new(value).map(Self)
    }

    /// The raw value.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// Unix milliseconds at which this id was made.
    pub fn unix_ms(self) -> u64 {
        (self.get() >> 22) + DISCORD_EPOCH_MS
    }
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Snowflake {
    type Err = InvalidSnowflake;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<u64>()
            .ok()
            .and_then(Snowflake::new)
            .ok_or(InvalidSnowflake)
    }
}

/// Not a non-zero decimal u64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidSnowflake;

impl fmt::Display for InvalidSnowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid snowflake")
    }
}

impl std::error::Error for InvalidSnowflake {}

impl Serialize for Snowflake {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Snowflake {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Snowflake;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a snowflake as a decimal string or an integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Snowflake, E> {
                Snowflake::new(v).ok_or_else(|| E::custom("snowflake must be non-zero"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Snowflake, E> {
                u64::try_from(v)
                    .ok()
                    .and_then(Snowflake::new)
                    .ok_or_else(|| E::custom("snowflake must be positive"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Snowflake, E> {
                v.parse()
                    .map_err(|_| E::custom("snowflake must be a non-zero decimal u64"))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Makes unique, time-ordered ids: 42 bits of milliseconds since the Discord
/// epoch, 10 bits of worker id, 12 bits of per-millisecond increment. Pure:
/// the caller passes the time. Monotonic even if the clock steps back or
/// more than 4,096 ids are asked for in one millisecond (the generator then
/// runs ahead of the clock by the needed milliseconds).
#[derive(Clone, Debug)]
pub struct SnowflakeGenerator {
    worker_id: u64,
    last_ms: u64,
    increment: u64,
}

impl SnowflakeGenerator {
    /// A generator for `worker_id` (masked to 10 bits).
    pub fn new(worker_id: u16) -> Self {
        Self {
            worker_id: u64::from(worker_id) & 0x3ff,
            last_ms: 0,
            increment: 0,
        }
    }

    /// The next id at Unix time `now_ms`.
    ///
    /// ```
    /// use guildhall_proto::snowflake::SnowflakeGenerator;
    /// let mut ids = SnowflakeGenerator::new(1);
    /// let a = ids.next(1_704_067_200_000);
    /// let b = ids.next(1_704_067_200_000);
    /// assert!(b > a);
    /// assert_eq!(a.unix_ms(), 1_704_067_200_000);
    /// ```
    pub fn next(&mut self, now_ms: u64) -> Snowflake {
        let ms = now_ms.saturating_sub(DISCORD_EPOCH_MS).max(1);
        if ms > self.last_ms {
            self.last_ms = ms;
            self.increment = 0;
        } else {
            self.increment += 1;
            if self.increment > 0xfff {
                self.last_ms += 1;
                self.increment = 0;
            }
        }
        let raw = (self.last_ms << 22) | (self.worker_id << 12) | self.increment;
        // last_ms ≥ 1, so raw is never zero.
        Snowflake(NonZeroU64::new(raw).unwrap_or(NonZeroU64::MIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wire_form_is_a_string_and_input_takes_both() {
        let id = Snowflake::new(1_000_000_000_000_000_001).unwrap();
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"1000000000000000001\""
        );
        assert_eq!(
            serde_json::from_str::<Snowflake>("\"1000000000000000001\"").unwrap(),
            id
        );
        assert_eq!(
            serde_json::from_str::<Snowflake>("1000000000000000001").unwrap(),
            id
        );
        assert!(serde_json::from_str::<Snowflake>("0").is_err());
        assert!(serde_json::from_str::<Snowflake>("\"-5\"").is_err());
        assert!(serde_json::from_str::<Snowflake>("\"abc\"").is_err());
    }

    proptest! {
        #[test]
        fn ids_are_strictly_increasing(steps in proptest::collection::vec(0u64..3, 1..10_000)) {
            let mut ids = SnowflakeGenerator::new(3);
            let mut now = 1_704_067_200_000u64;
            let mut last = ids.next(now);
            for step in steps {
                now = if step == 2 { now - 5 } else { now + step }; // clock may step back
                let id = ids.next(now);
                prop_assert!(id > last);
                last = id;
            }
        }
    }
}
