//! Seeing inside a world (DESIGN §22): a real Prometheus scraping `/metrics` with the token
//! `sausage metrics token` made, traces received by an OTLP/HTTP receiver that decodes them with
//! the official OpenTelemetry protobuf definitions, and `sausage status`.

mod support;

use std::time::Duration;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::{config_with, final_reply, world_with_config};
use support::http::request;
use support::otlp::Otlp;
use support::prometheus::Prometheus;
use support::web::WebHost;
use support::{Host, TestWorld, sausage, text};

/// Prometheus adds a target's first scrape about 5 s after it starts.
const SCRAPES: Duration = Duration::from_secs(40);
/// The host exports spans every second.
const EXPORTS: Duration = Duration::from_secs(30);

/// A world whose agent, on the fake, prices `test-model`.
fn priced_world(fake: &FakeLlm) -> TestWorld {
    let prices = json!({"test-model": {"input": 1.0, "output": 2.0, "cache_read": 0.1,
        "cache_write": 1.0}});
    let world = world_with_config(
        fake,
        "openai-responses",
        config_with(fake, "openai-responses", json!({"prices": prices})),
    );
    world.install("echo", "echo");
    world
}

/// The fake's next turn: one `send_message` to echo (waiting for its reply), then words.
fn push_turn_with_a_tool_call(fake: &FakeLlm) {
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "echo", "body": {"type": "ping", "n": 99}, "wait_seconds": 10}),
    )]));
    fake.push_openai(openai::text_reply("Echo answered."));
}

/// What `promtool check metrics` finds wrong with a classic text (empty when nothing).
fn promtool_check_metrics(text: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (run scripts/install-observability)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn prometheus_scrapes_a_running_world_and_its_series_move_with_messages_and_a_turn() {
    let fake = FakeLlm::start();
    let world = priced_world(&fake);
    let root = world.root.to_str().unwrap();
    let made = sausage(&["metrics", "token", "--world", root]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let token = text(&made.stdout).trim().to_string();
    assert_eq!(token.len(), 64, "a token of 256 bits: {token}");
    assert!(
        text(&made.stderr).contains("/metrics"),
        "{}",
        text(&made.stderr)
    );

    let mut web = WebHost::start(&world);
    let prometheus = Prometheus::start(&web.addr, &token);
    for n in 0..5 {
        web.host.tell("echo", json!({"type": "ping", "n": n}));
        web.host
            .wait_for("echo's answer", |m| m.from == "echo" && m.body["n"] == n);
    }
    push_turn_with_a_tool_call(&fake);
    web.host.send("ask echo");
    assert_eq!(final_reply(&mut web.host)["text"], "Echo answered.");
    // Two builds, the second an upgrade.
    let greeter = world.path("private/console/data/greeter");
    for greeting in ["hello", "hello again"] {
        support::write_greeter_crate(&greeter, "greeter", greeting);
        web.host
            .send(&format!("/deploy greeter {}", greeter.display()));
        web.host.send("@greeter hi");
        assert_eq!(web.host.wait_type("greeter", "text")["text"], greeting);
    }

    let at_least = |n: f64| move |samples: &[Value]| samples.first().is_some_and(|s| value(s) >= n);
    prometheus.wait_for_series(
        r#"sausage_messages_received_total{actor="echo"}"#,
        SCRAPES,
        at_least(6.0),
    );
    prometheus.wait_for_series(
        r#"sausage_messages_sent_total{actor="echo"}"#,
        SCRAPES,
        at_least(6.0),
    );
    prometheus.wait_for_series("sausage_turns_total", SCRAPES, at_least(1.0));
    prometheus.wait_for_series(
        r#"sausage_model_tokens_total{kind="input"}"#,
        SCRAPES,
        at_least(1.0),
    );
    prometheus.wait_for_series("sausage_model_cost_usd_total", SCRAPES, |samples| {
        samples.first().is_some_and(|s| value(s) > 0.0)
    });
    prometheus.wait_for_series(
        r#"sausage_requests_total{type="spans"}"#,
        SCRAPES,
        at_least(1.0),
    );
    prometheus.wait_for_series(
        r#"sausage_actor_memory_bytes{actor="echo"}"#,
        SCRAPES,
        |samples| samples.first().is_some_and(|s| value(s) > 65536.0),
    );
    prometheus.wait_for_series(r#"sausage_actors{state="running"}"#, SCRAPES, at_least(2.0));

    // The binary and the process, as Prometheus read them.
    prometheus.wait_for_series(
        &format!(
            r#"sausage_build_info{{version="{}",commit="{}"}}"#,
            env!("CARGO_PKG_VERSION"),
            env!("SAUSAGE_COMMIT")
        ),
        SCRAPES,
        |samples| samples.first().is_some_and(|s| value(s) == 1.0),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    prometheus.wait_for_series("process_start_time_seconds", SCRAPES, |samples| {
        samples
            .first()
            .is_some_and(|s| (now - 600.0..now).contains(&value(s)))
    });
    prometheus.wait_for_series("process_cpu_seconds_total", SCRAPES, |samples| {
        samples.first().is_some_and(|s| value(s) > 0.0)
    });
    prometheus.wait_for_series("process_resident_memory_bytes", SCRAPES, |samples| {
        samples.first().is_some_and(|s| value(s) > 10e6)
    });
    prometheus.wait_for_series("process_open_fds", SCRAPES, |samples| {
        samples.first().is_some_and(|s| value(s) >= 3.0)
    });
    prometheus.wait_for_series("process_max_fds >= process_open_fds", SCRAPES, |samples| {
        !samples.is_empty()
    });

    // How long the turn, the builds and the upgrade took: histograms in seconds.
    for (histogram, count, most) in [
        ("sausage_turn_duration_seconds", 1.0, 60.0),
        ("sausage_build_duration_seconds", 2.0, 1800.0),
        ("sausage_upgrade_duration_seconds", 1.0, 60.0),
    ] {
        prometheus.wait_for_series(&format!("{histogram}_count"), SCRAPES, at_least(count));
        prometheus.wait_for_series(
            &format!(r#"{histogram}_bucket{{le="+Inf"}}"#),
            SCRAPES,
            at_least(count),
        );
        prometheus.wait_for_series(&format!("{histogram}_sum"), SCRAPES, |samples| {
            samples
                .first()
                .is_some_and(|s| value(s) > 0.0 && value(s) < most)
        });
    }

    // How long messages waited in mailboxes: every delivery counted, in the histogram's
    // buckets from a millisecond up.
    prometheus.wait_for_series(
        "sausage_delivery_duration_seconds_count",
        SCRAPES,
        at_least(3.0),
    );
    prometheus.wait_for_series(
        r#"sausage_delivery_duration_seconds_bucket{le="0.001"}"#,
        SCRAPES,
        at_least(1.0),
    );
    prometheus.wait_for_series(
        "sausage_delivery_duration_seconds_sum",
        SCRAPES,
        |samples| {
            samples
                .first()
                .is_some_and(|s| (0.0..600.0).contains(&value(s)))
        },
    );

    // What Prometheus read, as OpenMetrics text: typed and explained series, units in their
    // names, and the end marked.
    let auth = format!("Bearer {token}");
    let openmetrics = request(
        &web.addr,
        "GET",
        "/metrics",
        &[
            ("Authorization", &auth),
            ("Accept", "application/openmetrics-text;version=1.0.0"),
        ],
        b"",
    );
    assert_eq!(openmetrics.status, 200);
    assert!(
        openmetrics
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text"))
    );
    let body = openmetrics.text();
    for line in [
        "# TYPE sausage_messages_received counter",
        "# HELP sausage_messages_received Messages accepted into the actor's mailbox",
        "# TYPE sausage_actor_memory_bytes gauge",
        "# UNIT sausage_actor_memory_bytes bytes",
        "# TYPE sausage_world_messages counter",
        "# TYPE sausage_build info",
        "# TYPE sausage_turn_duration_seconds histogram",
        "# UNIT sausage_turn_duration_seconds seconds",
    ] {
        assert!(body.contains(line), "{line} in:\n{body}");
    }
    assert!(body.ends_with("# EOF\n"), "{body}");
    // Without that `Accept` (or with the classic one): the classic format, which `promtool`
    // finds nothing wrong with.
    for accept in [None, Some("text/plain;version=0.0.4")] {
        let mut headers = vec![("Authorization", auth.as_str())];
        headers.extend(accept.map(|accept| ("Accept", accept)));
        let metrics = request(&web.addr, "GET", "/metrics", &headers, b"");
        assert_eq!(metrics.status, 200);
        assert_eq!(
            metrics.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let body = metrics.text();
        for line in [
            "# TYPE sausage_messages_received_total counter",
            "# TYPE sausage_actor_memory_bytes gauge",
            "# TYPE sausage_build_info gauge",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE sausage_upgrade_duration_seconds histogram",
            "# TYPE sausage_delivery_duration_seconds histogram",
        ] {
            assert!(body.contains(line), "{line} in:\n{body}");
        }
        assert!(
            !body.contains("# EOF") && !body.contains("# UNIT"),
            "{body}"
        );
        assert_eq!(promtool_check_metrics(&body), "", "promtool on:\n{body}");
    }
    // Wrong, missing and misplaced tokens.
    for headers in [
        vec![],
        vec![("Authorization", "Bearer nonsense")],
        vec![("Authorization", token.as_str())],
    ] {
        let refused = request(&web.addr, "GET", "/metrics", &headers, b"");
        assert_eq!(refused.status, 401, "{headers:?}");
        assert!(
            refused.text().contains("sausage metrics token"),
            "{}",
            refused.text()
        );
    }
    // Turns, tokens and cost count only the agent's reports: spans that say they are turns
    // and model requests, sent by anyone else, are exported but not counted.
    let counted = |name: &str| {
        let text = request(
            &web.addr,
            "GET",
            "/metrics",
            &[("Authorization", &auth)],
            b"",
        )
        .text();
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        let line = line.unwrap_or_else(|| panic!("{name} in:\n{text}"));
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    let (turns, cost, reported) = (
        counted("sausage_turns_total"),
        counted("sausage_model_cost_usd_total"),
        counted("sausage_spans_reported_total"),
    );
    let forged = |id: &str, operation: &str| {
        json!({"name": "forged", "id": id, "start_ms": 1, "end_ms": 2, "attributes": {
            "gen_ai.operation.name": operation, "gen_ai.usage.input_tokens": 1_000_000,
            "gen_ai.usage.cost_usd": 1000.0}})
    };
    let spans = [
        forged("00000000000000a1", "invoke_agent"),
        forged("00000000000000a2", "chat"),
    ];
    web.host
        .tell("broker", json!({"type": "spans", "spans": spans}));
    web.host.wait_for("the forged spans recorded", |m| {
        m.from == "broker" && m.body["type"] == "spans_recorded"
    });
    assert_eq!(counted("sausage_spans_reported_total"), reported + 2.0);
    assert_eq!(counted("sausage_turns_total"), turns);
    assert_eq!(counted("sausage_model_cost_usd_total"), cost);

    let status_with_metrics_token = request(
        &web.addr,
        "GET",
        "/status",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(status_with_metrics_token.status, 403);

    // `sausage status` asks the running host: a table with memory.
    let status = sausage(&["status", "--world", root]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let table = text(&status.stdout);
    let head = table.lines().next().unwrap();
    assert!(
        head.split_whitespace().eq([
            "id", "state", "version", "owner", "host", "queued", "restarts", "memory", "routes"
        ]),
        "{table}"
    );
    let echo = table.lines().find(|l| l.starts_with("echo ")).unwrap();
    assert!(echo.contains("running") && echo.contains(" MiB"), "{table}");

    // A new token replaces the old one.
    let again = sausage(&["metrics", "token", "--world", root]);
    let new_token = text(&again.stdout).trim().to_string();
    let old = request(
        &web.addr,
        "GET",
        "/metrics",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(old.status, 401);
    let new_auth = format!("Bearer {new_token}");
    let new = request(
        &web.addr,
        "GET",
        "/metrics",
        &[("Authorization", &new_auth)],
        b"",
    );
    assert_eq!(new.status, 200);

    web.host.quit();
    let mut headless = Host::start_with(&world.root, &["--no-web"], &[]);
    headless.tell("echo", json!({"type": "ping"}));
    headless.wait_type("echo", "ping");
    let table = text(&sausage(&["status", "--world", root]).stdout);
    assert!(table.contains("its web console does not answer"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("echo ") && l.contains("running")),
        "{table}"
    );
    headless.quit();
    let stopped = sausage(&["status", "--world", root]);
    let table = text(&stopped.stdout);
    assert!(table.contains("is not running"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("echo ") && l.contains("stopped")),
        "{table}"
    );
    let nowhere = sausage(&["status", "--world", "/nonexistent/world"]);
    assert!(!nowhere.status.success());
    assert!(text(&nowhere.stderr).contains("/nonexistent/world: no world here"));
}

/// Spans by name.
fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn has(spans: &[Value], name: &str) -> bool {
    !named(spans, name).is_empty()
}

#[test]
fn a_trace_follows_a_message_through_three_actors_and_a_turn_through_its_steps() {
    let otlp = Otlp::start();
    let fake = FakeLlm::start();
    let world = priced_world(&fake);
    world.install("first", "relay");
    world.install("second", "relay");
    let mut host = Host::start_with(&world.root, &["--no-web", "--otlp", &otlp.endpoint()], &[]);

    // console → first → second → echo, and the answers back.
    host.tell(
        "first",
        json!({"type": "relay", "to": "second", "body":
            {"type": "relay", "to": "echo", "body": {"type": "ping"}}}),
    );
    host.wait_type("first", "relayed");
    let spans = otlp.wait_for("the three deliveries", EXPORTS, |spans| {
        ["deliver first", "deliver second", "deliver echo"]
            .iter()
            .all(|name| has(spans, name))
    });
    let first = named(&spans, "deliver first")[0];
    let second = named(&spans, "deliver second")[0];
    let echo = named(&spans, "deliver echo")[0];
    assert_eq!(second["parent_span_id"], first["span_id"], "{second}");
    assert_eq!(echo["parent_span_id"], second["span_id"], "{echo}");
    for span in [second, echo] {
        assert_eq!(span["trace_id"], first["trace_id"]);
    }
    assert_eq!(first["attributes"]["sausage.from"], "console");
    assert_eq!(echo["attributes"]["messaging.destination.name"], "echo");
    assert_eq!(first["resource"]["service.name"], "sausage");
    assert!(echo["end_unix_nano"].as_u64() >= echo["start_unix_nano"].as_u64());
    // The answers continue the same trace back up.
    let answers = otlp.wait_for("the answers", EXPORTS, |spans| {
        named(spans, "deliver first")
            .iter()
            .any(|s| s["parent_span_id"] != "" && s["trace_id"] == first["trace_id"])
    });
    let back = named(&answers, "deliver first")
        .into_iter()
        .find(|s| s["parent_span_id"] != "")
        .unwrap();
    assert_eq!(back["attributes"]["sausage.from"], "second");

    // A turn: its model requests and its tool call nest under it, and the message the tool
    // call sent nests under the tool call.
    push_turn_with_a_tool_call(&fake);
    host.send("ask echo");
    assert_eq!(final_reply(&mut host)["text"], "Echo answered.");
    let spans = otlp.wait_for("the turn's spans", EXPORTS, |spans| {
        has(spans, "invoke_agent agent")
            && named(spans, "chat test-model").len() >= 2
            && has(spans, "execute_tool send_message")
    });
    let turn = named(&spans, "invoke_agent agent")[0];
    let delivered = named(&spans, "deliver agent")
        .into_iter()
        .find(|s| s["span_id"] == turn["parent_span_id"])
        .unwrap_or_else(|| panic!("the turn's parent is the delivery of its message: {turn}"));
    assert_eq!(delivered["attributes"]["sausage.from"], "console");
    assert_eq!(turn["attributes"]["gen_ai.operation.name"], "invoke_agent");
    for chat in named(&spans, "chat test-model") {
        assert_eq!(chat["parent_span_id"], turn["span_id"], "{chat}");
        assert_eq!(chat["trace_id"], turn["trace_id"]);
        assert_eq!(chat["attributes"]["gen_ai.request.model"], "test-model");
        assert!(
            chat["attributes"]["gen_ai.usage.input_tokens"].as_i64() > Some(0),
            "{chat}"
        );
        assert!(
            chat["attributes"]["gen_ai.usage.output_tokens"].as_i64() > Some(0),
            "{chat}"
        );
        assert!(
            chat["attributes"]["gen_ai.usage.cost_usd"].as_f64() > Some(0.0),
            "{chat}"
        );
    }
    let tool = named(&spans, "execute_tool send_message")[0];
    assert_eq!(tool["parent_span_id"], turn["span_id"]);
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "send_message");
    let spans = otlp.wait_for("the tool call's message to echo", EXPORTS, |spans| {
        named(spans, "deliver echo")
            .iter()
            .any(|s| s["parent_span_id"] == tool["span_id"])
    });
    let sent = named(&spans, "deliver echo")
        .into_iter()
        .find(|s| s["parent_span_id"] == tool["span_id"])
        .unwrap();
    assert_eq!(sent["trace_id"], turn["trace_id"]);
    assert_eq!(sent["attributes"]["sausage.from"], "agent");

    // A request's span is a child of its delivery; a refused one is an error.
    let refused = host.request(json!({"type": "spans", "spans": "x"}));
    assert_eq!(refused["type"], "error");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("must be a list")
    );
    let spans = otlp.wait_for("the refused request's span", EXPORTS, |spans| {
        named(spans, "request spans")
            .iter()
            .any(|s| s["status_code"] == 2)
    });
    let request_span = named(&spans, "request spans")
        .into_iter()
        .find(|s| s["status_code"] == 2)
        .unwrap();
    assert!(
        named(&spans, "deliver broker")
            .iter()
            .any(|d| d["span_id"] == request_span["parent_span_id"]),
        "{request_span}"
    );
    assert!(otlp.stderr().is_empty(), "{}", otlp.stderr());
    host.quit();
}

#[test]
fn spans_and_metrics_hold_no_conversation_text() {
    // Words planted in what a person says, in what the model answers, and in the message its
    // tool call sends: none may leave the world in a span or a metric.
    const ASKED: &str = "zebra-quartz-41";
    const ANSWERED: &str = "marmoset-violet-73";
    const SENT: &str = "okapi-ember-58";
    let otlp = Otlp::start();
    let fake = FakeLlm::start();
    let world = priced_world(&fake);
    let root = world.root.to_str().unwrap();
    let made = sausage(&["metrics", "token", "--world", root]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let token = text(&made.stdout).trim().to_string();
    let endpoint = otlp.endpoint();
    let mut web = WebHost::start_with(&world, &["--web", "127.0.0.1:0", "--otlp", &endpoint]);

    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "echo", "body": {"type": "ping", "text": format!("say {SENT}")},
            "wait_seconds": 10}),
    )]));
    fake.push_openai(openai::text_reply(&format!("Echo said {ANSWERED}.")));
    web.host.send(&format!("please ping echo with {ASKED}"));
    let reply = final_reply(&mut web.host);
    assert!(
        reply["text"].as_str().unwrap().contains(ANSWERED),
        "{reply}"
    );
    let asked = fake.requests();
    assert!(
        asked.iter().any(|r| r.body.to_string().contains(ASKED)),
        "the model was asked with the planted words"
    );

    let spans = otlp.wait_for("the turn's spans", EXPORTS, |spans| {
        has(spans, "invoke_agent agent")
            && named(spans, "chat test-model").len() >= 2
            && has(spans, "execute_tool send_message")
            && has(spans, "request spans")
            && has(spans, "deliver echo")
    });
    for span in &spans {
        let exported = span.to_string();
        for planted in [ASKED, ANSWERED, SENT] {
            assert!(
                !exported.contains(planted),
                "{planted} in a span: {exported}"
            );
        }
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
    let metrics = metrics.text();
    assert!(metrics.contains("sausage_turns_total"), "{metrics}");
    for line in metrics.lines() {
        for planted in [ASKED, ANSWERED, SENT] {
            assert!(!line.contains(planted), "{planted} in /metrics: {line}");
        }
    }
    web.host.quit();
}

#[test]
fn without_an_endpoint_messages_flow_and_spans_are_checked_but_not_sent() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("first", "relay");
    let mut host = world.run();
    host.tell(
        "first",
        json!({"type": "relay", "to": "echo", "body": {"type": "ping"}}),
    );
    host.wait_type("first", "relayed");
    let recorded = host.request(json!({"type": "spans", "spans": [{"name": "work",
        "id": "00000000000000aa", "parent": null, "start_ms": 1.0, "end_ms": 2.0}]}));
    assert_eq!(recorded, json!({"type": "spans_recorded", "count": 1}));
    let bad = host.request(json!({"type": "spans", "spans": [{"name": "work",
        "id": "00000000000000aa", "parent": "00-xyz", "start_ms": 1.0, "end_ms": 2.0}]}));
    assert!(
        bad["reason"].as_str().unwrap().contains("span 0: `parent`"),
        "{bad}"
    );
    assert!(!host.stderr().contains("traces go to"));
    host.quit();
}

#[test]
fn the_standard_environment_variable_turns_export_on_and_a_wrong_url_is_refused() {
    let otlp = Otlp::start();
    let world = TestWorld::new();
    world.install("echo", "echo");
    let endpoint = otlp.endpoint();
    let mut host = Host::start_with(
        &world.root,
        &["--no-web"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    );
    host.tell("echo", json!({"type": "ping"}));
    host.wait_type("echo", "ping");
    otlp.wait_for("echo's delivery", EXPORTS, |spans| {
        has(spans, "deliver echo")
    });
    assert!(
        host.stderr()
            .contains(&format!("traces go to {endpoint}/v1/traces"))
    );
    host.quit();

    let root = world.root.to_str().unwrap();
    for url in ["not a url", "ftp://127.0.0.1:4318", "http://"] {
        let refused = sausage(&["run", root, "--no-web", "--otlp", url]);
        assert!(!refused.status.success(), "{url}");
        let said = text(&refused.stderr);
        assert!(
            said.contains("give the OTLP/HTTP endpoint"),
            "{url}: {said}"
        );
    }
}

/// The span whose id is `span`'s parent, failing with both when there is none.
fn parent_of<'a>(spans: &'a [Value], span: &Value) -> &'a Value {
    spans
        .iter()
        .find(|s| s["span_id"] == span["parent_span_id"] && s["trace_id"] == span["trace_id"])
        .unwrap_or_else(|| panic!("no parent for {span} among the spans received"))
}

/// The work behind `/deploy` is traced (DESIGN §22): cargo's build is a child of its request's
/// delivery; the candidate's tests are children of the spawn or upgrade they serve; an upgrade's
/// shadow run is a child of the upgrade and says how many messages it tried.
#[test]
fn a_deploy_traces_its_build_its_tests_and_the_upgrades_shadow_run() {
    let otlp = Otlp::start();
    let world = TestWorld::new();
    let dir = world.path("private/console/data/greeter");
    support::write_greeter_crate(&dir, "greeter", "hello");
    let mut host = Host::start_with(&world.root, &["--no-web", "--otlp", &otlp.endpoint()], &[]);
    host.send(&format!("/deploy greeter {}", dir.display()));
    host.send("@greeter hi");
    assert_eq!(host.wait_type("greeter", "text")["text"], "hello");
    support::write_greeter_crate(&dir, "greeter", "hello again");
    host.send(&format!("/deploy greeter {}", dir.display()));
    host.send("@greeter hi");
    assert_eq!(host.wait_type("greeter", "text")["text"], "hello again");

    let spans = otlp.wait_for("two builds, tests and a shadow run", EXPORTS, |spans| {
        named(spans, "build").len() >= 2
            && named(spans, "test").len() >= 2
            && has(spans, "shadow run")
            && has(spans, "request upgrade")
    });
    for build in named(&spans, "build") {
        assert_eq!(parent_of(&spans, build)["name"], "deliver cargo", "{build}");
        assert_eq!(
            build["attributes"]["sausage.source"],
            dir.display().to_string()
        );
        assert_ne!(build["status_code"], 2, "an error status: {build}");
    }
    let tests: Vec<&str> = named(&spans, "test")
        .iter()
        .map(|test| parent_of(&spans, test)["name"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["request spawn", "request upgrade"]);
    let shadow = named(&spans, "shadow run")[0];
    assert_eq!(parent_of(&spans, shadow)["name"], "request upgrade");
    assert_eq!(shadow["attributes"]["sausage.actor"], "greeter");
    assert_eq!(shadow["attributes"]["sausage.version"], 2);
    assert_eq!(
        shadow["attributes"]["sausage.shadow.messages"], 1,
        "{shadow}"
    );
    host.quit();
}
