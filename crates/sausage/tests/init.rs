//! `sausage init` end to end: the questions answered by flags, the environment or stdin, the
//! provider checked before the build, the agent built from the source the binary carries, and
//! the new world answering through the agent; `sausage model show|set|test` after it, with the
//! token kept as the secret `model`; and a world made before that, whose token is moved there.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sausage_fake_llm::{FakeLlm, TOKEN, anthropic, openai};
use support::*;

#[test]
fn init_builds_and_registers_the_agent_and_the_world_answers() {
    let fake = FakeLlm::start();
    // The answer to init's check of the provider.
    fake.push_openai(openai::text_reply("OK"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    // Only the dependencies come pre-built; the agent itself is built by the world's cargo.
    warm_cargo_for_agent(&root, "boss");
    let out = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("init")
        .arg(&root)
        .args([
            "--api",
            "openai-responses",
            // As OpenAI's documentation writes it: the agent must not ask for /v1/v1/….
            "--base-url",
            &format!("{}/v1/", fake.base_url()),
            "--model",
            "m-1",
            "--owner",
            "boss",
        ])
        .env("SAUSAGE_API_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("deploy: agent runs version 1"), "{stdout}");
    assert!(
        stdout.contains("sausage run"),
        "it says what to do next: {stdout}"
    );

    let world = TestWorld::adopt(dir, root);
    assert_eq!(world.json("sausage.json")["actors"]["agent"]["version"], 1);
    let people = world.json("broker/people.json");
    assert_eq!(
        people["people"][0]["id"], "boss",
        "the first owner: {people}"
    );
    assert_eq!(people["people"][0]["tier"], "owner");
    assert_eq!(
        people["surfaces"]["agent"], "person",
        "the agent may act for people"
    );
    assert_eq!(
        world.json("sausage.json")["subscriptions"]["agent"],
        serde_json::json!(["console"])
    );
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "openai-responses");
    assert_eq!(config["base_url"], fake.base_url(), "without its /v1");
    assert_eq!(config["model"], "m-1");
    assert_eq!(config["max_turn_usd"], 5.0, "budgets a person can edit");
    assert_eq!(config["max_day_usd"], 25.0);
    assert_eq!(config.get("token"), None, "the host keeps the token");
    let secret = &world.json("broker/secrets/secrets.json")["model"];
    assert_eq!(secret["header"], "authorization");
    assert_eq!(secret["format"], "Bearer {}");
    assert_eq!(secret["value"], TOKEN);
    assert_eq!(secret["url"], fake.base_url());
    assert_eq!(secret["set_by"], "boss", "the first owner keeps it");
    assert_eq!(secret["grants"][0]["actor"], "agent");
    assert!(!world.path("broker/credentials/agent.json").exists());
    let host = fake.base_url().replace("http://", "");
    assert_eq!(
        world.json("actor/agent/source/actor.json"),
        serde_json::json!({ "network": [host], "window": 0 }),
        "the agent keeps no window: its messages are people's conversations"
    );
    assert!(world.path("actor/agent/source/src/main.rs").is_file());
    assert_eq!(
        world.json("broker/versions/agent/1/meta.json")["built_by"],
        "cargo"
    );

    fake.push_openai(openai::text_reply("Ready when you are."));
    let mut host = world.run();
    host.send("hello");
    let answer = host.wait_for_within(Duration::from_secs(60), "the agent's reply", |m| {
        m.from == "agent" && m.body["type"] == "text"
    });
    assert_eq!(answer.body["text"], "Ready when you are.");
    assert!(host.quit().success());
    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        ["/v1/responses", "/v1/responses"],
        "the check, then the turn"
    );
    assert_eq!(
        world.visible_files_containing(TOKEN),
        Vec::<std::path::PathBuf>::new(),
        "no file an actor can see holds the token"
    );
}

/// Runs `sausage init DIR ARGS…` with `answers` on stdin and no token in the environment.
fn init(root: &std::path::Path, args: &[&str], answers: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("init")
        .arg(root)
        .args(args)
        .env_remove("SAUSAGE_API_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// A local model server that needs no token: it answers every request with an empty event
/// stream, and hands each request's head to the test.
fn tokenless_server() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (heads, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            while reader.read_line(&mut head).unwrap_or(0) > 2 && !head.ends_with("\r\n\r\n") {}
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|n| n.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            let _ = heads.send(head);
        }
    });
    (url, received)
}

#[test]
fn a_local_openai_chat_server_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    warm_cargo_for_agent(&root, sausage_core::people::DEFAULT_OWNER);
    let (url, heads) = tokenless_server();
    let host = url.replace("http://", "");
    let args = [
        "--api",
        "openai-chat",
        "--base-url",
        &url,
        "--model",
        "local",
    ];
    // The token question is answered with an empty line.
    let out = init(&root, &args, "\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("empty if the server needs none"),
        "{stdout}"
    );
    assert!(stdout.contains("deploy: agent runs version 1"), "{stdout}");
    let world = TestWorld::adopt(dir, root);
    let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("authorization"),
        "no token, no header: {head}"
    );
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "openai-chat");
    assert_eq!(config["base_url"], url);
    assert!(
        !world.path("broker/credentials/agent.json").exists()
            && !world.path("broker/secrets/secrets.json").exists(),
        "no token, no secret: nothing is added to the agent's requests"
    );
    assert_eq!(
        world.json("actor/agent/source/actor.json"),
        serde_json::json!({ "network": [host], "window": 0 })
    );
}

#[test]
fn init_checks_the_provider_before_it_builds_and_names_what_is_wrong() {
    let fake = FakeLlm::start_expecting_violations();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    for (base_url, token, says) in [
        (
            closed.clone(),
            TOKEN,
            format!("sausage: the model provider: nothing listens at {closed}; check the base URL"),
        ),
        (
            fake.base_url(),
            "sk-wrong",
            "sausage: the model provider: the provider refused the token (401".to_string(),
        ),
        (
            format!("{}/openai/v1", fake.base_url()),
            TOKEN,
            "sausage: the model provider: no such path: is the base URL right?".to_string(),
        ),
    ] {
        let args = [
            "--api",
            "openai-responses",
            "--base-url",
            &base_url,
            "--model",
            "m",
            "--owner",
            "boss",
        ];
        let out = Command::new(env!("CARGO_BIN_EXE_sausage"))
            .arg("init")
            .arg(&root)
            .args(args)
            .env("SAUSAGE_API_TOKEN", token)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{base_url}: {stderr}");
        assert!(stderr.contains(&says), "{base_url}: {stderr}");
        assert!(stderr.contains("no world was created"), "{stderr}");
        assert!(!stderr.contains("sk-wrong"), "the token is never shown");
        assert!(!root.exists(), "{base_url}: nothing is left behind");
    }
    assert_eq!(fake.requests().len(), 2, "one request each");
}

/// Runs `sausage model ARGS` with `stdin`: exit code, stdout, stderr.
fn model(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("model")
        .args(args)
        .env_remove("SAUSAGE_API_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn model_settings_are_shown_changed_in_every_file_and_tested() {
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    let root = world.root.to_str().unwrap();
    let host = |url: &str| url.replace("http://", "");

    let (code, out, err) = model(&["show", root], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "api:      openai-responses\nbase URL: {0}\nmodel:    test-model\ntoken:    the \
             secret `model` for {0} (header `authorization`), granted to agent\n",
            fake.base_url()
        )
    );
    let (_, shown, _) = model(&["--world", root], "");
    assert_eq!(
        shown, out,
        "show is the default, and --world names the world too"
    );

    fake.push_openai(openai::text_reply("OK"));
    let (code, out, err) = model(&["test", root], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("The provider answers"), "{out}");
    let checked = &fake.requests()[0];
    assert_eq!(checked.body["model"], "test-model");
    assert_eq!(checked.headers["authorization"], format!("Bearer {TOKEN}"));

    // A new provider, with another API shape and its /v1: the token moves to it, as the header
    // that API wants, and the old host goes.
    let other = FakeLlm::start();
    other.push_anthropic(anthropic::text_reply("OK"));
    let (code, out, err) = model(
        &[
            "set",
            root,
            "--api",
            "anthropic-messages",
            "--base-url",
            &format!("{}/v1", other.base_url()),
            "--model",
            "claude-x",
        ],
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("saved") && out.contains("The provider answers"),
        "{out}"
    );
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "anthropic-messages");
    assert_eq!(config["base_url"], other.base_url());
    assert_eq!(config["model"], "claude-x");
    let secret = &world.json("broker/secrets/secrets.json")["model"];
    assert_eq!(
        (&secret["url"], &secret["header"], &secret["format"]),
        (&other.base_url().into(), &"x-api-key".into(), &"{}".into())
    );
    assert_eq!(secret["value"], TOKEN);
    assert!(!world.path("broker/credentials/agent.json").exists());
    for manifest in [
        "actor/agent/source/actor.json",
        "broker/versions/agent/1/source/actor.json",
    ] {
        assert_eq!(
            world.json(manifest)["network"],
            serde_json::json!([host(&other.base_url())]),
            "{manifest}"
        );
    }
    assert_eq!(other.requests()[0].headers["x-api-key"], TOKEN);

    // A new token, from stdin: the provider refuses it, and the check says so.
    let refusing = FakeLlm::start_expecting_violations();
    let (code, out, err) = model(
        &[
            "set",
            "--new-token",
            "--base-url",
            &refusing.base_url(),
            "--world",
            root,
        ],
        "sk-rotated\n",
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("the provider refused the token (401"), "{err}");
    assert!(!format!("{out}{err}").contains("sk-rotated"), "never shown");
    assert_eq!(
        world.json("broker/secrets/secrets.json")["model"]["value"],
        "sk-rotated",
        "saved all the same"
    );
    let (_, out, _) = model(&["show", root], "");
    assert!(!out.contains("sk-rotated"), "{out}");

    let (code, _, err) = model(&["set", root], "");
    assert_eq!(code, 1);
    assert!(err.contains("nothing to change; give --api"), "{err}");
    let (code, _, err) = model(&["test", "/nonexistent/w"], "");
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/w: no world here"), "{err}");
}

#[test]
fn model_set_keeps_the_token_as_the_secret_model_granted_to_the_agent_and_nowhere_else() {
    const PLANTED: &str = "sk-pl4nted-m0del-7ok3n";
    let fake = FakeLlm::start();
    let world = support::agent::world_with_agent(&fake, "openai-responses");
    let root = world.root.to_str().unwrap();
    let (url, heads) = tokenless_server();
    let (code, out, err) = model(
        &[
            "set",
            root,
            "--api",
            "openai-chat",
            "--base-url",
            &url,
            "--new-token",
        ],
        &format!("{PLANTED}\n"),
    );
    assert_eq!(code, 0, "{out}{err}");
    let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("authorization: bearer {PLANTED}").to_ascii_lowercase()),
        "the check sends the new token: {head}"
    );
    // `test` checks with the secret's value.
    let (code, out, err) = model(&["test", root], "");
    assert_eq!(code, 0, "{out}{err}");
    let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.contains(PLANTED), "{head}");

    let listed = sausage(&["secret", "list", "--json", root]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let secrets = listed.as_array().unwrap();
    assert_eq!(secrets.len(), 1, "{listed}");
    assert_eq!(secrets[0]["name"], "model");
    assert_eq!(secrets[0]["url"], url);
    assert_eq!(secrets[0]["header"], "authorization");
    assert_eq!(secrets[0]["grants"][0]["actor"], "agent");
    let (_, shown, _) = model(&["show", root], "");
    assert!(
        shown.contains(&format!(
            "token:    the secret `model` for {url} (header `authorization`), granted to agent"
        )),
        "{shown}"
    );
    assert!(!world.path("broker/credentials/agent.json").exists());
    assert_eq!(
        files_holding(&world.root, PLANTED.as_bytes()),
        [world.path("broker/secrets/secrets.json")],
        "the token is in the secrets file only"
    );
}

#[test]
fn a_token_in_the_agents_credentials_file_becomes_the_secret_at_the_first_run() {
    let fake = FakeLlm::start();
    let world = TestWorld::new();
    world.install_agent(Some(support::agent::config(&fake, "openai-responses")));
    world.give_agent_legacy_credentials(&fake.base_url());
    fake.push_openai(openai::text_reply("Still here."));
    let mut host = world.run();
    assert_eq!(support::agent::ask(&mut host, "hello?"), "Still here.");
    let stderr = host.stderr();
    assert_eq!(
        stderr.matches("the model token moved from").count(),
        1,
        "said once: {stderr}"
    );
    assert!(host.quit().success());
    assert!(!world.path("broker/credentials/agent.json").exists());
    let secret = &world.json("broker/secrets/secrets.json")["model"];
    assert_eq!(secret["url"], fake.base_url());
    assert_eq!(secret["format"], "Bearer {}");
    assert_eq!(secret["value"], TOKEN);
    assert_eq!(secret["grants"][0]["actor"], "agent");
    assert_eq!(
        fake.requests()[0].headers["authorization"],
        format!("Bearer {TOKEN}"),
        "the turn went with the secret's header"
    );
    // The next run has nothing to move, and says nothing.
    fake.push_openai(openai::text_reply("Here again."));
    let mut host = world.run();
    assert_eq!(support::agent::ask(&mut host, "and now?"), "Here again.");
    let again = host.stderr();
    assert!(host.quit().success());
    assert!(!again.contains("the model token moved"), "{again}");
}

#[test]
fn an_unknown_api_shape_is_refused_naming_the_three() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    let args = ["--api", "soap", "--base-url", "https://x", "--model", "m"];
    let out = init(&root, &args, "t\n");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "`soap` is not an API shape Sausage speaks; choose openai-responses, \
             anthropic-messages or openai-chat"
        ),
        "{stderr}"
    );
    assert!(
        !root.join("sausage.json").exists(),
        "no world is left behind"
    );
}

#[test]
fn a_wrong_owner_or_matrix_answer_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    let model = [
        "--api",
        "openai-chat",
        "--base-url",
        "http://127.0.0.1:1",
        "--model",
        "m",
    ];
    for (extra, says) in [
        (
            &["--owner", "The Boss"][..],
            "--owner: person id `The Boss`",
        ),
        (
            &["--matrix", "matrix.example.org", "--matrix-user", "@bot:x"],
            "not an http:// or https:// URL",
        ),
        (
            &["--matrix", "http://127.0.0.1:1", "--matrix-user", "bot"],
            "not a Matrix user id",
        ),
    ] {
        let args: Vec<&str> = model.iter().chain(extra).copied().collect();
        let out = init(&root, &args, "\n");
        assert!(!out.status.success(), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(
            !root.join("sausage.json").exists(),
            "{extra:?}: no world is left behind"
        );
    }
}
