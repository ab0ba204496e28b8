//! The public address (DESIGN §24) under load from outside: `cargo bench --bench http`.
//!
//! Whole processes, as a person would run them, side by side in one run on this machine: a
//! release `sausage run` with the `webapp` actor spawned, loaded by Debian's `wrk` (keep-alive,
//! `CONNECTIONS` connections, `THREADS` threads) on a JSON route and on a static 1 KB file, the
//! same file from an `nginx` this bench starts with its own configuration, an open-loop load at
//! a fixed rate for the latency a steady load sees, a standard `wasi:http` component (`greeter`)
//! beside the same file under `wasmtime serve` (the CLI of the same wasmtime), and the JSON
//! route again on a second host that holds 10,000 more routes. Prints one table with the
//! targets beside the figures. `DURATION=s` changes each load's length (10 s); `HOLD=1` sets up
//! the first host and keeps it serving until ended, for `perf` or a `wrk` of one's own;
//! `scripts/install-bench-tools` installs `wrk`, `nginx` and `wasmtime`.

mod common;
use common::{Host, build_actors, world};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// wrk's connections, and the open-loop load's: the issue's "16 connections".
const CONNECTIONS: usize = 16;
/// wrk's threads: one a core of this 2-core machine.
const THREADS: usize = 2;
/// The fixed rate of the open-loop load, requests a second over all connections.
const FIXED_RATE: u32 = 5_000;
/// The routes the second host holds besides the JSON route.
const MORE_ROUTES: usize = 10_000;
/// The static file's size.
const FILE_BYTES: usize = 1024;
/// How long a server has to start answering before the bench gives up.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// The JSON actor route: `webapp` answers `{"hello":"world"}` there.
const JSON_PATH: &str = "/api/hello";
/// What `greeter` answers at `/`.
const HELLO: &str = "Hello from a wasi:http component\n";
/// The static file, served by Sausage under `/site/*` and by nginx from its root.
const FILE_PATH: &str = "/site/1k.html";

/// One line of the table: what, the figure, the target, how it was measured.
struct Figure {
    what: String,
    value: String,
    target: String,
    how: String,
}

fn main() {
    let tools = Tools::find();
    let seconds: u64 = std::env::var("DURATION")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let load = Duration::from_secs(seconds);
    let actors = build_actors();
    let wasm = actors.join("webapp.wasm");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut figures = Vec::new();

    // The first host: the JSON route and the static folder, nothing else.
    let (_one_dir, one_world) = world(&actors, &[]);
    let mut one = Host::start(&one_world);
    let one_routes = json!([
        {"path": "/api/*", "rate": 0},
        {"path": "/site/*", "static": "/public/site", "rate": 0},
    ]);
    spawn_webapp(&mut one, &dir.path().join("one"), &wasm, one_routes);
    let one_addr = public_address(one_world.root());
    let file = "x".repeat(FILE_BYTES - 1) + "\n";
    one.tell(
        "shop",
        json!({"type": "write", "path": "/public/site/1k.html", "text": file}),
    );
    one.wait("shop", "written");
    check(&one_addr, JSON_PATH, r#"{"hello":"world"}"#);
    check(&one_addr, FILE_PATH, &file);
    if std::env::var_os("HOLD").is_some() {
        // For a profiler: the host stays up, loaded by whoever likes, until the bench is ended.
        eprintln!(
            "serving http://{one_addr}{JSON_PATH} and http://{one_addr}{FILE_PATH}; Ctrl-C ends"
        );
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }

    eprintln!("wrk on the JSON route, {seconds} s");
    let json_one = tools.wrk(&one_addr, JSON_PATH, load);
    figures.push(Figure {
        what: format!("JSON actor route (`GET {JSON_PATH}`), requests a second"),
        value: json_one.rate(),
        target: "≥ 30,000".into(),
        how: json_one.how(),
    });
    figures.push(Figure {
        what: "… its latency under wrk's full load, p50 / p99".into(),
        value: format!("{} / {}", json_one.p50, json_one.p99),
        target: "".into(),
        how: "wrk --latency".into(),
    });

    let fixed_rate = thousands(u64::from(FIXED_RATE));
    eprintln!("{fixed_rate} requests a second on the JSON route, {seconds} s");
    let fixed = open_loop(&one_addr, JSON_PATH, FIXED_RATE, load);
    figures.push(Figure {
        what: format!("JSON actor route at a fixed {fixed_rate} requests a second, p99"),
        value: fixed.summary(),
        target: "p99 ≤ 5 ms".into(),
        how: format!(
            "open loop in the bench: {CONNECTIONS} keep-alive connections, each sends on a \
             fixed schedule; latency from the scheduled send, so a late answer delays the \
             next and counts"
        ),
    });

    eprintln!("wrk on Sausage's static file, {seconds} s");
    let static_sausage = tools.wrk(&one_addr, FILE_PATH, load);
    eprintln!("wrk on nginx's static file, {seconds} s");
    let nginx = Nginx::start(&tools.nginx, &dir.path().join("nginx"), &file);
    check(&nginx.addr, FILE_PATH, &file);
    let static_nginx = tools.wrk(&nginx.addr, FILE_PATH, load);
    drop(nginx);
    figures.push(Figure {
        what: format!("static {FILE_BYTES}-byte file (`GET {FILE_PATH}`), Sausage"),
        value: static_sausage.rate(),
        target: "".into(),
        how: static_sausage.how(),
    });
    figures.push(Figure {
        what: "… the same file from nginx".into(),
        value: static_nginx.rate(),
        target: "".into(),
        how: format!(
            "{}; nginx {}, 2 workers, sendfile, access log off",
            static_nginx.how(),
            tools.nginx_version
        ),
    });
    figures.push(Figure {
        what: "… Sausage beside nginx".into(),
        value: format!(
            "{:.2}×",
            static_sausage.per_second / static_nginx.per_second
        ),
        target: "≥ 0.5×".into(),
        how: "".into(),
    });

    // A standard `wasi:http` component, `greeter` (made with `wstd`): on the first host at
    // `/*` (the other routes are longer prefixes), and alone under `wasmtime serve`.
    let greeter = actors.join("greeter.wasm");
    spawn_greeter(&mut one, &dir.path().join("greeter"), &greeter);
    check(&one_addr, "/", HELLO);
    eprintln!("wrk on Sausage's wasi:http component, {seconds} s");
    let component_sausage = tools.wrk(&one_addr, "/", load);
    eprintln!("wrk on `wasmtime serve` with the same component, {seconds} s");
    let serve = Serve::start(&tools.wasmtime, &greeter, &dir.path().join("serve"));
    check(&serve.addr, "/", HELLO);
    let component_serve = tools.wrk(&serve.addr, "/", load);
    drop(serve);
    figures.push(Figure {
        what: "`wasi:http` hello component (`wstd`), requests a second".into(),
        value: component_sausage.rate(),
        target: "".into(),
        how: component_sausage.how(),
    });
    figures.push(Figure {
        what: "… the same component under `wasmtime serve`".into(),
        value: component_serve.rate(),
        target: "".into(),
        how: format!(
            "{}; {}, `serve -S cli`, its defaults (a new instance a request)",
            component_serve.how(),
            tools.wasmtime_version
        ),
    });
    figures.push(Figure {
        what: "… Sausage beside `wasmtime serve`".into(),
        value: format!(
            "{:.2}×",
            component_sausage.per_second / component_serve.per_second
        ),
        target: "≥ 1.0×".into(),
        how: "the same component file, one after the other".into(),
    });

    // The second host: the same actor, the JSON route, and `MORE_ROUTES` more taken by `route`
    // requests (half exact paths, half prefixes) through the console.
    let (_many_dir, many_world) = world(&actors, &[]);
    let mut many = Host::start(&many_world);
    spawn_webapp(
        &mut many,
        &dir.path().join("many"),
        &wasm,
        json!([{"path": "/api/*", "rate": 0}]),
    );
    let many_addr = public_address(many_world.root());
    eprintln!("{MORE_ROUTES} route requests");
    let registering = Instant::now();
    for n in 0..MORE_ROUTES {
        let path = match n % 2 {
            0 => format!("/r/{n}"),
            _ => format!("/r/{n}/*"),
        };
        many.tell(
            "broker",
            json!({"type": "route", "actor": "shop", "path": path}),
        );
    }
    for _ in 0..MORE_ROUTES {
        many.wait("broker", "routed");
    }
    let registering = registering.elapsed();
    many.tell("broker", json!({"type": "routes"}));
    let held = many.wait("broker", "routes")["routes"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(held, MORE_ROUTES + 1, "the registry holds every route");
    check(&many_addr, JSON_PATH, r#"{"hello":"world"}"#);
    check(&many_addr, "/r/1/deep", "hello from webapp");

    eprintln!("wrk on the JSON route among {MORE_ROUTES} routes, {seconds} s");
    let json_many = tools.wrk(&many_addr, JSON_PATH, load);
    eprintln!("wrk on the JSON route alone again, {seconds} s");
    let json_one_again = tools.wrk(&one_addr, JSON_PATH, load);
    let alone = (json_one.per_second + json_one_again.per_second) / 2.0;
    figures.push(Figure {
        what: format!(
            "JSON route among {} routes, requests a second",
            thousands(held as u64)
        ),
        value: json_many.rate(),
        target: "".into(),
        how: format!(
            "{}; after the first host's two loads on it: {} and {}",
            json_many.how(),
            json_one.rate(),
            json_one_again.rate()
        ),
    });
    figures.push(Figure {
        what: "… beside the route alone (the mean of its two loads)".into(),
        value: format!("{:.2}×", json_many.per_second / alone),
        target: "no measurable difference".into(),
        how: format!(
            "{} `route` requests through the console took {:.1} s ({:.2} ms each)",
            thousands(MORE_ROUTES as u64),
            registering.as_secs_f64(),
            registering.as_secs_f64() * 1000.0 / MORE_ROUTES as f64
        ),
    });
    one.quit();
    many.quit();

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\nSausage's public address — {cores} cores, {seconds} s a load, {}, nginx {}\n",
        tools.wrk_version, tools.nginx_version
    );
    println!("| figure | measured | target | how |");
    println!("| --- | --- | --- | --- |");
    for f in figures {
        println!("| {} | {} | {} | {} |", f.what, f.value, f.target, f.how);
    }
}

/// Spawns `webapp` as actor `shop` with `routes` as its `actor.json`'s, through the console.
fn spawn_webapp(host: &mut Host, dir: &Path, wasm: &Path, routes: Value) {
    let source = dir.join("webapp-source");
    std::fs::create_dir_all(source.join("tests")).unwrap();
    let tests = common::repo().join("actors/webapp/tests");
    for test in std::fs::read_dir(tests).expect("webapp's tests") {
        let test = test.unwrap().path();
        std::fs::copy(&test, source.join("tests").join(test.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        source.join("actor.json"),
        json!({"http": routes}).to_string(),
    )
    .unwrap();
    host.tell(
        "broker",
        json!({"type": "spawn", "actor": "shop", "wasm": wasm, "source": source}),
    );
    host.wait("broker", "spawned");
}

/// Spawns `greeter` (a `wasi:http` component) as actor `hello`, routed at `/*`.
fn spawn_greeter(host: &mut Host, dir: &Path, wasm: &Path) {
    let source = dir.join("greeter-source");
    std::fs::create_dir_all(source.join("tests")).unwrap();
    let tests = common::repo().join("actors/greeter/tests");
    for test in std::fs::read_dir(tests).expect("greeter's tests") {
        let test = test.unwrap().path();
        std::fs::copy(&test, source.join("tests").join(test.file_name().unwrap())).unwrap();
    }
    let manifest = json!({"http": [{"path": "/*", "rate": 0}]});
    std::fs::write(source.join("actor.json"), manifest.to_string()).unwrap();
    host.tell(
        "broker",
        json!({"type": "spawn", "actor": "hello", "wasm": wasm, "source": source}),
    );
    host.wait("broker", "spawned");
}

/// The public address the host recorded once it listened.
fn public_address(world: &Path) -> String {
    let path = world.join("broker/http/address");
    let started = Instant::now();
    loop {
        if let Ok(addr) = std::fs::read_to_string(&path)
            && !addr.trim().is_empty()
        {
            return addr.trim().to_string();
        }
        assert!(
            started.elapsed() < START_PATIENCE,
            "the host recorded no public address in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends the bench when `GET path` does not answer 200 with `body`: a load on a wrong answer
/// would measure nothing.
fn check(addr: &str, path: &str, body: &str) {
    let mut client = Client::connect(addr);
    let (status, got) = client
        .get(path)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert!(
        status == 200 && got == body.as_bytes(),
        "GET http://{addr}{path} answered {status} {:?}",
        String::from_utf8_lossy(&got)
    );
}

/// The programs the bench drives from outside, found before anything is built.
struct Tools {
    wrk_version: String,
    nginx: PathBuf,
    nginx_version: String,
    /// The `wasmtime` CLI of the wasmtime Sausage is built on, for `wasmtime serve`.
    wasmtime: PathBuf,
    wasmtime_version: String,
}

impl Tools {
    fn find() -> Tools {
        let missing = |what: &str| -> ! {
            eprintln!(
                "http bench: {what} is missing; `scripts/install-bench-tools` installs it (as \
                 root: `apt-get install -y wrk nginx-light`)"
            );
            std::process::exit(2);
        };
        // `wrk -v` prints `wrk debian/4.1.0-3+b2 [epoll] Copyright …` and its usage, and
        // exits 1.
        let Ok(usage) = Command::new("wrk").arg("-v").output() else {
            missing("`wrk`");
        };
        let wrk_version = String::from_utf8_lossy(&usage.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&usage.stderr).lines())
            .find_map(|l| l.trim().strip_prefix("wrk ")?.split(" [").next())
            .map_or_else(|| "wrk".into(), |v| format!("wrk {v}"));
        let nginx = ["nginx", "/usr/sbin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| Command::new(p).arg("-v").output().is_ok())
            .unwrap_or_else(|| missing("`nginx`"));
        // `nginx -v` prints `nginx version: nginx/1.22.1` on stderr.
        let version = Command::new(&nginx).arg("-v").output().unwrap();
        let nginx_version = String::from_utf8_lossy(&version.stderr)
            .trim()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        // Built from the registry at the version Sausage links (`scripts/install-bench-tools`).
        let wasmtime = std::env::var_os("WASMTIME")
            .map(PathBuf::from)
            .unwrap_or_else(|| common::repo().join("target/bench-tools/bin/wasmtime"));
        let Ok(version) = Command::new(&wasmtime).arg("--version").output() else {
            missing(&format!("`wasmtime` ({})", wasmtime.display()));
        };
        // `wasmtime 48.0.8 (…)`.
        let wasmtime_version = String::from_utf8_lossy(&version.stdout)
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        Tools {
            wrk_version,
            nginx,
            nginx_version,
            wasmtime,
            wasmtime_version,
        }
    }

    /// `wrk` against `http://addr/path` for `load`, with its latency distribution.
    fn wrk(&self, addr: &str, path: &str, load: Duration) -> Wrk {
        let output = Command::new("wrk")
            .arg(format!("-t{THREADS}"))
            .arg(format!("-c{CONNECTIONS}"))
            .arg(format!("-d{}s", load.as_secs()))
            .arg("--latency")
            .arg(format!("http://{addr}{path}"))
            .stderr(Stdio::inherit())
            .output()
            .expect("wrk runs");
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "wrk failed:\n{text}");
        Wrk::read(&text)
    }
}

/// What `wrk --latency` printed that the table shows.
struct Wrk {
    per_second: f64,
    requests: u64,
    p50: String,
    p99: String,
    /// Answers that were not 2xx or 3xx: a rate of refusals would measure nothing.
    refused: u64,
    socket_errors: Option<String>,
}

impl Wrk {
    fn read(text: &str) -> Wrk {
        let field = |prefix: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_string()))
        };
        let per_second = field("Requests/sec:")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("wrk printed no Requests/sec:\n{text}"));
        // `  123456 requests in 10.00s, 12.34MB read`
        let requests = text
            .lines()
            .find(|l| l.contains(" requests in "))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        Wrk {
            per_second,
            requests,
            p50: field("50%").unwrap_or_else(|| "?".into()),
            p99: field("99%").unwrap_or_else(|| "?".into()),
            refused: field("Non-2xx or 3xx responses:")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            socket_errors: field("Socket errors:"),
        }
    }

    fn rate(&self) -> String {
        thousands(self.per_second.round() as u64)
    }

    /// How the figure was taken, with whatever went wrong on the way.
    fn how(&self) -> String {
        let mut how = format!(
            "wrk -t{THREADS} -c{CONNECTIONS}, keep-alive; {} requests, {} not 2xx/3xx",
            thousands(self.requests),
            thousands(self.refused)
        );
        if let Some(errors) = &self.socket_errors {
            how += &format!("; socket errors: {errors}");
        }
        how
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The latencies of an open-loop load, measured from each request's scheduled send.
struct OpenLoop {
    sent: usize,
    failed: usize,
    seconds: f64,
    /// Sorted, in microseconds.
    latencies: Vec<u64>,
}

impl OpenLoop {
    fn quantile(&self, q: f64) -> String {
        if self.latencies.is_empty() {
            return "?".into();
        }
        let at = ((self.latencies.len() as f64 * q).ceil() as usize).clamp(1, self.latencies.len());
        format!("{:.2} ms", self.latencies[at - 1] as f64 / 1000.0)
    }

    fn summary(&self) -> String {
        format!(
            "p99 {} (p50 {}, p99.9 {}, max {}); {} sent at {:.0}/s, {} failed",
            self.quantile(0.99),
            self.quantile(0.50),
            self.quantile(0.999),
            self.quantile(1.0),
            thousands(self.sent as u64),
            self.sent as f64 / self.seconds,
            self.failed
        )
    }
}

/// `rate` requests a second for `load` over `CONNECTIONS` keep-alive connections, each with its
/// own fixed schedule (staggered so the whole is even). A connection sends its next request at
/// its scheduled moment, or at once when the previous answer came after it; each latency runs
/// from the scheduled moment, so an answer that holds the line up is counted in every request
/// it delayed (no coordinated omission). The first second of each connection warms up and is
/// not counted.
fn open_loop(addr: &str, path: &str, rate: u32, load: Duration) -> OpenLoop {
    let interval = Duration::from_secs_f64(CONNECTIONS as f64 / f64::from(rate));
    let warm_up = Duration::from_secs(1);
    let per_connection = ((warm_up + load).as_secs_f64() / interval.as_secs_f64()) as u32;
    let start = Instant::now() + Duration::from_millis(100);
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (addr, path) = (addr.to_string(), path.to_string());
            std::thread::spawn(move || {
                let mut client = Client::connect(&addr);
                let offset = interval.mul_f64(c as f64 / CONNECTIONS as f64);
                let (mut latencies, mut failed) = (Vec::new(), 0);
                for i in 0..per_connection {
                    let scheduled = start + offset + interval * i;
                    if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let ok = matches!(client.get(&path), Ok((200, _)));
                    let latency = scheduled.elapsed();
                    if scheduled < start + warm_up {
                        continue;
                    }
                    match ok {
                        true => latencies.push(latency.as_micros() as u64),
                        false => {
                            failed += 1;
                            client = Client::connect(&addr);
                        }
                    }
                }
                (latencies, failed)
            })
        })
        .collect();
    let mut result = OpenLoop {
        sent: 0,
        failed: 0,
        seconds: load.as_secs_f64(),
        latencies: Vec::new(),
    };
    for thread in threads {
        let (latencies, failed) = thread.join().expect("a load thread");
        result.sent += latencies.len() + failed;
        result.failed += failed;
        result.latencies.extend(latencies);
    }
    result.latencies.sort_unstable();
    result
}

/// A keep-alive HTTP/1.1 client on one connection, enough for answers with a `content-length`.
struct Client {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Client {
            stream,
            buffer: Vec::new(),
        }
    }

    /// `GET path`: the answer's status and body.
    fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>), String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
        self.stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let head_end = loop {
            if let Some(at) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buffer[..head_end]).to_string();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {head:?}"))?;
        let header = |wanted: &str| {
            head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case(wanted)
                    .then(|| value.trim().to_ascii_lowercase())
            })
        };
        self.buffer.drain(..head_end);
        if header("transfer-encoding").as_deref() == Some("chunked") {
            return Ok((status, self.chunked()?));
        }
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no content-length in {head:?}"))?;
        while self.buffer.len() < length {
            self.fill()?;
        }
        let body = self.buffer.drain(..length).collect();
        Ok((status, body))
    }

    /// A chunked body (`wasmtime serve` answers so): each chunk's size in hex on its line, the
    /// chunk, until a chunk of 0 and the empty line after it.
    fn chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(at) = self.buffer.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                self.fill()?;
            };
            let line = String::from_utf8_lossy(&self.buffer[..line_end]).to_string();
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("not a chunk size: {line:?}"))?;
            self.buffer.drain(..line_end + 2);
            while self.buffer.len() < size + 2 {
                self.fill()?;
            }
            body.extend(self.buffer.drain(..size));
            self.buffer.drain(..2);
            if size == 0 {
                return Ok(body);
            }
        }
    }

    fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0; 16 << 10];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// An nginx serving one file from a temporary folder with its own configuration, as the user
/// the bench runs as; stopped when dropped.
/// `wasmtime serve` with one component, on a free port of its own.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    fn start(wasmtime: &Path, wasm: &Path, dir: &Path) -> Serve {
        std::fs::create_dir_all(dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        // `-S cli`: the component imports what any `wasm32-wasip2` program does, beyond the
        // proxy world.
        let child = Command::new(wasmtime)
            .args(["serve", "-S", "cli", "--addr", &addr])
            .arg(wasm)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("wasmtime serve starts");
        let serve = Serve { child, addr };
        let started = Instant::now();
        while TcpStream::connect(&serve.addr).is_err() {
            assert!(
                started.elapsed() < START_PATIENCE,
                "wasmtime serve did not listen on {}; see {}",
                serve.addr,
                dir.join("serve.log").display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        serve
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Nginx {
    child: Child,
    addr: String,
}

impl Nginx {
    fn start(nginx: &Path, dir: &Path, file: &str) -> Nginx {
        let site = dir.join("root");
        std::fs::create_dir_all(site.join("site")).unwrap();
        std::fs::write(site.join(FILE_PATH.trim_start_matches('/')), file).unwrap();
        // A free port, given back for nginx to take.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        // As root, nginx's workers would become `nobody`, who cannot read the temporary folder.
        let user = match std::fs::metadata("/proc/self").map(|m| m.uid()) {
            Ok(0) => "user root;",
            _ => "",
        };
        let d = dir.display();
        let config = format!(
            "{user}
daemon off;
worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {addr};
        root {root};
    }}
}}
",
            root = site.display()
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts");
        let nginx = Nginx { child, addr };
        let started = Instant::now();
        while TcpStream::connect(&nginx.addr).is_err() {
            assert!(
                started.elapsed() < START_PATIENCE,
                "nginx did not listen on {}; see {d}/error.log",
                nginx.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // TERM, not KILL: the master then stops its workers, which a killed master would leave
        // running on the port. Ignored: nginx may have exited already, and the bench ends
        // either way.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
