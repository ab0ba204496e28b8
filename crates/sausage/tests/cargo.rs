//! The `cargo` actor and `/deploy`: real builds of small crates for `wasm32-wasip2`.

mod support;

use sausage_core::cargo::DIAGNOSTICS_LIMIT;
use serde_json::json;
use support::*;

fn build(host: &mut Host, source: &str) -> serde_json::Value {
    host.tell("cargo", json!({"type": "build", "source": source}));
    host.wait_for("cargo's reply", |m| m.from == "cargo" && m.reply)
        .body
}

/// The README's first session, typed in the repository's folder: a relative folder for
/// `/deploy`, a relative path refused where only an absolute one is taken.
#[test]
fn the_readmes_first_session_works_as_printed() {
    let world = TestWorld::new();
    sausage_core::people::People::new(&sausage_core::world::World::new(&world.root))
        .create(sausage_core::people::DEFAULT_OWNER)
        .unwrap();
    let mut host = Host::start_in(&repo(), &world.root);
    host.send("/deploy echo actors/echo");
    host.send("@echo hello");
    assert_eq!(host.wait_type("echo", "text")["text"], "hello");
    host.tell(
        "broker",
        json!({"type": "spawn", "actor": "echo2", "wasm": "target/actors/echo.wasm"}),
    );
    let refused = host
        .wait_for("the broker's refusal", |m| {
            m.from == "broker" && m.body["type"] == "error"
        })
        .body;
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("is relative; give an absolute path"),
        "{refused}"
    );
}

/// The first actor of `docs/actors.md`, taken from its code blocks as a reader copies them:
/// it builds, passes its own transcript, and answers as the page shows.
#[test]
fn the_first_actor_of_the_users_docs_works_as_written() {
    let page = std::fs::read_to_string(repo().join("docs/actors.md")).unwrap();
    let block = |fence: &str, after: &str| -> String {
        let from = page
            .find(after)
            .unwrap_or_else(|| panic!("`{after}` in docs/actors.md"));
        let start = page[from..].find(fence).unwrap() + from + fence.len();
        let end = page[start..].find("```").unwrap() + start;
        page[start..end].trim_start_matches('\n').to_string()
    };
    let world = TestWorld::new();
    let dir = world.path("private/console/data/greeter");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        block("```toml", "## Your first actor"),
    )
    .unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        block("```rust", "## Your first actor"),
    )
    .unwrap();
    let transcript = block("```text", "A test, `tests/greeter.jsonl`");
    assert!(transcript.contains("expect"), "{transcript}");
    std::fs::write(dir.join("tests/greeter.jsonl"), transcript).unwrap();
    let mut host = world.run();
    host.send(&format!("/deploy greeter {}", dir.display()));
    host.send("@greeter Ann");
    assert_eq!(host.wait_type("greeter", "text")["text"], "hello, Ann");
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        1
    );
}

#[test]
fn deploy_twice_spawns_then_upgrades() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/greeter");
    write_greeter_crate(&dir, "greeter", "hello");
    let mut host = world.run();
    host.send(&format!("/deploy greeter {}", dir.display()));
    host.send("@greeter hi");
    assert_eq!(host.wait_type("greeter", "text")["text"], "hello");
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        1
    );
    let meta = world.json("broker/versions/greeter/1/meta.json");
    assert_eq!(meta["built_by"], "cargo");
    assert!(
        meta["wasm"]
            .as_str()
            .unwrap()
            .starts_with("/actor/cargo/public/builds/")
    );

    write_greeter_crate(&dir, "greeter", "hello again");
    host.send(&format!("/deploy greeter {}", dir.display()));
    host.send("@greeter hi");
    assert_eq!(host.wait_type("greeter", "text")["text"], "hello again");
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        2
    );
    assert!(world.path("actor/greeter/source/src/main.rs").is_file());
}

#[test]
fn a_build_publishes_the_wasm_and_reports_warnings() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/warned");
    write_greeter_crate(&dir, "warned", "hi");
    let main = dir.join("src/main.rs");
    let code = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, format!("{code}\nfn unused_helper() {{}}\n")).unwrap();
    let mut host = world.run();
    // A path in the sender's own namespace: the console's /data.
    let built = build(&mut host, "/data/warned");
    assert_eq!(built["type"], "built", "{built}");
    assert_eq!(built["built_by"], "cargo");
    assert_eq!(built["source"], "/data/warned");
    assert_eq!(built["wasm"], "/actor/cargo/public/builds/1/warned.wasm");
    assert!(built["seconds"].as_f64().is_some());
    let warnings = built["warnings"].as_str().unwrap();
    assert!(
        warnings.contains("unused_helper") && warnings.contains("never used"),
        "{warnings}"
    );
    assert!(
        world
            .path("actor/cargo/public/builds/1/warned.wasm")
            .is_file()
    );
    // Compiled into the component cache as soon as it is built, before anyone asks for it.
    eventually("the build compiled ahead", || {
        std::fs::read_dir(world.path("broker/cache")).is_ok_and(|d| d.count() > 0)
    });
    let spawned = host.request(json!({
        "type": "spawn", "actor": "warned", "wasm": built["wasm"], "source": "/data/warned",
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    assert_eq!(
        build(&mut host, "/data/warned")["wasm"],
        "/actor/cargo/public/builds/2/warned.wasm"
    );
}

#[test]
fn a_type_error_fails_the_build_with_the_compilers_diagnostics() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/broken");
    write_greeter_crate(&dir, "broken", "hi");
    std::fs::write(
        dir.join("src/main.rs"),
        "fn main() {\n    let n: u32 = \"not a number\";\n}\n",
    )
    .unwrap();
    let mut host = world.run();
    let failed = build(&mut host, dir.to_str().unwrap());
    assert_eq!(failed["type"], "build_failed", "{failed}");
    let errors = failed["errors"].as_str().unwrap();
    assert!(
        errors.contains("error[E0308]: mismatched types"),
        "{errors}"
    );
    assert!(errors.contains("src/main.rs:2"), "{errors}");
    assert!(!errors.contains("Compiling"), "no progress lines: {errors}");
    host.send(&format!("/deploy broken {}", dir.display()));
    host.wait_type("cargo", "build_failed");
    assert!(!host.quit().success(), "a failed /deploy fails a script");
    assert!(
        !world.path("broker/versions/broken").exists(),
        "nothing was spawned"
    );
}

#[test]
fn a_crate_inside_another_workspace_builds_on_its_own() {
    let world = TestWorld::new();
    let parent = world.path("private/console/data/parent");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(parent.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
    write_greeter_crate(&parent.join("child"), "child", "from a child");
    let mut host = world.run();
    let built = build(&mut host, "/data/parent/child");
    assert_eq!(built["type"], "built", "{built}");
}

#[test]
fn wrong_build_requests_say_what_to_do() {
    let world = TestWorld::new();
    let data = world.path("private/console/data");
    std::fs::create_dir_all(data.join("empty")).unwrap();
    std::fs::create_dir_all(data.join("lib/src")).unwrap();
    std::fs::write(
        data.join("lib/Cargo.toml"),
        "[package]\nname = \"lib\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(data.join("lib/src/lib.rs"), "").unwrap();
    let mut host = world.run();
    for (source, expected) in [
        (json!("/data/empty"), "has no Cargo.toml"),
        (json!("/data/lib"), "no binary"),
        (json!("/data/nowhere"), "not a folder"),
        (json!("/data/../../x"), "`..`"),
        (json!(3), "missing field `source`"),
    ] {
        host.tell("cargo", json!({"type": "build", "source": source}));
        let reply = host
            .wait_for("cargo's error", |m| m.from == "cargo" && m.reply)
            .body;
        assert_eq!(reply["type"], "error", "{source} → {reply}");
        assert!(
            reply["reason"].as_str().unwrap().contains(expected),
            "{source} → {reply}"
        );
    }
    host.tell("cargo", json!({"type": "compile"}));
    let reply = host
        .wait_for("cargo's error", |m| m.from == "cargo" && m.reply)
        .body;
    assert!(
        reply["reason"].as_str().unwrap().contains("build"),
        "{reply}"
    );
}

/// Writes a crate whose build script runs `build_rs`, a function body that returns an error
/// message when the sandbox let it do what it tried.
fn write_crate_with_build_script(dir: &std::path::Path, name: &str, build_rs: &str) {
    write_greeter_crate(dir, name, "hi");
    std::fs::write(
        dir.join("build.rs"),
        format!("fn main() {{\n{build_rs}\n}}\n"),
    )
    .unwrap();
}

#[test]
fn a_build_script_cannot_write_outside_its_folders() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/writer");
    let in_world = world.path("escaped.txt");
    let in_tmp = std::env::temp_dir().join(format!("sausage-escaped-{}", std::process::id()));
    // The private /tmp of the sandbox takes the write; the world is read-only, so the second
    // write fails and the build script says so: the build fails exactly when the sandbox works.
    write_crate_with_build_script(
        &dir,
        "writer",
        &format!(
            "std::fs::write({in_tmp:?}, \"out\").unwrap();\n\
             if let Err(e) = std::fs::write({in_world:?}, \"out\") {{\n\
                 panic!(\"the sandbox denied the write: {{e}}\");\n\
             }}"
        ),
    );
    let mut host = world.run();
    let failed = build(&mut host, "/data/writer");
    assert_eq!(failed["type"], "build_failed", "{failed}");
    let errors = failed["errors"].as_str().unwrap();
    assert!(errors.contains("the sandbox denied the write"), "{errors}");
    assert!(!in_world.exists(), "the world stayed untouched");
    assert!(!in_tmp.exists(), "the host's /tmp stayed untouched");
}

#[test]
fn a_build_script_cannot_reach_the_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let world = TestWorld::new();
    let dir = world.path("private/console/data/caller");
    write_crate_with_build_script(
        &dir,
        "caller",
        &format!(
            "if let Err(e) = std::net::TcpStream::connect(\"{address}\") {{\n\
                 panic!(\"the sandbox denied the connection: {{e}}\");\n\
             }}"
        ),
    );
    let mut host = world.run();
    let failed = build(&mut host, "/data/caller");
    assert_eq!(failed["type"], "build_failed", "{failed}");
    let errors = failed["errors"].as_str().unwrap();
    assert!(
        errors.contains("the sandbox denied the connection"),
        "{errors}"
    );
    assert!(
        listener
            .accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "nobody connected"
    );
}

#[test]
fn a_build_script_cannot_read_the_worlds_credentials() {
    let world = TestWorld::new();
    // The secrets (the model token among them) and an actor's credentials file.
    let secrets = [
        world.path("broker/secrets/secrets.json"),
        world.path("broker/credentials/matrix.json"),
    ];
    for secret in &secrets {
        std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
        std::fs::write(secret, r#"{"value": "sk-do-not-leak"}"#).unwrap();
    }
    let dir = world.path("private/console/data/reader");
    write_crate_with_build_script(
        &dir,
        "reader",
        &format!(
            "for secret in {secrets:?} {{\n\
                 if let Ok(text) = std::fs::read_to_string(secret) {{\n\
                     panic!(\"the sandbox let me read the credentials: {{text}}\");\n\
                 }}\n\
             }}"
        ),
    );
    let mut host = world.run();
    let built = build(&mut host, "/data/reader");
    assert_eq!(
        built["type"], "built",
        "the read failed, so the build went on: {built}"
    );
}

#[test]
fn a_build_sees_none_of_the_hosts_secrets() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/snoop");
    // The build script fails the build when it finds a secret under any name, or when cargo's
    // own variables are gone; its message lists every variable it saw.
    write_crate_with_build_script(
        &dir,
        "snoop",
        "let seen: Vec<String> = std::env::vars().map(|(name, _)| name).collect();\n\
         for (name, value) in std::env::vars() {\n\
             if value.contains(\"sausage-test-secret\") {\n\
                 panic!(\"the build sees {name}={value}; all: {seen:?}\");\n\
             }\n\
         }\n\
         for needed in [\"PATH\", \"HOME\"] {\n\
             if std::env::var_os(needed).is_none() {\n\
                 panic!(\"the build lost {needed}; all: {seen:?}\");\n\
             }\n\
         }",
    );
    let mut host = Host::start_with_env(
        &world.root,
        &[
            ("SAUSAGE_API_TOKEN", "sausage-test-secret-1"),
            ("SOME_HOST_SECRET", "sausage-test-secret-2"),
        ],
    );
    let built = build(&mut host, "/data/snoop");
    assert_eq!(built["type"], "built", "{built}");
}

#[test]
fn a_build_printing_megabytes_on_both_streams_still_answers() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/loud");
    // Cargo repeats each `cargo:warning` on its stderr (about 2 MB here), and each unused
    // function is a compiler warning in JSON on its stdout: both pipes fill many times over.
    write_crate_with_build_script(
        &dir,
        "loud",
        "for i in 0..20_000 {\n\
             println!(\"cargo:warning=line {i} of a loud build script {}\", \"x\".repeat(60));\n\
         }",
    );
    let main = dir.join("src/main.rs");
    let mut code = std::fs::read_to_string(&main).unwrap();
    for i in 0..2_000 {
        code.push_str(&format!("fn unused_{i}() {{}}\n"));
    }
    std::fs::write(&main, code).unwrap();
    let mut host = world.run();
    let built = build(&mut host, "/data/loud");
    assert_eq!(built["type"], "built", "{built}");
    let warnings = built["warnings"].as_str().unwrap();
    assert!(
        warnings.contains("unused_1999"),
        "the last warnings are kept"
    );
    assert!(
        warnings.len() <= DIAGNOSTICS_LIMIT + 100,
        "{}",
        warnings.len()
    );
}

#[test]
fn a_failed_build_with_megabytes_of_output_keeps_its_end() {
    let world = TestWorld::new();
    let dir = world.path("private/console/data/verbose");
    // A failing build script's output comes back on cargo's stderr, all 2 MB of it.
    write_crate_with_build_script(
        &dir,
        "verbose",
        "for i in 0..20_000 {\n\
             eprintln!(\"line {i} of a long story {}\", \"x\".repeat(80));\n\
         }\n\
         panic!(\"and that was the end of the story\");",
    );
    let mut host = world.run();
    let failed = build(&mut host, "/data/verbose");
    assert_eq!(failed["type"], "build_failed", "{failed}");
    let errors = failed["errors"].as_str().unwrap();
    assert!(errors.contains("the end of the story"), "the end is kept");
    assert!(errors.contains("line 19999 of a long story"));
    assert!(
        !errors.contains("line 0 of a long story"),
        "the start is not"
    );
    assert!(
        errors.starts_with("[") && errors.contains("earlier bytes of diagnostics were left out]"),
        "{}",
        &errors[..200]
    );
    assert!(errors.len() <= DIAGNOSTICS_LIMIT + 100, "{}", errors.len());
}
