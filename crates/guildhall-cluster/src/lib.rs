//! How nodes find each other.
//!
//! - [`registry`]: the [`Registry`] trait (atomic put-with-lease, keep-alive,
//!   revoke, list, change notifications) and [`LocalRegistry`], the
//!   in-process implementation embedded mode runs on. Cluster mode adds an
//!   etcd implementation of the same trait, not another code path.
//! - [`etcd`]: [`EtcdRegistry`], that implementation over etcd v3 (calls
//!   under timeouts, keep-alives on their own connection, watches that end
//!   for a re-list).
//! - [`view`]: what an observer makes of the registry: every entry
//!   validated, rejected entries counted, and each key's last good value
//!   kept across watch events and full re-lists (seed 002).
//!
//! - [`bus`]: the [`Bus`] trait (publish, bounded subscriptions, queue
//!   groups, request/reply with a deadline), [`LocalBus`] for embedded mode,
//!   and [`bus::DroppingBus`], the seeded fault-injecting wrapper tests use.
//! - [`nats`]: [`NatsBus`], the same trait over a NATS server (cluster
//!   mode), with its bounds in [`nats::NatsOptions`].

pub mod bus;
pub mod etcd;
pub mod nats;
pub mod registry;
pub mod view;

pub use bus::{Bus, BusError, LocalBus, Subscription};
pub use etcd::{EtcdOptions, EtcdRegistry};
pub use nats::{NatsBus, NatsOptions};
pub use registry::{
    Claim, LeaseId, Listing, LocalRegistry, Registry, RegistryError, Watch, WatchEvent,
};
pub use view::RegistryView;
