//! `crasher` fails on demand, to exercise the supervisor.
//! - At start, unless `SAUSAGE_CANDIDATE` is set: if `/actor/<SAUSAGE_ACTOR>/source/crash_after_ms`
//!   exists, it sleeps that many milliseconds and panics (traps) before reading any message. A
//!   candidate under test never does this, so a version carrying the file passes its tests and
//!   then crashes in service (the crash loop that triggers a rollback).
//! - `{"type":"crash"}` panics; `{"type":"exit","code":N}` exits with N; `{"type":"ping"}` →
//!   `{"type":"pong"}`.
//! - `{"type":"say","line":L}` writes `L` to stdout as it is (not a message, unless it is one);
//!   `{"type":"say_big","bytes":N}` writes one line of `N` bytes and then a real `pong` reply.
//! - `{"type":"log","lines":N,"width":W}` writes N lines of W bytes (newline included) to
//!   stderr, `line <n>` padded with `.`, n from 1, then replies `{"type":"logged","lines":N}`.
//! - `{"type":"connect","addr":"127.0.0.1:80"}` tries a raw TCP connection and replies
//!   `{"type":"connect","ok":bool,"error":..}` (the host denies raw sockets).
//! - An actor whose id starts with `doomed` panics at once when it starts: a candidate that
//!   fails its smoke test.
//! - `{"type":"grow","mb":N}` allocates N MiB, writes to every page of it, and replies
//!   `{"type":"grown","mb":N}` (the memory stays allocated): past the instance's memory limit
//!   it traps instead.
//! - `{"type":"ignore_shutdown"}`: later shutdowns and EOF are met with a busy loop, so the host
//!   has to kill the instance.
//!
//! Anything else → `{"type":"error","reason":..}`. Otherwise exits 0 on shutdown or EOF.

use serde_json::json;
use std::io::Write;
use std::time::Duration;
use std::{env, fs, process, thread};

fn main() {
    if env::var("SAUSAGE_ACTOR").is_ok_and(|id| id.starts_with("doomed")) {
        panic!("this actor is doomed: it panics as soon as it starts");
    }
    if env::var_os("SAUSAGE_CANDIDATE").is_none() {
        let actor = env::var("SAUSAGE_ACTOR").unwrap_or_default();
        let path = format!("/actor/{actor}/source/crash_after_ms");
        if let Ok(text) = fs::read_to_string(&path) {
            let ms: u64 = text
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{path}: {e}; it must hold a number of milliseconds"));
            eprintln!("{path}: crashing in {ms} ms");
            thread::sleep(Duration::from_millis(ms));
            panic!("crash_after_ms: crashing after {ms} ms as asked");
        }
    }

    let mut ignore_shutdown = false;
    loop {
        let msg = match proto::read() {
            Some(msg) if msg.kind() != "shutdown" => msg,
            _ if ignore_shutdown => {
                eprintln!("ignoring shutdown (or EOF) as asked: busy-looping until killed");
                loop {
                    std::hint::spin_loop();
                }
            }
            _ => return,
        };
        match msg.kind() {
            "crash" => panic!("crash requested by {}", msg.from),
            "exit" => {
                let code = msg.body["code"].as_i64().unwrap_or(0);
                eprintln!("exiting with {code} as asked by {}", msg.from);
                process::exit(code as i32);
            }
            "ping" => proto::reply(&msg, json!({"type": "pong"})),
            "ignore_shutdown" => ignore_shutdown = true,
            "say" => {
                let line = msg.body["line"].as_str().unwrap_or_default();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            "say_big" => {
                let bytes = msg.body["bytes"].as_u64().unwrap_or(0) as usize;
                let mut out = std::io::stdout().lock();
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    let _ = out.write_all(&chunk[..n]);
                    left -= n;
                }
                let _ = out.write_all(b"\n");
                let _ = out.flush();
                drop(out);
                proto::reply(&msg, json!({"type": "pong"}));
            }
            "grow" => {
                let mb = msg.body["mb"].as_u64().unwrap_or(0) as usize;
                let mut block = vec![0u8; mb << 20];
                for page in block.chunks_mut(4096) {
                    page[0] = 1;
                }
                // Kept, so that the next `grow` adds to it.
                std::mem::forget(block);
                proto::reply(&msg, json!({"type": "grown", "mb": mb}));
            }
            "log" => {
                let lines = msg.body["lines"].as_u64().unwrap_or(0);
                let width = msg.body["width"].as_u64().unwrap_or(80) as usize;
                let mut err = std::io::BufWriter::new(std::io::stderr().lock());
                for n in 1..=lines {
                    let _ = writeln!(err, "{:.<1$}", format!("line {n} "), width.max(2) - 1);
                }
                let _ = err.flush();
                drop(err);
                proto::reply(&msg, json!({"type": "logged", "lines": lines}));
            }
            "connect" => {
                let addr = msg.body["addr"].as_str().unwrap_or("127.0.0.1:80");
                let result = std::net::TcpStream::connect(addr);
                proto::reply(
                    &msg,
                    json!({"type": "connect", "ok": result.is_ok(), "error": result.err().map(|e| e.to_string())}),
                );
            }
            other => proto::reply_error(
                &msg,
                &format!(
                    "unknown type {other:?}; known: crash, exit, ping, say, say_big, grow, log, connect, ignore_shutdown"
                ),
            ),
        }
    }
}
