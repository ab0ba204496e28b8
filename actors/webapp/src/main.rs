//! `webapp` answers HTTP requests (DESIGN §24) as an actor of a JSON API would, one path for
//! each thing the public address must carry:
//! Paths are read after an `/api` they may start with.
//! - `/echo…`: 200 with the request it read, as JSON (method, path, query, headers, remote,
//!   `body` or `body_base64`).
//! - `/status/N`: status N, body `status N`.
//! - `/hello`: 200 `{"hello":"world"}`, the small JSON answer `cargo bench --bench http` loads.
//! - `/count` (POST): adds 1 to `/data/count` (committed), answers the count; after `?ms=N` ms.
//! - `/slow?ms=N`: answers after N ms.
//! - `/never`: answers nothing. `/crash`: panics. `/wrong`: answers a `text`, not a response.
//! - `/stream?n=N&size=S`: an event stream, N `data: i` events (padded with S `x`s), then the
//!   end.
//! - `/binary`: bytes 0 to 255 in base64. `/cookie`: sets two cookies.
//! - `/version`: `version N`, N its `SAUSAGE_VERSION` (so an upgrade answers differently).
//! - `/site/…` files: written by `{"type":"write","path":"/public/site/…","text":…}` (a
//!   message, not a request), which a static route serves.
//! - anything else: 200 `hello from webapp`.
//!
//! Exits 0 on shutdown or EOF.

use serde_json::{Value, json};
use std::time::Duration;

const COUNT: &str = "/data/count";

fn main() {
    for msg in proto::messages() {
        match msg.kind() {
            "http" => answer(&msg),
            "write" => {
                let path = msg.body["path"]
                    .as_str()
                    .unwrap_or("/public/site/index.html");
                let text = msg.body["text"].as_str().unwrap_or("");
                let written = std::path::Path::new(path)
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(path, text));
                match written {
                    Ok(()) => proto::reply(&msg, json!({"type": "written", "path": path})),
                    Err(e) => proto::reply_error(&msg, &format!("{path}: {e}")),
                }
            }
            _ => {}
        }
    }
}

fn answer(msg: &proto::Message) {
    let request = &msg.body;
    // Served under `/api/*` in the tests: the path is the request's whole path.
    let whole = request["path"].as_str().unwrap_or("/");
    let path = whole.strip_prefix("/api").unwrap_or(whole);
    let query = request["query"].as_str().unwrap_or("");
    let number = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.parse::<u64>().ok())
    };
    let respond = |status: u64, headers: Value, body: Value| {
        proto::reply(
            msg,
            json!({"type": "http_response", "status": status, "headers": headers, "body": body}),
        );
    };
    match path {
        p if p.starts_with("/echo") => respond(200, json!({}), request.clone()),
        "/hello" => respond(200, json!({}), json!({"hello": "world"})),
        p if p.starts_with("/status/") => {
            let status = p["/status/".len()..].parse::<u64>().unwrap_or(500);
            respond(status, json!({}), json!(format!("status {status}")));
        }
        "/count" => {
            // `?ms=N`: counts after N ms, for a host to die in between.
            std::thread::sleep(Duration::from_millis(number("ms").unwrap_or(0)));
            let n = std::fs::read_to_string(COUNT)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            std::fs::write(COUNT, n.to_string()).expect("the count is written");
            respond(200, json!({}), json!({"count": n}));
        }
        "/slow" => {
            std::thread::sleep(Duration::from_millis(number("ms").unwrap_or(100)));
            respond(200, json!({}), json!("slow"));
        }
        "/never" => {}
        "/crash" => panic!("asked to crash by {}", msg.id),
        "/wrong" => proto::reply(msg, json!({"type": "text", "text": "not a response"})),
        "/stream" => {
            proto::reply(
                msg,
                json!({
                    "type": "http_response", "status": 200, "stream": true,
                    "headers": {"content-type": "text/event-stream"},
                }),
            );
            // `size=N` pads each event to N bytes: a stream faster than its client reads.
            let pad = "x".repeat(number("size").unwrap_or(0) as usize);
            for i in 0..number("n").unwrap_or(3) {
                proto::reply(
                    msg,
                    json!({"type": "http_chunk", "data": format!("data: {i}{pad}\n\n")}),
                );
            }
            proto::reply(msg, json!({"type": "http_end"}));
        }
        "/binary" => {
            let bytes: Vec<u8> = (0..=255).collect();
            proto::reply(
                msg,
                json!({"type": "http_response", "body_base64": base64(&bytes)}),
            );
        }
        "/version" => {
            let version = std::env::var("SAUSAGE_VERSION").unwrap_or_default();
            respond(200, json!({}), json!(format!("version {version}")));
        }
        "/cookie" => respond(
            200,
            json!({"set-cookie": ["a=1; Path=/", "b=2; Path=/"]}),
            json!("two cookies"),
        ),
        _ => respond(200, json!({}), json!("hello from webapp")),
    }
}

/// Standard base64 with padding: the host decodes `body_base64` so.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
