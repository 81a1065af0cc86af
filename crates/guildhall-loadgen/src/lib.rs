//! The load generator's reusable part: clients that tests and the
//! benchmarks drive over real sockets (see `main.rs` for the binary).

pub mod voice;
