//! The agent's file tools of DESIGN §12 (`edit_file`, `search`, `find_files`, `read_file` with
//! lines) run by the real agent in a real world, against the fake model provider: one reply
//! holds several calls, and the tool results the agent sent back with the next request are
//! checked, success and failure alike, one API shape per test. The tools' every case is tested
//! natively in `agent/src/tools/`; these check that they work through WASI on a world's mounts.

mod support;

use sausage_fake_llm::{FakeLlm, anthropic, chat, openai};
use serde_json::{Value, json};
use support::agent::*;
use support::*;

/// Whether each tool call of the turn succeeded, from the `tool` messages the console printed.
fn tools_ok(host: &mut Host) -> Vec<bool> {
    host.take_all()
        .into_iter()
        .filter(|m| m.from == "agent" && m.body["type"] == "tool" && m.body["state"] == "finished")
        .map(|m| m.body["ok"].as_bool().unwrap())
        .collect()
}

#[test]
fn edit_file_changes_a_file_in_data_and_its_errors_say_where_to_look() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    let app = "fn main() {\n    let x = 1;\n    if ready {\n        go();\n    }\n    go();\n}\n";
    std::fs::write(world.path("private/agent/data/app.rs"), app).unwrap();
    let edit = |path: &str, old: &str, new: &str| {
        openai::function_call("edit_file", json!({"path": path, "old": old, "new": new}))
    };
    fake.push_openai(openai::reply(vec![
        edit("/data/app.rs", "let x = 1;", "let x = 2;"),
        edit("/data/app.rs", "if ready {\ngo();\n}", "go();"),
        edit("/data/app.rs", "go();", "stop();"),
        edit("/data/nothing.rs", "a", "b"),
    ]));
    fake.push_openai(openai::text_reply("Edited."));
    let mut host = world.run();
    assert_eq!(ask(&mut host, "set x to 2"), "Edited.");

    let offered: Vec<String> = fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_string())
        .collect();
    for tool in ["edit_file", "search", "find_files", "read_file"] {
        assert!(
            offered.iter().any(|name| name == tool),
            "{tool} is offered: {offered:?}"
        );
    }
    let outputs = tool_outputs(&fake, 1);
    assert_eq!(
        outputs[0],
        "edited /data/app.rs: replaced 1 place (now at line 2)"
    );
    assert_eq!(
        outputs[1],
        "error: `old` was not found in /data/app.rs, but lines 3-5 differ from it only in \
         whitespace (indentation, spaces or line ends). `old` must match exactly: copy it from \
         these lines, without the `<number>│ ` prefix:\n\
         3│     if ready {\n\
         4│         go();\n\
         5│     }"
    );
    assert_eq!(
        outputs[2],
        "error: `old` occurs 2 times in /data/app.rs, at lines 4, 6; add surrounding lines to \
         `old` so it occurs once, or set `all` to true to replace every one"
    );
    assert_eq!(
        outputs[3],
        "error: /data/nothing.rs: no such file; edit_file changes an existing file, write_file \
         creates one"
    );
    assert_eq!(
        world.read("private/agent/data/app.rs"),
        app.replace("x = 1", "x = 2"),
        "only the first edit changed the file"
    );
    assert_eq!(tools_ok(&mut host), [true, false, false, false]);
}

#[test]
fn search_and_find_files_look_through_the_agents_own_source() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "anthropic-messages");
    let source = "/actor/agent/source";
    fake.push_anthropic(anthropic::reply(vec![
        anthropic::tool_use(
            "search",
            json!({"pattern": r"pub fn cut_\w+\(", "path": source, "glob": "*.rs"}),
        ),
        anthropic::tool_use("search", json!({"pattern": "fn (", "path": source})),
        anthropic::tool_use(
            "find_files",
            json!({"pattern": "src/tools/*.rs", "path": source}),
        ),
        anthropic::tool_use(
            "find_files",
            json!({"pattern": "*.rs", "path": format!("{source}/Cargo.toml")}),
        ),
    ]));
    fake.push_anthropic(anthropic::text_reply("Found it."));
    let mut host = world.run();
    assert_eq!(ask(&mut host, "where is cut_output?"), "Found it.");

    let outputs = tool_outputs(&fake, 1);
    let hit = &outputs[0];
    assert!(
        hit.starts_with("/actor/agent/source/src/tools/mod.rs:")
            && hit.ends_with(": pub fn cut_output(output: String) -> String {")
            && !hit.contains('\n'),
        "{hit}"
    );
    assert!(
        outputs[1].starts_with("error: `pattern` is not a valid regular expression"),
        "{}",
        outputs[1]
    );
    let found: Vec<&str> = outputs[2].lines().collect();
    for file in ["files.rs", "mod.rs", "search.rs"] {
        let path = format!("{source}/src/tools/{file}");
        assert!(found.contains(&path.as_str()), "{path} in {found:?}");
    }
    assert!(found.is_sorted(), "{found:?}");
    assert_eq!(
        outputs[3],
        "error: /actor/agent/source/Cargo.toml: not a folder; find_files looks under a folder \
         (read_file reads a file)"
    );
    assert_eq!(tools_ok(&mut host), [true, false, true, false]);
}

#[test]
fn read_file_shows_the_end_of_a_log_and_numbered_lines() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-chat");
    // The host appends to the log, so the lines written here stay its first 500.
    let log: String = (1..=500).map(|n| format!("log line {n}\n")).collect();
    std::fs::write(world.path("actor/agent/stderr.log"), log).unwrap();
    let read = |arguments: Value| {
        let mut arguments = arguments;
        arguments["path"] = json!("/actor/agent/stderr.log");
        chat::tool_call("read_file", arguments)
    };
    fake.push_chat(chat::reply(chat::message(
        None,
        vec![
            read(json!({"tail": 2})),
            read(json!({"offset": 10, "limit": 2})),
            read(json!({"tail": 2, "offset": 3})),
            read(json!({"offset": 0})),
        ],
    )));
    fake.push_chat(chat::text_reply("The log ends well."));
    let mut host = world.run();
    assert_eq!(
        ask(&mut host, "how does the log end?"),
        "The log ends well."
    );

    let outputs = tool_outputs(&fake, 1);
    // `[/actor/agent/stderr.log: lines <total - 1>-<total> of <total>]` and two numbered lines.
    let (header, lines) = outputs[0].split_once('\n').unwrap();
    let total: usize = header
        .strip_suffix(']')
        .and_then(|h| h.rsplit_once(" of "))
        .map(|(_, total)| total.parse().unwrap())
        .unwrap_or_else(|| panic!("{header}"));
    assert!(total >= 500, "{header}");
    assert_eq!(
        header,
        format!(
            "[/actor/agent/stderr.log: lines {}-{total} of {total}]",
            total - 1
        )
    );
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.starts_with(&format!("{}│ ", total - 1)), "{lines}");
    assert_eq!(
        outputs[1],
        format!(
            "[/actor/agent/stderr.log: lines 10-11 of {total}; offset 12 reads on]\n\
             10│ log line 10\n\
             11│ log line 11"
        )
    );
    assert!(
        outputs[2].starts_with("error: `tail` shows the last lines"),
        "{}",
        outputs[2]
    );
    assert_eq!(
        outputs[3],
        "error: `offset` must be a whole number of at least 1, not 0"
    );
    assert_eq!(tools_ok(&mut host), [true, true, false, false]);
}
