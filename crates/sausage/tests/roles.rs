//! Roles and sub-agents (DESIGN §26): the roles the agent's sub-agents take, as `sausage roles`
//! lists them and the agent reads them.

mod support;

use serde_json::Value;
use support::*;

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
