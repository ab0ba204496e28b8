//! HTTP as messages (DESIGN §24): a request as the message its actor reads, and the actor's
//! answer as the response, for the public address and for transcripts' `http` steps alike. No
//! I/O here, so every shape an actor can write is tried in unit tests.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// Request headers that belong to the connection or to the console's logins: dropped before
/// an actor sees the request, unless its route passes them (`cookie`, `authorization`; the
/// connection's own never).
const CONNECTION: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
const PRIVATE: [&str; 2] = ["cookie", "authorization"];

/// The body of the message an actor gets for a request.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub remote: String,
    pub body: &'a [u8],
    /// Header names the route passes although they would be dropped.
    pub pass: &'a [String],
}

impl Request<'_> {
    /// Whether the header `name` (lower case) stays out of the actor's message: the
    /// connection's own headers, those the `connection` header names, and the private ones
    /// unless the route passes them.
    fn drops(&self, name: &str) -> bool {
        let named_by_connection = || {
            (self.headers.get_all(header::CONNECTION).iter())
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|named| named.trim().eq_ignore_ascii_case(name))
        };
        CONNECTION.contains(&name)
            || (PRIVATE.contains(&name) && !self.pass.iter().any(|p| p == name))
            || named_by_connection()
    }
}

/// `{"type": "http", "method", "path", "query", "headers", "remote", "body" |
/// "body_base64"}`: headers by lower-case name (repeated ones joined with `, `, cookies with
/// `; `), a body that is UTF-8 as text, any other in base64. Written straight as JSON, with no
/// tree of values made on the way (`Outgoing::new` takes it as it is).
impl Serialize for Request<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "http")?;
        map.serialize_entry("method", self.method)?;
        map.serialize_entry("path", self.path)?;
        map.serialize_entry("query", self.query.unwrap_or(""))?;
        map.serialize_entry("headers", &KeptHeaders(self))?;
        map.serialize_entry("remote", &self.remote)?;
        match std::str::from_utf8(self.body) {
            Ok(text) => map.serialize_entry("body", text)?,
            Err(_) => map.serialize_entry("body_base64", &BASE64.encode(self.body))?,
        }
        map.end()
    }
}

/// The headers of a [`Request`] its actor sees, by name.
struct KeptHeaders<'a>(&'a Request<'a>);

impl Serialize for KeptHeaders<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let headers = self.0.headers;
        let mut map = serializer.serialize_map(None)?;
        for name in headers.keys() {
            let name = name.as_str();
            if self.0.drops(name) {
                continue;
            }
            let mut values = headers.get_all(name).iter();
            let first = String::from_utf8_lossy(values.next().map_or(&[], |v| v.as_bytes()));
            let Some(second) = values.next() else {
                map.serialize_entry(name, &first)?;
                continue;
            };
            let joiner = if name == "cookie" { "; " } else { ", " };
            let mut joined = first.into_owned();
            for value in std::iter::once(second).chain(values) {
                joined.push_str(joiner);
                joined.push_str(&String::from_utf8_lossy(value.as_bytes()));
            }
            map.serialize_entry(name, &joined)?;
        }
        map.end()
    }
}

/// What an actor answered, ready to send.
#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// More comes as `http_chunk` messages until `http_end`.
    pub stream: bool,
}

/// Headers an actor may not set: the host frames the response itself.
const FRAMING: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

/// An `http_response` as its actor wrote it: each field as written, `null` taken as absent.
/// Read as it is rather than as a tree of values: an answer is read for every request.
#[derive(serde::Deserialize)]
struct Written<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    headers: Option<&'a RawValue>,
    #[serde(borrow, default)]
    body: Option<&'a RawValue>,
    #[serde(borrow, default)]
    body_base64: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
}

/// The text of a JSON string as written, unescaped; `None` for anything else.
fn text(raw: &RawValue) -> Option<String> {
    serde_json::from_str(raw.get()).ok()
}

/// Reads an `http_response` body an actor sent; `Err` says what is wrong, in words for its
/// log.
pub fn answer(reply: &RawValue) -> Result<Answer, String> {
    let reply: Written =
        serde_json::from_str(reply.get()).map_err(|e| format!("its answer cannot be read: {e}"))?;
    let kind = reply.kind.and_then(text);
    if kind.as_deref() != Some("http_response") {
        return Err(format!(
            "it answered a request with a `{}` message, not `http_response`",
            kind.as_deref().unwrap_or("(untyped)")
        ));
    }
    let status = match reply.status {
        None => http::StatusCode::OK,
        Some(value) => serde_json::from_str::<u16>(value.get())
            .ok()
            .and_then(|s| http::StatusCode::from_u16(s).ok())
            .filter(|s| s.as_u16() >= 200)
            .ok_or_else(|| format!("its `status` is {value}, not a number from 200 to 999"))?,
    };
    let mut headers = HeaderMap::new();
    if let Some(written) = reply.headers {
        let fields: serde_json::Map<String, Value> = serde_json::from_str(written.get())
            .map_err(|_| format!("its `headers` is {written}, not an object"))?;
        for (name, value) in fields {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("its header name {name:?} is not a valid one"))?;
            if FRAMING.contains(&name.as_str()) {
                continue;
            }
            let values = match value {
                Value::Array(values) => values,
                value => vec![value],
            };
            for value in values {
                let text = match value {
                    Value::String(text) => text,
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(format!(
                            "its header `{name}` is {other}, not a string (or a list of them)"
                        ));
                    }
                };
                let value = HeaderValue::from_str(&text).map_err(|_| {
                    format!("its header `{name}` holds a character a header cannot")
                })?;
                headers.append(name.clone(), value);
            }
        }
    }
    let body = match (reply.body, reply.body_base64) {
        (None, None) => Vec::new(),
        (Some(body), None) => match text(body) {
            Some(text) => {
                default_type(&mut headers, "text/plain; charset=utf-8");
                text.into_bytes()
            }
            None => {
                // A JSON API's answer written as JSON rather than as text: sent as written.
                default_type(&mut headers, "application/json");
                body.get().as_bytes().to_vec()
            }
        },
        (None, Some(encoded)) => {
            let encoded = text(encoded)
                .ok_or_else(|| format!("its `body_base64` is {encoded}, not a string"))?;
            default_type(&mut headers, "application/octet-stream");
            BASE64
                .decode(encoded)
                .map_err(|e| format!("its `body_base64` is not base64 ({e})"))?
        }
        (Some(_), Some(_)) => return Err("it has both `body` and `body_base64`; send one".into()),
    };
    let stream = match reply.stream.map(RawValue::get) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(format!("its `stream` is {other}, not true or false")),
    };
    Ok(Answer {
        status,
        headers,
        body,
        stream,
    })
}

fn default_type(headers: &mut HeaderMap, content_type: &'static str) {
    headers
        .entry(header::CONTENT_TYPE)
        .or_insert(HeaderValue::from_static(content_type));
}

/// What a message of a streamed answer says.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    Data(Vec<u8>),
    End,
}

/// Reads an `http_chunk` or `http_end` an actor sent while streaming.
pub fn chunk(body: &Value) -> Result<Chunk, String> {
    match body["type"].as_str() {
        Some("http_end") => Ok(Chunk::End),
        Some("http_chunk") => match (&body["data"], &body["data_base64"]) {
            (Value::String(text), Value::Null) => Ok(Chunk::Data(text.clone().into_bytes())),
            (Value::Null, Value::String(encoded)) => BASE64
                .decode(encoded)
                .map(Chunk::Data)
                .map_err(|e| format!("an `http_chunk`'s `data_base64` is not base64 ({e})")),
            _ => Err("an `http_chunk` has one string `data` or `data_base64`".into()),
        },
        other => Err(format!(
            "it sent a `{}` message while streaming an answer, not `http_chunk` or `http_end`",
            other.unwrap_or("(untyped)")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request's message as its actor reads it.
    fn to_body(request: &Request) -> Value {
        serde_json::to_value(request).unwrap()
    }

    /// An answer written as `reply`.
    fn answer(reply: &Value) -> Result<Answer, String> {
        super::answer(&crate::message::raw(reply))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_request_drops_connection_and_private_headers_unless_passed() {
        let h = headers(&[
            ("host", "example.com"),
            ("accept", "a"),
            ("accept", "b"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "s"),
            ("transfer-encoding", "chunked"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("authorization", "Bearer t"),
            ("te", "trailers"),
        ]);
        let request = |pass: &[String]| {
            to_body(&Request {
                method: "POST",
                path: "/p",
                query: Some("q=1"),
                headers: &h,
                remote: "1.2.3.4:5".into(),
                body: b"hi",
                pass,
            })
        };
        let body = request(&[]);
        assert_eq!(
            body,
            json!({
                "type": "http", "method": "POST", "path": "/p", "query": "q=1",
                "headers": {"host": "example.com", "accept": "a, b"},
                "remote": "1.2.3.4:5", "body": "hi",
            })
        );
        let passed = request(&["cookie".into(), "authorization".into()]);
        assert_eq!(passed["headers"]["cookie"], "a=1; b=2");
        assert_eq!(passed["headers"]["authorization"], "Bearer t");
        assert!(passed["headers"].get("x-secret").is_none());
    }

    #[test]
    fn a_body_that_is_not_utf8_goes_in_base64_and_never_both() {
        let h = HeaderMap::new();
        let body = to_body(&Request {
            method: "PUT",
            path: "/",
            query: None,
            headers: &h,
            remote: String::new(),
            body: &[0xff, 0, 1],
            pass: &[],
        });
        assert_eq!(body["body_base64"], "/wAB");
        assert!(body.get("body").is_none());
        assert_eq!(body["query"], "");
    }

    #[test]
    fn an_answer_is_read_with_its_defaults() {
        let a = answer(&json!({"type": "http_response", "body": "hi"})).unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(a.headers["content-type"], "text/plain; charset=utf-8");
        assert_eq!(a.body, b"hi");
        let a = answer(&json!({
            "type": "http_response", "status": 201, "body": {"id": 7},
            "headers": {"set-cookie": ["a=1", "b=2"], "content-length": "99", "x-n": 3},
        }))
        .unwrap();
        assert_eq!(a.status, 201);
        assert_eq!(a.headers["content-type"], "application/json");
        assert_eq!(a.body, br#"{"id":7}"#);
        assert_eq!(a.headers.get_all("set-cookie").iter().count(), 2);
        assert!(a.headers.get("content-length").is_none());
        assert_eq!(a.headers["x-n"], "3");
        let a = answer(&json!({"type": "http_response", "body_base64": "/wAB", "stream": true}))
            .unwrap();
        assert_eq!((a.body, a.stream), (vec![0xff, 0, 1], true));
        assert_eq!(a.headers["content-type"], "application/octet-stream");
        // A JSON body goes out as its actor wrote it; `null` is as good as absent.
        let written = r#"{"type":"http_response","status":null,"body": {"b": 1, "a": [2]}}"#;
        let a = super::answer(&RawValue::from_string(written.into()).unwrap()).unwrap();
        assert_eq!(
            (a.status.as_u16(), a.body),
            (200, br#"{"b": 1, "a": [2]}"#.to_vec())
        );
    }

    #[test]
    fn a_wrong_answer_says_what_is_wrong() {
        for (reply, says) in [
            (json!({"type": "text"}), "a `text` message"),
            (json!({}), "(untyped)"),
            (
                json!({"type": "http_response", "status": 99}),
                "from 200 to 999",
            ),
            (json!({"type": "http_response", "status": 101}), "from 200"),
            (
                json!({"type": "http_response", "status": "200"}),
                "not a number",
            ),
            (
                json!({"type": "http_response", "headers": []}),
                "not an object",
            ),
            (
                json!({"type": "http_response", "headers": {"a b": "x"}}),
                "not a valid",
            ),
            (
                json!({"type": "http_response", "headers": {"x": "a\nb"}}),
                "cannot",
            ),
            (
                json!({"type": "http_response", "headers": {"x": {}}}),
                "not a string",
            ),
            (
                json!({"type": "http_response", "body": "a", "body_base64": "YQ=="}),
                "both",
            ),
            (
                json!({"type": "http_response", "body_base64": "***"}),
                "not base64",
            ),
            (
                json!({"type": "http_response", "body_base64": 3}),
                "not a string",
            ),
            (
                json!({"type": "http_response", "stream": "yes"}),
                "true or false",
            ),
        ] {
            let err = answer(&reply).unwrap_err();
            assert!(err.contains(says), "{reply}: {err}");
        }
    }

    #[test]
    fn chunks_are_text_or_base64_and_end_with_http_end() {
        assert_eq!(
            chunk(&json!({"type": "http_chunk", "data": "a"})),
            Ok(Chunk::Data(b"a".to_vec()))
        );
        assert_eq!(
            chunk(&json!({"type": "http_chunk", "data_base64": "YQ=="})),
            Ok(Chunk::Data(b"a".to_vec()))
        );
        assert_eq!(chunk(&json!({"type": "http_end"})), Ok(Chunk::End));
        for wrong in [
            json!({"type": "http_chunk"}),
            json!({"type": "http_chunk", "data": "a", "data_base64": "YQ=="}),
            json!({"type": "http_chunk", "data_base64": "!"}),
            json!({"type": "text"}),
        ] {
            assert!(chunk(&wrong).is_err(), "{wrong}");
        }
    }
}
