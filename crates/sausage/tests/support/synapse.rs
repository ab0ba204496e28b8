//! A real Matrix homeserver for tests: Synapse (`scripts/install-synapse` puts it in
//! `target/synapse-venv`), on SQLite in a fresh temporary folder, on 127.0.0.1 and a free port,
//! without federation. Users are registered through the shared-secret admin API; rooms,
//! invites, messages, typing and reads go through the client-server API as [`User`] calls.
//!
//! Boundary: [`Synapse::shared`] (one per test binary, ended with it) or [`Synapse::start`] (one
//! of a test's own, ended on drop) in; users, rooms and the homeserver's answers out. Users are
//! exempt from rate limits unless registered with [`Synapse::register_limited`], which is how a
//! test meets a 429.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{self, Response};
use super::repo;

/// Synapse on SQLite starts in 2 to 5 s on this project's machines; a loaded one may take more.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// The shared secret of the admin registration API (a test homeserver's, not a secret).
const SHARED_SECRET: &str = "sausage-test-registration";

/// The `server_name`: user ids are `@name:sausage.test`.
pub const SERVER_NAME: &str = "sausage.test";

/// How fast a rate-limited user may send events (`rc_message`; a join counts too): past
/// `burst_count` in a quick row, each is refused with 429 `M_LIMIT_EXCEEDED` and its
/// `retry_after_ms` until `per_second` lets one more through.
#[derive(Clone, Copy, Debug)]
pub struct MessageLimit {
    pub per_second: f64,
    pub burst_count: u32,
}

impl Default for MessageLimit {
    fn default() -> MessageLimit {
        MessageLimit {
            per_second: 0.2,
            burst_count: 3,
        }
    }
}

/// A running Synapse; dropping it kills it and waits for it.
pub struct Synapse {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: Folder,
    pid: i32,
    /// The thread that spawned Synapse and waits on it: the child's death signal is tied to the
    /// thread that spawned it, so that thread lives as long as Synapse does, and Synapse dies
    /// with the test binary even when a shared one is never dropped.
    keeper: Option<std::thread::JoinHandle<()>>,
    /// An admin of the homeserver, to lift rate limits off the users tests register.
    admin: User,
}

/// Where a Synapse keeps its configuration, database and logs.
enum Folder {
    /// Removed when the Synapse is dropped.
    Temporary(tempfile::TempDir),
    /// Left for the next run to empty (the shared one, which is never dropped).
    Kept(PathBuf),
}

impl Folder {
    fn path(&self) -> &Path {
        match self {
            Folder::Temporary(dir) => dir.path(),
            Folder::Kept(dir) => dir,
        }
    }
}

/// The python of the virtualenv that `scripts/install-synapse` makes (installing it at first use).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new(repo().join("scripts/install-synapse"))
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/install-synapse runs");
        assert!(
            output.status.success(),
            "scripts/install-synapse failed: the Matrix tests need Synapse"
        );
        let path = String::from_utf8(output.stdout).unwrap();
        PathBuf::from(
            path.lines()
                .last()
                .expect("the script prints the python")
                .trim(),
        )
    })
}

impl Synapse {
    /// The one Synapse of this test binary, started at first use (default message limit).
    /// It is never dropped, so its folder is `target/synapse-tests/<test binary>`, emptied at
    /// the next run's start rather than left in the system's temporary folder.
    pub fn shared() -> &'static Synapse {
        static SHARED: OnceLock<Synapse> = OnceLock::new();
        SHARED.get_or_init(|| {
            let exe = std::env::current_exe().expect("the test binary has a path");
            let name = exe.file_name().unwrap().to_string_lossy().into_owned();
            let dir = repo().join("target/synapse-tests").join(name);
            let _ = std::fs::remove_dir_all(&dir); // The previous run's, if any.
            std::fs::create_dir_all(&dir).unwrap();
            Synapse::start_in(Folder::Kept(dir), MessageLimit::default())
        })
    }

    /// A Synapse of its own, with the default message limit.
    pub fn start() -> Synapse {
        Synapse::start_with(MessageLimit::default())
    }

    pub fn start_with(limit: MessageLimit) -> Synapse {
        Synapse::start_in(Folder::Temporary(tempfile::tempdir().unwrap()), limit)
    }

    fn start_in(dir: Folder, limit: MessageLimit) -> Synapse {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        write_config(dir.path(), port, limit);
        let (started, result) = std::sync::mpsc::channel();
        let (python, config, log) = (
            python().to_path_buf(),
            dir.path().join("homeserver.yaml"),
            dir.path().join("stdout.log"),
        );
        let keeper = std::thread::spawn(move || match spawn(&python, &config, &log) {
            Ok(mut child) => {
                started.send(Ok(child.id() as i32)).unwrap();
                let _ = child.wait();
            }
            Err(e) => started.send(Err(e)).unwrap(),
        });
        let pid = result
            .recv()
            .unwrap()
            .unwrap_or_else(|e| panic!("synapse cannot start: {e}"));
        let addr = format!("127.0.0.1:{port}");
        let mut synapse = Synapse {
            admin: User {
                addr: addr.clone(),
                id: String::new(),
                token: String::new(),
            },
            addr,
            dir,
            pid,
            keeper: Some(keeper),
        };
        synapse.wait_ready();
        synapse.admin = synapse.register_as("harness-admin", true);
        synapse
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let up = http::try_request(&self.addr, "GET", "/_matrix/client/versions", &[], b"")
                .is_ok_and(|r| r.status == 200);
            if up {
                return;
            }
            let gone = self.keeper.as_ref().is_none_or(|k| k.is_finished());
            if gone || Instant::now() > deadline {
                panic!(
                    "synapse did not answer /_matrix/client/versions ({}); its log:\n{}",
                    if gone { "it exited" } else { "timed out" },
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `http://127.0.0.1:PORT`, the homeserver's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What Synapse wrote (its stdout and stderr, and its log file), for a failing test.
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "{}{}",
            read("stdout.log").unwrap_or_default(),
            read("homeserver.log").unwrap_or_default()
        )
    }

    /// A new user (a unique name made from `name`), exempt from rate limits.
    pub fn register(&self, name: &str) -> User {
        let user = self.register_as(&unique(name), false);
        let path = format!(
            "/_synapse/admin/v1/users/{}/override_ratelimit",
            encode(&user.id)
        );
        let body = json!({"messages_per_second": 0, "burst_count": 0});
        self.admin.expect_ok("POST", &path, &body);
        user
    }

    /// A new user under the homeserver's message limit.
    pub fn register_limited(&self, name: &str) -> User {
        self.register_as(&unique(name), false)
    }

    /// Registers through `/_synapse/admin/v1/register`: a nonce, then the HMAC-SHA1 of
    /// `nonce\0user\0password\0admin|notadmin` under the shared secret.
    fn register_as(&self, name: &str, admin: bool) -> User {
        let path = "/_synapse/admin/v1/register";
        let nonce = http::request(&self.addr, "GET", path, &[], b"").json()["nonce"]
            .as_str()
            .expect("a nonce")
            .to_string();
        let password = format!("{name}-password");
        let kind = if admin { "admin" } else { "notadmin" };
        let message = format!("{nonce}\0{name}\0{password}\0{kind}");
        let mac = hex(&hmac_sha1(SHARED_SECRET.as_bytes(), message.as_bytes()));
        let body = json!({"nonce": nonce, "username": name, "password": password,
                          "admin": admin, "mac": mac});
        let response = post_json(&self.addr, path, &[], &body);
        assert_eq!(response.status, 200, "register {name}: {}", response.text());
        let answer = response.json();
        User {
            addr: self.addr.clone(),
            id: answer["user_id"].as_str().unwrap().to_string(),
            token: answer["access_token"].as_str().unwrap().to_string(),
        }
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        // SAFETY: kill(2) touches no memory; the pid is our child's, not yet reaped while the
        // keeper waits on it, so it cannot name another process.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

fn spawn(python: &Path, config: &Path, log: &Path) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log)?;
    let mut command = Command::new(python);
    command
        .args(["-m", "synapse.app.homeserver", "-c"])
        .arg(config)
        .current_dir(config.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent; it only asks
    // the kernel to kill the child when its parent thread ends.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// `homeserver.yaml`, its log configuration and a signing key in `dir`: SQLite, one client
/// listener, no federation or key servers, no presence; joins, invites, logins and
/// registrations unlimited; messages limited as `limit` says.
fn write_config(dir: &Path, port: u16, limit: MessageLimit) {
    let path = |name: &str| dir.join(name).display().to_string();
    let unlimited = "{per_second: 10000, burst_count: 10000}";
    let config = format!(
        r#"server_name: "{SERVER_NAME}"
pid_file: "{pid}"
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{db}"
log_config: "{log_config}"
media_store_path: "{media}"
signing_key_path: "{key}"
registration_shared_secret: "{SHARED_SECRET}"
enable_registration: false
report_stats: false
macaroon_secret_key: "sausage-test-macaroon"
form_secret: "sausage-test-form"
trusted_key_servers: []
federation_domain_whitelist: []
suppress_key_server_warning: true
enable_metrics: false
url_preview_enabled: false
presence:
  enabled: false
rc_message:
  per_second: {per_second}
  burst_count: {burst}
rc_login:
  address: {unlimited}
  account: {unlimited}
  failed_attempts: {unlimited}
rc_registration: {unlimited}
rc_joins:
  local: {unlimited}
  remote: {unlimited}
rc_invites:
  per_room: {unlimited}
  per_user: {unlimited}
  per_issuer: {unlimited}
rc_admin_redaction: {unlimited}
"#,
        pid = path("homeserver.pid"),
        db = path("homeserver.db"),
        log_config = path("log.yaml"),
        media = path("media"),
        key = path("signing.key"),
        per_second = limit.per_second,
        burst = limit.burst_count,
    );
    std::fs::write(dir.join("homeserver.yaml"), config).unwrap();
    let log = format!(
        r#"version: 1
formatters:
  precise:
    format: '%(asctime)s - %(name)s - %(levelname)s - %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: precise
    filename: "{}"
root:
  level: WARNING
  handlers: [file]
disable_existing_loggers: false
"#,
        path("homeserver.log")
    );
    std::fs::write(dir.join("log.yaml"), log).unwrap();
    // An ed25519 signing key is any 32 random bytes (as Synapse writes it: algorithm, key id,
    // unpadded base64), so Synapse need not be started once more just to make one.
    let mut seed = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .unwrap();
    std::fs::write(
        dir.join("signing.key"),
        format!("ed25519 a_test {}\n", base64_unpadded(&seed)),
    )
    .unwrap();
}

/// A user's name made unique within the homeserver (Synapse keeps every name ever used).
fn unique(name: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{name}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A registered user and its access token; every method is one client-server API call.
#[derive(Clone, Debug)]
pub struct User {
    addr: String,
    /// `@name:sausage.test`.
    pub id: String,
    pub token: String,
}

/// What creating a room makes.
pub enum RoomKind<'a> {
    /// A direct chat with one user (`is_direct`, private chat preset), who is invited.
    Direct(&'a User),
    /// A group room with these users invited.
    Group(&'a [&'a User]),
}

impl User {
    /// One call with this user's token and a JSON body (or none).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let auth = format!("Bearer {}", self.token);
        let mut headers = vec![("Authorization", auth.as_str())];
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        http::request(&self.addr, method, path, &headers, &bytes)
    }

    /// A call that must succeed; its JSON answer.
    pub fn expect_ok(&self, method: &str, path: &str, body: &Value) -> Value {
        let response = self.call(method, path, Some(body));
        assert_eq!(
            response.status,
            200,
            "{method} {path} as {}: {}",
            self.id,
            response.text()
        );
        response.json()
    }

    fn get(&self, path: &str) -> Value {
        let response = self.call("GET", path, None);
        assert_eq!(response.status, 200, "GET {path}: {}", response.text());
        response.json()
    }

    /// Creates a room and returns its id.
    pub fn create_room(&self, kind: RoomKind) -> String {
        let body = match kind {
            RoomKind::Direct(with) => json!({
                "preset": "trusted_private_chat", "is_direct": true, "invite": [with.id],
            }),
            RoomKind::Group(users) => json!({
                "preset": "private_chat", "name": "a group",
                "invite": users.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(),
            }),
        };
        let answer = self.expect_ok("POST", "/_matrix/client/v3/createRoom", &body);
        answer["room_id"].as_str().unwrap().to_string()
    }

    pub fn invite(&self, room: &str, user: &str) {
        let path = format!("/_matrix/client/v3/rooms/{}/invite", encode(room));
        self.expect_ok("POST", &path, &json!({"user_id": user}));
    }

    pub fn join(&self, room: &str) {
        let path = format!("/_matrix/client/v3/join/{}", encode(room));
        self.expect_ok("POST", &path, &json!({}));
    }

    /// Sends a text with a transaction id of its own; the raw answer (a 429 is a test's to see).
    pub fn try_send_text(&self, room: &str, text: &str) -> Response {
        static TXN: AtomicUsize = AtomicUsize::new(0);
        let txn = format!("t{}", TXN.fetch_add(1, Ordering::Relaxed));
        self.send_with_txn(room, &txn, &json!({"msgtype": "m.text", "body": text}))
    }

    /// `PUT /rooms/{room}/send/m.room.message/{txn}` with `content`.
    pub fn send_with_txn(&self, room: &str, txn: &str, content: &Value) -> Response {
        let path = format!(
            "/_matrix/client/v3/rooms/{}/send/m.room.message/{}",
            encode(room),
            encode(txn)
        );
        self.call("PUT", &path, Some(content))
    }

    /// Sends a text and returns its event id.
    pub fn send_text(&self, room: &str, text: &str) -> String {
        let response = self.try_send_text(room, text);
        assert_eq!(
            response.status,
            200,
            "send as {}: {}",
            self.id,
            response.text()
        );
        response.json()["event_id"].as_str().unwrap().to_string()
    }

    /// The room's `m.room.message` events, oldest first (`/messages`, at most 100).
    pub fn messages(&self, room: &str) -> Vec<Value> {
        let filter = encode(r#"{"types":["m.room.message"]}"#);
        let path = format!(
            "/_matrix/client/v3/rooms/{}/messages?dir=f&limit=100&filter={filter}",
            encode(room)
        );
        self.get(&path)["chunk"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The room's members (joined), by user id.
    pub fn joined_members(&self, room: &str) -> Vec<String> {
        let path = format!("/_matrix/client/v3/rooms/{}/joined_members", encode(room));
        let answer = self.get(&path);
        answer["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn set_typing(&self, room: &str, typing: bool) {
        let path = format!(
            "/_matrix/client/v3/rooms/{}/typing/{}",
            encode(room),
            encode(&self.id)
        );
        self.expect_ok("PUT", &path, &json!({"typing": typing, "timeout": 30000}));
    }

    /// One `/sync` (from `since`, waiting at most `timeout_ms`).
    pub fn sync(&self, since: Option<&str>, timeout_ms: u64) -> Value {
        let mut path = format!("/_matrix/client/v3/sync?timeout={timeout_ms}");
        if let Some(since) = since {
            path.push_str(&format!("&since={}", encode(since)));
        }
        self.get(&path)
    }

    /// Waits until `check` holds for the room's messages, or fails after `patience`.
    pub fn wait_for_messages(
        &self,
        room: &str,
        patience: Duration,
        what: &str,
        check: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + patience;
        loop {
            let messages = self.messages(room);
            if check(&messages) {
                return messages;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} in {room}; the messages: {messages:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn post_json(addr: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    http::request(addr, "POST", path, &all, body.to_string().as_bytes())
}

/// Percent-encodes all but the unreserved characters (room ids, user ids, tokens).
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn base64_unpadded(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// HMAC-SHA1 (RFC 2104), which the admin registration API asks for.
pub fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..20].copy_from_slice(&sha1(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let mut inner = pad(0x36);
    inner.extend_from_slice(message);
    let mut outer = pad(0x5c);
    outer.extend_from_slice(&sha1(&inner));
    sha1(&outer)
}

/// SHA-1 (FIPS 180-4), only for the HMAC above: the test crate has no SHA-1 dependency.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, &word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(word);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (h, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *h = h.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (i, word) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}
