//! The HTTP/1.1 server: an accept loop and one thread per connection, reading requests
//! (content-length or chunked, kept alive or not) and writing JSON answers or event streams,
//! flushed event by event. It decides nothing: each request goes to `Shared::answer`, and only a
//! request that is not HTTP at all is recorded here as a violation.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::Api;
use crate::script::{Body, Shared};

/// The largest request body read; a bigger one is answered 400 and the connection closed, so a
/// runaway history fails loudly instead of filling memory.
const MAX_BODY_BYTES: usize = 32 << 20;

/// The longest request line or header line read, against a client that never sends a newline.
const MAX_LINE_BYTES: u64 = 64 << 10;

/// How long a kept-alive connection may sit idle before the fake closes it; it bounds the life of
/// connection threads left behind by a client that neither closes nor sends.
const IDLE_CONNECTION: Duration = Duration::from_secs(30);

/// Accepts connections on `listener`, one thread each, until `shared.stopping` is set (`Drop`
/// sets it, then connects once to wake this loop).
pub(crate) fn spawn(listener: TcpListener, shared: Arc<Shared>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if shared.stopping.load(Ordering::SeqCst) {
                break;
            }
            // A failed accept (the peer gave up already) concerns no request: keep serving.
            let Ok(stream) = stream else { continue };
            let serving = shared.clone();
            std::thread::spawn(move || serve_connection(&serving, stream));
        }
    })
}

pub(crate) struct HttpRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Whether the connection stays open after the response.
    keep_alive: bool,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: Vec<u8>,
}

/// Serves requests on one connection until the client closes it, asks to close it, idles past
/// [`IDLE_CONNECTION`], or sends something that is not HTTP.
fn serve_connection(shared: &Shared, stream: TcpStream) {
    // Without a timeout an idle kept-alive connection would pin this thread forever.
    if stream.set_read_timeout(Some(IDLE_CONNECTION)).is_err() {
        return;
    }
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    loop {
        let request = match read_request(&mut reader, &mut writer) {
            Ok(Some(request)) => request,
            // The client closed, or idled out: nothing more to serve.
            Ok(None) => return,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let message = format!("malformed HTTP request: {e}");
                shared
                    .state
                    .lock()
                    .unwrap()
                    .violations
                    .push(message.clone());
                let body = Api::OpenAi.error_body(400, &message);
                // The connection is dropped right after; a client gone already changes nothing.
                let _ = write_response(&mut writer, 400, &[], &body, false);
                return;
            }
            Err(_) => return,
        };
        let answer = shared.answer(&request);
        let mut headers = vec![answer.api.request_id_header()];
        headers.extend(answer.headers);
        let keep_alive = request.keep_alive;
        let (written, broken) = match &answer.body {
            Body::Json(body) => (
                write_response(&mut writer, answer.status, &headers, body, keep_alive),
                false,
            ),
            Body::Events {
                events,
                broken,
                delay,
            } => {
                shared.streaming(1);
                let written =
                    write_events(&mut writer, &headers, events, *broken, *delay, keep_alive);
                shared.streaming(-1);
                (written, *broken)
            }
        };
        // A broken stream ends by closing the connection: the chunked body never ends.
        if written.is_err() || broken || !keep_alive {
            return;
        }
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Reads one line (with its `\r\n`), at most [`MAX_LINE_BYTES`]; an empty string means EOF.
fn read_line(reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = String::new();
    reader.by_ref().take(MAX_LINE_BYTES).read_line(&mut line)?;
    if !line.is_empty() && !line.ends_with('\n') && line.len() as u64 >= MAX_LINE_BYTES {
        return Err(invalid("a line longer than 64 KiB"));
    }
    Ok(line)
}

/// Reads one request; `None` when the client closed (or idled out) between requests.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
) -> io::Result<Option<HttpRequest>> {
    let mut line = match read_line(reader) {
        Ok(line) => line,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // RFC 9112 §2.2: a server should ignore an empty line before the request line.
    if line == "\r\n" || line == "\n" {
        line = read_line(reader)?;
    }
    if line.is_empty() {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(invalid(format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(invalid(format!("unsupported version {version}")));
    }
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Err(invalid("the connection ended inside the headers"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        headers
            .entry(name)
            .and_modify(|v| *v = format!("{v}, {value}"))
            .or_insert_with(|| value.to_string());
    }
    let has_token = |name: &str, token: &str| {
        headers
            .get(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let keep_alive = if version == "HTTP/1.0" {
        has_token("connection", "keep-alive")
    } else {
        !has_token("connection", "close")
    };
    if has_token("expect", "100-continue") {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = if has_token("transfer-encoding", "chunked") {
        read_chunked(reader)?
    } else {
        let length = match headers.get("content-length") {
            None => 0,
            Some(n) => n
                .parse::<usize>()
                .map_err(|_| invalid(format!("bad content-length {n:?}")))?,
        };
        if length > MAX_BODY_BYTES {
            return Err(invalid(format!("a body of {length} bytes")));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(HttpRequest {
        method: method.to_string(),
        path: target.to_string(),
        keep_alive,
        headers,
        body,
    }))
}

/// A `Transfer-Encoding: chunked` body: hex sizes, chunks, a zero chunk, optional trailers.
fn read_chunked(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| invalid(format!("bad chunk size line {line:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line that ends the message.
            loop {
                let trailer = read_line(reader)?;
                if trailer.trim_end_matches(['\r', '\n']).is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("a chunked body over the size limit"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut end = [0; 2];
        reader.read_exact(&mut end)?;
        if &end != b"\r\n" {
            return Err(invalid("a chunk not followed by CRLF"));
        }
    }
}

/// The status line and headers; `length` `None` means a chunked body.
fn head(
    status: u16,
    content_type: &str,
    length: Option<usize>,
    headers: &[(String, String)],
    keep_alive: bool,
) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n");
    match length {
        Some(length) => head.push_str(&format!("content-length: {length}\r\n")),
        None => head.push_str("transfer-encoding: chunked\r\n"),
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    head
}

fn write_response(
    writer: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &Value,
    keep_alive: bool,
) -> io::Result<()> {
    let body = body.to_string();
    let head = head(
        status,
        "application/json",
        Some(body.len()),
        headers,
        keep_alive,
    );
    writer.write_all(head.as_bytes())?;
    writer.write_all(body.as_bytes())?;
    writer.flush()
}

/// A 200 `text/event-stream`, one chunk per event, flushed as it goes so the client sees each
/// event when it is sent; `delay` passes between two events. A `broken` stream stops without
/// the last chunk, so the client can tell it was cut.
fn write_events(
    writer: &mut TcpStream,
    headers: &[(String, String)],
    events: &[String],
    broken: bool,
    delay: Duration,
    keep_alive: bool,
) -> io::Result<()> {
    let content_type = "text/event-stream; charset=utf-8";
    let mut headers = headers.to_vec();
    headers.push(("cache-control".to_string(), "no-cache".to_string()));
    writer.write_all(head(200, content_type, None, &headers, keep_alive).as_bytes())?;
    writer.flush()?;
    for (i, event) in events.iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        // Every event holds at least its `data:` line, so no chunk is the empty last one.
        write!(writer, "{:x}\r\n{event}\r\n", event.len())?;
        writer.flush()?;
    }
    if !broken {
        writer.write_all(b"0\r\n\r\n")?;
    }
    writer.flush()
}
