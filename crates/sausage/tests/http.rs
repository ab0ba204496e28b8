//! The world's public address (DESIGN §24) over real HTTP against a running world: routes from
//! `actor.json` and from `route`, a request as a message and its answer as the response, each
//! failure's status, streamed answers, static folders, and what may not be routed.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::http::{Response, request};
use support::*;

/// The address the running host of `world` serves its routes at.
fn public_address(world: &TestWorld) -> String {
    let path = world.path("broker/http/address");
    eventually("the public address to be recorded", || path.exists());
    std::fs::read_to_string(path).unwrap()
}

/// The test actor `actor`'s transcripts with `manifest` as its `actor.json`, in a folder of its
/// own under `dir`: a source to spawn or upgrade it from.
fn source_with(actor: &str, dir: &Path, manifest: Value) -> String {
    let source = dir.join(format!("{actor}-source"));
    std::fs::create_dir_all(source.join("tests")).unwrap();
    for test in std::fs::read_dir(support::source(actor).join("tests")).unwrap() {
        let test = test.unwrap().path();
        std::fs::copy(&test, source.join("tests").join(test.file_name().unwrap())).unwrap();
    }
    std::fs::write(source.join("actor.json"), manifest.to_string()).unwrap();
    source.display().to_string()
}

/// `webapp`'s source with `manifest` as its `actor.json`.
fn webapp_source(dir: &Path, manifest: Value) -> String {
    source_with("webapp", dir, manifest)
}

/// A running world whose actor `shop` runs `webapp` spawned with `manifest` as its
/// `actor.json`: the host and the public address.
fn shop_with(world: &TestWorld, dir: &Path, manifest: Value) -> (support::Host, String) {
    let source = webapp_source(dir, manifest);
    let mut host = world.run();
    let spawned = host.request(json!({
        "type": "spawn", "actor": "shop", "wasm": wasm("webapp"), "source": source,
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    let addr = public_address(world);
    (host, addr)
}

fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

#[test]
fn an_actors_routes_answer_over_http_and_every_failure_has_its_status() {
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let source = webapp_source(
        dir.path(),
        json!({"http": [
            {"path": "/api/*", "timeout": 2, "max_body": 1000, "rate": 0},
            {"path": "/hooks/github", "methods": ["POST"]},
            {"path": "/limited/*", "rate": 2},
            {"path": "/", "static": "/public/site"},
        ]}),
    );
    let mut host = world.run();
    let spawned = host.request(json!({
        "type": "spawn", "actor": "shop", "wasm": wasm("webapp"), "source": source,
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    let addr = public_address(&world);
    let addr = addr.as_str();
    let url = |path: &str| json!(format!("http://{addr}{path}"));
    assert_eq!(
        spawned["urls"],
        json!([
            url("/"),
            url("/api/"),
            url("/hooks/github"),
            url("/limited/")
        ])
    );

    // A request is a message; its answer is the response. Cookies and credentials stay out.
    let echoed = request(
        addr,
        "GET",
        "/api/echo?x=1",
        &[
            ("Cookie", "sausage_session=s"),
            ("Authorization", "Bearer t"),
            ("X-Custom", "yes"),
        ],
        b"",
    );
    assert_eq!(echoed.status, 200, "{}", echoed.text());
    assert_eq!(
        echoed.header("content-type"),
        Some("application/json"),
        "{}",
        echoed.text()
    );
    let seen = echoed.json();
    assert_eq!(
        (
            &seen["method"],
            &seen["path"],
            &seen["query"],
            &seen["body"]
        ),
        (
            &json!("GET"),
            &json!("/api/echo"),
            &json!("x=1"),
            &json!("")
        )
    );
    assert_eq!(seen["headers"]["x-custom"], "yes");
    assert!(seen["headers"].get("cookie").is_none(), "{seen}");
    assert!(seen["headers"].get("authorization").is_none(), "{seen}");
    assert!(seen["remote"].as_str().unwrap().starts_with("127.0.0.1:"));
    let binary = request(addr, "POST", "/api/echo", &[], &[0xff, 0, 1]);
    assert_eq!(binary.json()["body_base64"], "/wAB");
    assert!(binary.json().get("body").is_none());

    // State committed between requests; statuses and headers as the actor wrote them.
    for n in [1, 2] {
        let counted = request(addr, "POST", "/api/count", &[], b"");
        assert_eq!(counted.json(), json!({"count": n}));
    }
    let teapot = get(addr, "/api/status/418");
    assert_eq!((teapot.status, teapot.text()), (418, "status 418".into()));
    let bytes = get(addr, "/api/binary");
    assert_eq!(bytes.body, (0..=255).collect::<Vec<u8>>());
    assert_eq!(
        bytes.header("content-type"),
        Some("application/octet-stream")
    );
    let cookies = get(addr, "/api/cookie");
    let set: Vec<&str> = (cookies.headers.iter())
        .filter(|(n, _)| n == "set-cookie")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(set, ["a=1; Path=/", "b=2; Path=/"]);

    // A streamed answer: server-sent events as the actor sends them.
    let events = get(addr, "/api/stream?n=3");
    assert_eq!(events.status, 200);
    assert_eq!(events.header("content-type"), Some("text/event-stream"));
    assert_eq!(events.text(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");

    // Each failure with its status and a plain reason.
    let cases: [(&str, &str, &[u8], u16, &str); 6] = [
        ("GET", "/hooks/github", b"", 405, "does not answer GET"),
        (
            "POST",
            "/api/echo",
            &[b'x'; 2000],
            413,
            "larger than this route takes",
        ),
        ("GET", "/api/never", b"", 504, "did not answer within 2 s"),
        ("GET", "/api/wrong", b"", 502, "not a response"),
        ("GET", "/api/../secret", b"", 400, ". or .. segment"),
        ("GET", "/a/%2e%2e/b", b"", 400, "encoded"),
    ];
    for (method, path, body, status, says) in cases {
        let answer = request(addr, method, path, &[], body);
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.text());
        assert!(
            answer.text().contains(says),
            "{method} {path}: {}",
            answer.text()
        );
    }
    // A crash while handling a request answers it at once; the request is not given again.
    let crashed = get(addr, "/api/crash");
    assert_eq!(crashed.status, 503, "{}", crashed.text());
    assert!(
        crashed.text().contains("crashed while handling"),
        "{}",
        crashed.text()
    );
    assert_eq!(crashed.header("retry-after"), Some("1"));
    assert_eq!(get(addr, "/api/echo").status, 200, "restarted, it answers");
    assert!(
        !world
            .read("actor/shop/status.json")
            .contains("\"parked\":\"http/")
    );
    assert_eq!(get(addr, "/hooks/github").header("allow"), Some("POST"));
    let hook = request(addr, "POST", "/hooks/github", &[], b"{}");
    assert_eq!(hook.text(), "hello from webapp");
    assert!(
        world
            .log("shop")
            .contains("answered a request with a `text` message"),
        "{}",
        world.log("shop")
    );
    let limited: Vec<u16> = (0..3).map(|_| get(addr, "/limited/x").status).collect();
    assert_eq!(limited, [200, 200, 429]);
    assert_eq!(get(addr, "/limited/x").header("retry-after"), Some("1"));

    // Static files: committed by the actor, served by the host without waking it.
    let site = [
        ("/public/site/index.html", "<h1>home</h1>"),
        ("/public/site/css/a.css", "h1 { color: red }"),
        ("/public/site/.env", "TOKEN=secret"),
        ("/public/secret.txt", "outside the folder"),
    ];
    for (path, text) in site {
        host.tell("shop", json!({"type": "write", "path": path, "text": text}));
        host.wait_for("the file written", |m| m.body["type"] == "written");
    }
    let home = get(addr, "/");
    assert_eq!((home.status, home.text()), (200, "<h1>home</h1>".into()));
    assert_eq!(home.header("content-type"), Some("text/html"));
    let etag = home.header("etag").expect("an ETag").to_string();
    let again = request(addr, "GET", "/", &[("If-None-Match", &etag)], b"");
    assert_eq!((again.status, again.body.len()), (304, 0));
    let part = request(addr, "GET", "/index.html", &[("Range", "bytes=0-3")], b"");
    assert_eq!((part.status, part.text()), (206, "<h1>".into()));
    assert_eq!(
        get(addr, "/css/a.css").header("content-type"),
        Some("text/css")
    );
    assert_eq!(get(addr, "/css").status, 404, "no listings");
    for hidden in [
        "/.env",
        "/%2eenv",
        "/../secret.txt",
        "/metrics",
        "/api-not/x",
        "/login",
    ] {
        let refused = get(addr, hidden);
        assert!(
            matches!(refused.status, 400 | 404),
            "{hidden}: {}",
            refused.status
        );
        let text = refused.text();
        assert!(
            !text.contains("TOKEN") && !text.contains("outside the folder"),
            "{hidden}: {text}"
        );
    }
    // A new commit is served from the next request on, with a new ETag.
    host.tell(
        "shop",
        json!({"type": "write", "path": "/public/site/index.html", "text": "<h1>new</h1>"}),
    );
    host.wait_for("the file written", |m| m.body["type"] == "written");
    let changed = request(addr, "GET", "/", &[("If-None-Match", &etag)], b"");
    assert_eq!(
        (changed.status, changed.text()),
        (200, "<h1>new</h1>".into())
    );

    // A file past what is read whole is served a chunk at a time, whole or in ranges; an
    // unchanged one is 304 by its date too; a folder's page without its `/` is redirected.
    let big: String = (0..40_000).map(|n| format!("{n:07}\n")).collect();
    let docs = [
        ("/public/site/docs/big.txt", big.as_str()),
        ("/public/site/docs/index.html", "<h1>docs</h1>"),
    ];
    for (path, text) in docs {
        host.tell("shop", json!({"type": "write", "path": path, "text": text}));
        host.wait_for("the file written", |m| m.body["type"] == "written");
    }
    let whole = get(addr, "/docs/big.txt");
    assert_eq!((whole.status, whole.body.len()), (200, big.len()));
    assert!(whole.body == big.as_bytes(), "the big file whole");
    assert_eq!(whole.header("content-type"), Some("text/plain"));
    let range = [("Range", "bytes=300000-300015")];
    let part = request(addr, "GET", "/docs/big.txt", &range, b"");
    assert_eq!(
        (part.status, part.text()),
        (206, big[300_000..300_016].into())
    );
    let modified = whole.header("last-modified").expect("a Last-Modified");
    let since = [("If-Modified-Since", modified)];
    assert_eq!(
        request(addr, "GET", "/docs/big.txt", &since, b"").status,
        304
    );
    let folder = get(addr, "/docs?x=1");
    assert_eq!(
        (folder.status, folder.header("location")),
        (307, Some("/docs/?x=1"))
    );
    assert_eq!(get(addr, "/docs/").text(), "<h1>docs</h1>");

    // Each answer is a line in the actor's log.
    eventually("the access lines in the actor's log", || {
        world.log("shop").contains("http: GET /api/echo 200")
    });

    // Routes are listed, taken away, and never shared between actors.
    let routes = host.request(json!({"type": "routes"}));
    let paths: Vec<&str> = routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/", "/api/*", "/hooks/github", "/limited/*"]);
    let unrouted =
        host.request(json!({"type": "unroute", "actor": "shop", "path": "/hooks/github"}));
    assert_eq!(unrouted["type"], "unrouted", "{unrouted}");
    assert_eq!(request(addr, "POST", "/hooks/github", &[], b"").status, 405);
    let theirs = webapp_source(dir.path(), json!({"http": [{"path": "/api/*"}]}));
    let refused = host.request(json!({
        "type": "spawn", "actor": "other", "wasm": wasm("webapp"), "source": theirs,
    }));
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("served by actor `shop`"),
        "{refused}"
    );
    assert!(
        !world.json("sausage.json")["actors"]
            .as_object()
            .unwrap()
            .contains_key("other")
    );
    let routed =
        host.request(json!({"type": "route", "actor": "shop", "path": "/new", "methods": ["PUT"]}));
    assert_eq!(routed["type"], "routed", "{routed}");
    assert_eq!(routed["url"], url("/new"));
    assert_eq!(
        request(addr, "PUT", "/new", &[], b"").text(),
        "hello from webapp"
    );
    let wrong = host.request(json!({"type": "route", "actor": "shop", "path": "new"}));
    assert!(
        wrong["reason"]
            .as_str()
            .unwrap()
            .contains("does not start with /"),
        "{wrong}"
    );

    // A stopped actor: 503 and when to try again; started, it answers again.
    let stopped = host.request(json!({"type": "stop", "actor": "shop"}));
    assert_eq!(stopped["type"], "stopped", "{stopped}");
    let unavailable = get(addr, "/api/echo");
    assert_eq!(unavailable.status, 503, "{}", unavailable.text());
    assert_eq!(unavailable.header("retry-after"), Some("1"));
    assert_eq!(
        get(addr, "/").status,
        200,
        "static files need no running actor"
    );
    host.request(json!({"type": "start", "actor": "shop"}));
    assert_eq!(get(addr, "/api/echo").status, 200);

    // A removed actor's routes go with it.
    let removed = host.request(json!({"type": "remove", "actor": "shop"}));
    assert_eq!(removed["type"], "removed", "{removed}");
    assert_eq!(get(addr, "/api/echo").status, 404);
    assert!(host.quit().success());
}

/// Writes `bytes` on a new connection to `addr` and reads what comes back until the server
/// closes the connection or `patience` passes.
fn raw(addr: &str, bytes: &[u8], patience: std::time::Duration) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(patience)).unwrap();
    stream.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn the_public_address_holds_against_a_hostile_client() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let manifest = json!({"http": [{"path": "/api/*", "timeout": 2, "max_body": 1000, "rate": 0}]});
    let (host, addr) = shop_with(&world, dir.path(), manifest);
    let addr = addr.as_str();
    let patience = Duration::from_secs(5);

    // A head past 64 KiB is refused whole.
    let big = format!(
        "GET /api/echo HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(65 << 10)
    );
    let answer = raw(addr, big.as_bytes(), patience);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");

    // Smuggling: a second request hidden in a body framed two ways never reaches the actor.
    let smuggled = "POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\
                    Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /api/status/299 HTTP/1.1\r\n\
                    Host: x\r\n\r\n";
    let answer = raw(addr, smuggled.as_bytes(), patience);
    assert!(!answer.contains("299"), "{answer}");
    let conflicting = "POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\
                       Content-Length: 5\r\n\r\nabcde";
    let answer = raw(addr, conflicting.as_bytes(), patience);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A body that trickles is cut off at the route's timeout.
    let started = Instant::now();
    let slow_body = "POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab";
    let answer = raw(addr, slow_body.as_bytes(), patience);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // Slow heads (slowloris): many connections that never finish their head hold nothing;
    // each is closed after 10 s, and other clients are answered meanwhile.
    let mut slow: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream
                .write_all(b"GET /api/echo HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            stream
        })
        .collect();
    let started = Instant::now();
    assert_eq!(get(addr, "/api/echo").status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let cut_off = raw(
        addr,
        b"GET /api/echo HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(20),
    );
    assert!(!cut_off.contains("200 OK"), "{cut_off}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    slow.clear();

    // A client that reads slower than the actor streams has its answer cut off: the host does
    // not hold what it does not read.
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            b"GET /api/stream?n=4000&size=20000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    eventually("the cut-off in the actor's log", || {
        world.log("shop").contains("a streamed answer was cut off")
    });
    let mut got = Vec::new();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    std::io::Read::read_to_end(&mut stream, &mut got).expect("the cut-off answer ends");
    assert!(got.len() < 4000 * 20_000, "{} bytes", got.len());
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // Nothing of it reached the actor but the whole requests.
    let log = world.log("shop");
    assert!(!log.contains("/api/status/299"), "{log}");
    assert!(host.quit().success());
}

#[test]
fn routes_belong_to_their_actors_owners_and_tiers_hold() {
    let world = TestWorld::new();
    world.install("site", "webapp");
    world.install("mine", "webapp");
    world.set_owner("mine", "ann");
    let added = sausage(&[
        "people",
        "add",
        "ann",
        "--tier",
        "member",
        "--world",
        world.root.to_str().unwrap(),
    ]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let added = sausage(&[
        "people",
        "add",
        "gus",
        "--tier",
        "guest",
        "--world",
        world.root.to_str().unwrap(),
    ]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    world.install("guests", "webapp");
    world.set_owner("guests", "gus");
    let mut host = world.run();
    let addr = public_address(&world);
    let addr = addr.as_str();

    // The owner's actor (the console speaks for the owner) takes a prefix.
    let routed = host.request(json!({"type": "route", "actor": "site", "path": "/shop/*"}));
    assert_eq!(routed["type"], "routed", "{routed}");
    // A member's actor: free paths outside it, nothing under it, nothing another holds.
    for (path, ok) in [
        ("/ann/*", true),
        ("/shop/x", false),
        ("/shop/*", false),
        ("/shop", false),
    ] {
        let answer = host.request(json!({"type": "route", "actor": "mine", "path": path}));
        assert_eq!(answer["type"] == "routed", ok, "{path}: {answer}");
    }
    // A guest's actor: none.
    let answer = host.request(json!({"type": "route", "actor": "guests", "path": "/gus"}));
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("only members and owners"),
        "{answer}"
    );
    // Each refusal changed nothing.
    let routes = host.request(json!({"type": "routes"}));
    let paths: Vec<&str> = (routes["routes"].as_array().unwrap().iter())
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/ann/*", "/shop/*"]);
    assert_eq!(
        request(addr, "GET", "/ann/x", &[], b"").text(),
        "hello from webapp"
    );
    assert_eq!(get(addr, "/gus").status, 404);
    // Nothing of the web console is served here.
    for path in ["/api/actors", "/metrics", "/mcp", "/login", "/status", "/"] {
        let answer = request(addr, "GET", path, &[("Cookie", "sausage_session=x")], b"");
        assert_eq!(answer.status, 404, "{path}: {}", answer.text());
    }
    // Another actor's route is not the console's to take away by the wrong name.
    let answer = host.request(json!({"type": "unroute", "actor": "site", "path": "/ann/*"}));
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("served by actor `mine`"),
        "{answer}"
    );
    assert!(host.quit().success());
}

#[test]
fn a_request_is_delivered_at_most_once_even_across_a_killed_host() {
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let manifest = json!({"http": [{"path": "/api/*", "rate": 0}]});
    let (host, addr) = shop_with(&world, dir.path(), manifest);
    assert_eq!(
        request(&addr, "POST", "/api/count", &[], b"").json(),
        json!({"count": 1})
    );
    // A slow request, then a count queued behind it; the host is killed before either ends.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            support::http::try_request(&addr, "GET", "/api/slow?ms=5000", &[], b"")
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let queued = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            support::http::try_request(&addr, "POST", "/api/count", &[], b"")
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    host.kill();
    assert!(
        slow.join().unwrap().is_err(),
        "the slow request's connection died with the host"
    );
    assert!(queued.join().unwrap().is_err(), "so did the queued one's");

    // The next host never gives either again: the count goes on from 1.
    std::fs::remove_file(world.path("broker/http/address")).unwrap();
    let host = world.run();
    let addr = public_address(&world);
    support::eventually("shop to answer again", || {
        request(&addr, "GET", "/api/echo", &[], b"").status == 200
    });
    assert_eq!(
        request(&addr, "POST", "/api/count", &[], b"").json(),
        json!({"count": 2})
    );
    assert!(host.quit().success());
}

#[test]
fn each_route_counts_its_answers_by_status_and_time_in_the_metrics() {
    let world = TestWorld::new();
    world.install("shop", "webapp");
    let root = world.root.to_str().unwrap();
    let made = sausage(&["metrics", "token", "--world", root]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let token = text(&made.stdout).trim().to_string();
    let mut web = support::web::WebHost::start(&world);
    let routed = web
        .host
        .request(json!({"type": "route", "actor": "shop", "path": "/api/*", "rate": 0}));
    assert_eq!(routed["type"], "routed", "{routed}");
    let addr = public_address(&world);
    for path in ["/api/echo", "/api/echo", "/api/status/418", "/nothing"] {
        get(&addr, path);
    }
    let auth = format!("Bearer {token}");
    let metrics = request(
        &web.addr,
        "GET",
        "/metrics",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(metrics.status, 200);
    let body = metrics.text();
    for line in [
        r#"sausage_http_requests_total{route="/api/*",status="200"} 2"#,
        r#"sausage_http_requests_total{route="/api/*",status="418"} 1"#,
        r#"sausage_http_requests_total{route="none",status="404"} 1"#,
        r#"sausage_http_request_duration_seconds_count{route="/api/*"} 3"#,
        "# TYPE sausage_http_request_duration_seconds histogram",
    ] {
        assert!(body.contains(line), "{line} in:\n{body}");
    }
}

#[test]
fn a_standard_wasi_http_component_is_served_unchanged() {
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let source = source_with(
        "greeter",
        dir.path(),
        json!({"http": [{"path": "/*", "rate": 0}]}),
    );
    let mut host = world.run();
    // Its transcripts' `http` steps ran against it before it was deployed.
    let spawned = host.request(json!({
        "type": "spawn", "actor": "greeter", "wasm": wasm("greeter"), "source": source,
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    let addr = public_address(&world);

    let hello = get(&addr, "/");
    assert_eq!(hello.status, 200);
    assert_eq!(hello.text(), "Hello from a wasi:http component\n");
    // The request as the component reads it: the route's private headers dropped.
    let echo = request(
        &addr,
        "POST",
        "/echo?x=1",
        &[("x-custom", "yes"), ("cookie", "session=secret")],
        b"hi there",
    );
    let text = echo.text();
    assert!(text.starts_with("POST /echo?x=1\n"), "{text}");
    assert!(text.contains("\nx-custom: yes\n"), "{text}");
    assert!(text.ends_with("\n\nhi there"), "{text}");
    assert!(
        !text.contains("secret"),
        "a cookie reached the component: {text}"
    );
    let teapot = get(&addr, "/status/418");
    assert_eq!(
        (teapot.status, teapot.header("x-status")),
        (418, Some("418"))
    );
    // One instance answers request after request; its mount keeps what it commits.
    let hits: Vec<u64> = (0..3)
        .map(|_| get(&addr, "/hits").text().parse().unwrap())
        .collect();
    assert_eq!(hits[1], hits[0] + 1, "{hits:?}");
    assert_eq!(hits[2], hits[0] + 2, "{hits:?}");
    assert_eq!(request(&addr, "POST", "/count", &[], b"").text(), "1");
    assert_eq!(request(&addr, "POST", "/count", &[], b"").text(), "2");
    // A body that keeps coming is streamed as it comes.
    let streamed = get(&addr, "/stream?n=6");
    assert_eq!(streamed.status, 200);
    assert_eq!(
        streamed.text(),
        (0..6).map(|i| format!("line {i}\n")).collect::<String>()
    );
    // Its allow-list is empty: an outgoing request is refused.
    let fetched = get(&addr, "/fetch?url=http://127.0.0.1:9/").text();
    assert!(fetched.starts_with("cannot fetch"), "{fetched}");
    // A handler's error is a 500; its trap a 503, and the next request finds it running again.
    assert_eq!(get(&addr, "/fail").status, 500);
    let crashed = get(&addr, "/crash");
    assert_eq!(crashed.status, 503, "{}", crashed.text());
    // Crashing again and again, it restarts later each time: past a second off, a request is
    // told when to come back rather than kept waiting.
    // (Back-offs of 1, 2, 4 s…: a crash request that comes while one is a second or more away
    // is refused rather than crashing it again.)
    let crashing = (0..6)
        .find_map(|_| {
            let answer = get(&addr, "/crash");
            assert_eq!(answer.status, 503, "{}", answer.text());
            answer.text().contains("is crashing").then_some(answer)
        })
        .expect("a crash loop's back-off is told");
    let text = crashing.text();
    let after = crashing
        .header("retry-after")
        .unwrap_or_default()
        .to_string();
    assert!(
        after.parse::<u64>().is_ok_and(|s| (1..=5).contains(&s)),
        "Retry-After {after}"
    );
    assert!(
        text.contains(&format!("is crashing; it restarts in {after} s")),
        "{text}"
    );
    support::eventually("greeter to answer again after its crashes", || {
        get(&addr, "/").status == 200
    });
    // A message that is not a request is answered with why.
    host.tell("greeter", json!({"type": "ping"}));
    let refused = host.wait_for("greeter's refusal", |m| m.from == "greeter");
    let reason = refused.body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("answers `http` requests only"),
        "{}",
        refused.body
    );
    support::eventually("the answers in its log", || {
        world.log("greeter").contains("GET /status/418 418")
    });

    // An upgrade swaps it without dropping a request in flight.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || get(&addr, "/stream?n=40"))
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let upgraded = host.request(json!({
        "type": "upgrade", "actor": "greeter", "wasm": wasm("greeter"), "source": source,
    }));
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    let slow = slow.join().unwrap();
    assert_eq!(slow.status, 200);
    assert_eq!(slow.text().lines().count(), 40, "{}", slow.text());
    support::eventually("the upgrade to answer", || {
        get(&addr, "/version").text() == "version 2"
    });
    assert!(host.quit().success());
}
