//! A real browser for the web console's tests: headless Debian `chromium` driven over WebDriver
//! (JSON over HTTP, through `http.rs`) by one `chromedriver` per test binary.
//!
//! Boundary: CSS selectors and keys in, texts, script results and screenshots out. One browser
//! session per test (tests run in parallel threads); every wait polls with a deadline. Dropping
//! a `Browser` saves a screenshot to `target/browser/<test name>.png` (on failure too) and ends
//! its session; chromedriver itself ends with the test process.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{self, Response};
use super::web::Client;
use super::{PATIENCE, repo};

/// The switches every session's chromium gets: no display, no sandbox (CI containers have no
/// user namespaces for it), `/tmp` instead of a small `/dev/shm`, a laptop's window.
const CHROMIUM_ARGS: [&str; 4] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];
/// How often a wait asks the page again.
const POLL: Duration = Duration::from_millis(50);
/// WebDriver's key for an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// WebDriver's codes for the keys tests press (`send_keys` text may hold them).
pub const ENTER: &str = "\u{E007}";
/// Shift stays down until [`RELEASE`].
pub const SHIFT: &str = "\u{E008}";
pub const RELEASE: &str = "\u{E000}";

/// `127.0.0.1:PORT` of the one chromedriver of this test binary, started at first use.
fn chromedriver() -> &'static str {
    static DRIVER: OnceLock<String> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let (started, result) = std::sync::mpsc::channel();
        // The child's death signal is tied to the thread that spawned it, so that thread lives
        // as long as chromedriver does, waiting on it: chromedriver ends when the test binary
        // does.
        std::thread::spawn(move || match spawn_chromedriver(port) {
            Ok(mut child) => {
                started.send(Ok(())).unwrap();
                let _ = child.wait();
            }
            Err(e) => started.send(Err(e)).unwrap(),
        });
        result.recv().unwrap().unwrap_or_else(|e| {
            panic!("chromedriver cannot start ({e}); run scripts/install-chromium")
        });
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        while !http::try_request(&addr, "GET", "/status", &[], b"")
            .is_ok_and(|r| r.json()["value"]["ready"] == true)
        {
            assert!(Instant::now() < deadline, "chromedriver did not get ready");
            std::thread::sleep(POLL);
        }
        addr
    })
}

fn spawn_chromedriver(port: u16) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new("chromedriver");
    command
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent; it only asks
    // the kernel to send SIGTERM to the child when its parent thread ends.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// One browser session, named after the test that opened it.
pub struct Browser {
    driver: &'static str,
    session: String,
    name: String,
}

impl Browser {
    /// A headless chromium with a laptop's window.
    pub fn open() -> Browser {
        let driver = chromedriver();
        let mut options = json!({ "args": CHROMIUM_ARGS });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options,
        }}});
        let created = post(driver, "/session", &capabilities)
            .unwrap_or_else(|e| panic!("chromium cannot start: {e}"));
        let name = std::thread::current()
            .name()
            .unwrap_or("browser")
            .rsplit("::")
            .next()
            .unwrap()
            .to_string();
        Browser {
            driver,
            session: created["sessionId"].as_str().unwrap().to_string(),
            name,
        }
    }

    /// A headless chromium whose window is `width` × `height` CSS pixels.
    pub fn open_sized(width: u32, height: u32) -> Browser {
        let browser = Browser::open();
        browser.call(
            "POST",
            "window/rect",
            json!({"width": width, "height": height}),
        );
        browser
    }

    fn path(&self, command: &str) -> String {
        format!("/session/{}/{command}", self.session)
    }

    /// A WebDriver command of this session; its `value`, or the test fails with its error.
    fn call(&self, method: &str, command: &str, body: Value) -> Value {
        self.try_call(method, command, body)
            .unwrap_or_else(|e| panic!("webdriver {command}: {e}"))
    }

    fn try_call(&self, method: &str, command: &str, body: Value) -> Result<Value, String> {
        let path = self.path(command);
        let response = if method == "GET" {
            http::try_request(self.driver, "GET", &path, &[], b"")
        } else {
            request(self.driver, method, &path, &body)
        };
        value(response)
    }

    /// Opens `url` and waits for its page to load.
    pub fn goto(&self, url: &str) {
        self.call("POST", "url", json!({ "url": url }));
    }

    /// Loads the page again.
    pub fn reload(&self) {
        self.call("POST", "refresh", json!({}));
    }

    /// Logs in with a printed login link; the page it lands on holds no token.
    pub fn log_in(&self, link: &str) {
        self.goto(link);
        self.wait_until(
            "the console's page after the login link",
            "return location.pathname === '/' && !location.search && !!document.querySelector('#chat-input')",
        );
    }

    /// The page's address.
    pub fn url(&self) -> String {
        self.call("GET", "url", Value::Null)
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its result.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Polls `script` until it returns something truthy, and returns that.
    pub fn wait_until(&self, what: &str, script: &str) -> Value {
        self.wait_until_with(what, script, json!([]))
    }

    pub fn wait_until_with(&self, what: &str, script: &str, args: Value) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = self.try_call(
                "POST",
                "execute/sync",
                json!({"script": script, "args": args}),
            );
            let last = match got {
                Ok(Value::Null | Value::Bool(false)) => String::new(),
                Ok(Value::String(s)) if s.is_empty() => String::new(),
                Ok(value) => return value,
                Err(e) => e,
            };
            if Instant::now() > deadline {
                let page = self.eval("return document.body.innerText.slice(0, 3000)", json!([]));
                panic!(
                    "timed out waiting for {what} {last}; the page at {} shows:\n{}",
                    self.url(),
                    page.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The text of the first element matching `css`, if there is one.
    pub fn text(&self, css: &str) -> Option<String> {
        let script = "const e = document.querySelector(arguments[0]); return e && e.textContent;";
        self.eval(script, json!([css])).as_str().map(str::to_string)
    }

    /// Waits until the first element matching `css` is shown and its text contains `needle`;
    /// returns that text.
    pub fn wait_text(&self, css: &str, needle: &str) -> String {
        let script = "const e = document.querySelector(arguments[0]); \
            return e && e.getClientRects().length > 0 && e.textContent.includes(arguments[1]) \
            && e.textContent;";
        self.wait_until_with(
            &format!("`{needle}` in `{css}`"),
            script,
            json!([css, needle]),
        )
        .as_str()
        .unwrap()
        .to_string()
    }

    /// Waits until an element matches `css` and is shown.
    pub fn wait_shown(&self, css: &str) {
        let script = "const e = document.querySelector(arguments[0]); \
            return !!e && e.getClientRects().length > 0;";
        self.wait_until_with(&format!("`{css}` shown"), script, json!([css]));
    }

    /// Whether an element matches `css` and is shown, now.
    pub fn is_shown(&self, css: &str) -> bool {
        let script = "const e = document.querySelector(arguments[0]); \
            return !!e && e.getClientRects().length > 0;";
        self.eval(script, json!([css])) == true
    }

    /// The reference of the first element matching `css` (waiting for one).
    fn element(&self, css: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.try_call(
                "POST",
                "element",
                json!({"using": "css selector", "value": css}),
            );
            if let Ok(found) = found {
                return found[ELEMENT].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "no element matches `{css}`");
            std::thread::sleep(POLL);
        }
    }

    /// Clicks the first element matching `css` as a person would (it must be shown and not
    /// covered), retrying while it is not yet clickable.
    pub fn click(&self, css: &str) {
        self.act_on(css, "click", json!({}));
    }

    /// Types `text` (which may hold [`ENTER`], [`SHIFT`], …) into the element matching `css`.
    pub fn type_into(&self, css: &str, text: &str) {
        self.act_on(css, "value", json!({ "text": text }));
    }

    fn act_on(&self, css: &str, action: &str, body: Value) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let element = self.element(css);
            match self.try_call("POST", &format!("element/{element}/{action}"), body.clone()) {
                Ok(_) => return,
                Err(e) => assert!(Instant::now() < deadline, "{action} on `{css}`: {e}"),
            }
            std::thread::sleep(POLL);
        }
    }

    /// A client of the API with this browser's session (its HttpOnly cookie, which WebDriver
    /// can read), for what a test does besides the page.
    pub fn client(&self, addr: &str) -> Client {
        let cookie = self.call("GET", "cookie/sausage_session", Value::Null);
        Client {
            addr: addr.to_string(),
            cookie: format!("sausage_session={}", cookie["value"].as_str().unwrap()),
        }
    }

    /// Saves what the window shows to `target/browser/<name>.png`.
    pub fn screenshot(&self, name: &str) -> Result<PathBuf, String> {
        let png = self.try_call("GET", "screenshot", Value::Null)?;
        let bytes = base64(png.as_str().unwrap_or_default()).ok_or("a screenshot not in base64")?;
        let dir = repo().join("target/browser");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
        Ok(path)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Nothing here may panic (a failing test is unwinding through it): a screenshot that
        // cannot be taken is reported, a session that cannot be ended goes with chromedriver.
        if let Err(e) = self.screenshot(&self.name.clone()) {
            eprintln!("{}: no screenshot: {e}", self.name);
        }
        let _ = request(
            self.driver,
            "DELETE",
            &format!("/session/{}", self.session),
            &json!({}),
        );
    }
}

fn request(driver: &str, method: &str, path: &str, body: &Value) -> std::io::Result<Response> {
    http::try_request(
        driver,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn post(driver: &str, path: &str, body: &Value) -> Result<Value, String> {
    value(request(driver, "POST", path, body))
}

/// A WebDriver answer's `value`, or its error in words.
fn value(response: std::io::Result<Response>) -> Result<Value, String> {
    let response = response.map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let value = body["value"].clone();
    if response.status == 200 {
        Ok(value)
    } else {
        Err(format!(
            "{} ({}): {}",
            value["error"].as_str().unwrap_or("error"),
            response.status,
            value["message"].as_str().unwrap_or_default()
        ))
    }
}

/// Decodes standard base64 (WebDriver's screenshots).
fn base64(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut count) = (0u32, 0);
    for c in text.bytes() {
        let six = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => return None,
        };
        bits = (bits << 6 | u32::from(six)) & 0xFFFF;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
        }
    }
    Some(bytes)
}
