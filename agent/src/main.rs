//! `agent`, the actor of a Sausage world that talks with a large language model (DESIGN §8).
//!
//! A text message without `reply_to` starts a turn: the agent sends the conversation to the
//! configured model (`/data/config.json`), runs the tools the model calls (messages to other
//! actors, files), and answers the sender with the model's final text. Everything else that
//! arrives is kept and shown to the model at the next turn.
//!
//! Code map, bottom up (a module imports only those before it; `tests/layers.rs` checks it):
//! `message` (the types every module shares: messages in and out, tiers, ids, the API shapes,
//! HTTP request and answer), `host` (the trait for stdin, stdout and streaming HTTP), `history`
//! (the neutral conversation format), `config`, `conversations` (one per person, room and actor;
//! memory), `access` (what each tier may do), `fairness` (round-robin and the hourly limit),
//! `goals`, `tools`, `provider` (requests and event streams of each model API), `budget` (prices
//! and the day's spending per person), `context` (estimates and compaction), `delegation` (roles
//! and sub-agents), `turn` (the main
//! loop and one turn's state machine), and `wasi_host`, which implements `host` for the component.
//! The model's instructions are `prompt.md`.
//!
//! Build: `cargo build --release --target wasm32-wasip2`. Test natively: `cargo test` (the
//! provider tests read recorded answers from `../shared/llm-fixtures/` and skip without them).

// Natively only the unit tests drive this code; the program itself is the wasm32 component.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod access;
mod budget;
mod config;
mod context;
mod conversations;
mod delegation;
mod fairness;
mod goals;
mod history;
mod host;
mod mcp;
mod message;
mod provider;
mod tools;
mod turn;
#[cfg(target_arch = "wasm32")]
mod wasi_host;

#[cfg(test)]
mod testing;

#[cfg(target_arch = "wasm32")]
fn main() {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let candidate = !env("SAUSAGE_CANDIDATE").is_empty();
    let actor = match env("SAUSAGE_ACTOR") {
        actor if actor.is_empty() => "agent".to_string(),
        actor => actor,
    };
    let host = wasi_host::WasiHost::new(candidate);
    turn::Agent::new(host, "/data", &actor, &env("SAUSAGE_VERSION"), candidate).run();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!(
        "agent: this is a Sausage actor; build it with `--target wasm32-wasip2` and run it in a \
         world (`sausage init` does both)"
    );
    std::process::exit(2);
}
