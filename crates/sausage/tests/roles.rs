//! Roles and sub-agents (DESIGN §26): the roles the agent's sub-agents take, as `sausage roles`
//! lists them and the agent reads them.

mod support;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::{config_with, final_reply, world_with_config};
use support::*;

/// What only a sub-agent's requests hold (its instructions say it).
const SUB: &str = "You are a sub-agent";

/// The tool outputs a request sent back, whichever request it is.
fn outputs_of(request: &Value) -> Vec<String> {
    (request["input"].as_array().into_iter().flatten())
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| item["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The names of the tools a request offered.
fn tools_of(request: &Value) -> Vec<String> {
    (request["tools"].as_array().into_iter().flatten())
        .map(|tool| tool["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn sausage_roles_lists_the_built_in_roles_the_owners_files_and_refuses_a_bad_one_where_it_is() {
    let world = TestWorld::new();
    let dir = world.path("");
    let dir = dir.to_str().unwrap();
    let out = sausage(&["roles", dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    for line in [
        "worker  Does a piece of work end to end",
        "    tools: its person's tools",
        "scout  Looks around without changing anything",
        "    tools: read_file, list_dir, search, find_files, plan, note",
        "reviewer  Reads a change",
        "    from built in",
        "private/agent/data/roles/<name>.md",
    ] {
        assert!(listed.contains(line), "{line}: {listed}");
    }

    let roles = world.path("private/agent/data/roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("tester.md"),
        "---\ndescription: Runs the tests and says which fail.\nmodel: small-model\n\
         tools: [read_file, send_message]\nbudget_usd: 0.5\nmax_minutes: 10\n---\n\
         Run every actor's tests.\n",
    )
    .unwrap();
    std::fs::write(
        roles.join("scout.md"),
        "---\ndescription: A scout that only reads.\ntools: [read_file]\n---\nRead.\n",
    )
    .unwrap();
    let out = sausage(&["roles", "--json", dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = (listed["roles"].as_array().unwrap().iter())
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker", "reviewer", "scout", "tester"], "{listed}");
    let tester = &listed["roles"][3];
    assert_eq!(tester["model"], "small-model", "{tester}");
    assert_eq!(tester["budget_usd"], 0.5, "{tester}");
    assert_eq!(
        listed["roles"][2]["tools"],
        serde_json::json!(["read_file"])
    );
    let shown = text(&sausage(&["roles", dir]).stdout);
    assert!(
        shown.contains("model small-model; up to $0.50; up to 10 min"),
        "{shown}"
    );

    // A bad file: refused where it is wrong, the others still listed, and the exit says so.
    std::fs::write(
        roles.join("broken.md"),
        "---\ndescription: Breaks.\nbudget_usd: lots\n---\nBreak.\n",
    )
    .unwrap();
    let out = sausage(&["roles", dir]);
    assert!(!out.status.success());
    let shown = text(&out.stdout);
    assert!(shown.contains("refused: "), "{shown}");
    assert!(
        shown.contains("broken.md:3:13: budget_usd: invalid type"),
        "{shown}"
    );
    assert!(shown.contains("tester  Runs the tests"), "{shown}");
    let missing = sausage(&["roles", "/nonexistent/world"]);
    assert!(!missing.status.success());
    assert!(!text(&missing.stderr).is_empty());
}

#[test]
fn two_scouts_run_at_once_in_their_role_and_their_reports_and_cost_come_back_to_the_turn() {
    let fake = FakeLlm::start();
    // Each stream takes a while, so the two scouts' requests overlap.
    fake.set_event_delay(std::time::Duration::from_millis(30));
    let prices = json!({"test-model": {"input": 1.0, "output": 2.0, "cache_read": 1.0,
        "cache_write": 1.0}});
    let config = config_with(&fake, "openai-responses", json!({"prices": prices}));
    let world = world_with_config(&fake, "openai-responses", config);
    let delegate =
        |brief: &str| openai::function_call("delegate", json!({"role": "scout", "brief": brief}));
    fake.push_openai(openai::reply(vec![
        delegate("Find SCOUT-ALPHA's file and say what it holds."),
        delegate("Look for SCOUT-BETA in the logs."),
    ]));
    // Alpha tries to write, which its role refuses, then reports; beta reads, then reports.
    fake.push_openai_for(
        &[SUB, "SCOUT-ALPHA"],
        openai::reply(vec![openai::function_call(
            "write_file",
            json!({"path": "/data/stolen.txt", "content": "x"}),
        )]),
    );
    fake.push_openai_for(
        &[SUB, "SCOUT-ALPHA"],
        openai::text_reply("ALPHA found nothing to change."),
    );
    fake.push_openai_for(
        &[SUB, "SCOUT-BETA"],
        openai::reply(vec![openai::function_call(
            "list_dir",
            json!({"path": "/data"}),
        )]),
    );
    fake.push_openai_for(
        &[SUB, "SCOUT-BETA"],
        openai::text_reply("BETA found the logs quiet."),
    );
    fake.push_openai(openai::text_reply("Both scouts reported."));

    let mut host = Host::start(&world.root);
    host.send("send two scouts");
    let answer = final_reply(&mut host);
    assert_eq!(answer["text"], "Both scouts reported.", "{answer}");
    fake.assert_clean();
    assert!(
        fake.most_streams_at_once() >= 2,
        "the scouts' requests overlapped: {}",
        fake.most_streams_at_once()
    );

    let requests: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        requests.len(),
        6,
        "two of the agent's, two of each scout: {:?}",
        outputs_of(requests.last().unwrap())
    );
    let of = |marker: &str| -> Vec<&Value> {
        (requests.iter())
            .filter(|r| {
                let text = r.to_string();
                text.contains(marker) && text.contains(SUB)
            })
            .collect()
    };
    let (alpha, beta) = (of("SCOUT-ALPHA"), of("SCOUT-BETA"));
    assert_eq!((alpha.len(), beta.len()), (2, 2));
    // Each scout is told its role and offered its tools, nothing that writes.
    let instructions = alpha[0]["instructions"].as_str().unwrap_or_default();
    assert!(instructions.contains("the role `scout`"), "{instructions}");
    assert!(instructions.contains("You are a scout"), "{instructions}");
    assert_eq!(
        tools_of(alpha[0]),
        [
            "read_file",
            "list_dir",
            "search",
            "find_files",
            "plan",
            "note"
        ]
    );
    let refused = outputs_of(alpha[1]);
    assert!(
        refused[0].contains("`write_file` is not a tool of the scout role"),
        "{refused:?}"
    );
    assert!(!world.path("private/agent-s1/data/stolen.txt").exists());
    assert!(!world.path("private/agent-s2/data/stolen.txt").exists());
    assert!(
        outputs_of(beta[1])[0].contains("config.json"),
        "beta read its own /data"
    );

    // The agent's last request holds both reports; the turn's cost is all six requests'.
    let reports = outputs_of(&requests[5]);
    assert_eq!(reports.len(), 2, "{reports:?}");
    let joined = reports.join("\n");
    for said in [
        "scout sub-agent agent-s",
        "ALPHA found nothing to change.",
        "BETA found the logs quiet.",
    ] {
        assert!(joined.contains(said), "{said}: {joined}");
    }
    let spent: f64 = (fake.usage_log().iter())
        .map(|u| {
            let tokens = |f: &str| u[f].as_f64().unwrap_or(0.0);
            (tokens("input_tokens") + 2.0 * tokens("output_tokens")) / 1e6
        })
        .sum();
    let cost = answer["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - spent).abs() < 1e-5, "{cost} against {spent}");

    // The person saw the scouts' work nested under the calls, and both were dismissed.
    let nested = host.wait_for("a sub-agent's line", |m| {
        m.from == "agent" && m.body["type"] == "subagent"
    });
    assert!(
        nested.body["actor"]
            .as_str()
            .unwrap()
            .starts_with("agent-s"),
        "{:?}",
        nested.body
    );
    eventually("both sub-agents dismissed", || {
        let registry = world.json("sausage.json");
        registry["actors"].get("agent-s1").is_none() && registry["actors"].get("agent-s2").is_none()
    });
}

/// The pause between two events of a slow answer: its words take some seconds to come.
const SLOW_EVENT_DELAY: std::time::Duration = std::time::Duration::from_millis(150);

/// Every file under `dir` named `name`.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_named(&path, name));
        } else if entry.file_name() == name {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_stop_ends_the_turn_and_its_sub_agents_model_request_within_a_second() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "worker", "brief": "Deploy SLOW-WORK now."}),
    )]));
    let words = ["I will deploy it now, word by word."; 8].join(" ");
    fake.push_openai_for(
        &[SUB, "SLOW-WORK"],
        openai::reply(vec![
            openai::message(&words),
            openai::function_call(
                "write_file",
                json!({"path": "/data/deployed.txt", "content": "deployed"}),
            ),
        ]),
    );
    let mut web = support::web::WebHost::start(&world);
    let owner = web.log_in();
    let host = &mut web.host;
    fake.set_event_delay(SLOW_EVENT_DELAY);
    host.send("deploy it through a worker");
    let streaming = host.wait_for("the worker's first words", |m| {
        m.body["type"] == "subagent" && m.body["event"]["type"] == "progress"
    });
    let turn = streaming.body["turn"].as_str().unwrap().to_string();
    // `/list` shows the worker while it works: whose, in which role, how deep.
    let list = host.request(json!({"type": "list"}));
    let worker = (list["actors"].as_array().unwrap().iter())
        .find(|a| a["id"] == "agent-s1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        worker["subagent"],
        json!({"parent": "agent", "role": "worker", "depth": 1}),
        "{list}"
    );
    assert_eq!(worker["owner"], "owner", "{worker}");
    let page = owner.get("/api/actors").json();
    let row = (page["actors"].as_array().unwrap().iter())
        .find(|a| a["id"] == "agent-s1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        row["subagent"]["role"], "worker",
        "the page's table: {page}"
    );
    let asked = std::time::Instant::now();
    host.tell("agent", json!({"type": "stop", "turn": turn}));
    let reply = final_reply(host);
    let took = asked.elapsed();
    assert!(
        took < std::time::Duration::from_secs(1),
        "the stop took {took:?}: {reply}"
    );
    assert_eq!(reply["stopped"], "stop", "{reply}");
    // The worker's request is dropped with it, and the call that would have come never runs.
    eventually("the worker's stream to end", || fake.streams_now() == 0);
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    std::thread::sleep(SLOW_EVENT_DELAY * 60);
    assert!(files_named(&world.root, "deployed.txt").is_empty());
    assert_eq!(
        fake.requests().len(),
        2,
        "the agent's and the worker's, no more"
    );
    eventually("the worker dismissed", || {
        world.json("sausage.json")["actors"]
            .get("agent-s1")
            .is_none()
    });
}

#[test]
fn a_host_killed_mid_tree_resumes_the_sub_agent_and_repeats_no_answered_request() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "scout", "brief": "Count KILLED-TREE's files."}),
    )]));
    fake.push_openai_for(
        &[SUB, "KILLED-TREE"],
        openai::reply(vec![openai::function_call(
            "list_dir",
            json!({"path": "/data"}),
        )]),
    );
    let words = ["Counting, slowly, one by one."; 8].join(" ");
    fake.push_openai_for(&[SUB, "KILLED-TREE"], openai::text_reply(&words));
    fake.set_event_delay(SLOW_EVENT_DELAY);
    let mut host = Host::start(&world.root);
    host.send("count them through a scout");
    // Killed while the scout's second answer streams (its first is recorded).
    eventually("the scout's second request", || fake.requests().len() == 3);
    host.wait_for("the scout's words", |m| {
        m.body["type"] == "subagent" && m.body["event"]["type"] == "progress"
    });
    host.kill();

    fake.set_event_delay(std::time::Duration::ZERO);
    fake.push_openai_for(
        &[SUB, "KILLED-TREE"],
        openai::text_reply("There are 3 files."),
    );
    fake.push_openai(openai::text_reply("The scout counted 3."));
    let mut host = Host::start(&world.root);
    let answer = final_reply(&mut host);
    assert_eq!(answer["text"], "The scout counted 3.", "{answer}");
    let requests: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(requests.len(), 5, "one repeated: the one cut off");
    let scouts: Vec<&Value> = requests
        .iter()
        .filter(|r| r.to_string().contains(SUB))
        .collect();
    assert_eq!(scouts.len(), 3);
    assert!(outputs_of(scouts[0]).is_empty());
    assert_eq!(
        outputs_of(scouts[1]).len(),
        1,
        "the list_dir's output, once"
    );
    assert_eq!(
        outputs_of(scouts[2]),
        outputs_of(scouts[1]),
        "the cut request, asked again"
    );
    let agents: Vec<&Value> = requests
        .iter()
        .filter(|r| !r.to_string().contains(SUB))
        .collect();
    assert_eq!(
        agents.len(),
        2,
        "the agent's delegation was not asked again"
    );
    let report = outputs_of(agents[1]).join("\n");
    assert!(report.contains("There are 3 files."), "{report}");
    fake.assert_clean();
}

#[test]
fn rewinding_the_turn_undoes_what_its_worker_changed() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    // A build of echo in its public folder, for the worker to upgrade it to.
    std::fs::copy(wasm("echo"), world.path("actor/echo/public/echo.wasm")).unwrap();
    std::fs::create_dir_all(world.path("actor/echo/public/src")).unwrap();
    std::fs::write(world.path("actor/echo/public/src/actor.json"), "{}").unwrap();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "worker", "brief": "Upgrade REWIND-ECHO, the echo actor."}),
    )]));
    fake.push_openai_for(
        &[SUB, "REWIND-ECHO"],
        openai::reply(vec![openai::function_call(
            "send_message",
            json!({"to": "broker", "body": {"type": "upgrade", "actor": "echo",
                   "wasm": "/actor/echo/public/echo.wasm", "source": "/actor/echo/public/src"},
                   "wait_seconds": 120}),
        )]),
    );
    fake.push_openai_for(&[SUB, "REWIND-ECHO"], openai::text_reply("Upgraded echo."));
    fake.push_openai(openai::text_reply("The worker upgraded echo."));
    let mut host = Host::start(&world.root);
    host.send("upgrade echo through a worker");
    let answer = final_reply(&mut host);
    assert_eq!(answer["text"], "The worker upgraded echo.", "{answer}");
    assert_eq!(answer["rewindable"], true, "{answer}");
    let version = || world.json("sausage.json")["actors"]["echo"]["version"].clone();
    assert_eq!(version(), 2);
    let report = outputs_of(&fake.requests()[3].body).join("\n");
    assert!(report.contains("actors changed: echo"), "{report}");

    host.send("/rewind");
    let rewound = host
        .wait_for_within(
            std::time::Duration::from_secs(120),
            "the rewind's answer",
            |m| m.from == "agent" && matches!(m.body["type"].as_str(), Some("rewound" | "error")),
        )
        .body;
    assert_eq!(rewound["type"], "rewound", "{rewound}");
    assert_eq!(rewound["actors"][0]["actor"], "echo", "{rewound}");
    assert_eq!(rewound["not_recalled"], json!([]), "{rewound}");
    assert_eq!(version(), 1, "echo's version before the worker's upgrade");
}

#[test]
fn a_members_worker_has_the_members_rights_and_no_more() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    std::fs::copy(wasm("echo"), world.path("actor/echo/public/echo.wasm")).unwrap();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "worker", "brief": "Upgrade MEMBER-WORK, the owner's echo."}),
    )]));
    fake.push_openai_for(
        &[SUB, "MEMBER-WORK"],
        openai::reply(vec![openai::function_call(
            "send_message",
            json!({"to": "broker", "body": {"type": "upgrade", "actor": "echo",
                   "wasm": "/actor/echo/public/echo.wasm"}, "wait_seconds": 60}),
        )]),
    );
    fake.push_openai_for(&[SUB, "MEMBER-WORK"], openai::text_reply("I was refused."));
    fake.push_openai(openai::text_reply("The worker could not."));
    let web = support::web::WebHost::start(&world);
    let ann = web.add_person(&world, "ann", "member");
    let mut events = ann.events(None);
    let sent = ann.post(
        "/api/send",
        &json!({"to": "agent", "body": {"type": "text", "text": "upgrade echo"}}),
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    events.wait_for("message", support::web::EVENT_PATIENCE, |data| {
        data["body"]["type"] == "text" && data["body"]["text"] == "The worker could not."
    });
    let requests: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    let worker = (requests.iter())
        .filter(|r| r.to_string().contains(SUB))
        .nth(1)
        .expect("the worker's second request");
    let refusal = outputs_of(worker).join("\n");
    assert!(refusal.contains("refused"), "{refusal}");
    assert!(refusal.contains("echo"), "{refusal}");
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 1);
    eventually("the worker dismissed", || {
        world.json("sausage.json")["actors"]["agent-s1"].is_null()
    });
}

#[test]
fn a_sub_agents_turn_is_traced_under_the_delegate_call_that_started_it() {
    let otlp = support::otlp::Otlp::start();
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "scout", "brief": "Say hello, TRACED-SCOUT."}),
    )]));
    fake.push_openai_for(&[SUB, "TRACED-SCOUT"], openai::text_reply("Hello."));
    fake.push_openai(openai::text_reply("The scout said hello."));
    let mut host = Host::start_with(&world.root, &["--no-web", "--otlp", &otlp.endpoint()], &[]);
    host.send("have a scout say hello");
    assert_eq!(final_reply(&mut host)["text"], "The scout said hello.");
    let named = |spans: &[Value], name: &str| -> Vec<Value> {
        spans
            .iter()
            .filter(|s| s["name"] == name)
            .cloned()
            .collect()
    };
    let spans = otlp.wait_for(
        "both turns' spans",
        std::time::Duration::from_secs(30),
        |spans| {
            !named(spans, "invoke_agent agent-s1").is_empty()
                && !named(spans, "execute_tool delegate").is_empty()
                && !named(spans, "invoke_agent agent").is_empty()
        },
    );
    let parent = |span: &Value| -> Value {
        (spans.iter())
            .find(|s| s["span_id"] == span["parent_span_id"] && s["trace_id"] == span["trace_id"])
            .cloned()
            .unwrap_or_else(|| panic!("no parent for {span}"))
    };
    let sub = &named(&spans, "invoke_agent agent-s1")[0];
    let tool = &named(&spans, "execute_tool delegate")[0];
    let turn = &named(&spans, "invoke_agent agent")[0];
    // The sub-agent's turn → the broker's `delegate` request's delivery → the tool call → the turn.
    let delivery = parent(sub);
    assert_eq!(delivery["name"], "deliver broker", "{delivery}");
    assert_eq!(parent(&delivery)["span_id"], tool["span_id"], "{delivery}");
    assert_eq!(tool["parent_span_id"], turn["span_id"], "{tool}");
    assert_eq!(sub["trace_id"], turn["trace_id"]);
    host.quit();
}

#[test]
fn on_a_cluster_a_sub_agent_runs_beside_its_parent_and_reports() {
    let nats = support::nats::Nats::start();
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "scout", "brief": "Report CLUSTER-SCOUT."}),
    )]));
    fake.push_openai_for(&[SUB, "CLUSTER-SCOUT"], openai::text_reply("Reported."));
    fake.push_openai(openai::text_reply("The scout reported."));
    let on = |id: &str| ["--no-web", "--cluster", &nats.url(), "--host-id", id].map(str::to_owned);
    let args = on("a");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = Host::start_with(&world.root, &args, &[]);
    eventually("the agent running on a", || {
        let list = a.request(json!({"type": "list"}));
        (list["actors"].as_array().into_iter().flatten())
            .any(|x| x["id"] == "agent" && x["host"] == "a" && x["state"] == "running")
    });
    let other = TestWorld::new();
    let args = on("b");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _b = Host::start_with(&other.root, &args, &[]);
    eventually("two hosts", || {
        let list = a.request(json!({"type": "list"}));
        list["hosts"].as_array().is_some_and(|h| h.len() == 2)
    });
    a.send("have a scout report");
    assert_eq!(final_reply(&mut a)["text"], "The scout reported.");
    let scout = (fake.requests().into_iter())
        .find(|r| r.body.to_string().contains(SUB))
        .expect("the scout's request");
    assert!(
        scout.headers["authorization"].ends_with(sausage_fake_llm::TOKEN),
        "the scout's request carries the model token the host added"
    );
    fake.assert_clean();
}

#[test]
fn a_worker_delegates_once_more_to_an_owners_role_and_no_deeper() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    let roles = world.path("private/agent/data/roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("finder.md"),
        "---\ndescription: Finds one thing.\ntools: [list_dir, delegate]\n---\nFind it.\n",
    )
    .unwrap();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "delegate",
        json!({"role": "worker", "brief": "Organise DEPTH-ONE."}),
    )]));
    // The worker (depth 1) hands part of it to a finder (depth 2), which reports.
    fake.push_openai_for(
        &[SUB, "DEPTH-ONE"],
        openai::reply(vec![openai::function_call(
            "delegate",
            json!({"role": "finder", "brief": "Find DEPTH-TWO."}),
        )]),
    );
    fake.push_openai_for(
        &[SUB, "DEPTH-TWO"],
        openai::text_reply("Found it at /data."),
    );
    fake.push_openai_for(
        &[SUB, "DEPTH-ONE"],
        openai::text_reply("Organised, with the finder's help."),
    );
    fake.push_openai(openai::text_reply("All organised."));
    let mut host = Host::start(&world.root);
    host.send("organise it");
    assert_eq!(final_reply(&mut host)["text"], "All organised.");
    let requests: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(requests.len(), 5);
    let of = |marker: &str| -> Vec<Value> {
        (requests.iter())
            .filter(|r| {
                let text = r["instructions"].as_str().unwrap_or_default();
                text.contains(SUB) && r.to_string().contains(marker)
            })
            .cloned()
            .collect()
    };
    let (worker, finder) = (of("Organise DEPTH-ONE"), of("Find DEPTH-TWO"));
    assert!(tools_of(&worker[0]).contains(&"delegate".to_string()));
    assert!(
        finder[0]["instructions"]
            .as_str()
            .unwrap()
            .contains("the role `finder`"),
        "the owner's role reached the worker"
    );
    assert_eq!(tools_of(&finder[0]), ["list_dir"], "two deep: no delegate");
    let worker_saw = outputs_of(&worker[1]).join("\n");
    assert!(
        worker_saw.contains("finder sub-agent agent-s1-s1 reported"),
        "{worker_saw}"
    );
    let agent_saw = outputs_of(requests.last().unwrap()).join("\n");
    assert!(
        agent_saw.contains("Organised, with the finder's help."),
        "{agent_saw}"
    );
    // The person saw the finder's start nested two deep.
    host.wait_for("the finder, nested under the worker", |m| {
        m.body["type"] == "subagent"
            && m.body["event"]["type"] == "subagent"
            && m.body["event"]["actor"] == "agent-s1-s1"
    });
}

#[test]
fn only_the_agent_delegates_and_only_a_parent_dismisses_and_bad_requests_change_nothing() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = Host::start(&world.root);
    let role = json!({"role": "scout", "prompt": "Look."});
    let refused = host.request(json!({"type": "delegate", "role": role, "brief": "look",
        "message": "console/x"}));
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("only the agent and its sub-agents delegate"),
        "{refused}"
    );
    let not_one = host.request(json!({"type": "dismiss", "actor": "echo"}));
    assert!(
        not_one["reason"]
            .as_str()
            .unwrap()
            .contains("`echo` is no sub-agent"),
        "{not_one}"
    );
    let registry = world.json("sausage.json");
    assert!(registry["actors"].get("echo").is_some(), "nothing removed");
    assert_eq!(
        registry["actors"].as_object().unwrap().len(),
        1,
        "nothing made"
    );
}
