//! One checker over a run's whole history, in the way Jepsen's checkers
//! judge a run: the recorder writes what every client sent and how it was
//! answered, when each session lived and which guilds it followed, and
//! every dispatch each session received; the checker then proves, per
//! guild and per session, the delivery guarantee of `ARCHITECTURE.md`:
//!
//! - **missing**: an acknowledged event that a session entitled to it never
//!   received, with no fresh GUILD_CREATE of its guild after the event was
//!   sent (the documented way a gap is made good);
//! - **duplicate**: an event a session received twice;
//! - **reordered**: an event received after another that was sent only
//!   after the first one's acknowledgement (real-time order: what a sender
//!   was told was done comes first), or a sequence number that does not
//!   grow;
//! - **not entitled**: an event received by a session whose user was not a
//!   member of its guild at any time between the send and the receipt;
//! - **phantom**: an event received that no client sent, or whose send was
//!   refused (a 4xx: certainly not done). An event whose send has no answer
//!   (a timeout, a 5xx, a reset) is indeterminate: it may or may not be
//!   delivered, and is counted, not judged.
//!
//! A session is entitled to an event when it was live from before the
//! event was sent until at least `settle_us` after its acknowledgement, and
//! its user a member of the event's guild over that whole time. A session
//! lives from its READY to its end (closed for good, told to re-identify,
//! or the end of the recording); a RESUME continues it.
//!
//! Pure: the history is data (JSON lines, one [`Entry`] each), times are
//! the recorder's monotonic microseconds, and nothing here does I/O.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Entry {
    /// A client sent an event; `key` names it uniquely in the run (the
    /// workload puts it in the message).
    Invoke {
        /// When it was sent.
        at_us: u64,
        /// The event's guild.
        guild: i64,
        /// The event's unique name.
        key: String,
        /// The api node it was sent through (empty: one only). Real-time
        /// order is guaranteed among the events of one api node; across
        /// api nodes the guild's order is the order they reach its owner.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        via: String,
    },
    /// The answer to a send: `ok` for an acknowledgement (2xx), not `ok`
    /// for a refusal (4xx). A send with no `Complete` is indeterminate.
    Complete {
        /// When the answer arrived.
        at_us: u64,
        /// The event.
        key: String,
        /// Acknowledged.
        ok: bool,
    },
    /// A session's READY.
    SessionStart {
        /// When READY arrived.
        at_us: u64,
        /// The session id.
        session: String,
        /// Its user.
        user: i64,
    },
    /// A session ended: its socket closed for good, or it was told to
    /// identify anew (op 9).
    SessionEnd {
        /// When.
        at_us: u64,
        /// The session id.
        session: String,
    },
    /// A user became a member of a guild (`member`) or stopped being one.
    Membership {
        /// When the change was acknowledged (joins) or sent (leaves): the
        /// recorder takes the earliest time the change may have applied.
        at_us: u64,
        /// The user.
        user: i64,
        /// The guild.
        guild: i64,
        /// Member from now on.
        member: bool,
    },
    /// A session received GUILD_CREATE for a guild: a subscription or a
    /// resync, after which what it missed of the guild is made good.
    Resync {
        /// When it arrived.
        at_us: u64,
        /// The session id.
        session: String,
        /// The guild.
        guild: i64,
    },
    /// A session received an event.
    Deliver {
        /// When it arrived.
        at_us: u64,
        /// The session id.
        session: String,
        /// The guild.
        guild: i64,
        /// The event's unique name.
        key: String,
        /// The dispatch's sequence number in the session.
        seq: u64,
    },
}

/// Parses a history, one JSON [`Entry`] per line (blank lines skipped).
///
/// # Errors
/// The first line that is not an entry, with its number (from 1).
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// What is wrong with a history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// See the module's documentation.
    Missing,
    /// See the module's documentation.
    Duplicate,
    /// See the module's documentation.
    Reordered,
    /// As `Reordered`, for two events sent through different api nodes:
    /// the documented weaker order (`ARCHITECTURE.md`, "The delivery
    /// guarantee"): counted and listed, not a breach of the guarantee.
    ReorderedAcrossApiNodes,
    /// See the module's documentation.
    NotEntitled,
    /// See the module's documentation.
    Phantom,
}

/// One anomaly, with the session's history around it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    /// What is wrong.
    pub kind: AnomalyKind,
    /// The session it was found in.
    pub session: String,
    /// The event's guild.
    pub guild: i64,
    /// The event.
    pub key: String,
    /// What the checker saw, in words.
    pub detail: String,
    /// The session's deliveries of the guild around the anomaly (at most
    /// [`EXCERPT_ENTRIES_MAX`]), as `seq key` lines.
    pub excerpt: Vec<String>,
}

/// Deliveries an anomaly's excerpt shows, before and after it together.
pub const EXCERPT_ENTRIES_MAX: usize = 8;

/// Anomalies a report lists in full (all are counted): the first ones say
/// what went wrong; thousands more of one fault say nothing new.
pub const ANOMALIES_LISTED_MAX: usize = 100;

/// The checker's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Events sent.
    pub sent: u64,
    /// Of those, acknowledged.
    pub acknowledged: u64,
    /// Of those, refused.
    pub refused: u64,
    /// Of those, with no answer (delivery allowed, not required).
    pub indeterminate: u64,
    /// Sessions recorded.
    pub sessions: u64,
    /// Deliveries recorded.
    pub deliveries: u64,
    /// (session, event) pairs the guarantee required.
    pub required: u64,
    /// Of those, excused by a later GUILD_CREATE of the guild.
    pub excused_by_resync: u64,
    /// Anomalies by kind.
    pub counts: BTreeMap<AnomalyKind, u64>,
    /// The first [`ANOMALIES_LISTED_MAX`], in the order found (by session,
    /// then by kind).
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// Anomalies of every kind.
    pub fn anomalies_total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Anomalies that breach the written guarantee (every kind but the
    /// documented weaker order across api nodes).
    pub fn breaches_total(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(kind, _)| **kind != AnomalyKind::ReorderedAcrossApiNodes)
            .map(|(_, n)| n)
            .sum()
    }

    fn add(&mut self, anomaly: Anomaly) {
        *self.counts.entry(anomaly.kind).or_default() += 1;
        if self.anomalies.len() < ANOMALIES_LISTED_MAX {
            self.anomalies.push(anomaly);
        }
    }
}

#[derive(Default)]
struct Sent<'a> {
    via: &'a str,
    guild: i64,
    invoked_us: u64,
    completed: Option<(u64, bool)>,
}

struct Session {
    user: i64,
    start_us: u64,
    end_us: Option<u64>,
    /// (at, guild, key, seq) in arrival order.
    deliveries: Vec<(u64, i64, String, u64)>,
    /// Resync times per guild.
    resyncs: HashMap<i64, Vec<u64>>,
}

/// A session's first receipts of a guild's events, by send time: when it
/// first heard an event sent after a given moment, in O(log n).
#[derive(Default)]
struct Heard {
    /// (sent, heard), sorted by sent once indexed.
    sent_heard: Vec<(u64, u64)>,
    /// `earliest[i]`: the earliest receipt among `sent_heard[i..]`.
    earliest: Vec<u64>,
}

impl Heard {
    fn index(&mut self) {
        self.sent_heard.sort_unstable();
        self.earliest = vec![u64::MAX; self.sent_heard.len()];
        let mut min = u64::MAX;
        for (i, (_, heard)) in self.sent_heard.iter().enumerate().rev() {
            min = min.min(*heard);
            self.earliest[i] = min;
        }
    }

    /// When the session first heard an event sent after `after_us`.
    fn first_after(&self, after_us: u64) -> Option<u64> {
        let from = self
            .sent_heard
            .partition_point(|(sent, _)| *sent <= after_us);
        self.earliest.get(from).copied()
    }
}

/// Membership intervals `[from, to)` of (user, guild).
type Memberships = HashMap<(i64, i64), Vec<(u64, u64)>>;

fn memberships(history: &[Entry]) -> Memberships {
    let mut open: HashMap<(i64, i64), u64> = HashMap::new();
    let mut spans: Memberships = HashMap::new();
    for entry in history {
        if let Entry::Membership {
            at_us,
            user,
            guild,
            member,
        } = entry
        {
            let pair = (*user, *guild);
            if *member {
                open.entry(pair).or_insert(*at_us);
            } else if let Some(from) = open.remove(&pair) {
                spans.entry(pair).or_default().push((from, *at_us));
            }
        }
    }
    for (pair, from) in open {
        spans.entry(pair).or_default().push((from, u64::MAX));
    }
    spans
}

fn member_throughout(spans: &Memberships, user: i64, guild: i64, from: u64, to: u64) -> bool {
    spans
        .get(&(user, guild))
        .is_some_and(|s| s.iter().any(|(a, b)| *a <= from && to < *b))
}

fn member_at_some_time(spans: &Memberships, user: i64, guild: i64, from: u64, to: u64) -> bool {
    spans
        .get(&(user, guild))
        .is_some_and(|s| s.iter().any(|(a, b)| *a <= to && from < *b))
}

/// The session's deliveries of `guild` around position `at` (an index into
/// its deliveries).
fn excerpt(session: &Session, guild: i64, at: usize) -> Vec<String> {
    let half = EXCERPT_ENTRIES_MAX / 2;
    let of_guild: Vec<usize> = (0..session.deliveries.len())
        .filter(|i| session.deliveries[*i].1 == guild)
        .collect();
    let here = of_guild
        .iter()
        .position(|i| *i >= at)
        .unwrap_or(of_guild.len());
    let from = here.saturating_sub(half);
    of_guild
        .iter()
        .skip(from)
        .take(EXCERPT_ENTRIES_MAX)
        .map(|i| {
            let (_, _, key, seq) = &session.deliveries[*i];
            format!("{seq} {key}")
        })
        .collect()
}

/// Judges `history`. A session is required to have received an
/// acknowledged event when it lived, and its user was a member of the
/// guild, from the send until `settle_us` after the acknowledgement.
pub fn check(history: &[Entry], settle_us: u64) -> Report {
    let mut report = Report::default();
    let mut sent: HashMap<&str, Sent> = HashMap::new();
    let mut sessions: BTreeMap<&str, Session> = BTreeMap::new();
    let mut last_us = 0;
    for entry in history {
        match entry {
            Entry::Invoke {
                at_us,
                guild,
                key,
                via,
            } => {
                sent.insert(
                    key,
                    Sent {
                        via,
                        guild: *guild,
                        invoked_us: *at_us,
                        completed: None,
                    },
                );
                last_us = last_us.max(*at_us);
            }
            Entry::Complete { at_us, key, ok } => {
                if let Some(s) = sent.get_mut(key.as_str()) {
                    s.completed = Some((*at_us, *ok));
                }
                last_us = last_us.max(*at_us);
            }
            Entry::SessionStart {
                at_us,
                session,
                user,
            } => {
                sessions.insert(
                    session,
                    Session {
                        user: *user,
                        start_us: *at_us,
                        end_us: None,
                        deliveries: Vec::new(),
                        resyncs: HashMap::new(),
                    },
                );
                last_us = last_us.max(*at_us);
            }
            Entry::SessionEnd { at_us, session } => {
                if let Some(s) = sessions.get_mut(session.as_str()) {
                    s.end_us = Some(*at_us);
                }
                last_us = last_us.max(*at_us);
            }
            Entry::Membership { at_us, .. } => last_us = last_us.max(*at_us),
            Entry::Resync {
                at_us,
                session,
                guild,
            } => {
                if let Some(s) = sessions.get_mut(session.as_str()) {
                    s.resyncs.entry(*guild).or_default().push(*at_us);
                }
                last_us = last_us.max(*at_us);
            }
            Entry::Deliver {
                at_us,
                session,
                guild,
                key,
                seq,
            } => {
                report.deliveries += 1;
                if let Some(s) = sessions.get_mut(session.as_str()) {
                    s.deliveries.push((*at_us, *guild, key.clone(), *seq));
                }
                last_us = last_us.max(*at_us);
            }
        }
    }
    let spans = memberships(history);
    report.sent = sent.len() as u64;
    for s in sent.values() {
        match s.completed {
            Some((_, true)) => report.acknowledged += 1,
            Some((_, false)) => report.refused += 1,
            None => report.indeterminate += 1,
        }
    }
    report.sessions = sessions.len() as u64;

    for (id, session) in &sessions {
        let end_us = session.end_us.unwrap_or(last_us);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut last_seq = 0;
        for (i, (at, guild, key, seq)) in session.deliveries.iter().enumerate() {
            let anomaly = |kind, detail: String| Anomaly {
                kind,
                session: (*id).to_owned(),
                guild: *guild,
                key: key.clone(),
                detail,
                excerpt: excerpt(session, *guild, i),
            };
            if *seq <= last_seq {
                report.add(anomaly(
                    AnomalyKind::Reordered,
                    format!("sequence {seq} after {last_seq}"),
                ));
            }
            last_seq = last_seq.max(*seq);
            if let Some(&first) = seen.get(key.as_str()) {
                report.add(anomaly(
                    AnomalyKind::Duplicate,
                    format!(
                        "received again (first as sequence {})",
                        session.deliveries[first].3
                    ),
                ));
                continue;
            }
            seen.insert(key, i);
            match sent.get(key.as_str()) {
                None => report.add(anomaly(AnomalyKind::Phantom, "never sent".to_owned())),
                Some(Sent {
                    completed: Some((_, false)),
                    ..
                }) => report.add(anomaly(
                    AnomalyKind::Phantom,
                    "its send was refused".to_owned(),
                )),
                Some(s) => {
                    if s.guild != *guild {
                        report.add(anomaly(
                            AnomalyKind::Phantom,
                            format!("sent to guild {}", s.guild),
                        ));
                    } else if !member_at_some_time(&spans, session.user, *guild, s.invoked_us, *at)
                    {
                        report.add(anomaly(
                            AnomalyKind::NotEntitled,
                            format!("user {} was no member of the guild", session.user),
                        ));
                    }
                }
            }
        }

        // Real-time order, per guild: walking the deliveries backwards,
        // the earliest acknowledgement among those received later must
        // not precede this event's send.
        let mut earliest_after: HashMap<i64, (u64, &str)> = HashMap::new();
        let mut earliest_after_via: HashMap<(i64, &str), (u64, &str)> = HashMap::new();
        for (i, (_, guild, key, _)) in session.deliveries.iter().enumerate().rev() {
            // A repeat is a duplicate already; order is judged on firsts.
            let first = seen.get(key.as_str()) == Some(&i);
            let (true, Some(s)) = (first, sent.get(key.as_str())) else {
                continue;
            };
            let same_api_node = earliest_after_via
                .get(&(*guild, s.via))
                .filter(|(acked, _)| *acked < s.invoked_us);
            let any_api_node = earliest_after
                .get(guild)
                .filter(|(acked, _)| *acked < s.invoked_us);
            if let Some((kind, (_, later))) = same_api_node
                .map(|e| (AnomalyKind::Reordered, e))
                .or(any_api_node.map(|e| (AnomalyKind::ReorderedAcrossApiNodes, e)))
            {
                report.add(Anomaly {
                    kind,
                    session: (*id).to_owned(),
                    guild: *guild,
                    key: key.clone(),
                    detail: format!(
                        "received before {later}, which was acknowledged before it was sent"
                    ),
                    excerpt: excerpt(session, *guild, i),
                });
            }
            if let Some((acked, true)) = s.completed {
                for slot in [
                    earliest_after.entry(*guild).or_insert((acked, key)),
                    earliest_after_via
                        .entry((*guild, s.via))
                        .or_insert((acked, key)),
                ] {
                    if acked < slot.0 {
                        *slot = (acked, key);
                    }
                }
            }
        }

        // Every acknowledged event the session was entitled to.
        let mut later_heard: HashMap<i64, Heard> = HashMap::new();
        for (key, i) in &seen {
            if let Some(s) = sent.get(key) {
                let (at, guild, ..) = &session.deliveries[*i];
                later_heard
                    .entry(*guild)
                    .or_default()
                    .sent_heard
                    .push((s.invoked_us, *at));
            }
        }
        for heard in later_heard.values_mut() {
            heard.index();
        }
        let mut missing: BTreeSet<(u64, &str)> = BTreeSet::new();
        for (key, s) in &sent {
            let Some((acked_us, true)) = s.completed else {
                continue;
            };
            let until = acked_us.saturating_add(settle_us);
            if session.start_us > s.invoked_us
                || end_us < until
                || !member_throughout(&spans, session.user, s.guild, s.invoked_us, until)
            {
                continue;
            }
            report.required += 1;
            if seen.contains_key(key) {
                continue;
            }
            // Made good only by a GUILD_CREATE after the send and before
            // the session heard an event of the guild sent after this one
            // was acknowledged: hearing that first is a silent skip.
            let heard_later = later_heard
                .get(&s.guild)
                .and_then(|later| later.first_after(acked_us))
                .unwrap_or(u64::MAX);
            let resynced = session
                .resyncs
                .get(&s.guild)
                .is_some_and(|r| r.iter().any(|at| *at >= s.invoked_us && *at <= heard_later));
            if resynced {
                report.excused_by_resync += 1;
                continue;
            }
            missing.insert((s.invoked_us, key));
        }
        for (invoked_us, key) in missing {
            let guild = sent[key].guild;
            let at = session
                .deliveries
                .iter()
                .position(|(at, ..)| *at >= invoked_us)
                .unwrap_or(session.deliveries.len());
            report.add(Anomaly {
                kind: AnomalyKind::Missing,
                session: (*id).to_owned(),
                guild,
                key: key.to_owned(),
                detail: "acknowledged, never received, no resync after it".to_owned(),
                excerpt: excerpt(session, guild, at),
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SETTLE_US: u64 = 1_000;
    const G: i64 = 1;

    fn start(at_us: u64, session: &str, user: i64) -> Entry {
        Entry::SessionStart {
            at_us,
            session: session.to_owned(),
            user,
        }
    }

    fn join(at_us: u64, user: i64) -> Entry {
        Entry::Membership {
            at_us,
            user,
            guild: G,
            member: true,
        }
    }

    fn send(at_us: u64, key: &str, answer: Option<(u64, bool)>) -> Vec<Entry> {
        let mut entries = vec![Entry::Invoke {
            at_us,
            guild: G,
            key: key.to_owned(),
            via: String::new(),
        }];
        if let Some((at_us, ok)) = answer {
            entries.push(Entry::Complete {
                at_us,
                key: key.to_owned(),
                ok,
            });
        }
        entries
    }

    fn deliver(at_us: u64, session: &str, key: &str, seq: u64) -> Entry {
        Entry::Deliver {
            at_us,
            session: session.to_owned(),
            guild: G,
            key: key.to_owned(),
            seq,
        }
    }

    /// A run in which alice's session hears m1 and m2, sent one after the
    /// other and acknowledged; the end of the recording is at 10,000 µs.
    fn clean() -> Vec<Entry> {
        let mut h = vec![join(0, 7), start(10, "s", 7)];
        h.extend(send(100, "m1", Some((200, true))));
        h.push(deliver(150, "s", "m1", 2));
        h.extend(send(300, "m2", Some((400, true))));
        h.push(deliver(350, "s", "m2", 3));
        h.push(Entry::SessionEnd {
            at_us: 10_000,
            session: "s".to_owned(),
        });
        h
    }

    fn kinds(report: &Report) -> Vec<AnomalyKind> {
        report.anomalies.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_clean_run_has_no_anomaly() {
        let report = check(&clean(), SETTLE_US);
        assert_eq!(report.anomalies_total(), 0, "{report:?}");
        assert_eq!(
            (report.sent, report.acknowledged, report.required),
            (2, 2, 2)
        );
    }

    #[test]
    fn a_missing_event_is_found_and_a_later_resync_excuses_it() {
        let mut h = clean();
        h.retain(|e| !matches!(e, Entry::Deliver { key, .. } if key == "m1"));
        let report = check(&h, SETTLE_US);
        assert_eq!(kinds(&report), [AnomalyKind::Missing]);
        assert_eq!(report.anomalies[0].key, "m1");
        assert_eq!(report.anomalies[0].excerpt, ["3 m2"]);
        // A GUILD_CREATE after the send makes the gap good; one before
        // it does not.
        let mut early = h.clone();
        early.push(Entry::Resync {
            at_us: 50,
            session: "s".to_owned(),
            guild: G,
        });
        assert_eq!(kinds(&check(&early, SETTLE_US)), [AnomalyKind::Missing]);
        h.push(Entry::Resync {
            at_us: 250,
            session: "s".to_owned(),
            guild: G,
        });
        let report = check(&h, SETTLE_US);
        assert_eq!(report.anomalies_total(), 0, "{report:?}");
        assert_eq!(report.excused_by_resync, 1);
        // A GUILD_CREATE that comes only after the session heard m2 (sent
        // after m1's acknowledgement) does not: m1 was skipped silently.
        let last = h.len() - 1;
        h[last] = Entry::Resync {
            at_us: 360,
            session: "s".to_owned(),
            guild: G,
        };
        assert_eq!(kinds(&check(&h, SETTLE_US)), [AnomalyKind::Missing]);
    }

    #[test]
    fn nothing_is_required_of_a_session_that_was_not_there_or_not_a_member() {
        // Identified after m1 was sent; ended before m2 had settled.
        let mut h = vec![join(0, 7), start(120, "s", 7)];
        h.extend(send(100, "m1", Some((200, true))));
        h.extend(send(300, "m2", Some((400, true))));
        h.push(Entry::SessionEnd {
            at_us: 900,
            session: "s".to_owned(),
        });
        // Bob joined after m1 was sent and his session missed it.
        h.push(start(10, "b", 8));
        h.push(join(150, 8));
        h.push(deliver(350, "b", "m2", 2));
        h.push(Entry::SessionEnd {
            at_us: 2_000,
            session: "b".to_owned(),
        });
        let report = check(&h, SETTLE_US);
        assert_eq!(report.anomalies_total(), 0, "{report:?}");
        assert_eq!(report.required, 1, "only bob's m2");
    }

    #[test]
    fn duplicates_and_sequence_regressions_are_found() {
        let mut h = clean();
        h.push(deliver(500, "s", "m2", 4));
        h.push(deliver(600, "s", "m1", 4));
        let report = check(&h, SETTLE_US);
        let mut found = kinds(&report);
        found.sort();
        assert_eq!(
            found,
            [
                AnomalyKind::Duplicate,
                AnomalyKind::Duplicate,
                AnomalyKind::Reordered
            ]
        );
    }

    #[test]
    fn an_event_heard_before_one_acknowledged_ahead_of_it_is_reordered() {
        let mut h = vec![join(0, 7), start(10, "s", 7)];
        h.extend(send(100, "m1", Some((200, true))));
        h.extend(send(300, "m2", Some((400, true))));
        h.push(deliver(350, "s", "m2", 2));
        h.push(deliver(450, "s", "m1", 3));
        let report = check(&h, SETTLE_US);
        assert_eq!(kinds(&report), [AnomalyKind::Reordered]);
        assert_eq!(report.anomalies[0].key, "m2");
        assert_eq!(report.anomalies[0].excerpt, ["2 m2", "3 m1"]);
        // Concurrent sends (neither acknowledged before the other was
        // sent) may arrive in either order.
        let mut h = vec![join(0, 7), start(10, "s", 7)];
        h.extend(send(100, "m1", Some((400, true))));
        h.extend(send(300, "m2", Some((350, true))));
        h.push(deliver(360, "s", "m2", 2));
        h.push(deliver(410, "s", "m1", 3));
        assert_eq!(check(&h, SETTLE_US).anomalies_total(), 0);
        // Through two api nodes, the order is the owner's: listed apart.
        let mut h = vec![join(0, 7), start(10, "s", 7)];
        h.extend(send(100, "m1", Some((200, true))));
        h.extend(send(300, "m2", Some((400, true))));
        if let Entry::Invoke { via, .. } = &mut h[4] {
            *via = "api-2".to_owned();
        }
        h.push(deliver(350, "s", "m2", 2));
        h.push(deliver(450, "s", "m1", 3));
        let report = check(&h, SETTLE_US);
        assert_eq!(kinds(&report), [AnomalyKind::ReorderedAcrossApiNodes]);
        assert_eq!(report.breaches_total(), 0);
    }

    #[test]
    fn phantoms_and_strangers_are_found_and_indeterminate_sends_allowed() {
        let mut h = clean();
        h.extend(send(500, "refused", Some((510, false))));
        h.extend(send(520, "timed out", None));
        h.push(deliver(530, "s", "refused", 4));
        h.push(deliver(540, "s", "timed out", 5));
        h.push(deliver(550, "s", "invented", 6));
        // Carol never joined the guild.
        h.push(start(10, "c", 9));
        h.push(deliver(560, "c", "m2", 2));
        let report = check(&h, SETTLE_US);
        let mut found = kinds(&report);
        found.sort();
        assert_eq!(
            found,
            [
                AnomalyKind::NotEntitled,
                AnomalyKind::Phantom,
                AnomalyKind::Phantom
            ]
        );
        assert_eq!(report.indeterminate, 1);
    }

    #[test]
    fn a_history_round_trips_through_json_lines() {
        let history = clean();
        let text: String = history
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        assert_eq!(parse(&text).unwrap(), history);
        assert!(
            parse("{\"op\":\"nope\"}")
                .unwrap_err()
                .starts_with("line 1:")
        );
    }
}
