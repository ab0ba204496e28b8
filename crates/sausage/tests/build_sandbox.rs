//! What a build sees (DESIGN §18): real builds by the `cargo` actor whose build scripts look for
//! the world's secrets, the home folder and other people's artefacts; builds of two principals
//! in their own target folders; path dependencies outside the crate, the console's alone. The
//! boundary helper is [`Builds`]: a broker in this process with `cargo` running, asked from
//! `console` or `web` as a person, so a test chooses who asks.

mod support;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use support::*;

use sausage_core::broker::Broker;
use sausage_core::broker::mailbox::Mailbox;
use sausage_core::message::{ActorId, Outgoing, Speaker, Tier};
use sausage_core::people::People;
use sausage_core::runtime::Runtime;
use sausage_core::world::World;

/// A running broker with the `cargo` actor, asked by natives the test speaks as.
struct Builds {
    broker: Arc<Broker>,
    console: Arc<Mailbox>,
    web: Arc<Mailbox>,
}

impl Builds {
    /// Starts the broker of a world whose owner is `olga` and whose member is `ann`.
    async fn start(world: &TestWorld) -> Builds {
        let world = World::new(&world.root);
        let people = People::new(&world);
        people.create("olga").unwrap();
        people.add("ann", Tier::Member, None).unwrap();
        let broker = Broker::start(world, Runtime::new(None).unwrap())
            .await
            .unwrap();
        tokio::spawn(sausage_core::cargo::serve(broker.clone()));
        Builds {
            console: broker.native_mailbox("console"),
            web: broker.native_mailbox("web"),
            broker,
        }
    }

    /// Asks `cargo` to build `source`, from the native `from` speaking for `person` (an owner
    /// on the console, a member on the web), and returns the reply's body.
    async fn build(&self, from: &str, person: &str, source: &str) -> Value {
        let tier = if from == "console" {
            Tier::Owner
        } else {
            Tier::Member
        };
        let speaker = Speaker {
            person: ActorId::parse(person).unwrap(),
            tier,
        };
        let mailbox = if from == "console" {
            &self.console
        } else {
            &self.web
        };
        let body = json!({"type": "build", "source": source});
        let cargo = ActorId::parse("cargo").unwrap();
        let id = self
            .broker
            .send(
                &ActorId::parse(from).unwrap(),
                Outgoing::new(&cargo, &body).spoken_by(Some(speaker)),
            )
            .await;
        let reply = tokio::time::timeout(BUILD_PATIENCE, mailbox.recv())
            .await
            .expect("cargo answers within the patience");
        assert_eq!(reply.from.as_str(), "cargo");
        assert_eq!(reply.reply_to.as_deref(), Some(id.as_str()));
        reply.body_value()
    }
}

/// How long a test waits for one small build.
const BUILD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes a binary crate with these dependencies, `main.rs` and other files.
fn write_crate(dir: &Path, name: &str, dependencies: &str, main: &str, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[dependencies]\n{dependencies}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), main).unwrap();
    for (path, text) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
}

/// Writes a library crate `name` whose `greeting()` returns `text`.
fn write_lib(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        format!("pub fn greeting() -> &'static str {{ {text:?} }}\n"),
    )
    .unwrap();
}

/// The number of builds `cargo` published.
fn published(world: &TestWorld) -> usize {
    std::fs::read_dir(world.path("actor/cargo/public/builds"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

#[test]
fn a_build_script_sees_nothing_of_the_world_the_home_or_other_peoples_builds() {
    let world = TestWorld::new();
    let home = world.root.parent().unwrap().join("home");
    // The host runs with `home` as its home, so its builds keep their folders under it.
    let targets = World::new(&world.root)
        .build_cache_dir_under(&home.join(".cache"))
        .join("target");
    People::new(&World::new(&world.root))
        .create(sausage_core::people::DEFAULT_OWNER)
        .unwrap();
    let planted = [
        world.path("broker/secrets/secrets.json"),
        world.path("broker/credentials/agent.json"),
        world.path("broker/web/sessions.json"),
        world.path("private/agent/data/people/owner/conversation.jsonl"),
        world.path("private/agent/data/memory.md"),
        targets.join("ann/release/libsecret.rlib"),
        home.join(".ssh/id_ed25519"),
        home.join("notes.txt"),
    ];
    for file in &planted {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, "sausage-planted-secret").unwrap();
    }
    // Folders and files that exist on this machine, which the build must not find either: the
    // world, both homes' files beside the toolchain, this repository.
    let real_home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    let mut tried: Vec<String> = planted.iter().map(|p| p.display().to_string()).collect();
    let on_this_machine = [
        world.path("broker/people.json"),
        world.root.clone(),
        home.clone(),
        real_home.join(".bashrc"),
        real_home.join(".profile"),
        repo(),
    ];
    for path in on_this_machine.iter().filter(|p| p.exists()) {
        tried.push(path.display().to_string());
    }
    // The build script lists what it could read; it also checks that it reads what a build
    // needs (its own crate, cargo's download cache), so the test fails if nothing is readable.
    let build_rs = format!(
        r#"fn main() {{
    let mut seen = Vec::new();
    for path in {tried:?} {{
        if let Ok(text) = std::fs::read_to_string(path) {{
            seen.push(format!("{{path}}: {{text}}"));
        }} else if let Ok(dir) = std::fs::read_dir(path) {{
            let names: Vec<_> = dir.flatten().map(|e| e.file_name()).collect();
            seen.push(format!("{{path}}: {{names:?}}"));
        }}
    }}
    let cargo_home = std::env::var("CARGO_HOME").unwrap();
    for entry in std::fs::read_dir(&cargo_home).unwrap().flatten() {{
        let name = entry.file_name().into_string().unwrap();
        if !["bin", "registry", "git"].contains(&name.as_str()) {{
            seen.push(format!("{{cargo_home}}/{{name}}"));
        }}
    }}
    std::fs::read_dir(format!("{{cargo_home}}/registry")).expect("cargo's download cache");
    std::fs::read_to_string("Cargo.toml").expect("the crate's own manifest");
    if !seen.is_empty() {{
        panic!("the sandbox showed: {{seen:?}}");
    }}
}}"#
    );
    let dir = world.path("private/console/data/snoop");
    write_crate(
        &dir,
        "snoop",
        "",
        "fn main() {}\n",
        &[("build.rs", &build_rs)],
    );

    // The home is somewhere else than cargo's and rustup's homes, as on a machine where they
    // are installed apart, so the build script can tell the two apart.
    let toolchain = |variable: &str, default: &str| {
        std::env::var_os(variable)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| real_home.join(default))
            .display()
            .to_string()
    };
    let (cargo_home, rustup_home) = (
        toolchain("CARGO_HOME", ".cargo"),
        toolchain("RUSTUP_HOME", ".rustup"),
    );
    let home_text = home.display().to_string();
    let mut host = Host::start_with_env(
        &world.root,
        &[
            ("HOME", &home_text),
            ("CARGO_HOME", &cargo_home),
            ("RUSTUP_HOME", &rustup_home),
        ],
    );
    host.tell("cargo", json!({"type": "build", "source": "/data/snoop"}));
    let built = host
        .wait_for("cargo's reply", |m| m.from == "cargo" && m.reply)
        .body;
    assert_eq!(built["type"], "built", "{built}");
    for file in &planted {
        assert_eq!(
            std::fs::read_to_string(file).unwrap(),
            "sausage-planted-secret",
            "{} is unchanged",
            file.display()
        );
    }
    assert!(
        targets
            .join("owner/wasm32-wasip2/release/snoop.wasm")
            .is_file(),
        "the console's owner builds in their own target folder"
    );
}

#[test]
fn principals_build_apart_and_only_the_console_reaches_outside_the_crate() {
    let world = TestWorld::new();
    // A crate every actor may read, with a path dependency inside its folder.
    let shelf = world.path("actor/shelf/public");
    write_crate(
        &shelf.join("twin"),
        "twin",
        "helper = { path = \"helper\" }",
        "fn main() { println!(\"{}\", helper::greeting()); }\n",
        &[],
    );
    write_lib(&shelf.join("twin/helper"), "helper", "inside");
    // A crate whose dependency lies outside its folder (and outside the world).
    let outside = world.root.parent().unwrap().join("outside-lib");
    write_lib(&outside, "outside", "from outside");
    write_crate(
        &shelf.join("reacher"),
        "reacher",
        &format!("outside = {{ path = {:?} }}", outside.display().to_string()),
        "fn main() { println!(\"{}\", outside::greeting()); }\n",
        &[],
    );
    let cache = World::new(&world.root).build_cache_dir().unwrap();
    let target = |principal: &str, binary: &str| {
        cache.join(format!(
            "target/{principal}/wasm32-wasip2/release/{binary}.wasm"
        ))
    };

    sausage_core::scheduler().unwrap().block_on(async {
        let builds = Builds::start(&world).await;

        // Two people build the same crate: each in their own target folder.
        for (from, person) in [("console", "olga"), ("web", "ann")] {
            let built = builds.build(from, person, "/actor/shelf/public/twin").await;
            assert_eq!(built["type"], "built", "{from} for {person}: {built}");
        }
        assert!(target("olga", "twin").is_file() && target("ann", "twin").is_file());
        let mut folders: Vec<String> = std::fs::read_dir(cache.join("target"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        folders.sort();
        assert_eq!(folders, ["ann", "olga"]);

        // Outside the crate's folder: refused for anyone but the console, before anything ran.
        let before = published(&world);
        let refused = builds
            .build("web", "ann", "/actor/shelf/public/reacher")
            .await;
        assert_eq!(refused["type"], "error", "{refused}");
        let reason = refused["reason"].as_str().unwrap();
        assert!(
            reason.contains("path dependency `outside`")
                && reason.contains("lies outside the crate's folder")
                && reason.contains("console's owner"),
            "{reason}"
        );
        assert_eq!(published(&world), before, "nothing was published");
        assert!(!cache.join("work/ann/reacher").exists());
        assert!(!target("ann", "reacher").exists(), "nothing was built");

        // The console's owner builds it: the dependency is bound read-only.
        let shelf_path = shelf.join("reacher").display().to_string();
        let built = builds.build("console", "olga", &shelf_path).await;
        assert_eq!(built["type"], "built", "{built}");
        assert!(target("olga", "reacher").is_file());
        assert_eq!(published(&world), before + 1);
    });
}
