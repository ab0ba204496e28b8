//! The web console's page in a real browser (headless chromium over WebDriver): logging in, the
//! chat with the agent on the fake model provider (streaming, tool lines, a plan, a question
//! answered by a button, the stop button, a turn rewound, a sub-agent's work nested under its
//! delegate line), actions on an actor with their
//! confirmation, a rollback, an upgrade's shadow run side by side, a turn's waterfall, the
//! graph, reconnecting after the world restarts, and a phone's screen. Each test leaves a screenshot in
//! `target/browser/`.

mod support;

use std::time::Duration;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::json;
use support::agent::{config_with, tool_outputs, world_with_agent, world_with_config};
use support::browser::{Browser, ENTER, RELEASE, SHIFT};
use support::web::{WebHost, free_addr};
use support::*;

/// A browser logged in to `web`'s page with the link the host printed.
fn logged_in(web: &WebHost) -> Browser {
    let browser = Browser::open();
    browser.log_in(&web.login_link);
    browser
}

/// Opens a view by the page's navigation.
fn go(browser: &Browser, view: &str) {
    browser.click(&format!("#nav a[data-view={view}]"));
    browser.wait_shown(&format!("#view-{view}"));
}

#[test]
fn logging_in_and_a_streamed_answer_with_its_tool_lines() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![
        openai::message("Let me look."),
        openai::function_call("list_dir", json!({"path": "/data"})),
    ]));
    fake.push_openai(openai::text_reply(
        "There is **one** file, `config.json`, and <b>no</b> other:\n\n```\nconfig.json\n```",
    ));
    let web = WebHost::start(&world);
    let browser = Browser::open();
    browser.goto(&format!("http://{}/", web.addr));
    browser.wait_text(
        "#login-banner",
        "not logged in: open the login link sausage run printed",
    );
    browser.log_in(&web.login_link);
    assert!(!browser.url().contains("token"), "{}", browser.url());
    assert!(!browser.is_shown("#login-banner"));
    browser.wait_until(
        "the live indicator",
        "return document.querySelector('#conn').dataset.state === 'live'",
    );

    // Shift+Enter is a new line; Enter sends.
    browser.type_into(
        "#chat-input",
        &format!("what is in /data?{SHIFT}{ENTER}{RELEASE}please"),
    );
    let typed = browser.eval(
        "return document.querySelector('#chat-input').value",
        json!([]),
    );
    assert_eq!(typed, "what is in /data?\nplease");
    // The answer streams slowly enough to be seen while it comes.
    fake.set_event_delay(Duration::from_millis(60));
    browser.type_into("#chat-input", ENTER);
    browser.wait_text(".turn .bubble.user", "what is in /data?");
    let left = browser.eval(
        "return document.querySelector('#chat-input').value",
        json!([]),
    );
    assert_eq!(left, "");
    browser.wait_text(".tool-line[data-tool=list_dir] .preview", "/data");
    browser.wait_shown(".tool-line[data-tool=list_dir][data-state=finished][data-ok=true]");
    browser.wait_text(".turn-answer.streaming", "There");

    let answer = browser.wait_text(".turn[data-done=true] .turn-answer", "config.json");
    assert!(answer.starts_with("There is one file, config.json, and <b>no</b> other:"));
    assert_eq!(browser.text(".turn-answer strong").unwrap(), "one");
    assert_eq!(browser.text(".turn-answer p code").unwrap(), "config.json");
    assert_eq!(browser.text(".turn-answer pre").unwrap(), "config.json");
    assert_eq!(
        browser.eval(
            "return document.querySelectorAll('.turn-answer b').length",
            json!([])
        ),
        0,
        "HTML in an answer is text"
    );
    // The text before the tool call stays, and is not the answer.
    assert!(
        browser
            .text(".turn .bubble.assistant")
            .unwrap()
            .contains("Let me look.")
    );
    browser.wait_text(".turn-footer .turn-cost", "");
    assert!(!browser.is_shown("#chat-stop"));

    // A reload shows the same conversation, from the agent: the same tool line (its outcome
    // and time) and the same cost line.
    let turn = "const t = document.querySelector('.turn'); \
        return [[...t.querySelectorAll('.tool-line')].map((l) => [l.dataset.state, l.dataset.ok, l.textContent]), \
        t.querySelector('.turn-footer').textContent]";
    let live = browser.eval(turn, json!([]));
    browser.reload();
    browser.wait_text(".turn-answer", "There is one file");
    browser.wait_text(".tool-line[data-tool=list_dir]", "/data");
    browser.wait_text(".turn-footer .turn-cost", "");
    assert_eq!(browser.eval(turn, json!([])), live);
    assert!(live[1].as_str().unwrap().contains(" in · "), "{live}");
    fake.assert_clean();
}

#[test]
fn logged_out_the_page_says_so_once() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let browser = Browser::open();
    browser.goto(&format!("http://{}/", web.addr));
    browser.wait_text(
        "#login-banner",
        "not logged in: open the login link sausage run printed",
    );
    // Every view's load fails alike; only the banner says why.
    for view in ["chat", "actors", "graph", "people", "schedules", "chat"] {
        browser.goto(&format!("http://{}/#/{view}", web.addr));
        browser.wait_shown(&format!("#view-{view}"));
        let said = browser.eval(
            "return [...document.querySelectorAll('body *')].filter((e) => e.offsetParent !== null \
               && [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.includes('not logged in:'))).length",
            json!([]),
        );
        assert_eq!(said, 1, "#/{view} says it is not logged in {said} times");
    }
}

#[test]
fn the_page_has_a_favicon_from_the_binary() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    let icon = browser.eval(
        "const link = document.querySelector('link[rel=icon]'); \
         return fetch(link.href).then(async (r) => [r.status, r.headers.get('content-type'), await r.text()])",
        json!([]),
    );
    assert_eq!(icon[0], 200, "{icon}");
    assert_eq!(icon[1], "image/svg+xml", "{icon}");
    assert!(icon[2].as_str().unwrap().starts_with("<svg"), "{icon}");
    // The icon is an image the page may show (its policy allows images from itself).
    let width = browser.eval(
        "const img = new Image(); img.src = '/favicon.svg'; \
         return img.decode().then(() => img.naturalWidth)",
        json!([]),
    );
    assert!(width.as_u64().unwrap() > 0, "{width}");
}

#[test]
fn a_question_is_answered_with_a_choice_button() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![
        openai::function_call(
            "plan",
            json!({"items": [{"text": "ask the colour", "done": true}, {"text": "write it", "done": false}]}),
        ),
        openai::function_call(
            "ask",
            json!({"question": "Which colour should the counter print?", "choices": ["red", "blue"]}),
        ),
    ]));
    fake.push_openai(openai::text_reply("A blue counter, then."));
    let web = WebHost::start(&world);
    let browser = logged_in(&web);

    browser.type_into("#chat-input", &format!("make me a counter{ENTER}"));
    browser.wait_text(".plan li.done", "ask the colour");
    browser.wait_text(".plan li:not(.done)", "write it");
    browser.wait_text(".question p", "Which colour should the counter print?");
    browser.wait_shown("#chat-stop");
    // The open question's buttons come back after a reload.
    browser.reload();
    browser.wait_text(".question p", "Which colour should the counter print?");
    browser.wait_text(".plan li.done", "ask the colour");
    browser.click(".question button[data-choice=blue]");
    browser.wait_text(".question .answered", "blue");
    browser.wait_text(
        ".turn[data-done=true] .turn-answer",
        "A blue counter, then.",
    );
    assert_eq!(
        tool_outputs(&fake, 1).last().unwrap(),
        "owner answered: blue"
    );
    assert_eq!(fake.requests().len(), 2, "the answer was not a new turn");
    fake.assert_clean();
}

#[test]
fn the_stop_button_ends_a_running_turn() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "ask",
        json!({"question": "May I delete /data/old?"}),
    )]));
    let web = WebHost::start(&world);
    let browser = logged_in(&web);

    browser.type_into("#chat-input", &format!("clean up{ENTER}"));
    browser.wait_text(".question p", "May I delete /data/old?");
    browser.click("#chat-stop");
    browser.wait_text(
        ".turn[data-done=true] .turn-footer .stopped",
        "stopped (stop)",
    );
    assert!(!browser.is_shown("#chat-stop"));
    assert_eq!(
        browser.eval(
            "return document.querySelector('.question input').disabled",
            json!([])
        ),
        true,
        "a question of a turn that ended cannot be answered"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn an_actor_is_stopped_and_started_from_its_page_and_the_table_follows() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("crasher", "crasher");
    std::fs::write(world.path("actor/echo/public/hello.txt"), "hello, world").unwrap();
    let mut registry = world.json("sausage.json");
    registry["routes"] = json!({"/echo/*": {"actor": "echo"}});
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let web = WebHost::start(&world);
    let browser = logged_in(&web);

    go(&browser, "actors");
    let state = "#actors-table tr[data-actor=echo] .state";
    browser.wait_text(state, "running");
    // Native actors can be hidden; the table sorts by a column's header.
    assert!(browser.is_shown("#actors-table tr[data-actor=broker]"));
    browser.click("#hide-native");
    browser.wait_until(
        "native actors hidden",
        "return !document.querySelector('#actors-table tr[data-actor=broker]')",
    );
    browser.click("#actors-table th[data-key=id]");
    browser.wait_text("#actors-table tbody tr:first-child .id", "echo");
    browser.click("#actors-table th[data-key=id]");
    browser.wait_text("#actors-table tbody tr:first-child .id", "crasher");

    browser.click("#actors-table tr[data-actor=echo] .id a");
    browser.wait_text("#actor-id", "echo");
    browser.wait_text("#actor-state", "running");
    browser.click("a.file[data-path='hello.txt']");
    browser.wait_text("#file-text", "hello, world");
    // Its route, a link to the public address.
    browser.wait_text("#actor-routes", "/echo/*");
    let href = browser.eval(
        "return document.querySelector('#actor-routes a').href",
        json!([]),
    );
    assert!(
        href.as_str().unwrap().starts_with("http://127.0.0.1:"),
        "{href}"
    );
    assert!(href.as_str().unwrap().ends_with("/echo/"), "{href}");

    // Stop, after a confirmation that can be cancelled.
    browser.click("#actor-stop");
    browser.wait_text("#confirm-text", "Stop echo?");
    browser.click("#confirm-no");
    browser.wait_until(
        "the dialog closed",
        "return document.querySelector('#confirm').hidden",
    );
    assert_eq!(world.status("echo")["state"], "running");
    browser.click("#actor-stop");
    browser.click("#confirm-yes");
    browser.wait_text("#actor-notice", "Stopped echo.");
    browser.wait_text("#actor-state", "stopped");
    go(&browser, "actors");
    browser.wait_text(state, "stopped");

    browser.click("#actors-table tr[data-actor=echo] .id a");
    browser.click("#actor-start");
    browser.click("#confirm-yes");
    browser.wait_text("#actor-notice", "Started echo.");
    go(&browser, "actors");
    browser.wait_text(state, "running");

    // An actor's stderr.log, followed live.
    let client = browser.client(&web.addr);
    browser.click("#actors-table tr[data-actor=crasher] .id a");
    browser.wait_text("#actor-id", "crasher");
    client.post(
        "/api/send",
        &json!({"to": "crasher", "body": {"type": "log", "lines": 3, "width": 20}}),
    );
    browser.wait_text("#actor-log", "line 3");
}

#[test]
fn an_unknown_actors_page_says_it_does_not_exist_and_shows_nothing_of_the_one_before() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    browser.goto(&format!("http://{}/#/actor/echo", web.addr));
    browser.wait_text("#actor-state", "running");
    browser.wait_shown("#actor-stop");

    browser.goto(&format!("http://{}/#/actor/nobody", web.addr));
    browser.wait_text("#actor-id", "nobody");
    browser.wait_text("#actor-error", "there is no actor `nobody` in this world");
    for part in [
        "#actor-state",
        "#actor-stop",
        "#actor-start",
        "#actor-rollback",
        "#versions",
    ] {
        assert!(!browser.is_shown(part), "{part} is shown");
    }
}

#[test]
fn a_rollback_from_the_actor_page_makes_version_one_current_again() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    let client = browser.client(&web.addr);
    browser.goto(&format!("http://{}/#/actor/echo", web.addr));
    browser.wait_text("#versions tr[data-version='1'] .current", "current");

    // With one version there is nothing to roll back to: the page says why.
    browser.click("#actor-rollback");
    browser.click("#confirm-yes");
    browser.wait_text("#actor-error", "no version older");

    // The page speaks for a person, who names files under `/actor` only (never host paths).
    std::fs::copy(wasm("echo"), world.path("actor/echo/public/next.wasm")).unwrap();
    let upgrade = json!({"to": "broker", "body": {
        "type": "upgrade", "actor": "echo",
        "wasm": "/actor/echo/public/next.wasm", "source": "/actor/echo/source",
    }});
    assert_eq!(client.post("/api/send", &upgrade).status, 200);
    browser.wait_text("#versions tr[data-version='2'] .current", "current");
    browser.wait_text("#versions tr[data-version='2']", "web for owner");

    browser.click("#versions tr[data-version='1'] button.switch");
    browser.wait_text("#confirm-text", "Switch echo to version 1?");
    browser.click("#confirm-yes");
    browser.wait_text("#actor-notice", "Now on version 1 (was 2).");
    browser.wait_text("#versions tr[data-version='1'] .current", "current");
    assert!(browser.is_shown("#versions tr[data-version='2'] button.switch"));
    assert!(!browser.is_shown("#actor-error"));
    assert_eq!(world.status("echo")["version"], 1);
}

#[test]
fn the_graph_shows_who_sends_to_whom() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    let client = browser.client(&web.addr);
    go(&browser, "graph");
    browser.wait_shown("#graph svg .node[data-id=echo]");
    for n in 0..5 {
        client.post(
            "/api/send",
            &json!({"to": "echo", "body": {"type": "ping", "n": n}}),
        );
    }
    let edge = "#graph svg .edge[data-from=web][data-to=echo]";
    browser.wait_text(edge, "/s");
    browser.wait_shown("#graph svg .edge[data-from=echo][data-to=web]");
    let width = browser.eval(
        "return parseFloat(document.querySelector(arguments[0] + ' path').getAttribute('stroke-width'))",
        json!([edge]),
    );
    assert!(width.as_f64().unwrap() > 1.5, "{width}");
    // A legend says what circles, dashes and arrows mean.
    browser.wait_text("#graph-legend", "native actor");
    browser.wait_text("#graph-legend", "from sender to recipient");
    browser.wait_shown("#graph-legend .node.native circle");
}

#[test]
fn the_page_reconnects_after_a_restart_without_losing_what_was_typed() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let addr = free_addr();
    let web = WebHost::start_at(&world, &addr);
    let browser = logged_in(&web);
    let live = "return document.querySelector('#conn').dataset.state === 'live' \
        && document.body.dataset.run";
    let run = browser.wait_until("the first connection", live);
    browser.eval("window.samePage = true", json!([]));
    browser.type_into("#chat-input", "a thought half-way wr");

    web.host.quit();
    browser.wait_until(
        "the page to notice",
        "return document.querySelector('#conn').dataset.state !== 'live'",
    );
    let _web = WebHost::start_at(&world, &addr);
    browser.wait_until_with(
        "a connection to the new run, and the view's data reloaded",
        "return document.querySelector('#conn').dataset.state === 'live' \
            && document.body.dataset.run !== arguments[0] && document.body.dataset.reloads",
        json!([run]),
    );
    assert_eq!(browser.eval("return window.samePage", json!([])), true);
    browser.type_into("#chat-input", "itten");
    let kept = browser.eval(
        "return [document.querySelector('#chat-input').value, \
            sessionStorage.getItem('sausage.chat.draft')]",
        json!([]),
    );
    assert_eq!(
        kept,
        json!(["a thought half-way written", "a thought half-way written"])
    );
    // The session outlived the restart: the API answers the page.
    go(&browser, "actors");
    browser.wait_text("#actors-table tr[data-actor=echo] .state", "running");
    assert!(!browser.is_shown("#login-banner"));
    drop(browser); // its screenshot, before the host goes
}

#[test]
fn on_a_phone_the_chat_is_usable_and_the_menu_folds() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::text_reply(
        "Hello! Ask me to build an actor, or to look around the world.",
    ));
    let web = WebHost::start(&world);
    let browser = Browser::open_sized(375, 800);
    browser.log_in(&web.login_link);

    // The menu is folded behind its button, and opens.
    assert!(!browser.is_shown("#nav a[data-view=actors]"));
    browser.click("#nav-toggle");
    browser.wait_shown("#nav a[data-view=actors]");
    go(&browser, "actors");
    assert!(!browser.is_shown("#nav a[data-view=chat]"));
    browser.click("#nav-toggle");
    go(&browser, "chat");

    browser.type_into("#chat-input", &format!("hello{ENTER}"));
    browser.wait_text(".turn[data-done=true] .turn-answer", "Hello! Ask me");
    let fits = browser.eval(
        "const width = document.documentElement.clientWidth; \
         const inside = (s) => { const r = document.querySelector(s).getBoundingClientRect(); \
           return r.left >= 0 && r.right <= width && r.bottom <= window.innerHeight; }; \
         return [document.documentElement.scrollWidth <= width, inside('#chat-input'), \
           inside('#chat-send'), inside('.turn-answer')];",
        json!([]),
    );
    assert_eq!(fits, json!([true, true, true, true]));
}

#[test]
fn an_owner_adds_a_guest_who_logs_in_and_sees_only_their_own_chat() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    fake.push_openai(openai::text_reply("The owner's answer."));
    fake.push_openai(openai::text_reply("The guest's answer."));
    let web = WebHost::start(&world);
    let owner = logged_in(&web);
    owner.type_into("#chat-input", &format!("the owner's question{ENTER}"));
    owner.wait_text(".turn[data-done=true] .turn-answer", "The owner's answer.");

    // The owner adds a guest on the People page and gets the guest's link.
    owner.wait_shown("#nav a[data-view=people]");
    go(&owner, "people");
    owner.wait_text("#people-table tr[data-person=owner] .id", "owner");
    owner.type_into("#person-id", "gus");
    owner.type_into("#person-name", "Gus");
    owner.eval(
        "document.querySelector('#person-tier').value = 'guest'",
        json!([]),
    );
    owner.click("#person-add");
    let link = owner.wait_text("#person-link-url", "/login?token=");
    owner.wait_text("#people-table tr[data-person=gus] .id", "gus");
    owner.screenshot("people_view").unwrap();

    let guest = Browser::open();
    guest.log_in(&link);
    guest.wait_text("#me", "Gus · guest");
    assert!(
        !guest.is_shown("#nav a[data-view=people]"),
        "people are for owners"
    );
    guest.wait_until(
        "the guest's empty conversation",
        "return document.querySelector('#conn').dataset.state === 'live'",
    );
    assert!(
        !guest
            .text("#chat-log")
            .unwrap_or_default()
            .contains("owner's"),
        "the owner's conversation is the owner's"
    );
    guest.type_into("#chat-input", &format!("the guest's question{ENTER}"));
    guest.wait_text(".turn[data-done=true] .turn-answer", "The guest's answer.");
    guest.reload();
    guest.wait_text(".turn-answer", "The guest's answer.");
    assert!(!guest.text("#chat-log").unwrap().contains("owner's"));
    // A guest reads the actors' pages but is offered no action on them.
    go(&guest, "actors");
    guest.click("#actors-table tr[data-actor=echo] .id a");
    guest.wait_text("#actor-state", "running");
    assert!(!guest.is_shown("#actor-stop"));

    // The owner's page never showed the guest's turn.
    owner.reload();
    go(&owner, "chat");
    owner.wait_text(".turn-answer", "The owner's answer.");
    assert!(!owner.text("#chat-log").unwrap().contains("guest's"));
    fake.assert_clean();
}

#[test]
fn a_login_link_asks_before_it_replaces_the_browsers_session() {
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    let owner = browser.client(&web.addr);
    let added = owner.post("/api/people", &json!({"id": "ann", "tier": "member"}));
    assert_eq!(added.status, 200, "{}", added.text());
    let link = added.json()["link"].as_str().unwrap().to_string();

    // A page elsewhere leads the browser to ann's link (its strict cookie stays behind): the
    // link asks, and the owner's session stays.
    let elsewhere: String = format!("<a id=go href=\"{link}\">a prize</a>")
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    browser.goto(&format!("data:text/html,{elsewhere}"));
    browser.click("#go");
    browser.wait_text("h1", "Log in as ann?");
    assert_eq!(owner.get("/api/me").json()["person"], "owner");

    // Opened in the browser itself while the owner's session is there: it asks too, and only
    // its button (a POST from its own page) logs in as ann.
    browser.goto(&link);
    browser.wait_text("main p", "This browser is logged in as owner (owner)");
    browser.screenshot("login_asks").unwrap();
    assert_eq!(owner.get("/api/me").json()["person"], "owner");
    browser.click("form button");
    browser.wait_until(
        "the console's page as ann",
        "return location.pathname === '/' && !location.search",
    );
    browser.wait_text("#me", "ann · member");
    assert_eq!(
        owner.get("/api/me").status,
        200,
        "the owner's session itself goes on"
    );
}

#[test]
fn a_member_talks_in_a_shared_room_and_reads_and_clears_their_memory() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let link = owner
        .post("/api/people", &json!({"id": "ann", "tier": "member"}))
        .json()["link"]
        .as_str()
        .unwrap()
        .to_string();
    owner.post("/api/people", &json!({"id": "bob", "tier": "member"}));
    let room = json!({"type": "room", "room": "kitchen", "members": ["ann", "bob"]});
    assert_eq!(
        owner
            .post("/api/send", &json!({"to": "agent", "body": room}))
            .status,
        200
    );
    fake.push_openai(openai::reply(vec![openai::function_call(
        "remember",
        json!({"text": "ann likes tea"}),
    )]));
    fake.push_openai(openai::text_reply("Noted: tea."));
    fake.push_openai(openai::text_reply("Soup today."));

    let ann = Browser::open();
    ann.log_in(&link);
    ann.type_into("#chat-input", &format!("remember that I like tea{ENTER}"));
    ann.wait_text(".turn[data-done=true] .turn-answer", "Noted: tea.");
    ann.click("#memory-button");
    ann.wait_text("#memory-text", "ann likes tea");

    // The room is offered once the agent knows it; its talk stays in it.
    ann.wait_until_with(
        "the room offered",
        "return [...document.querySelectorAll('#chat-room option')].some(o => o.value === arguments[0])",
        json!(["kitchen"]),
    );
    ann.eval(
        "const s = document.querySelector('#chat-room'); s.value = 'kitchen'; \
         s.dispatchEvent(new Event('change'))",
        json!([]),
    );
    ann.wait_until(
        "the room's empty conversation",
        "return !document.querySelector('#chat-log').textContent.includes('Noted: tea.')",
    );
    ann.type_into("#chat-input", &format!("what is for lunch?{ENTER}"));
    ann.wait_text(".turn[data-done=true] .turn-answer", "Soup today.");
    let lunch = fake.requests()[2].body.to_string();
    assert!(
        lunch.contains("kitchen") && !lunch.contains("ann likes tea"),
        "{lunch}"
    );
    ann.eval(
        "const s = document.querySelector('#chat-room'); s.value = ''; \
         s.dispatchEvent(new Event('change'))",
        json!([]),
    );
    ann.wait_text(".turn-answer", "Noted: tea.");
    assert!(!ann.text("#chat-log").unwrap().contains("Soup today."));

    // Clearing the memory, after a confirmation.
    ann.click("#memory-forget");
    ann.click("#confirm-yes");
    ann.wait_until(
        "the card closed",
        "return document.querySelector('#memory-card').hidden",
    );
    ann.click("#memory-button");
    ann.wait_text("#memory-text", "Nothing yet");
    let stored = std::fs::read_to_string(world.path("private/agent/data/people/ann/memory.md"))
        .unwrap_or_default();
    assert!(!stored.contains("tea"), "{stored}");
    fake.assert_clean();
}

#[test]
fn an_upgrades_shadow_run_shows_the_one_different_answer_side_by_side() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    let client = browser.client(&web.addr);
    for n in 1..=12 {
        let double = json!({"to": "s", "body": {"type": "double", "n": n}});
        assert_eq!(client.post("/api/send", &double).status, 200);
    }
    let last = json!({"to": "s", "body": {"type": "record", "text": "last"}});
    assert_eq!(client.post("/api/send", &last).status, 200);
    eventually("s to read all thirteen", || {
        std::fs::read_to_string(world.path("private/s/data/records.jsonl"))
            .is_ok_and(|records| records.contains("last"))
    });
    // The page speaks for a person, who names files under `/actor`.
    std::fs::copy(wasm("shadowy"), world.path("actor/s/public/next.wasm")).unwrap();
    let tests = world.path("actor/s/public/next/tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(
        tests.join("double.jsonl"),
        "{\"send\": {\"type\": \"double\", \"n\": 2}}\n{\"expect\": {\"result\": 4}}\n",
    )
    .unwrap();
    let upgrade = json!({"to": "broker", "body": {
        "type": "upgrade", "actor": "s",
        "wasm": "/actor/s/public/next.wasm", "source": "/actor/s/public/next",
    }});
    assert_eq!(client.post("/api/send", &upgrade).status, 200);
    browser.goto(&format!("http://{}/#/actor/s", web.addr));
    browser.wait_text(
        "#versions tr[data-version='2'] .shadow-report",
        "12 of 13 same, 1 different",
    );
    // At a laptop's 1280 px the versions table fits its card: no column is cut off.
    let overflow = browser.eval(
        "const wrap = document.querySelector('#versions').parentElement; \
         return wrap.scrollWidth - wrap.clientWidth",
        json!([]),
    );
    assert_eq!(overflow, 0, "the versions table overflows by {overflow} px");
    browser.screenshot("the_versions_table_at_1280_px").unwrap();
    browser.click("#versions tr[data-version='2'] .shadow-report");
    browser.wait_shown("#shadow-view");
    browser.wait_text("#shadow-old", "Version 1 wrote");
    browser.wait_text("#shadow-new", "Version 2 wrote");
    let row = browser.wait_text("#shadow-table tr.difference", "\"n\": 7");
    assert!(
        row.contains("\"result\": 14") && row.contains("\"result\": 15"),
        "{row}"
    );
    assert_eq!(
        browser.eval(
            "return document.querySelectorAll('#shadow-table tr.difference').length",
            json!([])
        ),
        1
    );
    browser.screenshot("shadow_report").unwrap();
}

#[test]
fn the_rewind_button_undoes_a_turns_upgrade() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    std::fs::copy(wasm("echo"), world.path("actor/echo/public/next.wasm")).unwrap();
    // A turn that changes nothing has nothing to rewind: no button, live or after a reload.
    fake.push_openai(openai::text_reply("Hello."));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "broker", "wait_seconds": 60, "body": {
            "type": "upgrade", "actor": "echo",
            "wasm": "/actor/echo/public/next.wasm", "source": "/actor/echo/source",
        }}),
    )]));
    fake.push_openai(openai::text_reply("Upgraded echo to version 2."));
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    browser.type_into("#chat-input", &format!("hello{ENTER}"));
    browser.wait_text(".turn[data-done=true] .turn-answer", "Hello.");
    assert!(
        !browser.is_shown(".turn .turn-rewind"),
        "hello changed nothing"
    );
    browser.type_into("#chat-input", &format!("upgrade echo{ENTER}"));
    let upgraded = "return [...document.querySelectorAll('.turn[data-done=true] .turn-answer')] \
        .some((a) => a.textContent.includes('Upgraded echo to version 2.'))";
    browser.wait_until("the upgrade's answer", upgraded);
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 2);
    let rewinds = "return [...document.querySelectorAll('.turn')].map((t) => \
        [t.querySelector('.bubble.user').textContent, !!t.querySelector('.turn-rewind')])";
    let live = browser.wait_until_with(
        "the upgrade's Rewind button",
        &(rewinds.replace("return ", "const r = ") + "; return r.some(([, b]) => b) && r"),
        json!([]),
    );
    assert_eq!(live, json!([["hello", false], ["upgrade echo", true]]));
    browser.reload();
    browser.wait_until("the upgrade's answer", upgraded);
    assert_eq!(browser.eval(rewinds, json!([])), live, "after a reload");

    browser.click(".turn[data-done=true] .turn-rewind");
    browser.wait_text("#confirm-text", "Rewind this turn?");
    browser.click("#confirm-yes");
    let note = browser.wait_text(
        ".turn .note.rewound",
        "Rewound: 1 actor and 0 files put back",
    );
    assert!(note.contains("cut before message"), "{note}");
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 1);
    assert!(
        !browser.is_shown(".turn .turn-rewind"),
        "a turn is rewound once"
    );
    browser.screenshot("rewound_turn").unwrap();
}

#[test]
fn a_turns_waterfall_shows_its_model_requests_and_tool_call_on_one_time_axis() {
    let fake = FakeLlm::start();
    let prices =
        json!({"test-model": {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 2.0}});
    let config = config_with(&fake, "openai-responses", json!({"prices": prices}));
    let world = world_with_config(&fake, "openai-responses", config);
    fake.push_openai(openai::reply(vec![openai::function_call(
        "list_dir",
        json!({"path": "/data"}),
    )]));
    fake.push_openai(openai::text_reply("There is one file, config.json."));
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    browser.type_into("#chat-input", &format!("what is in /data?{ENTER}"));
    browser.wait_text(".turn[data-done=true] .turn-answer", "config.json");

    // Under the answer, closed: two model requests and the call between them, with their cost.
    let summary = browser.wait_text(
        ".turn .turn-answer + .waterfall summary",
        "Waterfall: 3 steps",
    );
    assert!(
        summary.contains('$') && !summary.contains("unknown"),
        "{summary}"
    );
    let open = "return document.querySelector('.waterfall').open";
    assert_eq!(browser.eval(open, json!([])), false, "it starts closed");
    browser.click(".waterfall summary");
    browser.wait_until("the waterfall to open", open);
    let rows = browser.eval(
        "return [...document.querySelectorAll('.waterfall-row')].map((row) => {
           const bar = row.querySelector('.waterfall-bar').getBoundingClientRect();
           return { kind: row.dataset.kind, label: row.querySelector('.waterfall-label').textContent,
                    left: bar.left, width: bar.width };
         })",
        json!([]),
    );
    let rows = rows.as_array().unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["model", "tool", "model"], "{rows:?}");
    let label = |n: usize| rows[n]["label"].as_str().unwrap();
    assert!(
        label(0).starts_with("test-model ") && label(0).contains(" out · $"),
        "{rows:?}"
    );
    assert!(
        label(1).starts_with("list_dir /data · ") && label(1).ends_with(" ms"),
        "{rows:?}"
    );
    for row in rows {
        assert!(row["width"].as_f64().unwrap() >= 2.0, "{rows:?}");
    }
    // One time axis: each step starts no earlier than the one before it.
    let left = |n: usize| rows[n]["left"].as_f64().unwrap();
    assert!(
        left(0) <= left(1) && left(1) <= left(2) && left(0) < left(2),
        "{rows:?}"
    );

    // The conversation the agent tells after a reload keeps it.
    browser.reload();
    browser.wait_text(".turn .turn-answer + .waterfall summary", &summary);
    browser.click(".waterfall summary");
    browser.wait_until("the waterfall to open", open);
    browser.screenshot("turn_waterfall").unwrap();
    fake.assert_clean();
}

#[test]
fn an_owner_sets_a_secret_in_a_password_field_and_grants_it_and_the_page_never_shows_it() {
    const VALUE: &str = "pl4nted-in-the-page";
    let world = TestWorld::new();
    world.install("echo", "echo");
    let web = WebHost::start(&world);
    let owner = logged_in(&web);
    owner.wait_shown("#nav a[data-view=secrets]");
    go(&owner, "secrets");
    assert_eq!(
        owner.eval(
            "return document.querySelector('#secret-value').type",
            json!([])
        ),
        "password"
    );
    owner.type_into("#secret-name", "gh");
    owner.type_into("#secret-url", "https://api.github.com");
    owner.type_into("#secret-value", VALUE);
    owner.click("#secret-set");
    owner.wait_text("#secrets-table tr[data-secret=gh] .id", "gh");
    owner.type_into("#secrets-table tr[data-secret=gh] .grant-actor", "echo");
    owner.click("#secrets-table tr[data-secret=gh] .grant-button");
    owner.wait_text("#secrets-table tr[data-secret=gh] .grant", "echo");
    // A wrong actor is refused with why, and changes nothing.
    owner.type_into("#secrets-table tr[data-secret=gh] .grant-actor", "nobody");
    owner.click("#secrets-table tr[data-secret=gh] .grant-button");
    owner.wait_text("#secrets-error", "no actor `nobody`");
    // The owner reads the audit log below: the grant, newest first.
    owner.wait_text("#audit-table tbody tr:first-child .event", "grant");
    owner.screenshot("secrets_view").unwrap();
    let page = owner
        .eval(
            "return document.documentElement.outerHTML + \
             [...document.querySelectorAll('input')].map((i) => i.value).join(' ')",
            json!([]),
        )
        .to_string();
    assert!(!page.contains(VALUE), "the page holds the value");
    let listed = std::fs::read_to_string(world.path("broker/secrets/secrets.json")).unwrap();
    assert!(listed.contains(VALUE) && listed.contains("\"actor\": \"echo\""));
}

#[test]
fn the_agents_request_for_a_secret_is_answered_in_a_password_field_and_the_turn_goes_on() {
    const VALUE: &str = "pl4nted-for-the-agent";
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "request_secret",
        json!({"name": "gh", "url": "https://api.github.com", "why": "to read your issues"}),
    )]));
    fake.push_openai(openai::text_reply("Thanks, I have what I need."));
    let web = WebHost::start(&world);
    let owner = logged_in(&web);
    owner.type_into("#chat-input", &format!("read my github issues{ENTER}"));
    // The menu marks what waits; the view shows it with a password field.
    let marked = "return document.querySelector('#nav-approvals').classList.contains('attention')";
    owner.wait_until("the menu to mark an approval", marked);
    // A page opened while it waits marks it too.
    owner.reload();
    owner.wait_until("the reloaded menu to mark an approval", marked);
    go(&owner, "approvals");
    owner.wait_text(
        "#approvals-table tr[data-approval=h1] .what",
        "set secret `gh`",
    );
    assert_eq!(
        owner.eval(
            "return document.querySelector('tr[data-approval=h1] .approval-value').type",
            json!([])
        ),
        "password"
    );
    // Without a value it is refused with why, and still waits.
    owner.click("tr[data-approval=h1] .approve");
    owner.wait_text("#approvals-error", "give its value");
    owner.type_into("tr[data-approval=h1] .approval-value", VALUE);
    owner.screenshot("approvals_view").unwrap();
    owner.click("tr[data-approval=h1] .approve");
    owner.wait_shown("#approvals-empty");
    go(&owner, "chat");
    owner.wait_text(".turn-answer", "Thanks, I have what I need.");
    assert!(tool_outputs(&fake, 1)[0].contains(r#""type":"secret_set""#));
    let page = owner
        .eval(
            "return document.documentElement.outerHTML + \
             [...document.querySelectorAll('input')].map((i) => i.value).join(' ')",
            json!([]),
        )
        .to_string();
    assert!(!page.contains(VALUE), "the page holds the value");
    let stored = std::fs::read_to_string(world.path("broker/secrets/secrets.json")).unwrap();
    assert!(stored.contains(VALUE));
}

#[test]
fn a_sub_agents_brief_tools_and_text_show_nested_under_the_delegate_line() {
    const SUB: &str = "You are a sub-agent";
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "scout", "brief": "Look in NESTED-DATA for the config."}),
    )]));
    fake.push_openai_for(
        &[SUB, "NESTED-DATA"],
        openai::reply(vec![
            openai::message("Listing the folder first."),
            openai::function_call("list_dir", json!({"path": "/data"})),
        ]),
    );
    fake.push_openai_for(
        &[SUB, "NESTED-DATA"],
        openai::text_reply("The config is /data/config.json."),
    );
    fake.push_openai(openai::text_reply("The scout found the config."));
    let web = WebHost::start(&world);
    let browser = logged_in(&web);
    browser.type_into("#chat-input", &format!("where is the config?{ENTER}"));

    let delegate = ".tool-line[data-tool=delegate]";
    browser.wait_text(
        &format!("{delegate} .preview"),
        "scout: Look in NESTED-DATA",
    );
    browser.wait_text(
        &format!("{delegate} .subagent .subagent-head"),
        "agent-s1 (scout)",
    );
    browser.wait_text(
        &format!("{delegate} .subagent .subagent-brief"),
        "Look in NESTED-DATA for the config.",
    );
    browser.wait_text(
        &format!("{delegate} .subagent .subagent-text"),
        "Listing the folder",
    );
    browser.wait_shown(&format!(
        "{delegate} .subagent .tool-line[data-tool=list_dir][data-state=finished]"
    ));
    browser.wait_text(
        ".turn[data-done=true] .turn-answer",
        "The scout found the config.",
    );
    browser.wait_shown(&format!("{delegate}[data-state=finished][data-ok=true]"));
    fake.assert_clean();
}
