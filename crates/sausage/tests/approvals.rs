//! Approvals (DESIGN §25): an action a `"hold"` rule holds waits for a person of the
//! approver's tier, is decided once, survives a restart, and goes on with the decision.

mod support;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::{final_reply, tool_outputs, world_with_agent};
use support::web::{Client, EVENT_PATIENCE, WebHost};
use support::*;

const PLANTED: &str = "gh-t0ken-pl4nted-51c2";

/// Waits until `client` sees exactly one entry waiting, and returns it.
fn the_one_waiting(client: &Client) -> Value {
    client.until("/api/approvals", "an approval waiting", |listed| {
        listed["approvals"].as_array().is_some_and(|a| a.len() == 1)
    })["approvals"][0]
        .clone()
}

#[test]
fn the_agent_asks_for_a_secret_and_its_grant_and_the_turn_goes_on_when_the_page_answers() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.install("gh-bot", "fetcher");
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "request_secret",
        json!({"name": "gh", "url": "https://api.github.com", "why": "to list your issues"}),
    )]));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "request_grant",
        json!({"secret": "gh", "actor": "gh-bot", "why": "gh-bot calls GitHub"}),
    )]));
    fake.push_openai(openai::text_reply("gh-bot can call GitHub now."));
    let mut web = WebHost::start(&world);
    let owner = web.log_in();
    web.host.send("list my github issues");

    let asked = the_one_waiting(&owner);
    // The person following the turn is told what waits and where to decide.
    let link = format!("http://{}/#/approvals", web.addr);
    let told = web.host.wait_for("the agent's note of what waits", |m| {
        m.from == "agent"
            && m.body["type"] == "progress"
            && m.body["text"].as_str().is_some_and(|t| t.contains(&link))
    });
    assert!(
        told.body["text"]
            .as_str()
            .unwrap()
            .contains("set secret `gh`"),
        "{:?}",
        told.body
    );
    assert_eq!(asked["action"], "secret", "{asked}");
    assert_eq!(asked["for"], "owner", "{asked}");
    assert_eq!(asked["actor"], "agent", "{asked}");
    assert_eq!(asked["why"], "to list your issues", "{asked}");
    let id = asked["id"].as_str().unwrap();
    // Approving a request for a value without one is refused, and changes nothing.
    let bare = owner.post(&format!("/api/approvals/{id}/approve"), &json!({}));
    assert_eq!(bare.status, 400, "{}", bare.text());
    assert!(bare.text().contains("give its value"), "{}", bare.text());
    let bad = owner.post(
        &format!("/api/approvals/{id}/approve"),
        &json!({"value": 7}),
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
    let set = owner.post(
        &format!("/api/approvals/{id}/approve"),
        &json!({"value": PLANTED}),
    );
    assert_eq!(set.status, 200, "{}", set.text());

    // The turn goes on to ask for the grant, which the same person decides.
    let grant = owner.until("/api/approvals", "the grant request", |listed| {
        listed["approvals"][0]["action"] == "grant"
    })["approvals"][0]
        .clone();
    assert_eq!(
        grant["what"], "grant secret `gh` to actor `gh-bot`",
        "{grant}"
    );
    let id = grant["id"].as_str().unwrap();
    let granted = owner.post(&format!("/api/approvals/{id}/approve"), &json!({}));
    assert_eq!(granted.status, 200, "{}", granted.text());
    assert_eq!(
        final_reply(&mut web.host)["text"],
        "gh-bot can call GitHub now."
    );
    let outputs = tool_outputs(&fake, 2);
    assert!(outputs[0].contains(r#""type":"secret_set""#), "{outputs:?}");
    assert!(outputs[1].contains(r#""type":"granted""#), "{outputs:?}");

    let listed: Value =
        serde_json::from_slice(&sausage(&["secret", "list", "--json", dir]).stdout).unwrap();
    assert_eq!(listed[0]["name"], "gh", "{listed}");
    assert_eq!(listed[0]["set_by"], "owner", "{listed}");
    assert_eq!(listed[0]["grants"][0]["actor"], "gh-bot", "{listed}");
    // The value reached the secrets file only: not the model, the agent's files or a log.
    let requests =
        serde_json::to_string(&fake.requests().iter().map(|r| &r.body).collect::<Vec<_>>())
            .unwrap();
    assert!(!requests.contains(PLANTED));
    let holding: Vec<_> = files_holding(&world.path(""), PLANTED.as_bytes())
        .into_iter()
        .filter(|f| !f.ends_with("broker/secrets/secrets.json"))
        .collect();
    assert!(holding.is_empty(), "the value is in {holding:?}");
    assert!(!web.host.stderr().contains(PLANTED));
}

/// Sends ann's upgrade of her bot to a build whose `actor.json` reaches a new host, and
/// returns the broker's first answer.
fn upgrade_reaching_a_new_host(ann: &Client) -> Value {
    let mut events = ann.events(None);
    let sent = ann.post(
        "/api/send",
        &json!({"to": "broker", "body": {"type": "upgrade", "actor": "ann-bot",
            "wasm": "/actor/ann-bot/public/fetcher.wasm", "source": "/actor/ann-bot/public/src",
            "why": "it reads the weather"}}),
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", EVENT_PATIENCE, |data| data["reply_to"] == id);
    serde_json::from_str::<Value>(&reply.data).unwrap()["body"].clone()
}

/// A world where member ann's `ann-bot` runs, with a build of it in its public folder whose
/// `actor.json` reaches a host it could not reach before.
fn world_with_anns_bot() -> TestWorld {
    let world = TestWorld::new();
    world.install("ann-bot", "fetcher");
    world.set_owner("ann-bot", "ann");
    std::fs::copy(
        wasm("fetcher"),
        world.path("actor/ann-bot/public/fetcher.wasm"),
    )
    .unwrap();
    std::fs::create_dir_all(world.path("actor/ann-bot/public/src")).unwrap();
    std::fs::write(
        world.path("actor/ann-bot/public/src/actor.json"),
        r#"{"network": ["weather.example:443"]}"#,
    )
    .unwrap();
    world
}

#[test]
fn a_members_new_network_host_waits_for_an_owner_who_denies_then_approves_after_a_restart() {
    let world = world_with_anns_bot();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let out = sausage(&["people", "add", "ann", "--tier", "member", dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ann = web.log_in_with(&text(&out.stdout));

    let held = upgrade_reaching_a_new_host(&ann);
    assert_eq!(held["type"], "held", "{held}");
    assert_eq!(held["approval"], "h1", "{held}");
    assert_eq!(held["action"], "network", "{held}");
    let reason = held["reason"].as_str().unwrap();
    assert!(reason.contains("weather.example:443"), "{reason}");
    assert!(reason.contains("an owner's approval"), "{reason}");
    let registry_version = || world.json("sausage.json")["actors"]["ann-bot"]["version"].clone();
    assert_eq!(registry_version(), 1, "nothing changed while it waits");

    // The one who asked may not decide it, nor approve twice; nor may anyone an unknown id.
    let own = ann.post("/api/approvals/h1/approve", &json!({}));
    assert_eq!(own.status, 403, "{}", own.text());
    assert!(
        own.text().contains("waits for an owner's"),
        "{}",
        own.text()
    );
    let unknown = owner.post("/api/approvals/h9/approve", &json!({}));
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let wrong = owner.post("/api/approvals/h1/maybe", &json!({}));
    assert_eq!(wrong.status, 404, "{}", wrong.text());
    let listed = owner.get("/api/approvals").json();
    assert_eq!(listed["approvals"][0]["id"], "h1", "{listed}");
    assert_eq!(listed["approvals"][0]["asked_by"], "ann", "{listed}");
    assert_eq!(
        listed["approvals"][0]["why"], "it reads the weather",
        "{listed}"
    );

    // Denied: ann's request is answered with who denied it.
    let mut events = ann.events(None);
    let denied = owner.post("/api/approvals/h1/deny", &json!({}));
    assert_eq!(denied.status, 200, "{}", denied.text());
    assert_eq!(denied.json()["type"], "denied");
    let answer = events.wait_for("message", EVENT_PATIENCE, |data| {
        data["body"]["type"] == "error"
    });
    assert!(answer.data.contains("denied it (h1)"), "{}", answer.data);
    let again = owner.post("/api/approvals/h1/approve", &json!({}));
    assert_eq!(again.status, 404, "decided once: {}", again.text());
    assert_eq!(registry_version(), 1);

    // Asked again, held again, and the hold outlives the host.
    let held = upgrade_reaching_a_new_host(&ann);
    assert_eq!(held["approval"], "h2", "{held}");
    drop((ann, owner, web));
    let listed = sausage(&["approvals", "--json", dir]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["id"], "h2", "{listed}");
    let lines = text(&sausage(&["approvals", dir]).stdout);
    assert!(
        lines.starts_with("h2  network  ann: upgrade `ann-bot`"),
        "{lines}"
    );
    let status = text(&sausage(&["status", dir]).stdout);
    assert!(
        status.contains("1 waiting for approval: `sausage approvals` lists them"),
        "{status}"
    );

    let web = WebHost::start(&world);
    let owner = web.log_in();
    let approved = owner.post("/api/approvals/h2/approve", &json!({}));
    assert_eq!(approved.status, 200, "{}", approved.text());
    eventually("the approved upgrade to be installed", || {
        registry_version() == 2
    });
    let manifest = world.read("actor/ann-bot/source/actor.json");
    assert!(manifest.contains("weather.example:443"), "{manifest}");
    assert!(
        owner.get("/api/approvals").json()["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let audit = text(&sausage(&["audit", dir]).stdout);
    for line in [
        "ann asked (h1)",
        "denied h1 (ann's upgrade",
        "ann asked (h2)",
        "approved h2 (ann's upgrade",
    ] {
        assert!(audit.contains(line), "{line}: {audit}");
    }
}

/// Sends `body` to the broker from `client`'s page and returns the broker's answer.
fn ask_broker(client: &Client, body: Value) -> Value {
    let mut events = client.events(None);
    let sent = client.post("/api/send", &json!({"to": "broker", "body": body}));
    assert_eq!(sent.status, 200, "{}", sent.text());
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", EVENT_PATIENCE, |data| data["reply_to"] == id);
    serde_json::from_str::<Value>(&reply.data).unwrap()["body"].clone()
}

#[test]
fn spending_is_held_past_its_threshold_for_members_and_the_rules_are_what_sausage_json_says() {
    let world = TestWorld::new();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let out = sausage(&["people", "add", "ann", "--tier", "member", dir]);
    let ann = web.log_in_with(&text(&out.stdout));
    let spend =
        |client: &Client, usd: Value| ask_broker(client, json!({"type": "spend", "usd": usd}));
    let below = spend(&ann, json!(1.5));
    assert_eq!(below, json!({"type": "spend_ok", "up_to_usd": 2.0}));
    let held = spend(&ann, json!(2.5));
    assert_eq!(held["type"], "held", "{held}");
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .contains("spending past $2.00"),
        "{held}"
    );
    assert_eq!(
        spend(&owner, json!(50))["up_to_usd"],
        Value::Null,
        "no rule for owners"
    );
    let bad = spend(&ann, json!(-1));
    assert!(
        bad["reason"].as_str().unwrap().contains("0 or more"),
        "{bad}"
    );
    drop((ann, owner, web));

    // `"hold": []` holds nothing; a misspelt rule keeps the world from starting, with why.
    let mut registry = world.json("sausage.json");
    registry["hold"] = json!([]);
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let web = WebHost::start(&world);
    let out = sausage(&["people", "link", "ann", dir]);
    let ann = web.log_in_with(&text(&out.stdout));
    assert_eq!(spend(&ann, json!(9))["up_to_usd"], Value::Null);
    drop((ann, web));
    registry["hold"] = json!([{"action": "spawn", "by": "members"}]);
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let run = sausage(&["run", dir]);
    assert!(!run.status.success());
    let said = text(&run.stderr);
    assert!(said.contains("the registry is not valid"), "{said}");
    assert!(said.contains("members"), "{said}");
}

#[test]
fn who_may_not_decide_is_refused_with_why_and_the_console_decides_for_its_owner() {
    let world = world_with_anns_bot();
    world.install("relay", "relay");
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let mut web = WebHost::start(&world);
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
    assert_eq!(upgrade_reaching_a_new_host(&ann)["approval"], "h1");
    let before = std::fs::read(world.path("broker/approvals.json")).unwrap();

    // Bob and gus do not see ann's; none of them decides it; nor does an actor.
    assert!(
        bob.get("/api/approvals").json()["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        gus.get("/api/approvals").json()["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(ann.get("/api/approvals").json()["approvals"][0]["id"], "h1");
    for (client, why) in [
        (&bob, "waits for an owner's decision, and bob is a member"),
        (&gus, "gus is a guest"),
        (&ann, "waits for an owner's decision, and ann is a member"),
    ] {
        let refused = client.post("/api/approvals/h1/approve", &json!({}));
        assert_eq!(refused.status, 403, "{}", refused.text());
        assert!(refused.text().contains(why), "{}", refused.text());
    }
    web.host.tell(
        "relay",
        json!({"type": "relay", "to": "broker",
               "body": {"type": "decide", "approval": "h1", "approve": true}}),
    );
    let relayed = web.host.wait_type("relay", "relayed");
    let reason = relayed["body"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not from actor relay"), "{relayed}");
    let by_value = ask_broker(
        &bob,
        json!({"type": "decide", "approval": "h1", "approve": true, "value": "x"}),
    );
    assert!(
        by_value["reason"]
            .as_str()
            .unwrap()
            .contains("never taken from a message"),
        "{by_value}"
    );
    assert_eq!(
        std::fs::read(world.path("broker/approvals.json")).unwrap(),
        before,
        "refusals change nothing"
    );

    // The owner at the console lists it and approves it.
    web.host.send("/approvals");
    web.host.wait_stdout(
        "h1  network  ann: upgrade `ann-bot` so that it may reach weather.example:443",
    );
    web.host.send("/approve h1");
    web.host.wait_stdout("h1 approved: upgrade `ann-bot`");
    eventually("the approved upgrade", || {
        world.json("sausage.json")["actors"]["ann-bot"]["version"] == 2
    });
    web.host.send("/deny h1");
    web.host
        .wait_stderr("console: /deny h1: nothing waits as h1");
}

#[test]
fn a_held_schedule_is_made_by_the_scheduler_once_an_owner_approves_it() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut registry = world.json("sausage.json");
    registry["hold"] = json!([{"action": "schedule", "by": "member"}]);
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let out = sausage(&["people", "add", "ann", "--tier", "member", dir]);
    let ann = web.log_in_with(&text(&out.stdout));

    let mut events = ann.events(None);
    let schedule = json!({"type": "schedule", "every": 3600, "to": "echo",
        "body": {"type": "ping"}, "why": "a heartbeat"});
    let sent = ann.post("/api/send", &json!({"to": "scheduler", "body": schedule}));
    assert_eq!(sent.status, 200, "{}", sent.text());
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let first = events.wait_for("message", EVENT_PATIENCE, |data| data["reply_to"] == id);
    let held: Value = serde_json::from_str::<Value>(&first.data).unwrap()["body"].clone();
    assert_eq!(held["type"], "held", "{held}");
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .contains("schedule `ping` to echo (every 3600 s)"),
        "{held}"
    );
    assert!(
        owner.get("/api/schedules").json()["schedules"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let approved = owner.post(
        &format!(
            "/api/approvals/{}/approve",
            held["approval"].as_str().unwrap()
        ),
        &json!({}),
    );
    assert_eq!(approved.status, 200, "{}", approved.text());
    let then = events.wait_for("message", EVENT_PATIENCE, |data| {
        data["reply_to"] == id && data["body"]["type"] != "held"
    });
    let made: Value = serde_json::from_str::<Value>(&then.data).unwrap()["body"].clone();
    assert_eq!(made["type"], "scheduled", "{made}");
    let listed = owner.get("/api/schedules").json();
    assert_eq!(listed["schedules"][0]["to"], "echo", "{listed}");
    assert_eq!(listed["schedules"][0]["creator"], "ann", "{listed}");
}

#[test]
fn wrong_requests_and_decisions_are_refused_with_what_to_do_and_file_nothing() {
    let world = world_with_anns_bot();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let web = WebHost::start(&world);
    let out = sausage(&["people", "add", "ann", "--tier", "member", dir]);
    let ann = web.log_in_with(&text(&out.stdout));
    let secret = |fields: Value| {
        let mut body = json!({"type": "request_secret"});
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        ask_broker(&ann, body)
    };
    let cases = [
        (
            secret(json!({"url": "https://a.example"})),
            "missing field `name`",
        ),
        (
            secret(json!({"name": "a b", "url": "https://a.example"})),
            "cannot name a secret",
        ),
        (
            secret(json!({"name": "ok", "url": "ftp://a.example"})),
            "https",
        ),
        (
            secret(json!({"name": "ok", "url": "https://a.example", "header": "host"})),
            "host",
        ),
        (
            secret(json!({"name": "ok", "url": "https://a.example", "why": 5})),
            "`why` must be a string",
        ),
        (
            ask_broker(
                &ann,
                json!({"type": "request_grant", "secret": "nope", "actor": "ann-bot"}),
            ),
            "no secret `nope`",
        ),
        (
            ask_broker(
                &ann,
                json!({"type": "request_grant", "secret": "nope", "actor": "ghost"}),
            ),
            "no actor `ghost`",
        ),
        (
            ask_broker(
                &ann,
                json!({"type": "decide", "approval": 5, "approve": true}),
            ),
            "`approval`",
        ),
        (
            ask_broker(&ann, json!({"type": "decide", "approval": "h1"})),
            "`approve` must be true",
        ),
        (ask_broker(&ann, json!({"type": "spend"})), "`usd` must be"),
    ];
    for (answer, why) in cases {
        assert_eq!(answer["type"], "error", "{answer}");
        let reason = answer["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{reason} should say {why}");
    }
    let not_an_object = ann.post("/api/approvals/h1/approve", &json!([1]));
    assert_eq!(not_an_object.status, 400, "{}", not_an_object.text());
    let not_text = ann.post("/api/approvals/h1/approve", &json!({"value": 7}));
    assert_eq!(not_text.status, 400, "{}", not_text.text());
    assert!(
        !world.path("broker/approvals.json").exists(),
        "nothing was filed"
    );
}

/// The broker's `list` as `host`'s console sees it, once `ready` holds of it.
fn list_until(host: &mut Host, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let mut list = Value::Null;
    eventually(what, || {
        list = host.request(json!({"type": "list"}));
        ready(&list)
    });
    list
}

/// Where `id` runs, as `list` shows it, and its state.
fn placed(list: &Value, id: &str) -> (String, String) {
    let actor = (list["actors"].as_array().unwrap().iter())
        .find(|a| a["id"] == id)
        .unwrap_or(&Value::Null);
    let text = |field: &str| actor[field].as_str().unwrap_or_default().to_string();
    (text("host"), text("state"))
}

#[test]
fn on_a_cluster_any_host_decides_what_another_held_and_a_hold_outlives_its_host() {
    let nats = support::nats::Nats::start();
    let (one, two) = (world_with_anns_bot(), TestWorld::new());
    let mut registry = one.json("sausage.json");
    registry["hold"] = json!([{"action": "upgrade", "by": "member"}]);
    std::fs::write(one.path("sausage.json"), registry.to_string()).unwrap();
    let on = |id| {
        [
            "--web",
            "127.0.0.1:0",
            "--cluster",
            &nats.url(),
            "--host-id",
            id,
        ]
        .map(str::to_owned)
    };
    let args = on("a");
    let mut a = WebHost::start_with(&one, &args.iter().map(String::as_str).collect::<Vec<_>>());
    list_until(&mut a.host, "ann-bot runs on a", |l| {
        placed(l, "ann-bot") == ("a".into(), "running".into())
    });
    let args = on("b");
    let mut b = WebHost::start_with(&two, &args.iter().map(String::as_str).collect::<Vec<_>>());
    list_until(&mut b.host, "two hosts", |l| {
        l["hosts"].as_array().is_some_and(|h| h.len() == 2)
    });
    // People are shared as a whole file, the last change winning: two changes on two hosts
    // within a heartbeat keep one (b's joining and a's new session, say). So each change
    // below is made once the two hosts' files agree, and the next waits for it to reach the
    // other: ann is added and logs in on a, the owner logs in on b with a link made there.
    let people = |world: &TestWorld| std::fs::read(world.path("broker/people.json")).ok();
    let people_alike = || people(&one).is_some() && people(&one) == people(&two);
    eventually("the two hosts' people alike", people_alike);
    let ann = a.add_person(&one, "ann", "member");
    eventually("ann's login on b", people_alike);
    let link = sausage(&["people", "link", "owner", two.path("").to_str().unwrap()]);
    assert!(link.status.success(), "{}", support::text(&link.stderr));
    let owner = b.log_in_with(&support::text(&link.stdout));
    eventually("b's login on a", people_alike);
    let version = |host: &mut Host| {
        let list = host.request(json!({"type": "list"}));
        (list["actors"].as_array().unwrap().iter())
            .find(|a| a["id"] == "ann-bot")
            .map(|a| a["version"].clone())
            .unwrap_or_default()
    };

    // Held on a, listed and denied on b (the rules b follows are the ones a's world set);
    // a, which held it, answers ann.
    let held = upgrade_reaching_a_new_host(&ann);
    assert_eq!(held["type"], "held", "{held}");
    assert_eq!(held["action"], "upgrade", "{held}");
    let waiting = the_one_waiting(&owner);
    assert_eq!(waiting["id"], held["approval"], "{waiting}");
    assert_eq!(waiting["asked_by"], "ann", "{waiting}");
    let mut events = ann.events(None);
    let denied = owner.post(
        &format!("/api/approvals/{}/deny", waiting["id"].as_str().unwrap()),
        &json!({}),
    );
    assert_eq!(denied.status, 200, "{}", denied.text());
    let answer = events.wait_for("message", EVENT_PATIENCE, |data| {
        data["body"]["type"] == "error"
    });
    assert!(answer.data.contains("denied it (h1)"), "{}", answer.data);

    // Approved on b while the bot runs on a: the upgrade is made on a, once.
    let held = upgrade_reaching_a_new_host(&ann);
    assert_eq!(held["approval"], "h2", "{held}");
    let approved = owner.post("/api/approvals/h2/approve", &json!({}));
    assert_eq!(approved.status, 200, "{}", approved.text());
    let again = owner.post("/api/approvals/h2/approve", &json!({}));
    assert_eq!(again.status, 404, "decided once: {}", again.text());
    eventually("the upgrade approved on b, made on a", || {
        version(&mut a.host) == 2
    });

    // Held on a, which dies: the hold is b's to list (in its own folder too) and to decide,
    // and b, where the bot now runs, carries it out.
    let held = upgrade_reaching_a_new_host(&ann);
    assert_eq!(held["approval"], "h3", "{held}");
    drop(ann);
    a.host.kill();
    let listed = || {
        let out = sausage(&["approvals", "--json", two.path("").to_str().unwrap()]);
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()
    };
    eventually("b's folder to list h3", || listed()[0]["id"] == "h3");
    list_until(&mut b.host, "ann-bot runs on b", |l| {
        placed(l, "ann-bot") == ("b".into(), "running".into())
    });
    let approved = owner.post("/api/approvals/h3/approve", &json!({}));
    assert_eq!(approved.status, 200, "{}", approved.text());
    eventually("the upgrade approved after its host died", || {
        version(&mut b.host) == 3
    });
    eventually("nothing waits", || {
        listed().as_array().is_some_and(Vec::is_empty)
            && owner.get("/api/approvals").json()["approvals"] == json!([])
    });
}

#[test]
fn a_decision_its_host_died_before_carrying_out_is_carried_out_at_start_and_expiry_answers() {
    let world = TestWorld::new();
    world.install("x", "echo");
    world.install("y", "echo");
    let mut registry = world.json("sausage.json");
    registry["hold"] = json!([{"action": "remove", "by": "owner"}]);
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let mut host = Host::start(&world.root);
    for (id, approval) in [("x", "h1"), ("y", "h2")] {
        let held = host.request(json!({"type": "remove", "actor": id}));
        assert_eq!(held["type"], "held", "{held}");
        assert_eq!(held["approval"], approval, "{held}");
    }
    host.kill();

    // As the file is when a host dies between writing h1's decision and carrying it out, and
    // once h2's 24 hours are over.
    let mut file = world.json("broker/approvals.json");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    file["held"][0]["decision"] = json!({"approved": true, "by": "olga", "at": now});
    file["held"][1]["expires"] = json!(now - 1);
    std::fs::write(world.path("broker/approvals.json"), file.to_string()).unwrap();

    let mut host = Host::start(&world.root);
    let removed = host.wait_for("x's removal, carried out", |m| {
        m.from == "broker" && m.body["type"] == "removed"
    });
    assert_eq!(removed.body["actor"], "x", "{:?}", removed.body);
    let expired = host.wait_for("h2's expiry, answered", |m| {
        m.from == "broker" && m.body["type"] == "error"
    });
    let reason = expired.body["reason"].as_str().unwrap();
    assert!(
        reason.contains("nobody decided remove `y` within 24 hours (h2)"),
        "{reason}"
    );
    let actors = world.json("sausage.json")["actors"].clone();
    assert!(
        actors.get("x").is_none() && actors.get("y").is_some(),
        "{actors}"
    );
    let listed = sausage(&["approvals", "--json", world.path("").to_str().unwrap()]);
    assert_eq!(
        serde_json::from_slice::<Value>(&listed.stdout).unwrap(),
        json!([])
    );
    let audit = text(&sausage(&["audit", world.path("").to_str().unwrap()]).stdout);
    assert!(audit.contains("h2 expired: remove `y`"), "{audit}");
}
