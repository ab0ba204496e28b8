//! `matrix`, the actor of a Sausage world that connects it to a Matrix homeserver (DESIGN §17).
//!
//! It long-polls `/sync`, joins the rooms it is invited to, and hands each person's message to
//! the agent as a text spoken `as` their Matrix id (the host maps it to the world's person);
//! the agent's messages about the turn come back as typing, one edited status line, questions
//! with numbered choices, and the final answer rendered from Markdown, with its cost.
//!
//! Code map: `bridge` (the sync loop and every mapping between Matrix and the world), `host`
//! (the trait for stdin, stdout and HTTP; `wasi_host` implements it for the component),
//! `state` (`/data/state.json`), `markdown` (the safe renderer of `formatted_body`); shared rooms
//! are named for the agent by the SHA-256 of their full id (the `sha2` crate).
//!
//! Configuration in `/data/config.json`: `{"homeserver","user_id","agent"?}`. The access token
//! is not in any file the actor sees: the host adds it to every request under `homeserver`.
//!
//! Build: `cargo build --release --target wasm32-wasip2`. Test natively: `cargo test`.

// Natively only the unit tests drive this code; the program itself is the wasm32 component.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod bridge;
mod host;
mod markdown;
mod state;
#[cfg(target_arch = "wasm32")]
mod wasi_host;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

#[cfg(target_arch = "wasm32")]
fn main() {
    use host::Host;

    let data = std::path::PathBuf::from("/data");
    let mut host = wasi_host::WasiHost::new();
    if std::env::var_os("SAUSAGE_CANDIDATE").is_some_and(|v| !v.is_empty()) {
        // A candidate under test has no network, and must not take the running version's
        // events anyway: it only shows that it starts and stops cleanly.
        eprintln!("matrix: a candidate under test; not connecting to the homeserver");
        while host.pause(std::time::Duration::from_secs(3600)) {}
        return;
    }
    let config = std::fs::read(data.join("config.json"))
        .map_err(|e| e.to_string())
        .and_then(|bytes| bridge::Config::parse(&bytes));
    match config {
        Ok(config) => bridge::Bridge::new(host, data, config).run(),
        Err(why) => {
            // Without a homeserver there is nothing to do; waiting (rather than exiting) keeps
            // the supervisor from restarting the actor in a loop until someone configures it.
            eprintln!(
                "matrix: /data/config.json: {why}; write {{\"homeserver\":\"http://HOST:PORT\",\
                 \"user_id\":\"@bot:server\",\"agent\":\"agent\"}} there and restart the actor"
            );
            while host.pause(std::time::Duration::from_secs(3600)) {}
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!(
        "matrix: this is a Sausage actor; build it with `--target wasm32-wasip2` and run it in a \
         world"
    );
    std::process::exit(2);
}
