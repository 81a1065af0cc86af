//! Discord's wire contract: Gateway v10 and REST v10 as the official docs
//! and OpenAPI spec define them, and as the bot libraries actually require
//! them (field sets, nullability, string-encoded snowflakes and
//! permissions, timestamp format, close codes, error bodies).
//!
//! - [`snowflake`]: ids on the Discord epoch, and their generator.
//! - [`timestamp`]: ISO 8601 the way every library parses it.
//! - [`intents`]: gateway intents, privileged bits, event → intent.
//! - [`gateway`]: opcodes, close codes, bounded parsing of client payloads,
//!   server frames, and dispatches encoded once for many sessions.
//! - [`model`]: users, guilds, roles, channels, members, messages, READY.
//! - [`permissions`]: permission bits and a member's guild permissions.
//! - [`shard`]: gateway sharding: which sessions hear a guild's events
//!   (Discord's formula; events without a guild on shard 0 only).
//! - [`commands`]: application commands: validation and wire objects.
//! - [`components`]: message and modal components: the layout rules of
//!   each surface, checked, and the tree as stored (ids filled in).
//! - [`interactions`]: the Interaction object, what users send to create
//!   one, callbacks and their bounds, `interaction_metadata`.
//! - [`guilds`], [`users`], [`presence`]: the request/reply envelopes and subjects of
//!   those roles, which other roles call over the bus.
//! - [`replies`]: a create body's `message_reference`, checked, with its
//!   refusals nested at the field.
//! - [`error`]: REST error bodies with Discord's JSON error codes.
//! - [`cluster`]: what a node announces in the registry, and its validation.
//! - [`bus`]: envelopes and subjects of the bus, and the stream-gap rule.
//! - [`voice`]: the voice control plane's envelopes (gateway → voice
//!   role → SFU).
//! - [`voice_gateway`]: the voice gateway v8 that clients speak to an SFU:
//!   opcodes, close codes, bounded client parsing, numbered server frames,
//!   IP discovery packets.
//!
//! Architecture invariant: pure. No I/O, no clock (times are arguments), and
//! this is the only crate that derives serde for the wire: a field renamed
//! anywhere else cannot break a client library.

pub mod audit;
pub mod bus;
pub mod cluster;
pub mod commands;
pub mod components;
pub mod embeds;
pub mod error;
pub mod etf;
pub mod gateway;
pub mod guilds;
pub mod intents;
pub mod interactions;
pub mod mentions;
pub mod model;
pub mod permissions;
pub mod presence;
pub mod replies;
pub mod shard;
pub mod snowflake;
pub mod timestamp;
pub mod users;
pub mod voice;
pub mod voice_gateway;

pub use snowflake::Snowflake;
