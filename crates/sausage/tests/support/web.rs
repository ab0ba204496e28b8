//! A world run with its web console on a free port, and a logged-in client of its API.

use std::time::Duration;

use serde_json::Value;

use super::http::{self, EventStream, Response};
use super::{Host, TestWorld, eventually};

/// A running host with its web console, and the login link it printed.
pub struct WebHost {
    pub host: Host,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub login_link: String,
}

impl WebHost {
    pub fn start(world: &TestWorld) -> WebHost {
        WebHost::start_at(world, "127.0.0.1:0")
    }

    /// A host serving its console at `addr` (`127.0.0.1:PORT`; port 0 for any).
    pub fn start_at(world: &TestWorld, addr: &str) -> WebHost {
        WebHost::start_with(world, &["--web", addr])
    }

    /// A host run with `args` (which serve the web console somewhere).
    pub fn start_with(world: &TestWorld, args: &[&str]) -> WebHost {
        let host = Host::start_with(&world.root, args, &[]);
        let mut link = String::new();
        eventually("the login link", || {
            link = host
                .stderr()
                .lines()
                .find_map(|l| l.strip_prefix("sausage: web console: "))
                .unwrap_or_default()
                .to_string();
            !link.is_empty()
        });
        let addr = link
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .expect("http://ADDR/login?token=…")
            .to_string();
        WebHost {
            host,
            addr,
            login_link: link,
        }
    }

    /// The path and query of the login link.
    pub fn login_path(&self) -> String {
        self.login_link
            .split_once(&self.addr)
            .map(|(_, path)| path.to_string())
            .unwrap()
    }

    /// Adds person `id` of `tier` to `world` (`sausage people add`) and returns a client logged
    /// in with the link it printed.
    pub fn add_person(&self, world: &TestWorld, id: &str, tier: &str) -> Client {
        let dir = world.path("");
        let out = super::sausage(&["people", "add", id, "--tier", tier, dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", super::text(&out.stderr));
        self.log_in_with(&super::text(&out.stdout))
    }

    /// Logs in with the printed link and returns a client with the session.
    pub fn log_in(&self) -> Client {
        self.log_in_with(&self.login_link.clone())
    }

    /// Logs in with the first login link in `printed` (what `sausage people add` printed, or
    /// a link alone) and returns a client with that person's session.
    pub fn log_in_with(&self, printed: &str) -> Client {
        let link = printed
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("a login link");
        let path = link.split_once(&self.addr).expect("a link to this host").1;
        let response = http::request(&self.addr, "GET", path, &[], b"");
        assert_eq!(response.status, 303, "{}", response.text());
        let cookie = response
            .header("set-cookie")
            .expect("a session cookie")
            .split(';')
            .next()
            .unwrap()
            .to_string();
        Client {
            addr: self.addr.clone(),
            cookie,
        }
    }
}

/// A logged-in client: its requests carry the session cookie, and changes the page's Origin.
#[derive(Clone)]
pub struct Client {
    pub addr: String,
    /// `sausage_session=…`.
    pub cookie: String,
}

impl Client {
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn get(&self, path: &str) -> Response {
        http::request(&self.addr, "GET", path, &[("Cookie", &self.cookie)], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        let origin = self.origin();
        http::request(
            &self.addr,
            "POST",
            path,
            &[
                ("Cookie", &self.cookie),
                ("Origin", &origin),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    }

    pub fn events(&self, last_id: Option<&str>) -> EventStream {
        let mut headers = vec![("Cookie", self.cookie.as_str())];
        if let Some(id) = last_id {
            headers.push(("Last-Event-ID", id));
        }
        let stream = EventStream::open(&self.addr, "/api/events", &headers);
        assert_eq!(stream.status, 200);
        stream
    }

    /// Polls `path` until `check` holds for its JSON.
    pub fn until(&self, path: &str, what: &str, mut check: impl FnMut(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        eventually(what, || {
            last = self.get(path).json();
            check(&last)
        });
        last
    }
}

/// A free address on the loopback, for a host that must come back on the same port.
pub fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// How long a test waits for an event.
pub const EVENT_PATIENCE: Duration = Duration::from_secs(30);
