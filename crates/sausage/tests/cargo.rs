//! The `cargo` actor and `/deploy`: real builds of small crates for `wasm32-wasip2`.

mod support;

use serde_json::json;
use support::*;

fn build(host: &mut Host, source: &str) -> serde_json::Value {
    host.tell("cargo", json!({"type": "build", "source": source}));
    host.wait_for("cargo's reply", |m| m.from == "cargo" && m.reply)
        .body
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
