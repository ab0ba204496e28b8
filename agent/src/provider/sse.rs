//! Server-sent events (`text/event-stream`), the framing all three model APIs stream in: bytes in,
//! in pieces split anywhere (even inside a UTF-8 character or a `\r\n`), whole events out. It
//! knows lines, fields and blank lines only, never JSON or an API's event names.
//! **Invariant:** memory stays bounded: a line or an event's data longer than
//! [`MAX_EVENT_BYTES`] is an error, never a buffer that grows without end.

/// The most bytes one line, or the data of one event, may hold. The largest real event is a
/// Responses `response.completed`, which repeats the whole output and the instructions (the
/// system prompt): some hundreds of kilobytes. Past the limit the stream fails with an error.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// One event: its `event:` name, if it had one, and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

/// The incremental parser: feed it bytes as they arrive, then call [`Parser::finish`].
#[derive(Debug, Default)]
pub struct Parser {
    /// The bytes of the line not yet ended; it may end inside a UTF-8 character, so it is
    /// decoded only once the line is whole.
    line: Vec<u8>,
    /// The last byte fed was `\r`: a `\n` right after it belongs to the same line end.
    after_cr: bool,
    /// The `event:` name of the event being read.
    name: Option<String>,
    /// Its data so far; `None` until a `data:` line came (an event without one is not sent).
    data: Option<String>,
}

impl Parser {
    /// Reads `bytes` and returns the events they completed, in order.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut events = Vec::new();
        while !bytes.is_empty() {
            if std::mem::take(&mut self.after_cr) && bytes[0] == b'\n' {
                bytes = &bytes[1..];
                continue;
            }
            let Some(at) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.extend(bytes)?;
                break;
            };
            self.extend(&bytes[..at])?;
            self.after_cr = bytes[at] == b'\r';
            bytes = &bytes[at + 1..];
            let line = std::mem::take(&mut self.line);
            events.extend(self.line(&String::from_utf8_lossy(&line))?);
        }
        Ok(events)
    }

    /// The end of the body: the last line and the last event, even without the blank line
    /// that should have ended them.
    pub fn finish(&mut self) -> Result<Option<Event>, String> {
        let line = std::mem::take(&mut self.line);
        if let Some(event) = self.line(&String::from_utf8_lossy(&line))? {
            return Ok(Some(event));
        }
        Ok(self.dispatch())
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(too_long());
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// One whole line; a blank one ends the event being read.
    fn line(&mut self, line: &str) -> Result<Option<Event>, String> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line.starts_with(':') {
            return Ok(None); // A comment: servers send them to keep the connection alive.
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = Some(value.to_string()),
            "data" => match &mut self.data {
                None => self.data = Some(value.to_string()),
                // The lines of one event are joined by `\n`.
                Some(data) if data.len() + 1 + value.len() <= MAX_EVENT_BYTES => {
                    data.push('\n');
                    data.push_str(value);
                }
                Some(_) => return Err(too_long()),
            },
            // llama.cpp's server sends an error inside a stream as a field of its own,
            // `error: {...}`: it is read as an event named `error` with that data.
            "error" => {
                self.name = Some("error".into());
                self.data = Some(value.to_string());
            }
            // `id`, `retry` and unknown fields mean nothing to these APIs.
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<Event> {
        let name = self.name.take().filter(|name| !name.is_empty());
        self.data.take().map(|data| Event { name, data })
    }
}

/// Whether the start of a body reads as server-sent events (only comments, blank lines and
/// fields), however early it broke off, rather than as something else (a JSON error, a page).
pub fn looks_like_events(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().all(|line| {
        let field = line.split(':').next().unwrap_or_default();
        ["", "event", "data", "id", "retry", "error"].contains(&field)
    })
}

fn too_long() -> String {
    format!(
        "a line or an event of the stream is longer than {} MiB",
        MAX_EVENT_BYTES >> 20
    )
}

/// One event as a server frames it.
#[cfg(test)]
pub fn frame(name: Option<&str>, data: &str) -> String {
    let name = name
        .map(|name| format!("event: {name}\n"))
        .unwrap_or_default();
    format!("{name}data: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> Event {
        Event {
            name: name.map(str::to_string),
            data: data.into(),
        }
    }

    /// The events of `body` fed whole, checked against the same bytes fed one at a time.
    fn events(body: &[u8]) -> Vec<Event> {
        let mut whole = Parser::default();
        let mut events = whole.feed(body).unwrap();
        events.extend(whole.finish().unwrap());
        let mut bytewise = Parser::default();
        let mut one_by_one = Vec::new();
        for byte in body {
            one_by_one.extend(bytewise.feed(std::slice::from_ref(byte)).unwrap());
        }
        one_by_one.extend(bytewise.finish().unwrap());
        assert_eq!(events, one_by_one, "fed whole and one byte at a time");
        events
    }

    #[test]
    fn every_line_end_ends_a_line() {
        let expected = vec![event(Some("a"), "1"), event(None, "2")];
        assert_eq!(events(b"event: a\ndata: 1\n\ndata: 2\n\n"), expected);
        assert_eq!(
            events(b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n"),
            expected
        );
        assert_eq!(events(b"event: a\rdata: 1\r\rdata: 2\r\r"), expected);
    }

    #[test]
    fn a_crlf_split_between_two_pieces_is_one_line_end() {
        let mut parser = Parser::default();
        assert_eq!(parser.feed(b"data: 1\r").unwrap(), []);
        assert_eq!(parser.feed(b"\n\r").unwrap(), [event(None, "1")]);
        assert_eq!(
            parser.feed(b"\ndata: 2\r\n\r\n").unwrap(),
            [event(None, "2")]
        );
    }

    #[test]
    fn a_character_split_between_two_pieces_is_whole() {
        let body = "data: “PotatoLand.”\n\n".as_bytes();
        let mut parser = Parser::default();
        assert_eq!(parser.feed(&body[..7]).unwrap(), []);
        assert_eq!(
            parser.feed(&body[7..]).unwrap(),
            [event(None, "“PotatoLand.”")]
        );
    }

    #[test]
    fn comments_pings_and_fields_without_a_space() {
        let body = b": keep-alive\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent:x\ndata:{}\nid: 7\nretry: 10\n\n";
        assert_eq!(
            events(body),
            [
                event(Some("ping"), "{\"type\": \"ping\"}"),
                event(Some("x"), "{}")
            ]
        );
    }

    #[test]
    fn data_lines_join_and_padding_is_kept_for_the_json_reader() {
        assert_eq!(
            events(b"data: {\ndata: \"a\": 1\ndata: }   \n\n"),
            [event(None, "{\n\"a\": 1\n}   ")]
        );
        assert_eq!(events(b"data\ndata\n\n"), [event(None, "\n")]);
        // An event name without data is no event.
        assert_eq!(events(b"event: lonely\n\ndata: x\n\n"), [event(None, "x")]);
    }

    #[test]
    fn an_error_field_is_an_error_event() {
        assert_eq!(
            events(b"data: {}\n\nerror: {\"code\": 400}\n\n"),
            [event(None, "{}"), event(Some("error"), "{\"code\": 400}")]
        );
    }

    #[test]
    fn the_last_event_needs_no_blank_line() {
        assert_eq!(
            events(b"data: 1\n\nevent: message_stop\ndata: {}"),
            [event(None, "1"), event(Some("message_stop"), "{}")]
        );
        assert_eq!(
            events(b"event: message_stop\ndata: {}\n"),
            [event(Some("message_stop"), "{}")]
        );
    }

    #[test]
    fn what_looks_like_events() {
        assert!(looks_like_events(b""));
        assert!(looks_like_events(
            b": keep-alive\n\nevent: message_start\ndata"
        ));
        assert!(looks_like_events(b"retry: 100\r\nid: 1\r\n"));
        assert!(!looks_like_events(b"{\"error\": {\"message\": \"x\"}}"));
        assert!(!looks_like_events(b"<html>Bad Gateway</html>"));
        assert!(!looks_like_events(b"Internal Server Error"));
    }

    #[test]
    fn a_line_too_long_is_an_error_not_a_growing_buffer() {
        let mut parser = Parser::default();
        let piece = vec![b'x'; 1 << 20];
        let mut error = None;
        for _ in 0..=(MAX_EVENT_BYTES >> 20) {
            if let Err(e) = parser.feed(&piece) {
                error = Some(e);
                break;
            }
        }
        assert_eq!(
            error.as_deref(),
            Some("a line or an event of the stream is longer than 16 MiB")
        );
        assert!(parser.line.len() <= MAX_EVENT_BYTES);
    }

    #[test]
    fn an_event_too_long_is_an_error() {
        let mut parser = Parser::default();
        let line = format!("data: {}\n", "x".repeat(1 << 20));
        let error = (0..=(MAX_EVENT_BYTES >> 20))
            .find_map(|_| parser.feed(line.as_bytes()).err())
            .unwrap();
        assert!(error.contains("16 MiB"), "{error}");
    }
}
