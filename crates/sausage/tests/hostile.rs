//! Hostile input at the host's edges: what actors write on stdout, the ids and paths they name,
//! the paths guests open, and the transcripts candidates bring. Each property says what must
//! hold for any input: no panic, no escape from a mount or a namespace, and an error a person
//! can act on. Inputs that once broke a property are kept as plain tests at the end.
//!
//! The stdout splitter's memory is measured with a counting allocator, per thread, so the
//! other tests of this binary running at the same time do not disturb the figure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use sausage_core::broker::stdio::{Line, Lines, MAX_LINE_BYTES};
use sausage_core::broker::transcript::{self, Step, StepKind};
use sausage_core::fs::{Dir, ErrorCode, MAX_GUEST_PATH_LEN, Mount, OpenOptions, Opened};
use sausage_core::message::{ActorId, Envelope, MAX_ACTOR_ID_LEN, Outgoing};
use sausage_core::world::World;

/// Enough cases to find the edges, few enough that the file runs in seconds. Failures are not
/// written to a `proptest-regressions` file: a failure found once becomes a plain test here.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases)
    }
}

// ---------------------------------------------------------------------------------------------
// Generators of hostile JSON text

/// A JSON string literal for `s`.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// Keys that mean something somewhere (message fields, transcript fields) and odd ones.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec!["type", "body", "to", "id", "reply_to", "from", "send", "expect", "", "a"])
            .prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ]
}

/// JSON text that is syntactically valid, but may hold what `serde_json::Value` cannot: numbers
/// past `f64`, 400-digit integers, lone surrogate escapes, duplicate keys.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        select(vec![
            "1e999999",
            "-1e999999",
            "1E+400",
            "0.000e-99999",
            "-0"
        ])
        .prop_map(str::to_owned),
        "[1-9][0-9]{300,420}",
        "\\PC{0,12}".prop_map(|s| quoted(&s)),
        select(vec![
            r#""\ud800""#,
            r#""\udc00\ud800""#,
            r#""\u0000\n\t\"""#
        ])
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
            vec((key(), inner), 0..6).prop_map(|fields| {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", quoted(k)))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// A line an actor might write: a JSON object of random fields (known, unknown, repeated),
/// usually with a body, spaced oddly, sometimes cut short or with a byte changed.
fn message_line() -> impl Strategy<Value = Vec<u8>> {
    let field = (
        select(vec![
            "to", "id", "reply_to", "body", "extra", "Body", "from",
        ]),
        json_text(),
    );
    let body_object = vec((key(), json_text()), 0..4).prop_map(|fields| {
        let fields: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!(" {} : {v} ", quoted(k)))
            .collect();
        format!("{{{}}}", fields.join(","))
    });
    let mutation = prop_oneof![
        4 => Just(None),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(Some),
    ];
    (
        vec(field, 0..4),
        prop::option::of(body_object),
        any::<prop::sample::Index>(),
        select(vec!["", " ", "\t", "\r", " \u{a0}"]),
        mutation,
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(mut fields, body, at, space, mutation, cut)| {
            if let Some(body) = body {
                let at = at.index(fields.len() + 1);
                fields.insert(at, ("body", body));
            }
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{space}{}{space}:{space}{v}", quoted(k)))
                .collect();
            let mut line = format!("{space}{{{}}}{space}", fields.join(",")).into_bytes();
            if let Some((at, byte)) = mutation
                && !line.is_empty()
            {
                let at = at.index(line.len());
                line[at] = byte;
            }
            if let Some(cut) = cut {
                line.truncate(cut.index(line.len() + 1));
            }
            line
        })
}

/// JSON values `serde_json` reads back exactly (integers and short binary fractions only).
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1000i32..1000).prop_map(|n| Value::from(f64::from(n) / 8.0)),
        "\\PC{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(key(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> {
    btree_map(key(), value(), 0..5).prop_map(|m| Value::Object(m.into_iter().collect()))
}

// ---------------------------------------------------------------------------------------------
// `Outgoing::parse`: the line an actor writes

/// What a guest reads back from the line the broker writes for it.
#[derive(Deserialize)]
struct Delivered<'a> {
    id: String,
    from: String,
    reply_to: Option<String>,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// Parses `line` and checks what any answer must satisfy; returns whether it was accepted.
fn check_outgoing(line: &[u8], id: &str, reply_to: Option<&str>) -> bool {
    let out = match Outgoing::parse(line) {
        Ok(out) => out,
        Err(reason) => {
            assert!(
                reason.starts_with("not JSON: ")
                    || reason.starts_with("not a message: ")
                    || reason.starts_with("the `body` must be a JSON object"),
                "unclear error: {reason}"
            );
            return false;
        }
    };
    let body = out.body.get();
    assert!(
        body.starts_with('{') && body.ends_with('}'),
        "accepted a body that is not an object: {body}"
    );
    serde_json::from_str::<IgnoredAny>(body).expect("an accepted body is JSON");

    let envelope = Envelope {
        id: id.to_string(),
        from: ActorId::parse("echo").unwrap(),
        reply_to: reply_to.map(str::to_owned),
        speaker: None,
        schedule: None,
        trace: Default::default(),
        body: out.body,
    };
    let rendered = envelope.to_line();
    assert!(rendered.ends_with(b"\n"), "a delivered line ends its line");
    if !line.contains(&b'\n') {
        assert_eq!(
            rendered.iter().filter(|b| **b == b'\n').count(),
            1,
            "a delivered line is one line"
        );
    }
    let delivered: Delivered =
        serde_json::from_slice(&rendered).expect("a delivered line is a JSON message");
    assert_eq!(delivered.id, id);
    assert_eq!(delivered.from, "echo");
    assert_eq!(delivered.reply_to.as_deref(), reply_to);
    assert_eq!(
        delivered.body.get(),
        envelope.body.get(),
        "the body is kept verbatim"
    );
    if let Ok(parsed) = serde_json::from_str::<Value>(envelope.body.get()) {
        assert_eq!(envelope.body_value(), parsed);
        // The envelope nests the body one level deeper, past serde_json's limit at worst.
        if let Ok(whole) = serde_json::from_slice::<Value>(&rendered) {
            assert_eq!(whole["body"], parsed);
        }
    }
    // Native actors read every body they get; none may take the host down.
    assert!(envelope.body_value().is_object());
    true
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn outgoing_parse_survives_any_bytes(line in vec(any::<u8>(), 0..200), id in "\\PC{0,6}") {
        check_outgoing(&line, &id, None);
    }

    #[test]
    fn outgoing_parse_survives_hostile_messages(
        line in message_line(),
        id in any::<String>(),
        reply_to in prop::option::of(any::<String>()),
    ) {
        check_outgoing(&line, &id, reply_to.as_deref());
    }

    #[test]
    fn outgoing_parse_survives_deep_bodies(depth in 1usize..400, open in select(vec!["[", "{\"a\":"])) {
        let close = if open == "[" { "]" } else { "}" };
        let line = format!(
            r#"{{"body":{{"a":{}1{}}}}}"#,
            open.repeat(depth),
            close.repeat(depth)
        );
        check_outgoing(line.as_bytes(), "x", None);
    }
}

#[test]
fn outgoing_parse_survives_a_hundred_thousand_brackets() {
    let deep = "[".repeat(100_000);
    for line in [
        deep.clone(),
        format!(r#"{{"body":{deep}"#),
        format!(r#"{{"body":{{"a":{deep}"#),
        format!(r#"{{"body":{{"a":{deep}{}}}}}"#, "]".repeat(100_000)),
        format!(r#"{{"body":{{}},"extra":{deep}{}}}"#, "]".repeat(100_000)),
    ] {
        check_outgoing(line.as_bytes(), "x", None);
    }
}

#[test]
fn outgoing_parse_rejects_what_is_not_a_message_clearly() {
    for (line, says) in [
        (&b"\xff{\"body\":{}}"[..], "not JSON"),
        (b"{\"body\":{\"a\":\"\xff\"}}", "not JSON"),
        (b"{\"body\":{},\"body\":{}}", "duplicate field `body`"),
        (b"{\"to\":\"a\"}", "missing field `body`"),
        (b"{\"body\":[{}]}", "`body` must be a JSON object"),
        (b"{\"body\":null}", "`body` must be a JSON object"),
        (b"{\"body\":{}} trailing", "trailing characters"),
    ] {
        let err = Outgoing::parse(line).err().unwrap_or_else(|| {
            panic!("accepted {}", String::from_utf8_lossy(line));
        });
        assert!(err.contains(says), "{err}");
    }
    // Unknown fields are ignored; huge numbers and duplicate keys inside the body pass verbatim.
    let out = Outgoing::parse(br#"{"x":1e999999,"body":{"n":1e999999,"n":1}}"#).unwrap();
    assert_eq!(out.body.get(), r#"{"n":1e999999,"n":1}"#);
}

// ---------------------------------------------------------------------------------------------
// `ActorId::parse`

fn is_valid_id(id: &str) -> bool {
    (1..=MAX_ACTOR_ID_LEN).contains(&id.chars().count())
        && id
            .chars()
            .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
}

fn check_actor_id(id: &str) {
    match ActorId::parse(id) {
        Ok(parsed) => {
            assert!(is_valid_id(id), "accepted {id:?}");
            assert_eq!(parsed.as_str(), id);
        }
        Err(err) => {
            assert!(!is_valid_id(id), "refused {id:?}: {err}");
            let chars = id.chars().count();
            if id.is_empty() {
                assert!(err.contains("empty"), "{err}");
            } else if chars > MAX_ACTOR_ID_LEN {
                assert!(
                    err.contains(&format!("is {chars} characters long"))
                        && err.contains(&MAX_ACTOR_ID_LEN.to_string()),
                    "{id:?}: {err}"
                );
            } else {
                let bad = id
                    .chars()
                    .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
                    .unwrap();
                assert!(err.contains(&format!("{bad:?}")), "{id:?}: {err}");
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn valid_actor_ids_are_accepted(id in "[a-z0-9_-]{1,64}") {
        check_actor_id(&id);
        prop_assert!(ActorId::parse(&id).is_ok());
    }

    #[test]
    fn actor_ids_are_accepted_exactly_by_the_rules(
        id in prop_oneof![
            any::<String>(),
            "[a-z0-9_-]{0,70}",
            "[a-z0-9_\\-A-Zé\\n /.\u{0}\u{1b}]{0,70}",
            "[a-zé]{30,70}",
        ]
    ) {
        check_actor_id(&id);
    }
}

// ---------------------------------------------------------------------------------------------
// `World::resolve_request_path`: paths in requests to the broker

fn request_path() -> impl Strategy<Value = String> {
    let prefix = select(vec![
        "/actor",
        "/public",
        "/data",
        "/actor/",
        "/data/",
        "/datax",
        "/actors",
        "//data",
        "/",
        "",
        "/etc",
        "/tmp",
        "data",
        "./data",
        "/./data",
        "/actor/..",
        "/data/..",
    ]);
    let part = prop_oneof![
        3 => select(vec!["..", ".", "", "x", "a.wasm", "...", "..x", ". .", "~", "\0", "..\\"])
            .prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ];
    prop_oneof![
        3 => (prefix, vec(part, 0..6), select(vec!["", "/", "/."]))
            .prop_map(|(prefix, parts, end)| format!("{prefix}/{}{end}", parts.join("/"))),
        1 => any::<String>(),
    ]
}

fn has_parent_dir(path: &Path) -> bool {
    path.components().any(|c| c == Component::ParentDir)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn request_paths_of_wasm_actors_stay_in_their_namespace(
        sender in "[a-z0-9_-]{1,64}".prop_filter("a WASM actor", |id| {
            !ActorId::parse(id).unwrap().is_native()
        }),
        path in request_path(),
    ) {
        let world = World::new("/w");
        let sender = ActorId::parse(&sender).unwrap();
        match world.resolve_request_path(&sender, &path) {
            Ok(resolved) => {
                prop_assert!(!has_parent_dir(&resolved), "{path:?} -> {resolved:?}");
                let allowed = if path.starts_with("/public") {
                    world.public_dir(&sender)
                } else if path.starts_with("/data") {
                    world.data_dir(&sender)
                } else {
                    Path::new("/w/actor").to_path_buf()
                };
                prop_assert!(resolved.starts_with(&allowed), "{path:?} -> {resolved:?}");
            }
            Err(err) => {
                prop_assert!(err.contains(&format!("`{path}`")), "{err}");
                if has_parent_dir(Path::new(&path)) {
                    prop_assert!(err.contains("`..`"), "{err}");
                }
            }
        }
    }

    #[test]
    fn request_paths_of_native_actors_never_climb(path in request_path()) {
        let world = World::new("/w");
        let console = ActorId::parse("console").unwrap();
        match world.resolve_request_path(&console, &path) {
            Ok(resolved) => {
                prop_assert!(!has_parent_dir(&resolved), "{path:?} -> {resolved:?}");
                prop_assert!(resolved.is_absolute(), "{path:?} -> {resolved:?}");
            }
            Err(err) => prop_assert!(err.contains(&format!("`{path}`")), "{err}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `fs::Dir`: guest paths inside a mount

/// A mount with files, folders, temporaries and host-made symlinks that point out of it, and
/// an `outside` folder beside it that no guest operation may touch.
struct Mounted {
    _scratch: tempfile::TempDir,
    top: PathBuf,
    mount: PathBuf,
    dir: Dir,
    read_only: Dir,
}

impl Mounted {
    fn new() -> Mounted {
        let scratch = tempfile::tempdir().unwrap();
        let top = scratch.path().to_path_buf();
        let mount = top.join("mount");
        for dir in ["outside/dir", "mount/a/b"] {
            std::fs::create_dir_all(top.join(dir)).unwrap();
        }
        for (file, content) in [
            ("outside/secret", "secret"),
            ("mount/file", "top"),
            ("mount/a/f", "f"),
            ("mount/.sausage-tmp-1-2", "temporary 1"),
            ("mount/a/.sausage-tmp-9", "temporary 9"),
        ] {
            std::fs::write(top.join(file), content).unwrap();
        }
        for (link, target) in [
            ("mount/up", PathBuf::from("../outside")),
            ("mount/abs", top.join("outside/secret")),
            ("mount/a/loop", PathBuf::from("../..")),
            ("mount/a/b/out", top.join("outside/dir")),
            ("mount/a/self", PathBuf::from("self")),
        ] {
            std::os::unix::fs::symlink(target, top.join(link)).unwrap();
        }
        let dir = Dir::root(&Mount {
            guest: "/data".into(),
            host: mount.clone(),
            writable: true,
        });
        let read_only = Dir::root(&Mount {
            guest: "/actor".into(),
            host: mount.clone(),
            writable: false,
        });
        Mounted {
            _scratch: scratch,
            top,
            mount,
            dir,
            read_only,
        }
    }

    /// Every entry under the scratch folder (the mount included), without following symlinks.
    fn tree(&self) -> BTreeMap<PathBuf, String> {
        let mut tree = BTreeMap::new();
        let mut folders = vec![self.top.clone()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let what = if meta.is_symlink() {
                    format!("-> {}", std::fs::read_link(&path).unwrap().display())
                } else if meta.is_dir() {
                    folders.push(path.clone());
                    "/".to_string()
                } else {
                    format!(
                        "= {}",
                        String::from_utf8_lossy(&std::fs::read(&path).unwrap())
                    )
                };
                tree.insert(path.strip_prefix(&self.top).unwrap().to_path_buf(), what);
            }
        }
        tree
    }

    /// The objects a guest may reach: the mount's root and everything under it that is neither
    /// a symlink nor a temporary.
    fn reachable(&self) -> HashSet<(u64, u64)> {
        let mut found = HashSet::new();
        let root = std::fs::metadata(&self.mount).unwrap();
        found.insert((root.dev(), root.ino()));
        for (path, what) in self.tree() {
            let name = path.file_name().unwrap().to_string_lossy();
            if path.starts_with("mount")
                && !what.starts_with("->")
                && !name.starts_with(".sausage-tmp-")
            {
                let meta = std::fs::symlink_metadata(self.top.join(&path)).unwrap();
                found.insert((meta.dev(), meta.ino()));
            }
        }
        found
    }

    /// What must never change: everything outside the mount, the host's symlinks (wherever a
    /// rename of their folder took them) and the temporaries (ditto).
    fn untouchable(&self) -> (Vec<(PathBuf, String)>, Vec<String>, Vec<String>) {
        let tree = self.tree();
        let outside = tree
            .iter()
            .filter(|(path, _)| !path.starts_with("mount"))
            .map(|(p, w)| (p.clone(), w.clone()))
            .collect();
        let mut links: Vec<String> = tree
            .values()
            .filter(|w| w.starts_with("->"))
            .cloned()
            .collect();
        links.sort();
        let mut temporaries: Vec<String> = tree
            .iter()
            .filter(|(p, _)| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".sausage-tmp-")
            })
            .map(|(p, w)| format!("{} {w}", p.file_name().unwrap().to_string_lossy()))
            .collect();
        temporaries.sort();
        (outside, links, temporaries)
    }
}

/// What the rules of DESIGN §2 say a guest path resolves to, from the folder `base` (names
/// from the mount's root), before the disk is asked: the names from the root, or the error.
fn resolve_model(base: &[String], path: &str) -> Result<Vec<String>, ErrorCode> {
    if path.len() > MAX_GUEST_PATH_LEN {
        return Err(ErrorCode::NameTooLong);
    }
    if path.is_empty() {
        return Err(ErrorCode::NoEntry);
    }
    if path.contains('\0') {
        return Err(ErrorCode::Invalid);
    }
    if path.starts_with('/') {
        return Err(ErrorCode::NotPermitted);
    }
    let mut names = base.to_vec();
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            names.pop().ok_or(ErrorCode::NotPermitted)?;
        } else if part.starts_with(".sausage-tmp-") {
            return Err(ErrorCode::NoEntry);
        } else {
            names.push(part.to_string());
        }
    }
    Ok(names)
}

/// Whether a symlink lies on the way to `names` (checked up to the first missing name).
fn symlink_on_the_way(mount: &Path, names: &[String]) -> bool {
    let mut path = mount.to_path_buf();
    for name in names {
        path.push(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_symlink() => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

fn guest_path() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        6 => select(vec![
            "a", "b", "f", "file", "up", "abs", "loop", "out", "self", "..", ".", "", "new",
            ".sausage-tmp-1-2", ".sausage-tmp-9", ".sausage-tmp-new", ".sausage-tmp", "outside",
            "secret", "x\0y", "...", " ", ".hidden",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{1,8}",
        1 => (200usize..300).prop_map(|n| "z".repeat(n)),
    ];
    prop_oneof![
        8 => (
            select(vec!["", "", "", "/", "./", "//"]),
            vec((name, select(vec!["/", "//", "/./"])), 1..7),
            select(vec!["", "", "/", "/."]),
        )
            .prop_map(|(start, parts, end)| {
                let mut path = start.to_string();
                for (i, (name, sep)) in parts.iter().enumerate() {
                    if i > 0 {
                        path.push_str(sep);
                    }
                    path.push_str(name);
                }
                path + end
            }),
        1 => any::<String>(),
        1 => (0usize..3, 4000usize..4200).prop_map(|(n, len)| "a/".repeat(n) + &"z".repeat(len)),
    ]
}

/// One guest operation on the writable mount.
#[derive(Clone, Debug)]
enum FsOp {
    Stat(String),
    Open(String, OpenOptions),
    /// Open a folder, then stat a path from it.
    StatFrom(String, String),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Rename(String, String),
}

fn fs_op() -> impl Strategy<Value = FsOp> {
    let options =
        any::<[bool; 6]>().prop_map(|[create, exclusive, truncate, directory, read, write]| {
            OpenOptions {
                create,
                exclusive,
                truncate,
                directory,
                read,
                write,
            }
        });
    prop_oneof![
        3 => guest_path().prop_map(FsOp::Stat),
        3 => (guest_path(), options).prop_map(|(p, o)| FsOp::Open(p, o)),
        2 => (guest_path(), guest_path()).prop_map(|(a, b)| FsOp::StatFrom(a, b)),
        1 => guest_path().prop_map(FsOp::Mkdir),
        1 => guest_path().prop_map(FsOp::Rmdir),
        1 => guest_path().prop_map(FsOp::Unlink),
        1 => (guest_path(), guest_path()).prop_map(|(a, b)| FsOp::Rename(a, b)),
    ]
}

/// Checks one `stat-at` from `dir` (whose names from the root are `base`) against the model.
fn check_stat(m: &Mounted, dir: &Dir, base: &[String], path: &str) {
    let reachable = m.reachable();
    let result = dir.stat_at(path);
    let names = match resolve_model(base, path) {
        Err(code) => {
            assert_eq!(result, Err(code), "stat {path:?}");
            return;
        }
        Ok(names) => names,
    };
    if symlink_on_the_way(&m.mount, &names) {
        assert_eq!(
            result,
            Err(ErrorCode::NotPermitted),
            "stat {path:?} through a symlink"
        );
        return;
    }
    let host: PathBuf = names.iter().fold(m.mount.clone(), |p, n| p.join(n));
    match result {
        Ok(stat) => {
            assert!(
                reachable.contains(&(stat.device, stat.inode)),
                "stat {path:?} reached something outside the mount"
            );
            let meta = std::fs::symlink_metadata(&host).unwrap();
            assert_eq!(
                (stat.device, stat.inode),
                (meta.dev(), meta.ino()),
                "stat {path:?}"
            );
        }
        Err(_) => assert!(
            std::fs::symlink_metadata(&host).map_or(true, |meta| !meta.is_dir()),
            "stat {path:?} failed on a folder"
        ),
    }
}

fn check_fs_op(m: &Mounted, op: &FsOp) {
    let reachable = m.reachable();
    match op {
        FsOp::Stat(path) => check_stat(m, &m.dir, &[], path),
        FsOp::StatFrom(folder, path) => {
            let options = OpenOptions {
                directory: true,
                read: true,
                ..OpenOptions::default()
            };
            if let Ok(Opened::Dir(dir)) = m.dir.open(folder, options) {
                let names = resolve_model(&[], folder).expect("an opened folder resolves");
                let stat = dir.stat().unwrap();
                assert!(
                    reachable.contains(&(stat.device, stat.inode)),
                    "open {folder:?}"
                );
                for entry in dir.entries().unwrap() {
                    assert!(
                        !entry.name.starts_with(".sausage-tmp-"),
                        "listed {}",
                        entry.name
                    );
                }
                check_stat(m, &dir, &names, path);
            }
        }
        FsOp::Open(path, options) => match m.dir.open(path, *options) {
            Ok(Opened::Dir(dir)) => {
                let stat = dir.stat().unwrap();
                assert!(
                    reachable.contains(&(stat.device, stat.inode)),
                    "open {path:?}"
                );
            }
            Ok(Opened::File(file)) => {
                if file.pending_commit().is_some() {
                    let _ = file.write_at(b"written", 0);
                } else {
                    let stat = file.stat().unwrap();
                    assert!(
                        reachable.contains(&(stat.device, stat.inode)),
                        "open {path:?}"
                    );
                }
                file.close();
            }
            Err(_) => {}
        },
        FsOp::Mkdir(path) => drop(m.dir.create_dir(path)),
        FsOp::Rmdir(path) => drop(m.dir.remove_dir(path)),
        FsOp::Unlink(path) => drop(m.dir.unlink(path)),
        FsOp::Rename(from, to) => drop(m.dir.rename(from, &m.dir, to)),
    }
    // The same operation on a read-only view of the mount changes nothing.
    let changes = match op {
        FsOp::Open(path, options) if options.write || options.truncate || options.create => {
            Some(m.read_only.open(path, *options).err())
        }
        FsOp::Mkdir(path) => Some(m.read_only.create_dir(path).err()),
        FsOp::Rmdir(path) => Some(m.read_only.remove_dir(path).err()),
        FsOp::Unlink(path) => Some(m.read_only.unlink(path).err()),
        FsOp::Rename(from, to) => Some(m.read_only.rename(from, &m.read_only, to).err()),
        _ => None,
    };
    if let Some(error) = changes {
        assert!(
            matches!(error, Some(ErrorCode::ReadOnly | ErrorCode::Invalid)),
            "{op:?} on a read-only mount: {error:?}"
        );
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn guest_paths_stay_in_their_mount(ops in vec(fs_op(), 1..5)) {
        let m = Mounted::new();
        let before = m.untouchable();
        for op in &ops {
            check_fs_op(&m, op);
            prop_assert_eq!(&m.untouchable(), &before, "after {:?}", op);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `Lines`: a WASM actor's stdout cut into lines

/// A piece of a stdout stream. Long lines are described, not generated byte by byte.
#[derive(Clone, Debug)]
enum Piece {
    Bytes(Vec<u8>),
    Long { len: usize, fill: u8 },
}

fn short_piece() -> impl Strategy<Value = Piece> {
    vec(
        prop_oneof![3 => Just(b'\n'), 1 => Just(b'\r'), 12 => any::<u8>()],
        0..60,
    )
    .prop_map(Piece::Bytes)
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        8 => short_piece(),
        1 => (
            prop_oneof![
                Just(MAX_LINE_BYTES - 1),
                Just(MAX_LINE_BYTES),
                Just(MAX_LINE_BYTES + 1),
                (MAX_LINE_BYTES / 2)..(MAX_LINE_BYTES + MAX_LINE_BYTES / 2),
            ],
            any::<u8>(),
        )
            .prop_map(|(len, fill)| Piece::Long { len, fill }),
    ]
}

fn stream(pieces: &[Piece]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => bytes.extend_from_slice(b),
            Piece::Long { len, fill } => bytes.resize(bytes.len() + len, *fill),
        }
    }
    bytes
}

/// What a line came out as: its length and a hash of its bytes, or `None` for `Overlong`.
type Seen = Option<(usize, u64)>;

fn fingerprint(line: &[u8]) -> Seen {
    let mut hasher = DefaultHasher::new();
    line.hash(&mut hasher);
    Some((line.len(), hasher.finish()))
}

/// The lines of a stream as DESIGN §3 says: each complete line without its newline (and a
/// trailing `\r`), or `Overlong` when it holds more than `MAX_LINE_BYTES` before its newline.
fn lines_model(stream: &[u8]) -> Vec<Seen> {
    let mut parts: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    parts.pop(); // The last part has no newline yet.
    parts
        .into_iter()
        .map(|line| {
            if line.len() > MAX_LINE_BYTES {
                None
            } else {
                fingerprint(line.strip_suffix(b"\r").unwrap_or(line))
            }
        })
        .collect()
}

fn split_lines<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Seen> {
    let mut lines = Lines::default();
    let mut seen = Vec::new();
    for chunk in chunks {
        lines.push(chunk, |line| match line {
            Line::Whole(line) => {
                assert!(
                    line.len() <= MAX_LINE_BYTES,
                    "a whole line of {} bytes",
                    line.len()
                );
                seen.push(fingerprint(line));
            }
            Line::Overlong => seen.push(None),
        });
    }
    seen
}

/// Cuts `bytes` into chunks of the given sizes, over and over.
fn chunked<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = bytes;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, after) = rest.split_at((*size).min(rest.len()));
        chunks.push(chunk);
        rest = after;
    }
    chunks
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn short_lines_come_out_the_same_however_chunked(
        pieces in vec(short_piece(), 0..12),
        sizes in vec(1usize..40, 1..8),
    ) {
        let bytes = stream(&pieces);
        let expected = lines_model(&bytes);
        prop_assert_eq!(&split_lines([&bytes[..]]), &expected);
        prop_assert_eq!(&split_lines(chunked(&bytes, &sizes)), &expected);
        prop_assert_eq!(&split_lines(bytes.chunks(1)), &expected);
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn long_lines_come_out_the_same_however_chunked(
        pieces in vec(piece(), 1..6),
        sizes in vec(prop_oneof![100usize..1000, 1000usize..2_000_000], 1..8),
    ) {
        let bytes = stream(&pieces);
        let expected = lines_model(&bytes);
        prop_assert_eq!(&split_lines([&bytes[..]]), &expected);
        prop_assert_eq!(&split_lines(chunked(&bytes, &sizes)), &expected);
    }
}

/// Counts the bytes each thread has allocated and not freed, and the peak since a reset.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the counters have no destructor, but a thread being torn down may still free
    // memory; such frees are not counted.
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + delta);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

// SAFETY: every call is forwarded to the system allocator with its arguments unchanged; the
// counting touches only thread-local cells, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // A moving realloc briefly holds both blocks.
            count(new_size as isize);
            count(-(layout.size() as isize));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most this thread held at once while `f` ran, beyond what it held before.
fn peak_while(f: impl FnOnce()) -> isize {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    f();
    PEAK.with(Cell::get) - start
}

#[test]
fn an_endless_line_holds_a_bounded_amount() {
    let chunk = vec![b'x'; 64 * 1024];
    let mut overlong = 0;
    let mut whole = 0;
    let peak = peak_while(|| {
        let mut lines = Lines::default();
        let mut each = |line: Line<'_>| match line {
            Line::Whole(_) => whole += 1,
            Line::Overlong => overlong += 1,
        };
        // 64 MiB without a newline, then the end of the line and a short one.
        for _ in 0..1024 {
            lines.push(&chunk, &mut each);
        }
        lines.push(b"\nok\n", &mut each);
    });
    assert_eq!((overlong, whole), (1, 1));
    // The line's bytes are bounded by MAX_LINE_BYTES; its buffer grows by doubling, and a
    // moving realloc holds the old block too, so the allocation may reach about 3×.
    assert!(
        peak <= 3 * MAX_LINE_BYTES as isize,
        "held {peak} bytes of a 64 MiB line"
    );
}

// ---------------------------------------------------------------------------------------------
// Transcripts

const NAME: &str = "tests/t.jsonl";

/// A line of a transcript file, as a generator sees it.
#[derive(Clone, Debug)]
enum TranscriptLine {
    Send { from: Option<String>, body: Value },
    Expect { to: Option<String>, body: Value },
    Comment(String),
    Blank(String),
}

fn transcript_line() -> impl Strategy<Value = TranscriptLine> {
    prop_oneof![
        3 => (prop::option::of("\\PC{0,10}"), object())
            .prop_map(|(from, body)| TranscriptLine::Send { from, body }),
        3 => (prop::option::of("\\PC{0,10}"), object())
            .prop_map(|(to, body)| TranscriptLine::Expect { to, body }),
        1 => "\\PC{0,20}".prop_map(TranscriptLine::Comment),
        1 => select(vec!["", " ", "\t", "  \t "]).prop_map(|s| TranscriptLine::Blank(s.into())),
    ]
}

fn render_line(line: &TranscriptLine, indent: &str) -> String {
    match line {
        TranscriptLine::Send { from, body } => {
            let mut step = json!({"send": body});
            if let Some(from) = from {
                step["from"] = json!(from);
            }
            format!("{indent}{step}{indent}")
        }
        TranscriptLine::Expect { to, body } => {
            let mut step = json!({"expect": body});
            if let Some(to) = to {
                step["to"] = json!(to);
            }
            format!("{indent}{step}{indent}")
        }
        TranscriptLine::Comment(text) => format!("{indent}//{text}"),
        TranscriptLine::Blank(space) => space.clone(),
    }
}

fn expected_steps(lines: &[TranscriptLine]) -> Vec<Step> {
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let kind = match line {
                TranscriptLine::Send { from, body } => StepKind::Send {
                    from: from
                        .clone()
                        .unwrap_or_else(|| transcript::DEFAULT_FROM.into()),
                    body: body.clone(),
                },
                TranscriptLine::Expect { to, body } => StepKind::Expect {
                    to: to.clone(),
                    body: body.clone(),
                },
                _ => return None,
            };
            Some(Step { line: i + 1, kind })
        })
        .collect()
}

fn valid_transcript() -> impl Strategy<Value = (Vec<TranscriptLine>, String)> {
    (
        vec(transcript_line(), 0..12),
        object(),
        select(vec!["", " ", "\t"]),
        select(vec!["\n", "\r\n"]),
        any::<bool>(),
    )
        .prop_map(|(mut lines, body, indent, newline, final_newline)| {
            lines.push(TranscriptLine::Expect { to: None, body });
            let mut text: Vec<String> = lines.iter().map(|l| render_line(l, indent)).collect();
            if final_newline {
                text.push(String::new());
            }
            (lines, text.join(newline))
        })
}

/// A line that is never a step: not JSON, not an object, or an object of the wrong shape.
fn bad_step() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "{not json",
            "[1, 2]",
            "\"send\"",
            "{}",
            "{\"send\": 3}",
            "{\"send\": [{}]}",
            "{\"expect\": {}, \"from\": \"x\"}",
            "{\"send\": {}, \"to\": \"x\"}",
            "{\"send\": {}, \"expect\": {}}",
            "{\"send\": {}, \"from\": 7}",
            "{\"expect\": {}, \"to\": null}",
            "{\"send\": {\"n\": 1e999999}}",
            "{\"expect\": {\"s\": \"\\ud800\"}}",
            "/ not a comment",
            "{\"http\": {\"path\": \"/\"}}",
            "{\"expect_http\": {\"status\": 200}}",
            "{\"http\": {\"path\": \"x\"}}",
            "{\"http\": {\"path\": \"/\", \"query\": \"a\"}}",
            "{\"http\": {}, \"to\": \"x\"}",
        ])
        .prop_map(str::to_owned),
        (1usize..300).prop_map(|n| format!("{{\"send\": {}", "[".repeat(n))),
        (129usize..400).prop_map(|n| format!(
            "{{\"expect\": {{\"a\": {}{}}}}}",
            "[".repeat(n),
            "]".repeat(n)
        )),
        "\\PC{1,40}".prop_filter("not blank, a comment or a step", |s| {
            let s = s.trim();
            !s.is_empty() && !s.starts_with("//") && !s.contains("send") && !s.contains("expect")
        }),
    ]
}

/// Every `line N` an error names.
fn named_lines(error: &str) -> Vec<usize> {
    error
        .match_indices("line ")
        .filter_map(|(at, _)| {
            let digits: String = error[at + 5..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn valid_transcripts_parse_to_their_steps((lines, text) in valid_transcript()) {
        let parsed = transcript::parse(NAME, &text).unwrap();
        prop_assert_eq!(parsed.name, NAME);
        prop_assert_eq!(parsed.steps, expected_steps(&lines));
    }

    #[test]
    fn a_bad_step_is_named_by_its_file_and_line(
        (lines, text) in valid_transcript(),
        bad in bad_step(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut text_lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
        let at = at.index(lines.len());
        text_lines[at] = bad;
        let text = text_lines.join("\n");
        let err = transcript::parse(NAME, &text).unwrap_err();
        let prefix = format!("{NAME} line {}: ", at + 1);
        prop_assert!(err.starts_with(&prefix), "{}", err);
        prop_assert_eq!(named_lines(&err), vec![at + 1], "{}", err);
        prop_assert!(err.len() < 2000, "an error of {} bytes", err.len());
    }

    #[test]
    fn any_text_parses_or_names_where_it_fails(
        text in prop_oneof![
            any::<String>(),
            vec(prop_oneof![
                bad_step(),
                valid_transcript().prop_map(|(_, text)| text),
                "\\PC{0,20}",
            ], 0..5).prop_map(|lines| lines.join("\n")),
        ]
    ) {
        let Err(err) = transcript::parse(NAME, &text) else {
            return Ok(());
        };
        prop_assert!(err.starts_with(NAME), "{}", err);
        if err.ends_with("it has no `expect` step, so it tests nothing") {
            return Ok(());
        }
        let named = named_lines(&err);
        prop_assert_eq!(named.len(), 1, "{}", err);
        let line = text.lines().nth(named[0] - 1).expect("the named line exists").trim();
        prop_assert!(!line.is_empty() && !line.starts_with("//"), "{}", err);
    }

    #[test]
    fn a_value_matches_itself(value in value()) {
        prop_assert!(transcript::matches(&value, &value));
    }

    #[test]
    fn an_empty_object_matches_any_object(actual in object()) {
        let empty = json!({});
        prop_assert!(transcript::matches(&empty, &actual));
    }

    #[test]
    fn a_subset_matches_and_an_extra_key_does_not(
        actual in object(),
        keep in any::<u64>(),
        extra in key(),
        extra_value in value(),
    ) {
        let Value::Object(fields) = &actual else { unreachable!() };
        let subset: serde_json::Map<String, Value> = fields
            .iter()
            .enumerate()
            .filter(|(i, _)| (keep >> (i % 64)) & 1 == 1)
            .map(|(_, (k, v))| (k.clone(), v.clone()))
            .collect();
        prop_assert!(transcript::matches(&Value::Object(subset.clone()), &actual));
        if !fields.contains_key(&extra) {
            let mut wider = subset;
            wider.insert(extra, extra_value);
            prop_assert!(!transcript::matches(&Value::Object(wider), &actual));
        }
    }
}

#[test]
fn transcripts_that_are_not_text_name_their_file() {
    let source = tempfile::tempdir().unwrap();
    let tests = source.path().join("tests");
    std::fs::create_dir(&tests).unwrap();
    std::fs::write(tests.join("a.jsonl"), b"{\"expect\": {}}\n\xff\xfe\n").unwrap();
    let err = transcript::load(source.path()).unwrap_err();
    assert!(err.starts_with("tests/a.jsonl: "), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Inputs that broke a property once

/// A body routing accepts (it checks only syntax) but `serde_json::Value` cannot hold: a native
/// actor reading it panicked, and a panic in the broker's request loop ended it for good.
#[test]
fn bodies_a_value_cannot_hold_do_not_take_a_native_actor_down() {
    for line in [
        r#"{"to":"broker","body":{"type":"list","n":1e999999}}"#.to_string(),
        format!(
            r#"{{"to":"broker","body":{{"type":"list","n":1{}}}}}"#,
            "0".repeat(400)
        ),
        format!(
            r#"{{"to":"broker","body":{{"a":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        ),
        r#"{"to":"broker","body":{"s":"\ud800"}}"#.to_string(),
    ] {
        let out = Outgoing::parse(line.as_bytes()).unwrap();
        let envelope = Envelope {
            id: "m-1".into(),
            from: ActorId::parse("evil").unwrap(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: out.body,
        };
        let body = envelope.body_value();
        assert_eq!(body["type"], "unreadable", "{line}");
        assert!(
            body["reason"].as_str().unwrap().contains("cannot be read"),
            "{body}"
        );
    }
}

/// An id of 33 `é` is 66 bytes: it was refused as "66 characters long" rather than for its `é`.
#[test]
fn a_short_id_of_wide_characters_is_refused_for_its_characters() {
    let err = ActorId::parse(&"é".repeat(33)).unwrap_err();
    assert!(err.contains("'é'"), "{err}");
    let err = ActorId::parse(&"é".repeat(65)).unwrap_err();
    assert!(err.contains("is 65 characters long"), "{err}");
}

/// serde_json's own position (`at line 1 column 2`) made a transcript error name two lines.
#[test]
fn a_transcript_error_names_one_line() {
    let err = transcript::parse(NAME, "{\"expect\": {}}\n\n{not json").unwrap_err();
    assert_eq!(named_lines(&err), vec![3], "{err}");
    assert!(err.contains("column 2"), "{err}");
}
