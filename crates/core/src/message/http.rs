//! HTTP as messages (DESIGN §24): a request as the message its actor reads, and the actor's
//! answer as the response, for the public address and for transcripts' `http` steps alike. No
//! I/O here, so every shape an actor can write is tried in unit tests.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

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
    /// `{"type": "http", "method", "path", "query", "headers", "remote", "body" |
    /// "body_base64"}`: headers by lower-case name (repeated ones joined with `, `, cookies
    /// with `; `), a body that is UTF-8 as text, any other in base64.
    pub fn to_body(&self) -> Value {
        let named_by_connection: Vec<String> = self
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|name| name.trim().to_ascii_lowercase())
            .collect();
        let mut headers = Map::new();
        for (name, value) in self.headers {
            let name = name.as_str();
            let passed = self.pass.iter().any(|p| p == name);
            let dropped = CONNECTION.contains(&name)
                || named_by_connection.iter().any(|n| n == name)
                || (PRIVATE.contains(&name) && !passed);
            if dropped {
                continue;
            }
            let value = String::from_utf8_lossy(value.as_bytes());
            let joiner = if name == "cookie" { "; " } else { ", " };
            match headers.get_mut(name) {
                Some(Value::String(seen)) => {
                    seen.push_str(joiner);
                    seen.push_str(&value);
                }
                _ => {
                    headers.insert(name.to_string(), Value::from(value.into_owned()));
                }
            }
        }
        let mut body = json!({
            "type": "http",
            "method": self.method,
            "path": self.path,
            "query": self.query.unwrap_or(""),
            "headers": headers,
            "remote": self.remote,
        });
        match std::str::from_utf8(self.body) {
            Ok(text) => body["body"] = Value::from(text),
            Err(_) => body["body_base64"] = Value::from(BASE64.encode(self.body)),
        }
        body
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

/// Reads an `http_response` body an actor sent; `Err` says what is wrong, in words for its
/// log.
pub fn answer(reply: &Value) -> Result<Answer, String> {
    if reply["type"] != "http_response" {
        return Err(format!(
            "it answered a request with a `{}` message, not `http_response`",
            reply["type"].as_str().unwrap_or("(untyped)")
        ));
    }
    let status = match &reply["status"] {
        Value::Null => http::StatusCode::OK,
        value => value
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .and_then(|s| http::StatusCode::from_u16(s).ok())
            .filter(|s| s.as_u16() >= 200)
            .ok_or_else(|| format!("its `status` is {value}, not a number from 200 to 999"))?,
    };
    let mut headers = HeaderMap::new();
    match &reply["headers"] {
        Value::Null => {}
        Value::Object(fields) => {
            for (name, value) in fields {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("its header name {name:?} is not a valid one"))?;
                if FRAMING.contains(&name.as_str()) {
                    continue;
                }
                let values = match value {
                    Value::Array(values) => values.iter().collect(),
                    value => vec![value],
                };
                for value in values {
                    let text = match value {
                        Value::String(text) => text.clone(),
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
        other => return Err(format!("its `headers` is {other}, not an object")),
    }
    let body = match (&reply["body"], &reply["body_base64"]) {
        (Value::Null, Value::Null) => Vec::new(),
        (Value::String(text), Value::Null) => {
            default_type(&mut headers, "text/plain; charset=utf-8");
            text.clone().into_bytes()
        }
        (Value::Null, Value::String(encoded)) => {
            default_type(&mut headers, "application/octet-stream");
            BASE64
                .decode(encoded)
                .map_err(|e| format!("its `body_base64` is not base64 ({e})"))?
        }
        (Value::Null, other) => {
            return Err(format!("its `body_base64` is {other}, not a string"));
        }
        (value, Value::Null) => {
            // A JSON API's answer written as JSON rather than as text.
            default_type(&mut headers, "application/json");
            value.to_string().into_bytes()
        }
        _ => return Err("it has both `body` and `body_base64`; send one".into()),
    };
    let stream = match &reply["stream"] {
        Value::Null | Value::Bool(false) => false,
        Value::Bool(true) => true,
        other => return Err(format!("its `stream` is {other}, not true or false")),
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
            Request {
                method: "POST",
                path: "/p",
                query: Some("q=1"),
                headers: &h,
                remote: "1.2.3.4:5".into(),
                body: b"hi",
                pass,
            }
            .to_body()
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
        let body = Request {
            method: "PUT",
            path: "/",
            query: None,
            headers: &h,
            remote: String::new(),
            body: &[0xff, 0, 1],
            pass: &[],
        }
        .to_body();
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
