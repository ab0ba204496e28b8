//! What a WASM actor writes: stdout lines routed as messages, stderr appended to its log (rotated
//! by the world's `ActorLog`).
//!
//! A stdout line is routed as soon as its newline arrives. When a recipient's mailbox is full
//! the stdout stops taking bytes (capacity 0) until the message is in, so a fast producer is
//! slowed down, never dropped, and its later lines keep their order; a commit of the guest's
//! files waits for it too (output before commit).

use std::collections::VecDeque;
use std::sync::Arc;

use super::mailbox::Mailbox;
use super::router::{Delivery, Router};
use crate::message::{ActorId, Outgoing};
use crate::runtime::stdio::{BoxFuture, GuestOutput};
use crate::world::{ActorLog, World};

/// Longest stdout line that is routed. A longer one is skipped up to its newline, with a note
/// in the log; the host never holds more than this of it.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// How much a guest may write in one go while nothing blocks.
pub const WRITE_CHUNK: usize = 64 * 1024;

/// How much of a bad line the log note quotes.
const NOTE_QUOTE_CHARS: usize = 200;

/// Cuts a byte stream into lines of at most [`MAX_LINE_BYTES`].
#[derive(Default)]
pub struct Lines {
    line: Vec<u8>,
    /// The current line passed [`MAX_LINE_BYTES`]: skip to its newline.
    overlong: bool,
}

/// One line out of [`Lines`].
pub enum Line<'a> {
    /// A whole line, without its newline (or a trailing `\r`).
    Whole(&'a [u8]),
    /// A line longer than [`MAX_LINE_BYTES`], dropped.
    Overlong,
}

impl Lines {
    /// Takes bytes and calls `each` for every line they complete. A line that begins and ends
    /// within `bytes` is handed on where it lies; only a line cut by the end of a write is
    /// copied, to be completed by the next.
    pub fn push(&mut self, mut bytes: &[u8], mut each: impl FnMut(Line<'_>)) {
        while !bytes.is_empty() {
            let (part, rest, ends) = match bytes.iter().position(|b| *b == b'\n') {
                Some(n) => (&bytes[..n], &bytes[n + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if ends && self.line.is_empty() && !self.overlong {
                match part.len() > MAX_LINE_BYTES {
                    true => each(Line::Overlong),
                    false => each(Line::Whole(part.strip_suffix(b"\r").unwrap_or(part))),
                }
                continue;
            }
            if !self.overlong {
                if self.line.len() + part.len() > MAX_LINE_BYTES {
                    self.overlong = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if ends {
                if std::mem::take(&mut self.overlong) {
                    each(Line::Overlong);
                } else {
                    let line = std::mem::take(&mut self.line);
                    each(Line::Whole(line.strip_suffix(b"\r").unwrap_or(&line)));
                }
            }
        }
    }
}

/// A WASM actor's stdout: lines in, deliveries out.
pub struct RoutedStdout {
    from: ActorId,
    router: Arc<Router>,
    world: World,
    /// The sender's mailbox: the message it read last is the one its lines continue.
    reading: Arc<Mailbox>,
    lines: Lines,
    /// Deliveries waiting for a full mailbox, oldest first; while any waits, capacity is 0.
    blocked: VecDeque<Delivery>,
}

impl RoutedStdout {
    pub fn new(
        from: ActorId,
        router: Arc<Router>,
        world: World,
        reading: Arc<Mailbox>,
    ) -> RoutedStdout {
        RoutedStdout {
            from,
            router,
            world,
            reading,
            lines: Lines::default(),
            blocked: VecDeque::new(),
        }
    }

    fn route(&mut self, line: Line<'_>) {
        let Line::Whole(line) = line else {
            self.world.log_note(
                &self.from,
                &format!("a stdout line longer than {MAX_LINE_BYTES} bytes was not routed"),
            );
            return;
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match Outgoing::parse(line) {
            Ok(mut out) => {
                if out.trace.is_none() && self.router.tracing() {
                    out.trace = self.reading.reading_trace();
                }
                let mut delivery = self.router.accept(&self.from, out);
                if !self.blocked.is_empty() || !self.router.try_deliver(&mut delivery) {
                    self.blocked.push_back(delivery);
                }
            }
            Err(reason) => {
                let text = String::from_utf8_lossy(line);
                let quote: String = text.chars().take(NOTE_QUOTE_CHARS).collect();
                let more = if quote.len() < text.len() { "…" } else { "" };
                self.world.log_note(
                    &self.from,
                    &format!("stdout line not routed ({reason}): {quote}{more}"),
                );
            }
        }
    }
}

impl GuestOutput for RoutedStdout {
    fn capacity(&mut self) -> usize {
        if self.blocked.is_empty() {
            WRITE_CHUNK
        } else {
            0
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut lines = std::mem::take(&mut self.lines);
        lines.push(bytes, |line| self.route(line));
        self.lines = lines;
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async move {
            while let Some(delivery) = self.blocked.pop_front() {
                self.router.deliver(delivery).await;
            }
        })
    }

    /// Every line waiting for a full mailbox goes in first, and on a cluster every line is
    /// stored in its stream: a line the guest wrote before a commit is accepted before the
    /// commit (DESIGN §20).
    fn settled(&mut self) -> BoxFuture<'_> {
        Box::pin(async move {
            while let Some(delivery) = self.blocked.pop_front() {
                self.router.deliver(delivery).await;
            }
            self.router.stored().await;
        })
    }
}

/// A guest's stderr, appended to its `stderr.log` and rotated with it (see
/// [`STDERR_LOG_LIMIT`](crate::world::STDERR_LOG_LIMIT)). The append runs here, on the thread that runs the guest; it is at most
/// [`WRITE_CHUNK`] copied into the page cache, plus a rename when the log rotates. The log is
/// opened for each append and closed after it, as the host's notes are: an instance holds no
/// file open while it is idle, so the process's file limit does not bound a world's size.
pub struct LogOutput {
    path: std::path::PathBuf,
    /// A log that cannot be written is reported once, not at every write.
    failed: bool,
}

impl LogOutput {
    /// The log of an instance about to start. The file is made now, before the guest writes
    /// anything: every actor has its `/actor/<id>/stderr.log` (DESIGN §2).
    pub fn append_to(path: &std::path::Path) -> LogOutput {
        let mut output = LogOutput {
            path: path.to_owned(),
            failed: false,
        };
        output.write(&[]);
        output
    }
}

impl GuestOutput for LogOutput {
    fn capacity(&mut self) -> usize {
        WRITE_CHUNK
    }

    fn write(&mut self, bytes: &[u8]) {
        match ActorLog::new(self.path.clone()).append(bytes) {
            Ok(()) => self.failed = false,
            Err(e) if !self.failed => {
                self.failed = true;
                tracing::warn!("cannot append to an actor's log: {e}");
            }
            Err(_) => {}
        }
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// Output kept in memory, up to a bound (a candidate's stdout and stderr under test).
#[derive(Clone, Default)]
pub struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

/// How much of a candidate's output is kept: enough for a useful tail in an error.
const CAPTURE_BYTES: usize = 64 * 1024;

impl Captured {
    /// The last `max` characters, for an error message.
    pub fn tail(&self, max: usize) -> String {
        let bytes = self.0.lock().expect("capture lock");
        let text = String::from_utf8_lossy(&bytes);
        let start = text.len().saturating_sub(max);
        text[text.ceil_char_boundary(start)..].trim().to_string()
    }
}

impl GuestOutput for Captured {
    fn capacity(&mut self) -> usize {
        WRITE_CHUNK
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut kept = self.0.lock().expect("capture lock");
        kept.extend_from_slice(bytes);
        if kept.len() > CAPTURE_BYTES {
            let cut = kept.len() - CAPTURE_BYTES;
            kept.drain(..cut);
        }
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::STDERR_LOG_LIMIT;

    /// Feeds `writes` one after another; the lines they make, with `None` for an overlong one.
    fn lines_of(writes: &[&[u8]]) -> Vec<Option<String>> {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        for write in writes {
            lines.push(write, |line| {
                out.push(match line {
                    Line::Whole(line) => Some(String::from_utf8(line.to_vec()).unwrap()),
                    Line::Overlong => None,
                })
            });
        }
        out
    }

    /// Lines whole within a write, cut across writes, ended by `\r\n`, empty, and too long
    /// (within one write and across several) come out as the guest meant them.
    #[test]
    fn lines_are_cut_at_newlines_whatever_the_writes() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            lines_of(&[b"a\nbc\r\n", b"", b"d", b"e\n\nf"]),
            [some("a"), some("bc"), some("de"), some("")]
        );
        assert_eq!(lines_of(&[b"f", b"\r", b"\n"]), [some("f")]);
        let long = vec![b'x'; MAX_LINE_BYTES + 1];
        let whole = [&long[..], b"\nnext\n"].concat();
        assert_eq!(lines_of(&[&whole]), [None, some("next")]);
        let (head, tail) = long.split_at(MAX_LINE_BYTES / 2);
        assert_eq!(lines_of(&[head, tail, b"\nnext\n"]), [None, some("next")]);
        let exact = [&vec![b'y'; MAX_LINE_BYTES][..], b"\n"].concat();
        assert_eq!(lines_of(&[&exact]).len(), 1);
        assert!(lines_of(&[&exact])[0].is_some());
        assert!(lines_of(&[&exact[..10], &exact[10..]])[0].is_some());
    }

    /// A guest's output and the host's notes, interleaved past the limit twice over: the log
    /// stays within it, the older half is in `stderr.log.1`, and the newest lines are whole and
    /// in order across the two files.
    #[test]
    fn stderr_log_rotates_at_its_limit_keeping_the_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        world.create().unwrap();
        let id = ActorId::parse("chatty").unwrap();
        std::fs::create_dir_all(world.log_path(&id).parent().unwrap()).unwrap();
        let mut stderr = LogOutput::append_to(&world.log_path(&id));
        let mut n = 0;
        let mut written = 0;
        while written < 5 * STDERR_LOG_LIMIT / 2 {
            let mut chunk = String::new();
            while chunk.len() < WRITE_CHUNK - 100 {
                n += 1;
                chunk.push_str(&format!("line {n} {}\n", "x".repeat(n % 200)));
            }
            stderr.write(chunk.as_bytes());
            n += 1;
            world.log_note(&id, &format!("line {n}"));
            written += chunk.len() as u64;
        }
        let log = std::fs::read_to_string(world.log_path(&id)).unwrap();
        let older = world.log_path(&id).with_file_name("stderr.log.1");
        let older = std::fs::read_to_string(older).unwrap();
        assert!(log.len() as u64 <= STDERR_LOG_LIMIT, "{}", log.len());
        assert!(older.len() as u64 <= STDERR_LOG_LIMIT, "{}", older.len());
        assert!(older.len() as u64 + log.len() as u64 > STDERR_LOG_LIMIT);
        let numbers: Vec<usize> = older
            .lines()
            .chain(log.lines())
            .map(|line| {
                let line = line.strip_prefix("[sausage] ").unwrap_or(line);
                line.split(' ').nth(1).unwrap().parse().unwrap()
            })
            .collect();
        let first = numbers[0];
        assert_eq!(numbers, (first..=n).collect::<Vec<_>>());
    }
}
