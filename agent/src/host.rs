//! What the agent needs from the world around it, as one small trait: messages in (with a time
//! limit), messages out, one streaming HTTP POST (handing over the messages that arrive
//! meanwhile), the wall clock, and random numbers. The component implements it over WASI (`wasi_host.rs`); unit
//! tests implement it with a script (`testing.rs`).
//! **Invariant:** nothing outside an implementation of [`Host`] touches stdin, stdout or the network.

use std::time::{Duration, SystemTime};

use crate::message::{HttpRequest, HttpResponse, Incoming, Outgoing};

/// What waiting for a message ended with.
#[derive(Debug)]
pub enum Event {
    Message(Incoming),
    TimedOut,
    /// `{"type":"shutdown"}` came, or stdin ended: the agent must save and exit.
    Stop,
}

/// How often, at least, [`Host::post`] calls its `stream` while a 2xx answer is silent, so
/// that progress batched for a person goes out on time.
pub const STREAM_TICK: Duration = Duration::from_millis(250);

/// How a POST ended.
#[derive(Debug)]
pub enum Posted {
    /// A 2xx answer, whose whole body went to `stream`; its headers, names lowercased.
    Streamed { headers: Vec<(String, String)> },
    /// Any other answer, whole.
    Refused(HttpResponse),
    /// No answer came (no network, refused, timed out), or the answer's body broke off; `why`
    /// says why, for a person, and `retry` whether trying again may help (not for a request
    /// the host denies, such as a candidate's).
    Failed { why: String, retry: bool },
    /// A shutdown (or the end of stdin) came while waiting; the request was abandoned.
    Stopped,
    /// The caller's `meanwhile` said [`Heard::Drop`]: the request was abandoned at once, and
    /// nothing more of its answer was read.
    Dropped,
}

/// What a `post`'s caller makes of the messages handed to its `meanwhile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// Nothing among them concerns the request: it goes on.
    GoOn,
    /// One of them ends the request's purpose (a stop for its turn): the host drops the request
    /// before it waits again, so no later byte of the answer (a tool call) is ever read.
    Drop,
}

pub trait Host {
    /// The next message, waiting at most `timeout` (forever when `None`; `Some(ZERO)` only takes
    /// what already arrived). After `Stop`, every later call returns `Stop`.
    fn receive(&mut self, timeout: Option<Duration>) -> Event;

    /// Writes one message and flushes it.
    fn send(&mut self, message: &Outgoing);

    /// Sends the request, giving up after its `timeout` when it has one. A 2xx answer's body goes to `stream` piece by piece as it arrives,
    /// and `stream(&[])` is called at least every [`STREAM_TICK`] while it is silent; any other
    /// answer comes back whole as `Refused`. Whatever `stream` returns (batched progress, one
    /// message for each person who follows the turn) is sent at once.
    /// The messages read meanwhile, and any read earlier and not yet returned, go to
    /// `meanwhile`, in order, those of one read together, before the host waits again. They are
    /// the caller's from then on (`receive` and `arrived` never return them): a host counts a
    /// message delivered for good once the actor commits a file after reading it (or 5 s after
    /// the read), so a caller that must not lose them to a kill commits them there (DESIGN §20).
    /// A shutdown among them abandons the request with `Stopped`; `receive` says `Stop` after.
    /// When `meanwhile` answers [`Heard::Drop`] the request is abandoned with `Dropped`.
    fn post(
        &mut self,
        request: &HttpRequest,
        stream: &mut dyn FnMut(&[u8]) -> Vec<Outgoing>,
        meanwhile: &mut dyn FnMut(Vec<Incoming>) -> Heard,
    ) -> Posted;

    /// The messages that came and were not returned yet (read together with an earlier one, or
    /// waiting on stdin now), without waiting; a shutdown among them is kept for the next
    /// `receive`.
    fn arrived(&mut self) -> Vec<Incoming>;

    /// The wall clock: the day a turn's spending counts for, and the times of a turn's spans.
    fn now(&self) -> SystemTime;

    /// 64 random bits, for the ids of a turn's trace and spans.
    fn random(&mut self) -> u64;
}
