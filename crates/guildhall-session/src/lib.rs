//! A gateway session without the socket.
//!
//! - [`machine`]: the handshake and protocol state machine. It takes client
//!   frames, ticks and authentication results with the time, and returns
//!   [`machine::Command`]s for the I/O layer (send, close, authenticate).
//! - [`replay`]: the bounded buffer of sent dispatches that RESUME replays.
//! - [`queue`]: the frames a session's outbound queue carries.
//!
//! Architecture invariant: pure. The WebSocket task in the server owns a
//! `Session`, feeds it and carries out its commands; every protocol rule
//! (which op is allowed when, which close code, when a heartbeat is late)
//! lives here, tested without sockets.

pub mod machine;
pub mod queue;
pub mod replay;

pub use machine::{Command, Session, SessionConfig};
