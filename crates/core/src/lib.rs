//! Sausage's core: a host that runs a world of WebAssembly actors talking JSON through a broker,
//! on one host. It names no NATS type: several hosts are `sausage-cluster`'s, behind the
//! broker's ports (`broker::ports`), and the binary wires the two.
//!
//! Its modules are layered (DESIGN §19, checked by `tests/layers.rs`): `message`, `fs` <
//! `replace`, `runtime` < `world` < `people` < `broker` < the native actors `console`, `cargo`,
//! `schedules` and `web`, which never import each other.

pub mod approvals;
pub mod broker;
pub mod cargo;
pub mod console;
pub mod fs;
pub mod http;
pub mod message;
pub mod people;
pub mod replace;
pub mod runtime;
pub mod schedules;
pub mod secrets;
pub mod traces;
pub mod web;
pub mod world;

/// After this many task polls the scheduler looks at I/O, timers and wakes from other threads
/// (tokio's own default). A busy guest's next slice waits for that look (`runtime::slices`), so
/// between two slices of one busy actor up to this many polls of ready tasks run: with the pair
/// of `cargo bench --bench routing` beside a spinning actor, 4 gave one round trip per slice
/// (p50 1.1 ms), 16 about 7, 61 about 30 (p50 8 µs, p99 0.8 ms). With N busy actors, I/O waits
/// at most min(N, this) slices of `runtime::EPOCH_TICK`.
const SCHEDULER_CHECK_INTERVAL: u32 = 61;

/// The tokio scheduler a world runs on: one thread for every actor, so a message between two
/// actors wakes no other thread (that halves a round trip). Compiling and other blocking work
/// go to tokio's blocking pool; every guest yields after at most two ticks of 1 ms.
pub fn scheduler() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .event_interval(SCHEDULER_CHECK_INTERVAL)
        .global_queue_interval(SCHEDULER_CHECK_INTERVAL)
        .build()
}
