//! `pingpong` measures the broker: round trips, and floods with an order check.
//! - `{"type":"ping","n":K}` → `{"type":"pong","n":K}`.
//! - `{"type":"run","peer":P,"rounds":R}`: R sequential round trips with P. Round k sends
//!   `{"type":"ping","n":k}` with id `p<k>` and waits for the reply whose `reply_to` is
//!   `<self>/p<k>` (the broker publishes an actor-chosen id under the sender's name); pings that
//!   arrive meanwhile are answered, anything else is ignored. Then replies
//!   `{"type":"stats","rounds":R,"p50_us":..,"p99_us":..,"max_us":..,"per_sec":..}`, or an
//!   `error` when the peer answers a ping with something other than a pong (say, `undeliverable`).
//!   With `"ms":M` it stops after M ms if the R rounds are not played by then (`rounds` says how
//!   many were).
//! - `{"type":"flood","to":T,"count":N}` sends `{"type":"seq","n":i}` for i in 1..=N to T as fast
//!   as it can (one flush at the end), then replies `{"type":"flooded","count":N}`. With
//!   `"pad":P`, each `seq` also carries `"pad"`, a string of P bytes.
//! - `{"type":"sleep","ms":M}` replies `{"type":"sleeping"}`, then sleeps M ms without reading
//!   stdin (a busy consumer).
//! - `{"type":"append","path":P,"ms":M}` replies `{"type":"appending"}`, then for M ms opens P in
//!   append mode, writes one line and closes it, again and again, without reading stdin; then
//!   replies `{"type":"appended","count":N}` (or an `error`). On a big file, each open copies it.
//! - `{"type":"spin","ms":M}` replies `{"type":"spinning"}`, then computes for M ms without a
//!   pause and without reading stdin (a busy actor); then replies `{"type":"spun","sum":..}`.
//! - As a consumer, counts `seq` messages and checks each is `n` = previous + 1 (from 1);
//!   `{"type":"report"}` → `{"type":"report","received":..,"in_order":..,"last":..}`.
//!
//! Anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF, also mid-run.
//!
//! `ping`, `pong` and `seq` take a lean path: their envelope is read into borrowed fields and the
//! answer written straight into a reused buffer, so that the benches measure the broker rather
//! than this actor building JSON trees. Any line the lean path cannot read whole goes the general
//! way.

use proto::Message;
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::env;
use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

/// The fields of a delivered message the lean path reads, borrowed from its line where they
/// need no unescaping.
#[derive(Deserialize)]
struct Lean<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow, default)]
    reply_to: Option<Cow<'a, str>>,
    #[serde(borrow)]
    body: LeanBody<'a>,
}

#[derive(Deserialize)]
struct LeanBody<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    n: u64,
}

/// Reused buffers: the line read last and the lines to write.
#[derive(Default)]
struct Io {
    line: Vec<u8>,
    out: Vec<u8>,
}

impl Io {
    /// The next line, `false` at EOF.
    fn read(&mut self) -> bool {
        proto::read_line(&mut self.line)
    }

    /// The line as a lean `ping`, `pong` or `seq`, when it reads as one.
    fn lean(&self) -> Option<Lean<'_>> {
        serde_json::from_slice::<Lean>(&self.line)
            .ok()
            .filter(|m| matches!(&*m.body.kind, "ping" | "pong" | "seq"))
    }

    /// The line as a general message; `None` (with a log line) when it is not one.
    fn message(&self) -> Option<Message> {
        serde_json::from_slice(&self.line)
            .inspect_err(|e| eprintln!("stdin: skipping a line that is not a message: {e}"))
            .ok()
    }

    /// Writes `{"to":to,"body":{"type":"seq","n":n}}` (with `"pad"` when it is not empty) for n
    /// in 1..=count, 64 KiB at a time, and flushes once at the end.
    fn flood(&mut self, to: &str, count: u64, pad: &str) {
        // Every line is `{head}{n}{tail}`.
        let head = format!(
            "{{\"to\":{},\"body\":{{\"type\":\"seq\",\"n\":",
            serde_json::to_string(to).expect("a string serializes")
        );
        let tail = match pad {
            "" => "}}\n".to_string(),
            pad => format!(
                ",\"pad\":{}}}}}\n",
                serde_json::to_string(pad).expect("a string serializes")
            ),
        };
        let out = &mut self.out;
        out.clear();
        for n in 1..=count {
            out.extend_from_slice(head.as_bytes());
            push_u64(out, n);
            out.extend_from_slice(tail.as_bytes());
            if out.len() >= 64 * 1024 {
                proto::send_raw(out);
                out.clear();
            }
        }
        proto::send_raw(out);
    }

    /// Writes `{"to":to,"reply_to"?:..,"id"?:..,"body":{"type":kind,"n":n}}` and flushes.
    fn send(&mut self, to: &str, reply_to: Option<&str>, id: Option<&str>, kind: &str, n: u64) {
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"{\"to\":");
        serde_json::to_writer(&mut *out, to).expect("a string serializes");
        if let Some(reply_to) = reply_to {
            out.extend_from_slice(b",\"reply_to\":");
            serde_json::to_writer(&mut *out, reply_to).expect("a string serializes");
        }
        if let Some(id) = id {
            out.extend_from_slice(b",\"id\":");
            serde_json::to_writer(&mut *out, id).expect("a string serializes");
        }
        out.extend_from_slice(b",\"body\":{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"n\":");
        push_u64(out, n);
        out.extend_from_slice(b"}}\n");
        proto::send_raw(out);
    }
}

fn main() {
    let me = env::var("SAUSAGE_ACTOR").unwrap_or_default();
    let (mut received, mut last, mut in_order) = (0u64, 0u64, true);
    let mut io = Io::default();
    while io.read() {
        if let Some(lean) = io.lean() {
            match &*lean.body.kind {
                "ping" => {
                    let (from, id, n) = (lean.from.to_string(), lean.id.to_string(), lean.body.n);
                    io.send(&from, Some(&id), None, "pong", n);
                }
                "seq" => {
                    received += 1;
                    in_order &= lean.body.n == last + 1;
                    last = lean.body.n;
                }
                _ => eprintln!("ignoring a pong outside a run"),
            }
            continue;
        }
        let Some(msg) = io.message() else { continue };
        match msg.kind() {
            "shutdown" => break,
            "ping" => pong(&msg),
            "run" => {
                let (Some(peer), Some(rounds)) =
                    (msg.body["peer"].as_str(), msg.body["rounds"].as_u64())
                else {
                    proto::reply_error(&msg, "run needs a string `peer` and a number `rounds`");
                    continue;
                };
                let limit = match &msg.body["ms"] {
                    Value::Null => None,
                    ms => match ms.as_u64() {
                        Some(ms) => Some(Duration::from_millis(ms)),
                        None => {
                            proto::reply_error(&msg, "run's `ms`, when given, must be a number");
                            continue;
                        }
                    },
                };
                let body = match run(&mut io, &me, peer, rounds, limit) {
                    Ok(stats) => stats,
                    Err(reason) => json!({"type": "error", "reason": reason}),
                };
                proto::reply(&msg, body);
            }
            "flood" => {
                let (Some(to), Some(count)) = (msg.body["to"].as_str(), msg.body["count"].as_u64())
                else {
                    proto::reply_error(&msg, "flood needs a string `to` and a number `count`");
                    continue;
                };
                let pad = "x".repeat(msg.body["pad"].as_u64().unwrap_or(0) as usize);
                io.flood(to, count, &pad);
                proto::reply(&msg, json!({"type": "flooded", "count": count}));
            }
            "seq" => {
                let n = msg.body["n"].as_u64().unwrap_or(0);
                received += 1;
                in_order &= n == last + 1;
                last = n;
            }
            "sleep" => {
                proto::reply(&msg, json!({"type": "sleeping"}));
                let ms = msg.body["ms"].as_u64().unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
            }
            "append" => {
                let (Some(path), Some(ms)) = (msg.body["path"].as_str(), msg.body["ms"].as_u64())
                else {
                    proto::reply_error(&msg, "append needs a string `path` and a number `ms`");
                    continue;
                };
                proto::reply(&msg, json!({"type": "appending"}));
                match append_for(path, Duration::from_millis(ms)) {
                    Ok(count) => proto::reply(&msg, json!({"type": "appended", "count": count})),
                    Err(e) => proto::reply_error(&msg, &format!("{path}: {e}")),
                }
            }
            "spin" => {
                let Some(ms) = msg.body["ms"].as_u64() else {
                    proto::reply_error(&msg, "spin needs a number `ms`");
                    continue;
                };
                proto::reply(&msg, json!({"type": "spinning"}));
                let sum = spin(Duration::from_millis(ms));
                proto::reply(&msg, json!({"type": "spun", "sum": sum}));
            }
            "report" => proto::reply(
                &msg,
                json!({"type": "report", "received": received, "in_order": in_order, "last": last}),
            ),
            other => proto::reply_error(
                &msg,
                &format!(
                    "unknown type {other:?}; known: ping, run, flood, sleep, append, spin, seq, report"
                ),
            ),
        }
    }
}

fn pong(ping: &Message) {
    proto::reply(ping, json!({"type": "pong", "n": ping.body["n"]}));
}

/// Plays `rounds` round trips with `peer`, or as many as `limit` allows, and returns the `stats`
/// body, or why it stopped.
fn run(
    io: &mut Io,
    me: &str,
    peer: &str,
    rounds: u64,
    limit: Option<Duration>,
) -> Result<Value, String> {
    let mut times = Vec::new();
    // This round's id and the `reply_to` its answer carries, made without `format!`.
    let (mut id, mut reply_to) = (Vec::new(), format!("{me}/"));
    let started = Instant::now();
    for k in 1..=rounds {
        if limit.is_some_and(|limit| started.elapsed() >= limit) {
            break;
        }
        let sent = Instant::now();
        id.clear();
        id.push(b'p');
        push_u64(&mut id, k);
        let id = std::str::from_utf8(&id).expect("ascii");
        io.send(peer, None, Some(id), "ping", k);
        reply_to.truncate(me.len() + 1);
        reply_to.push_str(id);
        let answer = wait_for_reply(io, &reply_to);
        times.push(sent.elapsed());
        if let Err(body) = answer {
            return Err(format!(
                "round {k}: the ping to {peer} was answered with {body}"
            ));
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    times.sort();
    Ok(json!({
        "type": "stats",
        "rounds": times.len(),
        "p50_us": percentile(&times, 50),
        "p99_us": percentile(&times, 99),
        "max_us": times.last().map_or(0, Duration::as_micros),
        "per_sec": if elapsed > 0.0 { times.len() as f64 / elapsed } else { 0.0 },
    }))
}

/// Computes without a pause until `period` has passed: a checksum of a pseudo-random walk, so
/// that the work cannot be optimised away.
fn spin(period: Duration) -> u64 {
    let started = Instant::now();
    let mut sum = 0u64;
    while started.elapsed() < period {
        for _ in 0..10_000 {
            sum = sum
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
    sum
}

/// Appends a line to `path` (open, write, close) until `period` has passed; returns how many.
fn append_for(path: &str, period: Duration) -> std::io::Result<u64> {
    let started = Instant::now();
    let mut count = 0;
    while started.elapsed() < period {
        let mut file = OpenOptions::new().append(true).create(true).open(path)?;
        count += 1;
        writeln!(file, "append {count}")?;
    }
    Ok(count)
}

/// Reads until the reply to `id` comes: `Ok` for a pong, else the body it came with. Pings that
/// arrive meanwhile are answered, anything else is ignored. A shutdown or EOF meanwhile ends the
/// program with 0, as it would at any other time.
fn wait_for_reply(io: &mut Io, id: &str) -> Result<(), Value> {
    loop {
        if !io.read() {
            eprintln!("EOF while waiting for the reply to {id}");
            std::process::exit(0);
        }
        if let Some(lean) = io.lean() {
            match (&*lean.body.kind, lean.reply_to.as_deref()) {
                ("pong", Some(to)) if to == id => return Ok(()),
                ("ping", _) => {
                    let (from, ping, n) = (lean.from.to_string(), lean.id.to_string(), lean.body.n);
                    io.send(&from, Some(&ping), None, "pong", n);
                    continue;
                }
                _ => {}
            }
        }
        let Some(msg) = io.message() else { continue };
        if msg.kind() == "shutdown" {
            eprintln!("shutdown while waiting for the reply to {id}");
            std::process::exit(0);
        }
        if msg.reply_to.as_deref() == Some(id) {
            return Err(msg.body);
        }
        if msg.kind() == "ping" {
            pong(&msg);
        } else {
            eprintln!("ignoring {} from {} during a run", msg.body, msg.from);
        }
    }
}

/// Appends `n` in decimal.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The nearest-rank percentile of sorted durations, in microseconds; 0 when there are none.
fn percentile(sorted: &[Duration], p: usize) -> u128 {
    match sorted.len() {
        0 => 0,
        len => sorted[(len * p).div_ceil(100).max(1) - 1].as_micros(),
    }
}
