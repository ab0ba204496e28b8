//! Standard `wasi:http/proxy` components (DESIGN §24): an instance whose component exports
//! `wasi:http/incoming-handler` is served through its mailbox like any actor. Each `http`
//! message it is given on stdin becomes an incoming request, its handler is called, and the
//! response goes back on stdout as the `http_response` reply an actor would write: whole when
//! its body ends soon, streamed as `http_chunk`s and `http_end` when it keeps coming. The
//! broker, transcripts and the public address see an actor; the component sees `wasmtime
//! serve`'s world, one request at a time, in an instance kept for the next.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};
use wasmtime::Store;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::Proxy;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use super::Guest;
use super::stdio::{GuestInput, Stdout};

/// The exports that make a component a `wasi:http/proxy` one, at any 0.2 version.
pub const HANDLER_EXPORT: &str = "wasi:http/incoming-handler@0.2";

/// How long a response's body may take to end and still go back as one `http_response`;
/// past it (an event stream, a long download) it is streamed.
const WHOLE_WITHIN: Duration = Duration::from_millis(50);
/// The most of a body sent as one message; a longer one is streamed in pieces.
const WHOLE_AT_MOST: usize = 1 << 20;

/// Serves requests until shutdown or the end of input: `Ok(Ok(()))` as a command's `run`
/// returning success would. A trap in the handler is the instance's end (`Err`).
pub async fn serve(
    store: &mut Store<Guest>,
    proxy: &Proxy,
    input: &Arc<dyn GuestInput>,
    output: &Stdout,
    errors: &Stdout,
) -> wasmtime::Result<Result<(), ()>> {
    let mut lines = Lines::default();
    while let Some(line) = lines.next(input.as_ref()).await {
        let message: Value = match serde_json::from_slice(&line) {
            Ok(message) => message,
            Err(e) => {
                let note = format!("stdin: skipping a line that is not a message: {e}\n");
                write(errors, note.as_bytes()).await;
                continue;
            }
        };
        let body = &message["body"];
        let is_reply = !message["reply_to"].is_null();
        match body["type"].as_str() {
            Some("shutdown") => break,
            Some("http") if !is_reply => {
                let to = Reply::to(&message);
                match request(body) {
                    Ok(request) => handle(store, proxy, request, &to, output, errors).await?,
                    Err(why) => {
                        let answer = json!({"type": "http_response", "status": 400,
                            "body": format!("bad request: {why}\n")});
                        write(output, &to.line(answer)).await;
                    }
                }
            }
            kind if !is_reply && message["id"].as_str().is_some_and(|id| !id.is_empty()) => {
                let reason = format!(
                    "this actor is a wasi:http component: it answers `http` requests only, \
                     not `{}`",
                    kind.unwrap_or("(untyped)")
                );
                let to = Reply::to(&message);
                write(output, &to.line(json!({"type": "error", "reason": reason}))).await;
            }
            _ => {}
        }
        input.settle().await;
    }
    Ok(Ok(()))
}

/// Whom a reply goes to: the request's sender, naming the request.
struct Reply {
    to: Value,
    reply_to: Value,
}

impl Reply {
    fn to(message: &Value) -> Reply {
        Reply {
            to: message["from"].clone(),
            reply_to: message["id"].clone(),
        }
    }

    fn line(&self, body: Value) -> Vec<u8> {
        let mut line = serde_json::to_vec(&json!({
            "to": self.to, "reply_to": self.reply_to, "body": body,
        }))
        .expect("a reply serializes");
        line.push(b'\n');
        line
    }
}

/// The request an `http` message describes, as the component will see it.
fn request(body: &Value) -> Result<http::Request<Full<Bytes>>, String> {
    let method = body["method"].as_str().unwrap_or("GET");
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("`{method}` is not an HTTP method"))?;
    let path = body["path"].as_str().unwrap_or("/");
    if !path.starts_with('/') {
        return Err(format!("the path `{path}` does not start with `/`"));
    }
    let mut headers = HeaderMap::new();
    if let Some(fields) = body["headers"].as_object() {
        for (name, value) in fields {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a header name"))?;
            let value = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let value = HeaderValue::from_str(&value)
                .map_err(|_| format!("the header `{name}` holds a character a header cannot"))?;
            headers.insert(name, value);
        }
    }
    let authority = headers
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("localhost")
        .to_string();
    let uri = match body["query"].as_str().filter(|q| !q.is_empty()) {
        Some(query) => format!("http://{authority}{path}?{query}"),
        None => format!("http://{authority}{path}"),
    };
    let content = match (&body["body"], &body["body_base64"]) {
        (Value::String(text), _) => Bytes::from(text.clone()),
        (_, Value::String(encoded)) => BASE64
            .decode(encoded)
            .map(Bytes::from)
            .map_err(|e| format!("its `body_base64` is not base64 ({e})"))?,
        (Value::Null, Value::Null) => Bytes::new(),
        (other, _) => Bytes::from(other.to_string()),
    };
    let mut request = http::Request::builder()
        .method(method)
        .uri(&uri)
        .body(Full::new(content))
        .map_err(|e| format!("`{uri}` is not a request's address ({e})"))?;
    *request.headers_mut() = headers;
    Ok(request)
}

/// Calls the handler with one request and writes its answer.
async fn handle(
    store: &mut Store<Guest>,
    proxy: &Proxy,
    request: http::Request<Full<Bytes>>,
    to: &Reply,
    output: &Stdout,
    errors: &Stdout,
) -> wasmtime::Result<()> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let (request, out) = {
        let mut http = store.data_mut().http();
        let request = http.new_incoming_request(Scheme::Http, request)?;
        (request, http.new_response_outparam(sender)?)
    };
    let call = proxy
        .wasi_http_incoming_handler()
        .call_handle(&mut *store, request, out);
    let answering = answer(receiver, to, output, errors);
    tokio::pin!(call, answering);
    // The handler may write its body after it set its response, or trap before: the answer is
    // read while it runs, and a trap ends both (the broker answers the request 503).
    tokio::select! {
        called = &mut call => {
            called?;
            answering.await;
        }
        () = &mut answering => call.await?,
    }
    Ok(())
}

type Outcome = Result<http::Response<HyperOutgoingBody>, ErrorCode>;

/// Writes the handler's response as a reply: whole, or streamed.
async fn answer(
    receiver: tokio::sync::oneshot::Receiver<Outcome>,
    to: &Reply,
    output: &Stdout,
    errors: &Stdout,
) {
    let failed =
        |why: String| json!({"type": "http_response", "status": 500, "body": format!("{why}\n")});
    let response = match receiver.await {
        Ok(Ok(response)) => response,
        Ok(Err(code)) => {
            let why = format!("the component's handler failed: {code:?}");
            write(errors, format!("{why}\n").as_bytes()).await;
            return write(output, &to.line(failed(why))).await;
        }
        Err(_) => {
            let why = "the component's handler returned without a response".to_string();
            write(errors, format!("{why}\n").as_bytes()).await;
            return write(output, &to.line(failed(why))).await;
        }
    };
    let (parts, mut body) = response.into_parts();
    let head = |stream: bool| {
        let mut head = json!({
            "type": "http_response",
            "status": parts.status.as_u16(),
            "headers": headers(&parts.headers),
        });
        if stream {
            head["stream"] = Value::Bool(true);
        }
        head
    };

    // Whole when it ends soon and is not too long.
    let mut whole = BytesMut::new();
    let deadline = tokio::time::Instant::now() + WHOLE_WITHIN;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(None) => {
                let mut reply = head(false);
                put_body(&mut reply, "body", &whole);
                return write(output, &to.line(reply)).await;
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    whole.extend_from_slice(&data);
                }
                if whole.len() > WHOLE_AT_MOST {
                    break;
                }
            }
            Ok(Some(Err(e))) => {
                let why = format!("the component's response body failed: {e}");
                write(errors, format!("{why}\n").as_bytes()).await;
                return write(output, &to.line(failed(why))).await;
            }
            Err(_) => break,
        }
    }

    // Streamed: the head, what came so far, then each piece as it comes.
    write(output, &to.line(head(true))).await;
    let mut pending = whole.freeze();
    loop {
        for piece in pending.chunks(WHOLE_AT_MOST) {
            let mut chunk = json!({"type": "http_chunk"});
            put_body(&mut chunk, "data", piece);
            write(output, &to.line(chunk)).await;
        }
        pending = match body.frame().await {
            None => break,
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            Some(Err(e)) => {
                let note = format!("the component's response body failed midway: {e}\n");
                write(errors, note.as_bytes()).await;
                break;
            }
        };
    }
    write(output, &to.line(json!({"type": "http_end"}))).await;
}

/// A response's headers as an answer's: by name, a list where one repeats; the framing ones
/// are the public address's to set.
fn headers(headers: &HeaderMap) -> Value {
    let mut fields = Map::new();
    for name in headers.keys() {
        let values: Vec<Value> = headers
            .get_all(name)
            .iter()
            .map(|v| Value::from(String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let value = match <[Value; 1]>::try_from(values) {
            Ok([one]) => one,
            Err(many) => Value::Array(many),
        };
        fields.insert(name.as_str().to_string(), value);
    }
    Value::Object(fields)
}

/// Puts bytes under `field` when they are UTF-8, under `field_base64` otherwise.
fn put_body(reply: &mut Value, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => reply[field] = Value::from(text),
        Err(_) => reply[format!("{field}_base64")] = Value::from(BASE64.encode(bytes)),
    }
}

/// Writes all of `bytes` to a guest output, waiting for room as a guest's stream would.
async fn write(output: &Stdout, mut bytes: &[u8]) {
    let mut out = output.0.lock().await;
    while !bytes.is_empty() {
        let room = out.capacity();
        if room == 0 {
            out.writable().await;
            continue;
        }
        let (now, rest) = bytes.split_at(room.min(bytes.len()));
        out.write(now);
        bytes = rest;
    }
}

/// Lines read from a guest input.
#[derive(Default)]
struct Lines {
    partial: BytesMut,
}

impl Lines {
    /// The next line that is not blank, without its newline; `None` at the end of input.
    async fn next(&mut self, input: &dyn GuestInput) -> Option<Bytes> {
        loop {
            if let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                let line = trim(self.partial.split_to(end + 1).freeze());
                if line.is_empty() {
                    continue;
                }
                return Some(line);
            }
            match input.read(64 * 1024) {
                None => return None,
                Some(bytes) if bytes.is_empty() => input.readable().await,
                Some(bytes) => self.partial.extend_from_slice(&bytes),
            }
        }
    }
}

/// A line without its newline and the blanks around it.
fn trim(line: Bytes) -> Bytes {
    let start = line.iter().position(|b| !b.is_ascii_whitespace());
    let end = line.iter().rposition(|b| !b.is_ascii_whitespace());
    match (start, end) {
        (Some(start), Some(end)) => line.slice(start..=end),
        _ => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_message_becomes_the_request_a_component_sees() {
        let body = json!({"type": "http", "method": "POST", "path": "/a/b", "query": "x=1",
            "headers": {"host": "example.org", "x-one": "1"}, "body": "hi"});
        let made = request(&body).unwrap();
        assert_eq!(made.method(), Method::POST);
        assert_eq!(made.uri().to_string(), "http://example.org/a/b?x=1");
        assert_eq!(made.headers()["x-one"], "1");

        let binary = json!({"type": "http", "path": "/", "body_base64": "AAEC"});
        let made = request(&binary).unwrap();
        assert_eq!(made.method(), Method::GET);
        assert_eq!(made.uri().to_string(), "http://localhost/");
    }

    #[test]
    fn a_wrong_request_message_says_what_is_wrong() {
        let wrong = [
            (json!({"method": "G T", "path": "/"}), "not an HTTP method"),
            (json!({"path": "a"}), "does not start with `/`"),
            (
                json!({"path": "/", "headers": {"a b": "1"}}),
                "not a header name",
            ),
            (
                json!({"path": "/", "headers": {"a": "x\ny"}}),
                "a header cannot",
            ),
            (json!({"path": "/", "body_base64": "!!"}), "not base64"),
            (json!({"path": "/ x"}), "not a request's address"),
        ];
        for (body, expected) in wrong {
            let why = request(&body).unwrap_err();
            assert!(why.contains(expected), "{body}: {why}");
        }
    }

    #[test]
    fn repeated_headers_become_a_list_and_bodies_text_or_base64() {
        let mut map = HeaderMap::new();
        map.append("set-cookie", HeaderValue::from_static("a=1"));
        map.append("set-cookie", HeaderValue::from_static("b=2"));
        map.insert("x-one", HeaderValue::from_static("1"));
        assert_eq!(
            headers(&map),
            json!({"set-cookie": ["a=1", "b=2"], "x-one": "1"})
        );
        let mut reply = json!({});
        put_body(&mut reply, "body", b"text");
        put_body(&mut reply, "data", &[0xff, 0]);
        assert_eq!(reply, json!({"body": "text", "data_base64": "/wA="}));
    }
}
