//! Sausage: a host that runs a world of WebAssembly actors talking JSON through a broker.
//!
//! The crate is layered: `fs` (commit-on-close files, knows nothing of actors), `runtime`
//! (wasmtime, knows nothing of routing), `world` (the on-disk layout), `broker` (routing,
//! mailboxes, supervision, requests), and the native actors `console` and `cargo`.

pub mod broker;
pub mod cargo;
pub mod console;
pub mod fs;
pub mod init;
pub mod message;
pub mod runtime;
pub mod world;
