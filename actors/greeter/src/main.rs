//! `greeter` is a standard `wasi:http/proxy` component made with `wstd`'s `#[http_server]`,
//! knowing nothing of Sausage (DESIGN §24): what the host must serve unchanged.
//! - `/`: 200 `Hello from a wasi:http component`, the answer `cargo bench --bench http` loads
//!   beside `wasmtime serve`.
//! - `/echo`: 200 with `method path-and-query`, then each request header `name: value` on its
//!   own line, then an empty line and the body.
//! - `/status/N`: status N with an `x-status` header.
//! - `/hits`: how many requests this instance has answered, this one included (an instance kept
//!   for the next request counts on).
//! - `/count` (POST): adds 1 to `/data/count` (a mount), answers the count.
//! - `/stream?n=N`: N lines `line i`, 20 ms apart.
//! - `/fetch?url=U`: GETs U (the allow-list decides), answers its status or the error.
//! - `/version`: `version N`, N its `SAUSAGE_VERSION` environment variable.
//! - `/crash`: panics. `/fail`: the handler returns an error.
//! - anything else: 404.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_lite::stream::unfold;
use wstd::http::body::{Body, Bytes};
use wstd::http::{Client, Error, Request, Response, StatusCode};
use wstd::time::Duration;

static HITS: AtomicU64 = AtomicU64::new(0);

#[wstd::http_server]
async fn main(request: Request<Body>) -> Result<Response<Body>, Error> {
    let hits = HITS.fetch_add(1, Ordering::Relaxed) + 1;
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let number = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.parse::<u64>().ok())
    };
    match path.as_str() {
        "/" => Ok(Response::new("Hello from a wasi:http component\n".into())),
        "/echo" => echo(request).await,
        "/hits" => Ok(Response::new(hits.to_string().into())),
        p if p.starts_with("/status/") => {
            let status = p["/status/".len()..].parse::<u16>().unwrap_or(500);
            Ok(Response::builder()
                .status(status)
                .header("x-status", status.to_string())
                .body(format!("status {status}").into())?)
        }
        "/count" => {
            let n = std::fs::read_to_string("/data/count")
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            std::fs::write("/data/count", n.to_string())?;
            Ok(Response::new(n.to_string().into()))
        }
        "/stream" => {
            let n = number("n").unwrap_or(3);
            let lines = unfold(0, move |i| async move {
                if i == n {
                    return None;
                }
                wstd::task::sleep(Duration::from_millis(20)).await;
                Some((
                    Ok::<_, Infallible>(Bytes::from(format!("line {i}\n"))),
                    i + 1,
                ))
            });
            Ok(Response::new(Body::from_try_stream(lines)))
        }
        "/fetch" => {
            let url = query.strip_prefix("url=").unwrap_or("").to_string();
            let outgoing = Request::get(url.as_str()).body(Body::empty())?;
            let answer = match Client::new().send(outgoing).await {
                Ok(response) => format!("fetched {}", response.status().as_u16()),
                Err(e) => format!("cannot fetch {url}: {e}"),
            };
            Ok(Response::new(answer.into()))
        }
        "/version" => {
            let version = std::env::var("SAUSAGE_VERSION").unwrap_or_default();
            Ok(Response::new(format!("version {version}").into()))
        }
        "/crash" => panic!("asked to crash"),
        "/fail" => Err(Error::msg("asked to fail")),
        _ => Ok(Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())?),
    }
}

async fn echo(request: Request<Body>) -> Result<Response<Body>, Error> {
    let (parts, mut body) = request.into_parts();
    let mut text = format!(
        "{} {}\n",
        parts.method,
        parts.uri.path_and_query().map_or("", |p| p.as_str())
    );
    for (name, value) in &parts.headers {
        text.push_str(&format!("{}: {}\n", name, value.to_str().unwrap_or("?")));
    }
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(body.contents().await?));
    Ok(Response::new(text.into()))
}
