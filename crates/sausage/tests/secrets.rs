//! Secrets and grants (DESIGN §25) from the command line to an actor's request: a planted
//! value set from stdin, granted, sent by the host under its base URL only and for the granted
//! actor only, revoked from the next request on, and found nowhere else in the world.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use serde_json::{Value, json};
use support::*;

const PLANTED: &str = "pl4nted-v4lue-9f3e";

/// A server that answers every request 200 `howdy` and hands over each request's head.
fn recording_server() -> (String, mpsc::Receiver<String>) {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let (heads, received) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in server.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) <= 2 {
                    break;
                }
                head.push_str(&line);
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhowdy",
            );
            if heads.send(head).is_err() {
                return;
            }
        }
    });
    (addr, received)
}

fn get(host: &mut Host, actor: &str, url: &str) -> Value {
    host.tell(actor, json!({"type": "get", "url": url}));
    host.wait_for(&format!("{actor}'s answer"), |m| {
        m.from == actor
            && ["response", "http_error"].contains(&m.body["type"].as_str().unwrap_or(""))
    })
    .body
}

#[test]
fn a_granted_secret_reaches_its_url_for_its_actor_only_and_is_seen_nowhere_else() {
    let world = TestWorld::new();
    world.install("fetcher", "fetcher");
    world.install("other", "fetcher");
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let (addr, heads) = recording_server();
    let base = format!("http://{addr}/api");

    // Wrong input is refused before a value is asked, and changes nothing.
    let refused = sausage_with_input(&["secret", "set", "bad name", "--url", &base, dir], PLANTED);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("cannot name a secret"),
        "{}",
        text(&refused.stderr)
    );
    let refused = sausage_with_input(&["secret", "set", "gh", "--url", "ftp://x", dir], PLANTED);
    assert!(
        text(&refused.stderr).contains("must start with https://"),
        "{}",
        text(&refused.stderr)
    );
    let refused = sausage_with_input(
        &[
            "secret", "set", "gh", "--url", &base, "--header", "a b", dir,
        ],
        PLANTED,
    );
    assert!(
        text(&refused.stderr).contains("not a header name"),
        "{}",
        text(&refused.stderr)
    );
    let refused = sausage(&["secret", "grant", "gh", "fetcher", dir]);
    assert!(
        text(&refused.stderr).contains("no secret `gh`"),
        "{}",
        text(&refused.stderr)
    );

    let set = sausage_with_input(
        &[
            "secret",
            "set",
            "gh",
            "--url",
            &base,
            "--header",
            "x-api-key",
            "--format",
            "Token {}",
            dir,
        ],
        &format!("{PLANTED}\n"),
    );
    assert!(set.status.success(), "{}", text(&set.stderr));
    assert!(
        text(&set.stdout).contains("Set secret `gh`"),
        "{}",
        text(&set.stdout)
    );
    let unknown = sausage(&["secret", "grant", "gh", "nobody", dir]);
    assert!(
        text(&unknown.stderr).contains("no actor `nobody`"),
        "{}",
        text(&unknown.stderr)
    );
    let granted = sausage(&["secret", "grant", "gh", "fetcher", dir]);
    assert!(granted.status.success(), "{}", text(&granted.stderr));

    let mut host = world.run();
    // Under the base URL: the header, written as the format says.
    let answer = get(&mut host, "fetcher", &format!("{base}/user"));
    assert_eq!(answer["body"], "howdy", "{answer}");
    let head = heads.recv().unwrap();
    assert!(head.starts_with("GET /api/user "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("x-api-key: token {PLANTED}").to_ascii_lowercase()),
        "{head}"
    );
    // The same host outside the base URL: reached (the grant allows the host), no header.
    let answer = get(&mut host, "fetcher", &format!("http://{addr}/elsewhere"));
    assert_eq!(answer["body"], "howdy", "{answer}");
    let head = heads.recv().unwrap();
    assert!(head.starts_with("GET /elsewhere "), "{head}");
    assert!(!head.contains(PLANTED), "{head}");
    // An actor it is not granted to: denied, as with no network.
    let answer = get(&mut host, "other", &format!("{base}/user"));
    assert_eq!(answer["type"], "http_error", "{answer}");

    // Listed without its value; its use is in the audit log.
    let list = sausage(&["secret", "list", "--json", dir]);
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed[0]["name"], "gh");
    assert_eq!(listed[0]["grants"][0]["actor"], "fetcher");
    assert_eq!(listed[0]["last_use"]["status"], 200, "{listed}");
    let audit = sausage(&["audit", dir]);
    let audit = text(&audit.stdout);
    assert!(audit.contains("granted gh to fetcher"), "{audit}");
    assert!(
        audit.contains(&format!("fetcher used gh for {base}/user: 200")),
        "{audit}"
    );

    // Revoked while the actor runs: its next request has neither the header nor the host.
    let revoked = sausage(&["secret", "revoke", "gh", "fetcher", dir]);
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let answer = get(&mut host, "fetcher", &format!("{base}/user"));
    assert_eq!(answer["type"], "http_error", "{answer}");
    let output = host.stderr();
    assert!(host.quit().success());

    // The value is in the secrets file and nowhere else: no file of the world, no listing,
    // no output of the host.
    let secrets_file = world.path("broker/secrets/secrets.json");
    let holding: Vec<_> = files_holding(&world.path(""), PLANTED.as_bytes())
        .into_iter()
        .filter(|f| *f != secrets_file)
        .collect();
    assert!(holding.is_empty(), "the value leaked into {holding:?}");
    assert!(
        std::fs::read_to_string(&secrets_file)
            .unwrap()
            .contains(PLANTED)
    );
    for printed in [
        text(&list.stdout),
        audit,
        output,
        text(&set.stdout),
        text(&set.stderr),
    ] {
        assert!(!printed.contains(PLANTED), "{printed}");
    }
    sausage(&["secret", "remove", "gh", dir]);
    assert!(
        !std::fs::read_to_string(&secrets_file)
            .unwrap()
            .contains(PLANTED)
    );
}

#[test]
fn on_the_web_members_set_and_grant_their_own_secrets_to_their_own_actors_and_guests_none() {
    let world = TestWorld::new();
    world.install("ann-bot", "fetcher");
    world.install("bob-bot", "fetcher");
    world.set_owner("ann-bot", "ann");
    world.set_owner("bob-bot", "bob");
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = support::web::WebHost::start(&world);
    let add = |id: &str, tier: &str| {
        let out = sausage(&["people", "add", id, "--tier", tier, dir]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        web.log_in_with(&text(&out.stdout))
    };
    let (ann, bob, gus) = (
        add("ann", "member"),
        add("bob", "member"),
        add("gus", "guest"),
    );
    let set = |client: &support::web::Client, name: &str| {
        client.post(
            "/api/secrets",
            &json!({"name": name, "url": "https://api.example", "value": PLANTED}),
        )
    };
    assert_eq!(set(&ann, "anns").status, 200);
    assert_eq!(set(&bob, "bobs").status, 200);

    // What each may not do is refused with why, and changes nothing.
    let before = std::fs::read(world.path("broker/secrets/secrets.json")).unwrap();
    let refusals = [
        (set(&gus, "guss"), 403, "guests may not"),
        (set(&ann, "bobs"), 403, "was set by bob"),
        (
            ann.post("/api/secrets/anns/grant", &json!({"actor": "bob-bot"})),
            403,
            "is bob's",
        ),
        (
            ann.post("/api/secrets/anns/grant", &json!({"actor": "nobody"})),
            404,
            "no actor `nobody`",
        ),
        (
            ann.post("/api/secrets/anns/grant", &json!({})),
            400,
            "notifier",
        ),
        (
            ann.post("/api/secrets/anns/steal", &json!({})),
            404,
            "no action `steal`",
        ),
        (
            ann.post("/api/secrets/bobs/remove", &json!({})),
            403,
            "was set by bob",
        ),
        (
            ann.post("/api/secrets", &json!({"name": "x"})),
            400,
            "https://api.github.com",
        ),
        (
            ann.post(
                "/api/secrets",
                &json!({"name": "x y", "url": "https://a", "value": PLANTED}),
            ),
            400,
            "cannot name a secret",
        ),
        (gus.get("/api/secrets"), 403, "guests may not"),
    ];
    for (response, status, why) in refusals {
        assert_eq!(response.status, status, "{}", response.text());
        assert!(
            response.text().contains(why),
            "{} should say {why}",
            response.text()
        );
        assert!(!response.text().contains(PLANTED));
    }
    assert_eq!(
        std::fs::read(world.path("broker/secrets/secrets.json")).unwrap(),
        before
    );

    // Ann grants her own to her own actor, and sees only her own.
    let granted = ann.post("/api/secrets/anns/grant", &json!({"actor": "ann-bot"}));
    assert_eq!(granted.status, 200, "{}", granted.text());
    let listed = ann.get("/api/secrets");
    let names: Vec<Value> = listed.json()["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, [json!("anns")]);
    assert_eq!(listed.json()["secrets"][0]["grants"][0]["actor"], "ann-bot");
    assert!(!listed.text().contains(PLANTED));
    // Bob's secret to ann's actor waits for an owner (the default `grant` rule); bob, a
    // member, may not decide it; the owner's approval makes the grant.
    let held = ann.post(
        "/api/secrets/bobs/grant",
        &json!({"actor": "ann-bot", "why": "it reads bob's repos"}),
    );
    assert_eq!(held.status, 202, "{}", held.text());
    let held = held.json();
    assert_eq!(held["type"], "held", "{held}");
    let id = held["approval"].as_str().unwrap();
    assert!(
        held["reason"].as_str().unwrap().contains("(set by bob)"),
        "{held}"
    );
    let by_bob = bob.post(&format!("/api/approvals/{id}/approve"), &json!({}));
    assert_eq!(by_bob.status, 403, "{}", by_bob.text());
    let owner = web.log_in();
    let approved = owner.post(&format!("/api/approvals/{id}/approve"), &json!({}));
    assert_eq!(approved.status, 200, "{}", approved.text());
    let granted_to = || -> Value {
        let listed = owner.get("/api/secrets").json();
        let bobs = listed["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "bobs")
            .cloned()
            .unwrap();
        bobs["grants"].clone()
    };
    eventually("the approved grant", || {
        granted_to()[0]["actor"] == "ann-bot"
    });
    assert_eq!(granted_to()[0]["by"], "owner");
    let revoked = ann.post("/api/secrets/anns/revoke", &json!({"actor": "ann-bot"}));
    assert_eq!(revoked.json()["changed"], true, "{}", revoked.text());
    assert_eq!(bob.post("/api/secrets/bobs/remove", &json!({})).status, 200);

    // Owners read the audit log on the page, newest first; nobody else does.
    let on_the_page = owner.get("/api/audit");
    assert_eq!(on_the_page.status, 200, "{}", on_the_page.text());
    let lines = on_the_page.json()["audit"].as_array().unwrap().clone();
    assert_eq!(
        lines[0]["event"], "secret_remove",
        "newest first: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "approved" && l["by"] == "owner")
    );
    assert!(!on_the_page.text().contains(PLANTED));
    for client in [&ann, &gus] {
        let refused = client.get("/api/audit");
        assert_eq!(refused.status, 403, "{}", refused.text());
        assert!(refused.text().contains("only owners read the audit log"));
    }

    // Who came in, as what, and every secret's story, in the audit log; no value.
    let audit = text(&sausage(&["audit", dir]).stdout);
    for line in [
        "added ann as member",
        "added gus as guest",
        "ann set secret anns for https://api.example",
        "ann granted anns to ann-bot",
        "ann revoked anns from ann-bot",
        "bob removed secret bobs",
    ] {
        assert!(audit.contains(line), "{line} is not in\n{audit}");
    }
    assert!(!audit.contains(PLANTED));
}

#[test]
fn new_code_from_a_member_keeps_only_the_grants_that_member_gave() {
    let world = TestWorld::new();
    world.install("ann-bot", "fetcher");
    world.set_owner("ann-bot", "ann");
    // A program ann may name in her own namespace.
    std::fs::copy(
        wasm("fetcher"),
        world.path("actor/ann-bot/public/fetcher.wasm"),
    )
    .unwrap();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = support::web::WebHost::start(&world);
    let out = sausage(&["people", "add", "ann", "--tier", "member", dir]);
    let ann = web.log_in_with(&text(&out.stdout));
    // The owner grants one secret to ann's bot, ann another.
    let set = sausage_with_input(
        &["secret", "set", "owners", "--url", "https://o.example", dir],
        PLANTED,
    );
    assert!(set.status.success(), "{}", text(&set.stderr));
    assert!(
        sausage(&["secret", "grant", "owners", "ann-bot", dir])
            .status
            .success()
    );
    let anns = json!({"name": "anns", "url": "https://a.example", "value": PLANTED});
    assert_eq!(ann.post("/api/secrets", &anns).status, 200);
    let granted = ann.post("/api/secrets/anns/grant", &json!({"actor": "ann-bot"}));
    assert_eq!(granted.status, 200, "{}", granted.text());

    let mut events = ann.events(None);
    let sent = ann.post(
        "/api/send",
        &json!({"to": "broker", "body": {"type": "upgrade", "actor": "ann-bot",
            "wasm": "/actor/ann-bot/public/fetcher.wasm"}}),
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", support::web::EVENT_PATIENCE, |data| {
        data["reply_to"] == id
    });
    let reply: Value = serde_json::from_str::<Value>(&reply.data).unwrap()["body"].clone();
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["grants_dropped"], json!(["owners"]), "{reply}");
    let listed: Value =
        serde_json::from_slice(&sausage(&["secret", "list", "--json", dir]).stdout).unwrap();
    let grants = |name: &str| -> Vec<Value> {
        let secret = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap();
        secret["grants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["actor"].clone())
            .collect()
    };
    assert!(
        grants("owners").is_empty(),
        "the owner's grant went with the old code"
    );
    assert_eq!(grants("anns"), [json!("ann-bot")], "ann's own grant stays");
    let audit = text(&sausage(&["audit", dir]).stdout);
    assert!(audit.contains("ann revoked owners from ann-bot"), "{audit}");

    // A rollback by ann replaces the code too: the owner's grant given since goes again.
    assert!(
        sausage(&["secret", "grant", "owners", "ann-bot", dir])
            .status
            .success()
    );
    let mut events = ann.events(None);
    let sent = ann.post(
        "/api/send",
        &json!({"to": "broker", "body": {"type": "rollback", "actor": "ann-bot"}}),
    );
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", support::web::EVENT_PATIENCE, |data| {
        data["reply_to"] == id
    });
    let reply: Value = serde_json::from_str::<Value>(&reply.data).unwrap()["body"].clone();
    assert_eq!(reply["type"], "rolled_back", "{reply}");
    assert_eq!(reply["grants_dropped"], json!(["owners"]), "{reply}");
}
