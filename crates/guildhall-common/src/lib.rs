//! What every role of a node shares, below the roles: a role crate depends
//! on this crate and on `guildhall-proto`, never on another role.
//!
//! - [`state`]: the store, the id generator, the limits and the clock
//!   (read here, at the edge, and passed as `now_ms` to everything pure).
//! - [`cluster`]: discovery. The node's announcement and lease in the
//!   registry, the validated view of the others, the membership table and
//!   ring built from it, and placement: what each role asks to route
//!   (`ClusterState::owner_of`, `presence_node_of`, `gateway_infos`, the
//!   SFUs).
//! - [`log`]: the process-wide log throttle and [`throttled!`], which every
//!   line that can fire per request or per event goes through (seed 000).
//! - [`http`]: what the roles that answer HTTP answer alike (JSON bodies,
//!   Discord's 404).
//! - [`histogram`]: fixed-bucket latency histograms for `/metrics`.
//! - [`outbox`]: guild events held for redelivery until an owner confirms
//!   their fanout (pure: time is an argument).
//! - [`auth`]: passwords (a fail-fast permit pool) and tokens.
//! - [`gateways`]: "send to these gateways", how any role reaches sessions
//!   outside a guild's stream, and the session id format that names a
//!   session's gateway node.
//! - [`guilds`]: the guilds role's client (`cast` and `call` to a guild's
//!   owner over the bus).
//! - [`presence`]: the presence role's clients (a session's status, a
//!   loading owner's question) and their counters.
//! - [`users`]: the users role's client (load users by id).
//! - [`wire`]: the wire objects of store rows that several roles answer
//!   with (users, channels).

pub mod auth;
pub mod cluster;
pub mod gateways;
pub mod guilds;
pub mod histogram;
pub mod http;
pub mod log;
pub mod outbox;
pub mod presence;
pub mod state;
pub mod users;
pub mod wire;
