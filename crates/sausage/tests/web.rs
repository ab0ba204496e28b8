//! The web console's HTTP API (DESIGN §14) through a real world: logging in, sessions and every
//! refusal, the actors' table and pages, actions, files and logs, sending, the event stream and
//! the graph, and the chat with the agent on the fake model provider; and the console's part of
//! authority (DESIGN §18): logins, streams that end, bounded events, `for` and bound answers.

mod support;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::world_with_agent;
use support::http::{EventStream, request, request_from};
use support::web::{Client, EVENT_PATIENCE, WebHost, free_addr};
use support::*;

#[test]
fn a_login_link_opens_one_session_and_everything_else_is_refused() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let addr = web.addr.as_str();

    // Without a session, the API says so.
    let anonymous = request(addr, "GET", "/api/actors", &[], b"");
    assert_eq!(anonymous.status, 401);
    assert!(
        anonymous.json()["error"]
            .as_str()
            .unwrap()
            .contains("login link")
    );
    // A wrong token, then the right one, once.
    assert_eq!(
        request(addr, "GET", "/login?token=0123", &[], b"").status,
        401
    );
    assert_eq!(request(addr, "GET", "/login", &[], b"").status, 401);
    let client = web.log_in();
    let again = request(addr, "GET", &web.login_path(), &[], b"");
    assert_eq!(again.status, 401, "a login link works once");
    // A used link's page is in the console's style and says how to get a new link.
    let page = again.text();
    assert!(
        page.contains(r#"<link rel="stylesheet" href="/app.css">"#),
        "{page}"
    );
    assert!(
        page.contains("<code>sausage people link ID</code>"),
        "{page}"
    );
    assert!(page.contains("prints a new link at once"), "{page}");
    let login = {
        // The cookie's attributes, from a fresh login of another run is not possible: check the
        // one this client got by logging in again through a new host later; here, its shape.
        client.cookie.clone()
    };
    assert!(login.starts_with("sausage_session=") && login.len() > 60);
    assert_eq!(client.get("/api/me").json()["person"], "owner");

    // Changes need the page's own Origin.
    let send = json!({"to": "echo", "body": {"type": "hi"}});
    let body = send.to_string();
    let cookie = ("Cookie", client.cookie.as_str());
    for origin in [None, Some("http://evil.example"), Some("null")] {
        let mut headers = vec![cookie];
        if let Some(origin) = origin {
            headers.push(("Origin", origin));
        }
        let refused = request(addr, "POST", "/api/send", &headers, body.as_bytes());
        assert_eq!(refused.status, 403, "origin {origin:?}");
    }
    assert_eq!(client.post("/api/send", &send).status, 200);
    // Another Host header is not this server (DNS rebinding).
    let rebound = request(
        addr,
        "GET",
        "/api/me",
        &[("Host", "evil.example"), cookie],
        b"",
    );
    assert_eq!(rebound.status, 421);
    // A body over 1 MiB.
    let huge = json!({"to": "echo", "body": {"type": "x", "pad": "x".repeat(1 << 20)}});
    assert_eq!(client.post("/api/send", &huge).status, 413);
    // No listing, nothing outside the API and the page.
    for path in [
        "/api/nothing",
        "/etc/passwd",
        "/assets/",
        "/../sausage.json",
    ] {
        let missing = client.get(path);
        assert_eq!(missing.status, 404, "{path}");
    }
    // The page itself, with the headers that keep it safe.
    let page = request(addr, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<script src=\"/app.js\""));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert!(
        page.header("content-security-policy")
            .unwrap()
            .contains("default-src 'self'")
    );
    for asset in ["/app.js", "/app.css"] {
        assert_eq!(request(addr, "GET", asset, &[], b"").status, 200, "{asset}");
    }

    // Logging out ends the session.
    assert_eq!(client.post("/api/logout", &json!({})).status, 200);
    assert_eq!(client.get("/api/me").status, 401);
}

#[test]
fn a_session_survives_a_restart_of_the_world_and_its_cookie_is_strict() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let response = request(&web.addr, "GET", &web.login_path(), &[], b"");
    assert_eq!(response.status, 303);
    assert_eq!(
        response.header("location"),
        Some("/"),
        "no token after login"
    );
    let cookie = response.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_string();
    web.host.quit();

    let web = WebHost::start(&world);
    let client = Client {
        addr: web.addr.clone(),
        cookie: session,
    };
    assert_eq!(client.get("/api/me").json()["person"], "owner");
    let stored = world.read("broker/web/sessions.json");
    assert!(!stored.contains(client.cookie.trim_start_matches("sausage_session=")));
}

#[test]
fn actors_their_pages_actions_files_and_logs() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("crasher", "crasher");
    std::fs::write(world.path("actor/echo/public/hello.txt"), "hello, world").unwrap();
    let web = WebHost::start(&world);
    let client = web.log_in();

    let table = client.until("/api/actors", "both actors running", |t| {
        let state = |id: &str| {
            t["actors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["id"] == id)
                .map(|a| a["state"].clone())
        };
        state("echo") == Some(json!("running")) && state("crasher") == Some(json!("running"))
    });
    let echo = table["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "echo")
        .unwrap()
        .clone();
    assert_eq!(echo["kind"], "wasm");
    assert_eq!(echo["version"], 1);
    assert!(echo["queued"].is_number() && echo["in_per_sec"].is_number());
    assert!(
        table["actors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == "broker" && a["kind"] == "native")
    );

    let page = client.get("/api/actors/echo").json();
    assert_eq!(page["status"]["state"], "running");
    assert_eq!(page["versions"][0]["version"], 1);
    assert_eq!(page["versions"][0]["current"], true);
    assert_eq!(page["public"], json!(["hello.txt"]));
    assert_eq!(client.get("/api/actors/ghost").status, 404);
    assert_eq!(client.get("/api/actors/Bad%20Id").status, 404);

    // Files: the file itself; nothing else.
    let file = client.get("/api/actors/echo/files/public/hello.txt");
    assert_eq!(file.status, 200);
    assert_eq!(file.text(), "hello, world");
    std::fs::create_dir_all(world.path("actor/echo/public/sub")).unwrap();
    std::fs::write(world.path("actor/echo/public/.sausage-tmp-1"), "hidden").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", world.path("actor/echo/public/link")).unwrap();
    for path in [
        "/api/actors/echo/files/public/sub",
        "/api/actors/echo/files/public/../../../sausage.json",
        "/api/actors/echo/files/public/%2e%2e/%2e%2e/sausage.json",
        "/api/actors/echo/files/public/.sausage-tmp-1",
        "/api/actors/echo/files/public/link",
        "/api/actors/echo/files/private/x",
        "/api/actors/echo/files/public/nothing.txt",
    ] {
        let refused = client.get(path);
        assert_eq!(refused.status, 404, "{path}: {}", refused.text());
    }

    // Stop and start, seen in the table; a rollback with nowhere to go says why.
    let stopped = client.post("/api/actors/echo/stop", &json!({}));
    assert_eq!(stopped.status, 200, "{}", stopped.text());
    assert_eq!(stopped.json()["type"], "stopped");
    client.until("/api/actors", "echo stopped", |t| {
        t["actors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == "echo" && a["state"] == "stopped")
    });
    assert_eq!(
        client.post("/api/actors/echo/start", &json!({})).json()["type"],
        "started"
    );
    let nowhere = client.post("/api/actors/echo/rollback", &json!({}));
    assert_eq!(nowhere.status, 409);
    assert!(
        nowhere.json()["error"]
            .as_str()
            .unwrap()
            .contains("no version older")
    );
    let bad = client.post("/api/actors/echo/rollback", &json!({"version": "two"}));
    assert_eq!(bad.status, 400);
    assert_eq!(
        client.post("/api/actors/echo/explode", &json!({})).status,
        404
    );
    assert_eq!(
        client.post("/api/actors/broker/stop", &json!({})).status,
        409
    );
    assert_eq!(
        client.post("/api/actors/ghost/stop", &json!({})).status,
        404
    );

    // The log: a tail, then what came after.
    client.post(
        "/api/send",
        &json!({"to": "crasher", "body": {"type": "log", "lines": 3, "width": 20}}),
    );
    let log = client.until("/api/actors/crasher/log", "the log lines", |l| {
        l["text"].as_str().unwrap().contains("line 3")
    });
    let to = log["to"].as_u64().unwrap();
    client.post(
        "/api/send",
        &json!({"to": "crasher", "body": {"type": "log", "lines": 1, "width": 30}}),
    );
    let more = client.until(
        &format!("/api/actors/crasher/log?from={to}"),
        "the next line",
        |l| l["text"].as_str().unwrap().contains("line 1"),
    );
    assert_eq!(more["from"], to);
    assert!(!more["text"].as_str().unwrap().contains("line 3"));
    let rotated = client.get("/api/actors/crasher/log?from=999999999").json();
    assert_eq!(rotated["rotated"], true);
    assert_eq!(rotated["from"], 0);
}

#[test]
fn sent_messages_their_replies_as_events_the_graph_and_a_resumed_stream() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let client = web.log_in();
    let mut events = client.events(None);
    let hello = events.next(EVENT_PATIENCE).unwrap();
    assert_eq!(hello.kind, "hello");

    for bad in [
        json!({"to": "echo"}),
        json!({"to": "Not An Id", "body": {"type": "x"}}),
        json!({"to": "echo", "body": "text"}),
        json!({"to": "echo", "body": {"no_type": 1}}),
        json!([1, 2]),
    ] {
        let refused = client.post("/api/send", &bad);
        assert_eq!(refused.status, 400, "{bad}");
        assert!(refused.json()["error"].is_string());
    }
    let not_json = request(
        &client.addr,
        "POST",
        "/api/send",
        &[("Cookie", &client.cookie), ("Origin", &client.origin())],
        b"{oops",
    );
    assert_eq!(not_json.status, 400);

    let sent = client.post(
        "/api/send",
        &json!({"to": "echo", "body": {"type": "ping", "n": 1}}),
    );
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", EVENT_PATIENCE, |m| m["reply_to"] == id.as_str());
    let reply_data: Value = serde_json::from_str(&reply.data).unwrap();
    assert_eq!(reply_data["from"], "echo");
    assert_eq!(reply_data["body"]["n"], 1);
    assert!(!reply.id.is_empty());

    // The graph shows web → echo and echo → web.
    let graph = client.until("/api/graph", "an edge from web to echo", |g| {
        g["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["from"] == "web" && e["to"] == "echo")
    });
    assert_eq!(graph["window_s"], 60);
    events.wait_for("graph", EVENT_PATIENCE, |g| {
        g["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["from"] == "echo" && e["to"] == "web")
    });

    // A page that reconnects with the last id it saw gets what it missed, then goes on.
    client.post(
        "/api/send",
        &json!({"to": "echo", "body": {"type": "ping", "n": 2}}),
    );
    client.post(
        "/api/send",
        &json!({"to": "echo", "body": {"type": "ping", "n": 3}}),
    );
    events.wait_for("message", EVENT_PATIENCE, |m| m["body"]["n"] == 3);
    let mut resumed = client.events(Some(&reply.id));
    let mut ns = Vec::new();
    while ns.len() < 2 {
        let event = resumed.next(EVENT_PATIENCE).expect("the missed messages");
        if event.kind == "message" {
            let data: Value = serde_json::from_str(&event.data).unwrap();
            ns.push(data["body"]["n"].as_u64().unwrap());
        }
    }
    assert_eq!(ns, [2, 3]);
    let mut stale = client.events(Some("another-run:5"));
    stale.wait_for("reset", EVENT_PATIENCE, |_| true);
}

#[test]
fn the_chat_streams_a_turn_and_the_conversation_comes_back_after_a_reload() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "list_dir",
        json!({"path": "/data"}),
    )]));
    fake.push_openai(openai::text_reply("There is a config file."));
    let web = WebHost::start(&world);
    let client = web.log_in();
    let mut events = client.events(None);

    for bad in [
        json!({}),
        json!({"text": ""}),
        json!({"text": 5}),
        json!({"answer": "yes"}),
        json!({"text": "a", "answer": "b", "question": "m-1"}),
    ] {
        assert_eq!(client.post("/api/chat", &bad).status, 400, "{bad}");
    }
    assert_eq!(client.post("/api/chat/stop", &json!({})).status, 400);

    let sent = client.post("/api/chat", &json!({"text": "what is in /data?"}));
    assert_eq!(sent.status, 200);
    let turn = sent.json()["id"].as_str().unwrap().to_string();
    events.wait_for("message", EVENT_PATIENCE, |m| {
        m["from"] == "agent" && m["body"]["type"] == "tool" && m["body"]["tool"] == "list_dir"
    });
    let answer = events.wait_for("message", EVENT_PATIENCE * 4, |m| {
        m["from"] == "agent" && m["body"]["type"] == "text" && m["reply_to"] == turn.as_str()
    });
    let answer: Value = serde_json::from_str(&answer.data).unwrap();
    assert_eq!(answer["body"]["text"], "There is a config file.");
    assert!(answer["body"]["usage"].is_object());

    let conversation = client.get("/api/conversation");
    assert_eq!(conversation.status, 200, "{}", conversation.text());
    let entries = conversation.json()["entries"].clone();
    assert_eq!(entries[0]["role"], "user");
    assert_eq!(entries[0]["text"], "what is in /data?");
    assert_eq!(entries[0]["from"], "web");
    assert_eq!(entries[1]["role"], "tool");
    assert_eq!(
        entries.as_array().unwrap().last().unwrap()["text"],
        "There is a config file."
    );

    // A stop for a turn that ended is answered in words.
    let stop = client.post("/api/chat/stop", &json!({"turn": turn}));
    assert_eq!(stop.status, 200);

    // A rewind needs a turn, and one that changed nothing has nothing to rewind (409, in words).
    for bad in [json!({}), json!({"turn": 7}), json!([1])] {
        assert_eq!(client.post("/api/chat/rewind", &bad).status, 400, "{bad}");
    }
    let rewind = client.post("/api/chat/rewind", &json!({"turn": turn}));
    assert_eq!(rewind.status, 409, "{}", rewind.text());
    assert!(
        rewind.text().contains("nothing to rewind"),
        "{}",
        rewind.text()
    );
}

/// The modification time and bytes of a world's file.
fn stamp(world: &TestWorld, rel: &str) -> (std::time::SystemTime, Vec<u8>) {
    let path = world.path(rel);
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    (modified, std::fs::read(&path).unwrap())
}

/// Logs in with `link` (as printed) from `source` and returns the session's client.
fn log_in_from(web: &WebHost, source: &str, link: &str) -> Client {
    let path = link.split_once(&web.addr).unwrap().1;
    let response = request_from(source, &web.addr, "GET", path, &[]);
    assert_eq!(response.status, 303, "{}", response.text());
    let cookie = response.header("set-cookie").unwrap();
    Client {
        addr: web.addr.clone(),
        cookie: cookie.split(';').next().unwrap().to_string(),
    }
}

/// Adds a person on the web as `owner` and answers their one-time login link.
fn add_person(owner: &Client, id: &str, tier: &str) -> String {
    let added = owner.post("/api/people", &json!({"id": id, "tier": tier}));
    assert_eq!(added.status, 200, "{}", added.text());
    added.json()["link"].as_str().unwrap().to_string()
}

/// The path (with its token) of a login link as printed.
fn link_path<'a>(web: &WebHost, link: &'a str) -> &'a str {
    link.split_once(&web.addr).unwrap().1
}

/// A session's client from a login's `Set-Cookie`.
fn session_from(web: &WebHost, response: &support::http::Response) -> Client {
    let cookie = response.header("set-cookie").expect("a session cookie");
    Client {
        addr: web.addr.clone(),
        cookie: cookie.split(';').next().unwrap().to_string(),
    }
}

#[test]
fn a_login_link_asks_before_it_replaces_another_persons_session() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let ann_link = add_person(&owner, "ann", "member");
    let ann_path = link_path(&web, &ann_link);
    let token = ann_path.split_once("token=").unwrap().1;

    // Opened in a browser that holds the owner's session: a page asks, and nothing changes.
    let asked = request(
        &web.addr,
        "GET",
        ann_path,
        &[("Cookie", &owner.cookie)],
        b"",
    );
    assert_eq!(asked.status, 200, "{}", asked.text());
    assert_eq!(asked.header("set-cookie"), None, "the session stays");
    let page = asked.text();
    for part in [
        "Log in as ann?",
        "This browser is logged in as owner (owner)",
        "<form method=\"post\" action=\"/login\">",
        &format!("name=\"token\" value=\"{token}\""),
    ] {
        assert!(page.contains(part), "{part} in {page}");
    }
    assert!(!page.contains("<script"), "no script: {page}");
    assert!(!page.contains("style="), "no inline style: {page}");
    assert!(
        asked
            .header("content-security-policy")
            .unwrap()
            .contains("default-src 'self'"),
        "the page's own policy"
    );
    assert_eq!(asked.header("cache-control"), Some("no-store"));
    assert_eq!(
        asked.header("referrer-policy"),
        Some("strict-origin"),
        "its form's POST carries its Origin, and no Referer holds the token"
    );
    assert_eq!(owner.get("/api/me").json()["person"], "owner");

    // A page elsewhere that leads a browser to the link: its strict cookie does not come, so a
    // session may be there unseen; the page asks too.
    let led = request(
        &web.addr,
        "GET",
        ann_path,
        &[("Sec-Fetch-Site", "cross-site")],
        b"",
    );
    assert_eq!(led.status, 200, "{}", led.text());
    assert_eq!(led.header("set-cookie"), None);
    assert!(
        led.text()
            .contains("A page on another site opened this login link")
    );

    // The answer counts only from the console's own page.
    let form = format!("token={token}");
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");
    for origin in [None, Some("http://evil.example"), Some("null")] {
        let mut headers = vec![("Cookie", owner.cookie.as_str()), form_type];
        if let Some(origin) = origin {
            headers.push(("Origin", origin));
        }
        let refused = request(&web.addr, "POST", "/login", &headers, form.as_bytes());
        assert_eq!(refused.status, 403, "origin {origin:?}: {}", refused.text());
        assert_eq!(refused.header("set-cookie"), None);
        assert!(refused.json()["error"].as_str().unwrap().contains("Origin"));
    }
    assert_eq!(owner.get("/api/me").json()["person"], "owner");
    let origin = owner.origin();
    let own_page = [
        ("Cookie", owner.cookie.as_str()),
        ("Origin", origin.as_str()),
        form_type,
    ];
    let no_form = request(&web.addr, "POST", "/login", &own_page[..2], b"{}");
    assert_eq!(no_form.status, 400, "{}", no_form.text());
    let wrong = request(
        &web.addr,
        "POST",
        "/login",
        &own_page,
        format!("token={:064x}", 7).as_bytes(),
    );
    assert_eq!(wrong.status, 401);

    // The page's own POST, with the token in its body, replaces the session.
    let confirmed = request(&web.addr, "POST", "/login", &own_page, form.as_bytes());
    assert_eq!(confirmed.status, 303, "{}", confirmed.text());
    assert_eq!(confirmed.header("location"), Some("/"));
    let cookie = confirmed.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let ann = session_from(&web, &confirmed);
    assert_eq!(ann.get("/api/me").json()["person"], "ann");
    let used = request(
        &web.addr,
        "GET",
        ann_path,
        &[("Cookie", &owner.cookie)],
        b"",
    );
    assert_eq!(used.status, 401, "the link worked once");

    // The same person's session, or none, logs in as before.
    let again = owner.post("/api/people/ann/link", &json!({}));
    let again = again.json()["link"].as_str().unwrap().to_string();
    let same = request(
        &web.addr,
        "GET",
        link_path(&web, &again),
        &[("Cookie", &ann.cookie)],
        b"",
    );
    assert_eq!(same.status, 303, "{}", same.text());
    assert_eq!(
        session_from(&web, &same).get("/api/me").json()["person"],
        "ann"
    );
    let fresh = owner.post("/api/people/ann/link", &json!({}));
    let fresh = fresh.json()["link"].as_str().unwrap().to_string();
    let none = request(&web.addr, "GET", link_path(&web, &fresh), &[], b"");
    assert_eq!(none.status, 303, "{}", none.text());
}

#[test]
fn failed_logins_write_nothing_take_no_lock_and_are_slowed_past_five_a_minute() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let ann_link = add_person(&owner, "ann", "member");
    let people_before = stamp(&world, "broker/people.json");
    let sessions_before = stamp(&world, "broker/web/sessions.json");

    // While another process holds the people's lock, wrong links are still answered at once,
    // and a right one waits for the lock off the world's thread: the API goes on meanwhile.
    let lock = std::fs::File::open(world.path("broker/people.lock")).unwrap();
    lock.lock().unwrap();
    for n in 0..5 {
        let wrong = request(
            &web.addr,
            "GET",
            &format!("/login?token={n:064x}"),
            &[],
            b"",
        );
        assert_eq!(wrong.status, 401, "attempt {n}");
    }
    let slowed = request(
        &web.addr,
        "GET",
        &format!("/login?token={:064x}", 9),
        &[],
        b"",
    );
    assert_eq!(slowed.status, 429, "{}", slowed.text());
    let retry: u64 = slowed.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let why = slowed.json()["error"].as_str().unwrap().to_string();
    assert!(why.contains(&format!("try again in {retry} s")), "{why}");
    let blocked = request(&web.addr, "GET", &web.login_path(), &[], b"");
    assert_eq!(
        blocked.status, 429,
        "a blocked client's link is not even read"
    );

    let web_addr = web.addr.clone();
    let ann_path = ann_link.split_once(&web.addr).unwrap().1.to_string();
    let ann_login =
        std::thread::spawn(move || request_from("127.0.0.2", &web_addr, "GET", &ann_path, &[]));
    eventually("ann's login waiting for the lock", || {
        owner.get("/api/me").json()["person"] == "owner" && !ann_login.is_finished()
    });
    assert_eq!(stamp(&world, "broker/people.json"), people_before);
    assert_eq!(stamp(&world, "broker/web/sessions.json"), sessions_before);
    lock.unlock().unwrap();
    let logged_in = ann_login.join().unwrap();
    assert_eq!(logged_in.status, 303, "another client's valid link works");
    assert_ne!(
        stamp(&world, "broker/people.json").1,
        people_before.1,
        "the link is used"
    );
}

#[test]
fn an_open_event_stream_ends_when_its_person_is_demoted_or_removed() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let ann = log_in_from(&web, "127.0.0.3", &add_person(&owner, "ann", "member"));
    let mut owners_page = owner.events(None);
    let mut anns_page = ann.events(None);
    assert_eq!(anns_page.next(EVENT_PATIENCE).unwrap().kind, "hello");

    let demoted = owner.post("/api/people/ann/tier", &json!({"tier": "guest"}));
    assert_eq!(demoted.status, 200, "{}", demoted.text());
    assert!(
        anns_page.ends_within(EVENT_PATIENCE),
        "a demoted member's page stops"
    );
    let mut anns_page = ann.events(None);
    assert_eq!(
        ann.get("/api/me").json()["tier"],
        "guest",
        "the new tier's view"
    );

    let removed = owner.post("/api/people/ann/remove", &json!({}));
    assert_eq!(removed.status, 200, "{}", removed.text());
    assert!(
        anns_page.ends_within(EVENT_PATIENCE),
        "a removed person's page stops"
    );
    let again = EventStream::open(&web.addr, "/api/events", &[("Cookie", &ann.cookie)]);
    assert_eq!(again.status, 401);

    // The owner's page went on all along.
    let sent = owner.post(
        "/api/send",
        &json!({"to": "echo", "body": {"type": "ping"}}),
    );
    let id = sent.json()["id"].as_str().unwrap().to_string();
    owners_page.wait_for("message", EVENT_PATIENCE, |m| m["reply_to"] == id.as_str());
}

/// How soon an open stream ends once its person's tier changes or they are removed: the host
/// looks at the people every 2 s (`PAGE_RECHECK`), with room for a busy machine.
const STREAM_END_PATIENCE: std::time::Duration = std::time::Duration::from_secs(8);

/// `sausage people ARGS --world WORLD`, run while the world runs; its stdout.
fn people_command(world: &TestWorld, args: &[&str]) -> String {
    let mut all = vec!["people"];
    all.extend(args);
    all.extend(["--world", world.root.to_str().unwrap()]);
    let out = sausage(&all);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn an_open_event_stream_ends_when_the_command_line_demotes_or_removes_its_person() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    // A second owner, so that the first may be demoted; and a member to remove.
    people_command(&world, &["add", "olga", "--tier", "owner"]);
    let added = people_command(&world, &["add", "ann", "--tier", "member"]);
    let ann_link = added.lines().last().unwrap().trim();
    let ann_path = ann_link.split_once("/login").unwrap().1;
    let ann = request(&web.addr, "GET", &format!("/login{ann_path}"), &[], b"");
    assert_eq!(ann.status, 303, "{}", ann.text());
    let ann = session_from(&web, &ann);
    // Streams on connections kept alive, as a browser's are: an end must close the connection
    // too, or a client that waits for it sees the stream open.
    let kept_alive = |client: &Client| {
        let headers = [
            ("Cookie", client.cookie.as_str()),
            ("Connection", "keep-alive"),
        ];
        let mut stream = EventStream::open(&web.addr, "/api/events", &headers);
        assert_eq!(stream.status, 200);
        assert_eq!(stream.next(EVENT_PATIENCE).unwrap().kind, "hello");
        stream
    };
    let mut owners_page = kept_alive(&owner);
    let mut anns_page = kept_alive(&ann);

    people_command(&world, &["tier", "owner", "guest"]);
    assert!(
        owners_page.closes_within(STREAM_END_PATIENCE),
        "the demoted owner's stream ends"
    );
    assert_eq!(owner.get("/api/me").json()["tier"], "guest");
    let mut as_guest = owner.events(None);
    assert_eq!(as_guest.next(EVENT_PATIENCE).unwrap().kind, "hello");

    people_command(&world, &["remove", "ann"]);
    assert!(
        anns_page.closes_within(STREAM_END_PATIENCE),
        "the removed member's stream ends"
    );
    assert_eq!(ann.get("/api/me").status, 401);
    assert!(
        !as_guest.ends_within(std::time::Duration::from_secs(3)),
        "a page whose person did not change goes on"
    );
}

/// A line for the crasher's `say` (its stdout as it is): `body` to `web`, with `extra` fields.
fn say(body: Value, extra: Value) -> Value {
    let mut line = json!({"to": "web", "body": body});
    line.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"type": "say", "line": line.to_string()})
}

#[test]
fn for_counts_only_from_the_agent_and_an_answer_only_for_its_persons_open_question() {
    let world = TestWorld::new();
    // Crashers say what they are told: one as the agent, one as any other actor.
    world.install("agent", "crasher");
    world.install("mallory", "crasher");
    let web = WebHost::start_at(&world, &free_addr());
    let owner = web.log_in();
    let ann = log_in_from(&web, "127.0.0.4", &add_person(&owner, "ann", "member"));
    let mut owners_page = owner.events(None);
    let mut anns_page = ann.events(None);
    let tell = |actor: &str, line: Value| {
        let sent = owner.post("/api/send", &json!({"to": actor, "body": line}));
        assert_eq!(sent.status, 200, "{}", sent.text());
    };
    let text_of = |event: &support::http::ServerEvent| -> String {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        data["body"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    // Ann's own message to the agent: its reply is hers.
    let pinged = ann.post(
        "/api/send",
        &json!({"to": "agent", "body": {"type": "ping"}}),
    );
    let ping = pinged.json()["id"].as_str().unwrap().to_string();
    anns_page.wait_for("message", EVENT_PATIENCE, |m| {
        m["reply_to"] == ping.as_str() && m["body"]["type"] == "pong"
    });
    // Mallory names ann by `for`, by her message's id and by a turn: owners see it, ann not.
    let text = |t: &str| json!({"type": "text", "for": "ann", "turn": ping, "text": t});
    tell(
        "mallory",
        say(text("from mallory"), json!({"reply_to": ping})),
    );
    owners_page.wait_for("message", EVENT_PATIENCE, |m| {
        m["from"] == "mallory" && m["body"]["text"] == "from mallory"
    });
    tell("agent", say(text("from the agent"), json!({})));
    loop {
        let event = anns_page.next(EVENT_PATIENCE).expect("the agent's message");
        let text = text_of(&event);
        assert_ne!(text, "from mallory", "another actor's `for` is ignored");
        if text == "from the agent" {
            break;
        }
    }

    // Questions: only ann answers hers, once, while its turn runs.
    let question = |id: &str, turn: &str| {
        let body = json!({"type": "question", "for": "ann", "turn": turn, "text": "red?"});
        say(body, json!({"id": id}))
    };
    tell("agent", question("q1", "t1"));
    tell("mallory", question("q2", "t1"));
    tell("agent", question("q3", "t3"));
    tell(
        "agent",
        say(
            json!({"type": "text", "for": "ann", "turn": "t3", "text": "done"}),
            json!({}),
        ),
    );
    anns_page.wait_for("message", EVENT_PATIENCE, |m| m["body"]["text"] == "done");
    let answer = |client: &Client, question: &str| {
        client.post("/api/chat", &json!({"answer": "red", "question": question}))
    };
    for (client, question, why) in [
        (&owner, "agent/q1", "put to ann, not the owner"),
        (&ann, "agent/nothing", "never asked"),
        (&ann, "mallory/q2", "not the agent's"),
        (&ann, "agent/q3", "its turn ended"),
    ] {
        let refused = answer(client, question);
        assert_eq!(refused.status, 400, "{why}: {}", refused.text());
        let reason = refused.json()["error"].as_str().unwrap().to_string();
        assert!(
            reason.contains(&format!("question `{question}`")),
            "{reason}"
        );
    }
    // The open question outlives a restart of the world, as the agent's wait for it does.
    let addr = web.addr.clone();
    assert!(web.host.quit().success());
    let _web = WebHost::start_at(&world, &addr);
    let answered = answer(&ann, "agent/q1");
    assert_eq!(answered.status, 200, "{}", answered.text());
    assert_eq!(
        answer(&ann, "agent/q1").status,
        400,
        "a question is answered once"
    );
    eventually("the one answer in the agent's log", || {
        world.log("agent").matches("answer").count() == 1
    });
}

#[test]
fn a_flood_of_big_messages_to_web_keeps_only_the_newest_16_mib() {
    let world = TestWorld::new();
    world.install("flood", "pingpong");
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let mut page = owner.events(None);
    // 100 messages of 200 kB: far fewer than the 1,024 kept by count, more than 16 MiB.
    let count = 100;
    let flood = json!({"type": "flood", "to": "web", "count": count, "pad": 200_000});
    owner.post("/api/send", &json!({"to": "flood", "body": flood}));
    let mut ids = Vec::new();
    while ids.len() < count {
        let event = page
            .next(EVENT_PATIENCE)
            .expect("every message on a page that reads");
        let data: Value = serde_json::from_str(&event.data).unwrap_or_default();
        if data["body"]["type"] == "seq" {
            assert_eq!(data["body"]["n"], ids.len() + 1);
            ids.push(event.id);
        }
    }
    let mut first = owner.events(Some(&ids[0]));
    first.wait_for("reset", EVENT_PATIENCE, |_| true);
    let mut recent = owner.events(Some(&ids[count - 4]));
    let mut replayed = Vec::new();
    while replayed.len() < 3 {
        let event = recent.next(EVENT_PATIENCE).expect("the newest are kept");
        assert_ne!(event.kind, "reset");
        if event.kind == "message" {
            replayed.push(event.id);
        }
    }
    assert_eq!(replayed, ids[count - 3..]);
}
