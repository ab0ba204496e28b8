//! A small HTTP/1.1 client over a TCP stream, for the web console's tests and for WebDriver:
//! every header is the test's to choose (Host, Origin, Cookie), and server-sent events can be
//! read as they come.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Sends one request to `addr` (`host:port`) and reads the whole response. `headers` come
/// after `Host: addr` unless they set their own `Host`, and before `Connection: close` unless
/// they set their own `Connection`.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`request`] from the loopback address `source` (such as `127.0.0.2`): another client, as a
/// server that counts by address sees it.
pub fn request_from(
    source: &str,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let connect = || connect_from(source.parse().unwrap(), addr.parse().unwrap());
    let mut stream = connect()
        .and_then(|stream| send_head(stream, addr, method, path, headers, b""))
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path} from {source}: {e}"));
    read_response(&mut stream).unwrap_or_else(|e| panic!("{path} from {source}: {e}"))
}

/// A TCP connection to `to` from the address `from` (a port of the system's choosing).
fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddrV4) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor made here, with addresses that live across
    // each call; the descriptor goes to the `TcpStream` (which closes it) or is closed on error.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let local = sockaddr(from, 0);
        let remote = sockaddr(*to.ip(), to.port());
        if libc::bind(fd, (&raw const local).cast(), len) != 0
            || libc::connect(fd, (&raw const remote).cast(), len) != 0
        {
            let e = io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        Ok(TcpStream::from_raw_fd(fd))
    }
}

/// [`request`], answering an I/O error instead of failing the test (for clean-ups that must
/// not panic, such as a browser session's `Drop`).
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    let mut stream = open(addr, method, path, headers, body)?;
    read_response(&mut stream)
}

fn read_response(stream: &mut BufReader<TcpStream>) -> io::Result<Response> {
    let (status, headers) = read_head(stream)?;
    let body = if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        read_chunked(stream)
    } else if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        let mut body = vec![0; len];
        stream.read_exact(&mut body)?;
        body
    } else {
        let mut body = Vec::new();
        let _ = stream.read_to_end(&mut body);
        body
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn open(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<BufReader<TcpStream>> {
    send_head(TcpStream::connect(addr)?, addr, method, path, headers, body)
}

fn send_head(
    stream: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<BufReader<TcpStream>> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    // A connection closed after one response, unless the test keeps it alive as a browser does.
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("connection"))
    {
        head.push_str("Connection: close\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut writer = stream.try_clone()?;
    writer.write_all(head.as_bytes())?;
    writer.write_all(body)?;
    Ok(BufReader::new(stream))
}

fn read_head(stream: &mut BufReader<TcpStream>) -> io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not an HTTP status line: {line:?}"),
            )
        })?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        stream.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    Ok((status, headers))
}

fn read_chunk(stream: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if stream.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut chunk = vec![0; size + 2];
    stream.read_exact(&mut chunk).ok()?;
    chunk.truncate(size);
    (size > 0).then_some(chunk)
}

fn read_chunked(stream: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(chunk) = read_chunk(stream) {
        body.extend(chunk);
    }
    body
}

/// A server-sent event: its `event`, `id` and `data`.
#[derive(Debug, Clone)]
pub struct ServerEvent {
    pub kind: String,
    pub id: String,
    pub data: String,
}

/// An open `text/event-stream`, read event by event.
pub struct EventStream {
    stream: BufReader<TcpStream>,
    pub status: u16,
    pending: String,
}

impl EventStream {
    pub fn open(addr: &str, path: &str, headers: &[(&str, &str)]) -> EventStream {
        let mut stream = open(addr, "GET", path, headers, b"")
            .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"));
        let (status, _) = read_head(&mut stream).unwrap_or_else(|e| panic!("{path}: {e}"));
        EventStream {
            stream,
            status,
            pending: String::new(),
        }
    }

    /// The next event, or `None` when the stream ends or nothing comes for `patience`.
    /// Keep-alive comments do not count as events, nor stretch the wait.
    pub fn next(&mut self, patience: Duration) -> Option<ServerEvent> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let mut event = ServerEvent {
                    kind: "message".into(),
                    id: String::new(),
                    data: String::new(),
                };
                let mut any = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event.kind = v.trim().to_string();
                        any = true;
                    } else if let Some(v) = line.strip_prefix("id:") {
                        event.id = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        if !event.data.is_empty() {
                            event.data.push('\n');
                        }
                        event.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        any = true;
                    }
                }
                if any {
                    return Some(event);
                }
                continue;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            self.stream.get_ref().set_read_timeout(Some(left)).unwrap();
            let chunk = read_chunk(&mut self.stream)?;
            self.pending.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Whether the stream ends within `patience`; the events before its end are passed over.
    pub fn ends_within(&mut self, patience: Duration) -> bool {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.next(left).is_none() {
                // `next` gives up waiting only after `left`: a `None` well before the deadline
                // is the end of the stream.
                return std::time::Instant::now() + Duration::from_millis(500) < deadline;
            }
        }
    }

    /// Whether the server closes the connection within `patience` (what a stream sends before
    /// is passed over): for a stream opened with `Connection: keep-alive`, as browsers do, the end
    /// of its body alone would leave the connection open.
    pub fn closes_within(&mut self, patience: Duration) -> bool {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.get_ref().set_read_timeout(Some(left)).unwrap();
            match self.stream.fill_buf() {
                Ok([]) => return true,
                Ok(bytes) => {
                    let n = bytes.len();
                    self.stream.consume(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
    }

    /// The next event of `kind` whose data satisfies `check`, within `patience` in all.
    pub fn wait_for(
        &mut self,
        kind: &str,
        patience: Duration,
        mut check: impl FnMut(&Value) -> bool,
    ) -> ServerEvent {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "no `{kind}` event came that matched");
            let Some(event) = self.next(left) else {
                panic!("the event stream ended or went quiet before a matching `{kind}`");
            };
            if event.kind == kind
                && serde_json::from_str::<Value>(&event.data).is_ok_and(|data| check(&data))
            {
                return event;
            }
        }
    }
}
