//! Sausage: a host that runs a world of WebAssembly actors talking JSON through a broker.
//!
//! The crate is layered: `fs` (commit-on-close files, knows nothing of actors), `runtime`
//! (wasmtime, knows nothing of routing), `world` (the on-disk layout), `broker` (routing,
//! mailboxes, supervision, requests), and the native actors `console`, `cargo`, `web` and `scheduler` (`schedules`).

pub mod broker;
pub mod cargo;
pub mod cluster;
pub mod console;
pub mod fs;
pub mod init;
pub mod message;
pub mod people;
pub mod replace;
pub mod runtime;
pub mod schedules;
pub mod web;
pub mod world;

/// After this many task polls the scheduler looks at I/O, timers and wakes from other threads:
/// with a busy actor (which yields every 10 ms) those wait at most this many slices.
const SCHEDULER_CHECK_INTERVAL: u32 = 4;

/// The tokio scheduler a world runs on: one thread for every actor, so a message between two
/// actors wakes no other thread (that halves a round trip). Compiling and other blocking work
/// go to tokio's blocking pool; every guest yields at least every 10 ms.
pub fn scheduler() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .event_interval(SCHEDULER_CHECK_INTERVAL)
        .global_queue_interval(SCHEDULER_CHECK_INTERVAL)
        .build()
}
