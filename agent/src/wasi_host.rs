//! The [`Host`] of the real component: stdin read through `wasi:cli/stdin` (so a wait can have a
//! time limit and an HTTP call can notice a shutdown or a stop), stdout through std, and model
//! calls through `wasi:http/outgoing-handler`, where the host does the connection and TLS. A 2xx
//! answer's body is handed on piece by piece as it arrives (the model's stream), with a tick while
//! it is silent.
//! **Invariant:** stdin is read only here, into `queue`; no message read is ever dropped: each
//! leaves `queue` through `receive` or `arrived`, or through a `post`'s `meanwhile` in the
//! wake-up that read it.

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use wasi::cli::stdin::get_stdin;
use wasi::clocks::monotonic_clock::subscribe_duration;
use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasi::io::poll::poll;
use wasi::io::streams::{InputStream, StreamError};

use crate::host::{Event, Heard, Host, Posted, STREAM_TICK};
use crate::message::{HttpRequest, HttpResponse, Incoming, Outgoing};

/// Connecting to the provider may take this long before the call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A model may think for minutes before its first byte, and pause between bytes as long: only
/// after this much silence is the call given up.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// How long a request whose body could not be sent may take to say why (a refused connection
/// says so at once); past it, the closed stream is the reason given.
const WHY_UNSENT_PATIENCE: Duration = Duration::from_secs(5);

/// The largest error answer read whole; a bigger one is cut rather than filling the memory.
const MAX_ERROR_BYTES: usize = 1024 * 1024;

/// How many stdin bytes one read takes.
const READ_CHUNK: u64 = 64 * 1024;

/// `blocking-write-and-flush` takes at most 4096 bytes a call.
const WRITE_CHUNK: usize = 4096;

pub struct WasiHost {
    stdin: InputStream,
    /// Bytes of a line not yet complete.
    partial: Vec<u8>,
    /// Messages read but not yet returned (or handed to a `post`'s `meanwhile`), in arrival
    /// order.
    queue: VecDeque<Incoming>,
    /// A shutdown or the end of stdin was seen; `receive` returns `Stop` once `queue` is empty.
    stopped: bool,
    /// A candidate under test runs without network: its calls fail at once, in words.
    candidate: bool,
}

impl WasiHost {
    pub fn new(candidate: bool) -> WasiHost {
        WasiHost {
            stdin: get_stdin(),
            partial: Vec::new(),
            queue: VecDeque::new(),
            stopped: false,
            candidate,
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
                    "agent: stdin: {}; treating it as the end",
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
                Err(e) => eprintln!("agent: stdin: skipping a line that is not a message: {e}"),
            }
        }
        self.stopped |= ended;
    }

    /// Hands every message read and not yet returned to a `post`'s `meanwhile`, oldest first,
    /// and says what it made of them.
    fn hand_over(&mut self, meanwhile: &mut dyn FnMut(Vec<Incoming>) -> Heard) -> Heard {
        if self.queue.is_empty() {
            return Heard::GoOn;
        }
        meanwhile(self.queue.drain(..).collect())
    }
}

impl Host for WasiHost {
    fn receive(&mut self, timeout: Option<Duration>) -> Event {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(message) = self.queue.pop_front() {
                return Event::Message(message);
            }
            if self.stopped {
                return Event::Stop;
            }
            let readable = self.stdin.subscribe();
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                let timer = subscribe_duration(left.as_nanos() as u64);
                // Waits for: a byte on stdin (index 0) or the deadline (index 1).
                if !poll(&[&readable, &timer]).contains(&0) {
                    return Event::TimedOut;
                }
            } else {
                readable.block();
            }
            self.read_available();
        }
    }

    fn send(&mut self, message: &Outgoing) {
        // Strings and JSON values always serialise.
        let mut line = serde_json::to_vec(message).expect("a message serialises");
        line.push(b'\n');
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            // Nobody reads our stdout any more, so nothing we say could reach anyone: stop.
            eprintln!("agent: stdout: {e}; the broker no longer reads, exiting");
            std::process::exit(1);
        }
    }

    fn post(
        &mut self,
        request: &HttpRequest,
        stream: &mut dyn FnMut(&[u8]) -> Vec<Outgoing>,
        meanwhile: &mut dyn FnMut(Vec<Incoming>) -> Heard,
    ) -> Posted {
        if self.candidate {
            return Posted::Failed {
                why: "this instance is a candidate under test (SAUSAGE_CANDIDATE=1), which has no \
                      network"
                    .into(),
                retry: false,
            };
        }
        match self.try_post(request, stream, meanwhile) {
            Ok(posted) => posted,
            Err((why, retry)) => Posted::Failed { why, retry },
        }
    }

    fn arrived(&mut self) -> Vec<Incoming> {
        self.read_available();
        self.queue.drain(..).collect()
    }

    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn random(&mut self) -> u64 {
        wasi::random::random::get_random_u64()
    }
}

/// A failed POST: why, and whether trying again may help.
type PostError = (String, bool);

impl WasiHost {
    /// The POST itself, streaming a 2xx body to `stream`.
    fn try_post(
        &mut self,
        request: &HttpRequest,
        stream: &mut dyn FnMut(&[u8]) -> Vec<Outgoing>,
        meanwhile: &mut dyn FnMut(Vec<Incoming>) -> Heard,
    ) -> Result<Posted, PostError> {
        // What an earlier `receive` read with its message is handed over before this long wait.
        if self.hand_over(meanwhile) == Heard::Drop {
            return Ok(Posted::Dropped);
        }
        let fatal = |why: String| (why, false);
        let (scheme, rest) = request.url.split_once("://").ok_or_else(|| {
            fatal(format!(
                "base_url must start with https:// or http:// ({})",
                request.url
            ))
        })?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            other => Scheme::Other(other.to_string()),
        };
        let split = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);

        let headers = Fields::new();
        let length = request.body.len().to_string();
        let all = request
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()));
        for (name, value) in all.chain([("content-length", length.as_str())]) {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| fatal(format!("header {name}: {e:?}")))?;
        }
        let outgoing = OutgoingRequest::new(headers);
        let invalid =
            |what: &str| fatal(format!("the request's {what} is invalid ({})", request.url));
        outgoing
            .set_method(&Method::Post)
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

        // The request's own timeout bounds each of the host's waits, and the whole exchange
        // here (`late`), since a stream that trickles could pass every one of them.
        let limit = |default: Duration| request.timeout.map_or(default, |t| t.min(default));
        let deadline = request.timeout.map(|t| Instant::now() + t);
        let late = || {
            deadline.is_some_and(|d| Instant::now() >= d).then(|| {
                let seconds = request.timeout.unwrap_or_default().as_secs();
                (format!("no whole answer came within {seconds} s"), false)
            })
        };
        let options = RequestOptions::new();
        // A host that does not support a timeout keeps its own default; that is no reason to fail.
        let _ = options.set_connect_timeout(Some(limit(CONNECT_TIMEOUT).as_nanos() as u64));
        let _ = options.set_first_byte_timeout(Some(limit(FIRST_BYTE_TIMEOUT).as_nanos() as u64));
        let _ =
            options.set_between_bytes_timeout(Some(limit(BETWEEN_BYTES_TIMEOUT).as_nanos() as u64));

        let body = outgoing
            .body()
            .map_err(|()| fatal("the request body was already taken".into()))?;
        let failed = |e: &ErrorCode| (describe(e, authority), retryable(e));
        let future = outgoing_handler::handle(outgoing, Some(options)).map_err(|e| failed(&e))?;
        let mut unsent = None;
        {
            let out = body
                .write()
                .map_err(|()| fatal("the request stream was already taken".into()))?;
            for chunk in request.body.chunks(WRITE_CHUNK) {
                if let Err(e) = out.blocking_write_and_flush(chunk) {
                    unsent = Some(format!("sending the request: {e:?}"));
                    break;
                }
            }
        } // The stream must be dropped before its body is finished.
        if let Some(unsent) = unsent {
            // A connection that failed (nothing listens, say) first shows as a closed stream;
            // the request's own error, which comes at once then, says what happened.
            let answered = future.subscribe();
            let patience = subscribe_duration(WHY_UNSENT_PATIENCE.as_nanos() as u64);
            // Waits for: the request's outcome (index 0) or the patience to run out (index 1).
            if poll(&[&answered, &patience]).contains(&0)
                && let Some(Ok(Err(e))) = future.get()
            {
                return Err(failed(&e));
            }
            return Err((unsent, true));
        }
        OutgoingBody::finish(body, None).map_err(|e| failed(&e))?;

        // Waits for: the answer's headers (index 0), a message on stdin (index 1), handed over
        // before the next wait, or the tick that checks the request's deadline (index 2); a
        // shutdown, the deadline or the caller's `Heard::Drop` drops the request, which cancels
        // it.
        loop {
            let answered = future.subscribe();
            let readable = self.stdin.subscribe();
            let tick = subscribe_duration(STREAM_TICK.as_nanos() as u64);
            if poll(&[&answered, &readable, &tick]).contains(&0) {
                break;
            }
            if let Some(late) = late() {
                return Err(late);
            }
            self.read_available();
            let heard = self.hand_over(meanwhile);
            if self.stopped {
                return Ok(Posted::Stopped);
            }
            if heard == Heard::Drop {
                return Ok(Posted::Dropped);
            }
        }
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return Err(failed(&e)),
            Some(Err(())) => return Err(fatal("the answer was already taken".into())),
            None => return Err(fatal("no answer after the host said it was ready".into())),
        };
        let status = response.status();
        let headers: Vec<(String, String)> = response
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
            .map_err(|()| fatal("the answer's body was already taken".into()))?;
        let streaming = (200..300).contains(&status);
        let mut whole = Vec::new();
        {
            let body = incoming
                .stream()
                .map_err(|()| fatal("the answer's stream was already taken".into()))?;
            loop {
                // Waits for: bytes of the answer (index 0), a message on stdin (index 1, handed
                // over at once; maybe a shutdown, or a stop that drops the request before another
                // byte is read), or the tick that lets batched progress go out (index 2).
                let readable = body.subscribe();
                let stdin = self.stdin.subscribe();
                let tick = subscribe_duration(STREAM_TICK.as_nanos() as u64);
                let ready = poll(&[&readable, &stdin, &tick]);
                if let Some(late) = late() {
                    return Err(late);
                }
                if ready.contains(&1) {
                    self.read_available();
                    let heard = self.hand_over(meanwhile);
                    if self.stopped {
                        return Ok(Posted::Stopped);
                    }
                    if heard == Heard::Drop {
                        return Ok(Posted::Dropped);
                    }
                }
                if !ready.contains(&0) {
                    if streaming {
                        for message in stream(&[]) {
                            self.send(&message);
                        }
                    }
                    continue;
                }
                let chunk = match body.read(READ_CHUNK) {
                    Ok(chunk) => chunk,
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err((
                            format!("the answer broke off: {}", e.to_debug_string()),
                            true,
                        ));
                    }
                };
                if streaming {
                    for message in stream(&chunk) {
                        self.send(&message);
                    }
                } else if whole.len() < MAX_ERROR_BYTES {
                    whole.extend_from_slice(&chunk);
                }
            }
        } // The stream must be dropped before its body.
        if streaming {
            Ok(Posted::Streamed { headers })
        } else {
            Ok(Posted::Refused(HttpResponse {
                status,
                headers,
                body: whole,
            }))
        }
    }
}

/// An HTTP error code in words, for a person; `authority` is the provider's host and port.
fn describe(e: &ErrorCode, authority: &str) -> String {
    match e {
        ErrorCode::HttpRequestDenied => {
            "the host denied the request (is the provider's host in the agent's actor.json?)".into()
        }
        // The host names every failed connect so, a name that does not resolve included.
        ErrorCode::ConnectionRefused => format!(
            "nothing listens at {authority} (the connection was refused); check the base URL in \
             /data/config.json and that the model server runs"
        ),
        ErrorCode::DnsError(_) | ErrorCode::DestinationNotFound => {
            format!("no host is named {authority}; check the base URL in /data/config.json")
        }
        ErrorCode::TlsCertificateError => format!(
            "{authority} showed a TLS certificate that is not trusted; check the base URL (http:// \
             or https://)"
        ),
        ErrorCode::ConnectionTimeout => format!("{authority} did not take the connection in time"),
        other => format!("{other:?}"),
    }
}

/// Whether trying again may help: not when the host refused the request outright, nor when
/// the base URL names nothing that listens (until a person fixes it, every try fails alike).
fn retryable(e: &ErrorCode) -> bool {
    !matches!(
        e,
        ErrorCode::HttpRequestDenied
            | ErrorCode::ConnectionRefused
            | ErrorCode::DnsError(_)
            | ErrorCode::DestinationNotFound
            | ErrorCode::TlsCertificateError
    )
}
