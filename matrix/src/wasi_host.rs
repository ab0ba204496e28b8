//! The [`Host`] of the real component: stdin through `wasi:cli/stdin` (so a wait can watch
//! stdin, the `/sync` in flight and a timer at once), stdout through std, and HTTP through
//! `wasi:http/outgoing-handler`, where the host does the connection and adds the access token.
//! **Invariant:** stdin is read only here, into `queue`; no message read is ever dropped.

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

use wasi::cli::stdin::get_stdin;
use wasi::clocks::monotonic_clock::subscribe_duration;
use wasi::http::outgoing_handler;
use wasi::http::types::{
    FutureIncomingResponse, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasi::io::poll::poll;
use wasi::io::streams::{InputStream, StreamError};

use crate::host::{Event, Host, Incoming, Outgoing, Request, Response};

/// Connecting to the homeserver may take this long before the call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A short call's answer must start within this; a `/sync` gets its long-poll on top.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
const SYNC_SLACK: Duration = Duration::from_secs(30);

/// The largest answer read; a bigger one is an error rather than filling the memory.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// A wait without a deadline wakes after this and reports `TimedOut`, which costs nothing.
const IDLE_WAKE: Duration = Duration::from_secs(3600);

/// How many stdin bytes one read takes.
const READ_CHUNK: u64 = 64 * 1024;

/// `blocking-write-and-flush` takes at most 4096 bytes a call.
const WRITE_CHUNK: usize = 4096;

pub struct WasiHost {
    stdin: InputStream,
    /// Bytes of a line not yet complete.
    partial: Vec<u8>,
    /// Messages read but not yet returned by `next`, in arrival order.
    queue: VecDeque<Incoming>,
    /// A shutdown or the end of stdin was seen; `next` returns `Stop` once `queue` is empty.
    stopped: bool,
    /// The `/sync` in flight.
    sync: Option<FutureIncomingResponse>,
    started: Instant,
}

impl WasiHost {
    pub fn new() -> WasiHost {
        WasiHost {
            stdin: get_stdin(),
            partial: Vec::new(),
            queue: VecDeque::new(),
            stopped: false,
            sync: None,
            started: Instant::now(),
        }
    }

    /// Takes whatever stdin has now, without waiting, and queues every whole line.
    fn read_available(&mut self) {
        if self.stopped {
            return;
        }
        let ended = match self.stdin.read(READ_CHUNK) {
            Ok(bytes) => {
                self.partial.extend_from_slice(&bytes);
                false
            }
            Err(StreamError::Closed) => true,
            Err(StreamError::LastOperationFailed(e)) => {
                eprintln!(
                    "matrix: stdin: {}; treating it as the end",
                    e.to_debug_string()
                );
                true
            }
        };
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            // After a shutdown only the end of input follows; nothing more is read.
            if line.trim_ascii().is_empty() || self.stopped {
                continue;
            }
            match serde_json::from_slice::<Incoming>(&line) {
                Ok(message) if message.kind() == "shutdown" => self.stopped = true,
                Ok(message) => self.queue.push_back(message),
                Err(e) => eprintln!("matrix: stdin: skipping a line that is not a message: {e}"),
            }
        }
        self.stopped |= ended;
    }
}

impl Host for WasiHost {
    fn start_sync(&mut self, request: Request) {
        match send(&request, FIRST_BYTE_TIMEOUT + SYNC_SLACK) {
            Ok(future) => self.sync = Some(future),
            Err(why) => {
                // Reported by the next `next`, as a failed sync.
                eprintln!("matrix: /sync: {why}");
                self.sync = None;
            }
        }
    }

    fn next(&mut self, timeout: Option<Duration>) -> Event {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(message) = self.queue.pop_front() {
                return Event::Message(message);
            }
            if self.stopped {
                return Event::Stop;
            }
            let Some(sync) = &self.sync else {
                return Event::Synced(Err("the request could not be sent".into()));
            };
            let answered = sync.subscribe();
            let readable = self.stdin.subscribe();
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Without a deadline, an hour's timer stands in for none (the caller just waits again).
            let timer = subscribe_duration(left.unwrap_or(IDLE_WAKE).as_nanos() as u64);
            // Waits for: a byte on stdin (index 0), the sync's answer (index 1), the deadline
            // (index 2).
            let ready = poll(&[&readable, &answered, &timer]);
            // A pollable must go before the resource it watches: the future goes below.
            drop((readable, answered, timer));
            if ready.contains(&1) {
                // Just checked to be there.
                let future = self.sync.take().expect("a sync in flight");
                return Event::Synced(receive(&future));
            }
            if ready.contains(&0) {
                self.read_available();
                continue;
            }
            return Event::TimedOut;
        }
    }

    fn call(&mut self, request: &Request) -> Result<Response, String> {
        let future = send(request, FIRST_BYTE_TIMEOUT)?;
        future.subscribe().block();
        receive(&future)
    }

    fn send(&mut self, message: &Outgoing) {
        // Strings and JSON values always serialise.
        let mut line = serde_json::to_vec(message).expect("a message serialises");
        line.push(b'\n');
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            // Nobody reads our stdout any more, so nothing we say could reach anyone: stop.
            eprintln!("matrix: stdout: {e}; the broker no longer reads, exiting");
            std::process::exit(1);
        }
    }

    fn pause(&mut self, duration: Duration) -> bool {
        let deadline = Instant::now() + duration;
        loop {
            if self.stopped {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            let readable = self.stdin.subscribe();
            let timer = subscribe_duration(left.as_nanos() as u64);
            // Waits for: a byte on stdin (index 0, maybe a shutdown) or the end of the pause.
            if !poll(&[&readable, &timer]).contains(&0) {
                return true;
            }
            self.read_available();
        }
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Sends a request; its answer comes through the returned future.
fn send(request: &Request, first_byte: Duration) -> Result<FutureIncomingResponse, String> {
    let (scheme, rest) = request.url.split_once("://").ok_or_else(|| {
        format!(
            "homeserver must start with http:// or https:// ({})",
            request.url
        )
    })?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        other => Scheme::Other(other.to_string()),
    };
    let split = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let body = request
        .body
        .as_ref()
        .map(|b| serde_json::to_vec(b).expect("a JSON value serialises"));

    let headers = wasi::http::types::Fields::new();
    let length = body.as_ref().map_or(0, Vec::len).to_string();
    let mut all = vec![("content-length", length.as_str())];
    if body.is_some() {
        all.push(("content-type", "application/json"));
    }
    for (name, value) in all {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| format!("header {name}: {e:?}"))?;
    }
    let outgoing = OutgoingRequest::new(headers);
    let method = match request.method {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        other => Method::Other(other.to_string()),
    };
    let invalid = |what: &str| format!("the request's {what} is invalid ({})", request.url);
    outgoing
        .set_method(&method)
        .map_err(|()| invalid("method"))?;
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| invalid("scheme"))?;
    outgoing
        .set_authority(Some(authority))
        .map_err(|()| invalid("host"))?;
    outgoing
        .set_path_with_query(Some(path))
        .map_err(|()| invalid("path"))?;
    let options = RequestOptions::new();
    // A host that does not support a timeout keeps its own default; that is no reason to fail.
    let _ = options.set_connect_timeout(Some(CONNECT_TIMEOUT.as_nanos() as u64));
    let _ = options.set_first_byte_timeout(Some(first_byte.as_nanos() as u64));
    let _ = options.set_between_bytes_timeout(Some(FIRST_BYTE_TIMEOUT.as_nanos() as u64));

    let outgoing_body = outgoing
        .body()
        .map_err(|()| "the request body was already taken".to_string())?;
    let future = outgoing_handler::handle(outgoing, Some(options)).map_err(|e| match e {
        wasi::http::types::ErrorCode::HttpRequestDenied => format!(
            "the host denied the request to {authority} (is it in the network list of the \
             matrix actor's actor.json?)"
        ),
        other => format!("{other:?}"),
    })?;
    {
        let stream = outgoing_body
            .write()
            .map_err(|()| "the request stream was already taken".to_string())?;
        for chunk in body.as_deref().unwrap_or(&[]).chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("sending the request: {e:?}"))?;
        }
    } // The stream must be dropped before its body is finished.
    OutgoingBody::finish(outgoing_body, None).map_err(|e| format!("{e:?}"))?;
    Ok(future)
}

/// The whole answer of a future that is ready (or blocks until it is).
fn receive(future: &FutureIncomingResponse) -> Result<Response, String> {
    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(format!("{e:?}")),
        Some(Err(())) => return Err("the answer was already taken".into()),
        None => return Err("no answer after the host said it was ready".into()),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                String::from_utf8_lossy(&value).into_owned(),
            )
        })
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| "the answer's body was already taken".to_string())?;
    let mut body = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| "the answer's stream was already taken".to_string())?;
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(bytes) => body.extend_from_slice(&bytes),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!("the answer broke off: {}", e.to_debug_string()));
                }
            }
            if body.len() > MAX_BODY_BYTES {
                return Err(format!("the answer is larger than {MAX_BODY_BYTES} bytes"));
            }
        }
    } // The stream must be dropped before its body.
    Ok(Response {
        status,
        headers,
        body,
    })
}
