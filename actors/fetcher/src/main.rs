//! `fetcher` makes outgoing HTTP requests through `wasi:http/outgoing-handler`; the host does the
//! connection and TLS. `{"type":"get","url":U}`, with optional `"method"` (default `GET`),
//! `"headers"` (`{name: value}`) and `"body"` (a string) →
//! `{"type":"response","status":N,"body":..,"headers":{..}}`: the body as lossy UTF-8, cut at
//! 64 KiB; header names lowercased, repeated ones joined with `", "`. On any failure →
//! `{"type":"http_error","error":..}`, the `wasi:http` error code's debug text or a reason.
//! Other types get a `proto::reply_error`. Exits 0 on `{"type":"shutdown"}` or at EOF.

use serde_json::{Map, Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// The most body bytes a reply carries; the rest of the response is not read.
const MAX_BODY: usize = 64 * 1024;

fn main() {
    for msg in proto::messages() {
        match msg.kind() {
            "get" => match fetch(&msg.body) {
                Ok(body) => proto::reply(&msg, body),
                Err(error) => proto::reply(&msg, json!({"type": "http_error", "error": error})),
            },
            other => proto::reply_error(
                &msg,
                &format!("unknown type {other:?}; known: get, shutdown"),
            ),
        }
    }
}

/// Performs the request `req` describes and returns the `response` body to reply with.
fn fetch(req: &Value) -> Result<Value, String> {
    let url = req["url"].as_str().ok_or("missing string \"url\"")?;
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not an absolute URL: {url}"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    let method = match req["method"]
        .as_str()
        .unwrap_or("GET")
        .to_ascii_uppercase()
        .as_str()
    {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_string()),
    };

    let headers = Fields::new();
    if let Some(map) = req["headers"].as_object() {
        for (name, value) in map {
            let value = value
                .as_str()
                .ok_or_else(|| format!("header {name}: not a string"))?;
            headers
                .append(name, value.as_bytes())
                .map_err(|e| format!("header {name}: {e:?}"))?;
        }
    }
    let request = OutgoingRequest::new(headers);
    request.set_method(&method).map_err(|()| "invalid method")?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "invalid scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "invalid authority")?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| "invalid path")?;

    let outgoing_body = request.body().map_err(|()| "request body already taken")?;
    let future = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    {
        let stream = outgoing_body
            .write()
            .map_err(|()| "request body stream already taken")?;
        let bytes = req["body"].as_str().unwrap_or("").as_bytes();
        // blocking-write-and-flush takes at most 4096 bytes a call.
        for chunk in bytes.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the request body: {e:?}"))?;
        }
    } // The stream must be dropped before its body is finished.
    OutgoingBody::finish(outgoing_body, None).map_err(|e| format!("{e:?}"))?;

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(format!("{e:?}")),
        Some(Err(())) => return Err("response already taken".into()),
        None => return Err("response not ready after the pollable fired".into()),
    };

    let mut reply_headers = Map::new();
    for (name, value) in response.headers().entries() {
        let value = String::from_utf8_lossy(&value).into_owned();
        match reply_headers.entry(name.to_ascii_lowercase()) {
            serde_json::map::Entry::Vacant(e) => {
                e.insert(Value::String(value));
            }
            serde_json::map::Entry::Occupied(mut e) => {
                let joined = format!("{}, {value}", e.get().as_str().unwrap_or(""));
                e.insert(Value::String(joined));
            }
        }
    }

    let incoming_body = response
        .consume()
        .map_err(|()| "response body already taken")?;
    let mut body = Vec::new();
    {
        let stream = incoming_body
            .stream()
            .map_err(|()| "response body stream already taken")?;
        while body.len() < MAX_BODY {
            match stream.blocking_read((MAX_BODY - body.len()) as u64) {
                Ok(bytes) => body.extend_from_slice(&bytes),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!(
                        "reading the response body: {}",
                        e.to_debug_string()
                    ));
                }
            }
        }
    } // The stream must be dropped before its body.

    Ok(json!({
        "type": "response",
        "status": response.status(),
        "body": String::from_utf8_lossy(&body),
        "headers": reply_headers,
    }))
}
