//! The agent's roles (DESIGN §26): what a sub-agent is told and may use. A role is a Markdown
//! file whose front matter (YAML between two `---` lines) says `description`, and optionally
//! `model`, `tools`, `deny_tools`, `budget_usd` and `max_minutes`; its body is the role's
//! prompt. Three are built in (`worker`, `scout`, `reviewer`); an owner adds or changes roles as
//! `roles/<name>.md` in the agent's data, read afresh for each delegation.
//!
//! The agent (a wasm32 component) and `sausage roles` read them through this crate, so both
//! accept and refuse the same files, a refusal naming the file's line and column.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// The longest a role's name may be.
pub const MAX_NAME: usize = 40;

/// The longest a sub-agent of a role may run, in minutes, whatever its file says.
pub const MAX_MINUTES: u64 = 24 * 60;

/// The largest role file read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The built-in roles, each as its file.
const BUILT_IN: [(&str, &str); 3] = [
    ("worker", include_str!("builtin/worker.md")),
    ("scout", include_str!("builtin/scout.md")),
    ("reviewer", include_str!("builtin/reviewer.md")),
];

/// One role.
#[derive(Clone, Debug, PartialEq)]
pub struct Role {
    pub name: String,
    pub description: String,
    /// The model its sub-agents ask, instead of the agent's.
    pub model: Option<String>,
    /// The tools its sub-agents are offered; `None`: every tool of the person they work for.
    pub tools: Option<Vec<String>>,
    /// Tools its sub-agents are never offered, whatever `tools` says.
    pub deny_tools: Vec<String>,
    /// The most one of its sub-agents may spend, in dollars (less when the turn that delegates
    /// has less left).
    pub budget_usd: Option<f64>,
    /// How long one of its sub-agents may run.
    pub max_minutes: Option<u64>,
    /// The body: what its sub-agents are told.
    pub prompt: String,
    /// Where it comes from: `built in`, or its file's path.
    pub source: String,
}

impl Role {
    /// Whether its sub-agents are offered `tool`.
    pub fn offers(&self, tool: &str) -> bool {
        let listed = self
            .tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == tool));
        listed && !self.deny_tools.iter().any(|t| t == tool)
    }
}

/// Why a role file was refused: where, and what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub file: String,
    /// 1-based, as an editor counts.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// The roles of an agent: the built-in ones, each replaced by the file of the same name, and
/// the owners' own; a file that was refused leaves its name refused (not the built-in role).
#[derive(Clone, Debug, Default)]
pub struct Roles {
    pub roles: Vec<Role>,
    pub refused: Vec<(String, Problem)>,
}

impl Roles {
    /// The role called `name`, or why there is none, in words for the model.
    pub fn get(&self, name: &str) -> Result<&Role, String> {
        if let Some(role) = self.roles.iter().find(|r| r.name == name) {
            return Ok(role);
        }
        if let Some((_, problem)) = self.refused.iter().find(|(n, _)| n == name) {
            return Err(format!(
                "role `{name}` was refused: {problem}; an owner fixes the file"
            ));
        }
        let names: Vec<&str> = self.roles.iter().map(|r| r.name.as_str()).collect();
        Err(format!(
            "no role is called `{name}`; the roles are: {}",
            names.join(", ")
        ))
    }
}

/// The built-in roles.
pub fn built_in() -> Vec<Role> {
    BUILT_IN
        .iter()
        .map(|(name, text)| {
            let mut role =
                parse(name, &format!("built-in {name}"), text).expect("the built-in roles parse");
            role.source = "built in".into();
            role
        })
        .collect()
}

/// The roles in `dir` (`roles/` of the agent's data) over the built-in ones. A missing folder
/// holds none.
pub fn load(dir: &Path) -> Roles {
    let mut roles = Roles {
        roles: built_in(),
        refused: Vec::new(),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return roles;
    };
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    for path in files {
        let shown = path.display().to_string();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let read = match std::fs::metadata(&path) {
            Ok(meta) if meta.len() > MAX_FILE_BYTES => Err(format!(
                "{} bytes; a role file holds at most {MAX_FILE_BYTES}",
                meta.len()
            )),
            _ => std::fs::read_to_string(&path).map_err(|e| format!("cannot be read: {e}")),
        };
        let parsed = read
            .map_err(|message| Problem {
                file: shown.clone(),
                line: 1,
                column: 1,
                message,
            })
            .and_then(|text| parse(&name, &shown, &text));
        roles.roles.retain(|r| r.name != name);
        match parsed {
            Ok(role) => roles.roles.push(role),
            Err(problem) => roles.refused.push((name, problem)),
        }
    }
    roles
}

/// The front matter, as a role file may write it: anything else is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    description: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    deny_tools: Vec<String>,
    #[serde(default)]
    budget_usd: Option<f64>,
    #[serde(default)]
    max_minutes: Option<u64>,
}

/// The role `name` from `text`, the file `file` holds.
pub fn parse(name: &str, file: &str, text: &str) -> Result<Role, Problem> {
    let problem = |line: usize, column: usize, message: String| Problem {
        file: file.to_string(),
        line,
        column,
        message,
    };
    if !valid_name(name) {
        return Err(problem(
            1,
            1,
            format!(
                "`{name}` is no role name: a file's name is the role's, in lowercase letters, \
                 digits, `-` and `_`, at most {MAX_NAME} characters, then `.md`"
            ),
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(problem(
            1,
            1,
            "a role file begins with its front matter: a line `---`, then `description: …` \
             (and `model`, `tools`, `deny_tools`, `budget_usd`, `max_minutes` if needed), a \
             line `---`, then the role's prompt"
                .into(),
        ));
    }
    let mut front = String::new();
    let mut body = None;
    let mut count = 1;
    for line in lines.by_ref() {
        count += 1;
        if line.trim_end() == "---" {
            body = Some(lines.collect::<String>());
            break;
        }
        front.push_str(line);
    }
    let Some(body) = body else {
        return Err(problem(
            count + 1,
            1,
            "the front matter has no closing `---` line; end it with one before the prompt".into(),
        ));
    };
    // The front matter's first line is the file's second.
    let matter: FrontMatter = serde_yaml_ng::from_str(&front).map_err(|e| {
        let (line, column) = e
            .location()
            .map_or((2, 1), |at| (at.line() + 1, at.column()));
        problem(line, column, without_location(&e.to_string()))
    })?;
    let at = |key: &str| key_line(&front, key);
    if matter.description.trim().is_empty() {
        return Err(problem(
            at("description"),
            1,
            "`description` is empty: say in a sentence what this role does (the agent chooses \
             roles by it)"
                .into(),
        ));
    }
    for (key, tools) in [
        ("tools", matter.tools.as_deref()),
        ("deny_tools", Some(&matter.deny_tools[..])),
    ] {
        if let Some(bad) = tools.into_iter().flatten().find(|t| !valid_tool(t)) {
            return Err(problem(
                at(key),
                1,
                format!("`{bad}` in `{key}` is no tool name: tools are named like read_file"),
            ));
        }
    }
    if let Some(usd) = matter.budget_usd
        && !(usd.is_finite() && usd > 0.0)
    {
        return Err(problem(
            at("budget_usd"),
            1,
            format!("`budget_usd` is {usd}: give a number of dollars above 0, such as 0.5"),
        ));
    }
    if let Some(minutes) = matter.max_minutes
        && !(1..=MAX_MINUTES).contains(&minutes)
    {
        return Err(problem(
            at("max_minutes"),
            1,
            format!("`max_minutes` is {minutes}: give a number from 1 to {MAX_MINUTES}"),
        ));
    }
    if body.trim().is_empty() {
        return Err(problem(
            count + 1,
            1,
            "the role has no prompt: write what its sub-agents are told after the front matter"
                .into(),
        ));
    }
    Ok(Role {
        name: name.to_string(),
        description: matter.description.trim().to_string(),
        model: matter.model.filter(|m| !m.trim().is_empty()),
        tools: matter.tools,
        deny_tools: matter.deny_tools,
        budget_usd: matter.budget_usd,
        max_minutes: matter.max_minutes,
        prompt: body.trim().to_string(),
        source: file.to_string(),
    })
}

/// Whether `name` may name a role (and its file).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Whether `name` may name a tool: the agent's own, or an MCP server's (`server__tool`).
fn valid_tool(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// The file's line where the front matter sets `key` (its first line when it does not).
fn key_line(front: &str, key: &str) -> usize {
    front
        .lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map_or(2, |n| n + 2)
}

/// The YAML parser's message without its own ` at line L column C` (the problem says where,
/// counted in the whole file).
fn without_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(at) if !message[at..].contains(',') => message[..at].to_string(),
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "---\ndescription: Finds flaky tests.\nmodel: gpt-5-mini\ntools: [read_file, search]\ndeny_tools: [search]\nbudget_usd: 0.25\nmax_minutes: 5\n---\nYou look for flaky tests.\n";

    #[test]
    fn a_role_file_gives_its_front_matter_and_its_prompt() {
        let role = parse("flaky", "roles/flaky.md", GOOD).unwrap();
        assert_eq!(role.description, "Finds flaky tests.");
        assert_eq!(role.model.as_deref(), Some("gpt-5-mini"));
        assert_eq!(role.budget_usd, Some(0.25));
        assert_eq!(role.max_minutes, Some(5));
        assert_eq!(role.prompt, "You look for flaky tests.");
        assert!(role.offers("read_file"));
        assert!(!role.offers("search"), "denied");
        assert!(!role.offers("write_file"), "not listed");
    }

    #[test]
    fn the_built_in_roles_are_a_worker_a_scout_and_a_reviewer() {
        let roles = built_in();
        let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["worker", "scout", "reviewer"]);
        assert!(
            roles[0].offers("write_file"),
            "a worker has its person's tools"
        );
        for reader in &roles[1..] {
            assert!(reader.offers("read_file") && reader.offers("search"));
            for tool in [
                "write_file",
                "edit_file",
                "remove_path",
                "send_message",
                "delegate",
            ] {
                assert!(!reader.offers(tool), "{} offers {tool}", reader.name);
            }
        }
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line_and_column() {
        let cases = [
            ("no front matter\n", 1, 1, "begins with its front matter"),
            ("---\ndescription: x\n", 3, 1, "no closing `---`"),
            (
                "---\ndescription: x\ntools: [a, b\n---\nbody\n",
                4,
                1,
                "did not find expected",
            ),
            (
                "---\ndescription: x\ntool: [a]\n---\nbody\n",
                3,
                1,
                "unknown field `tool`",
            ),
            ("---\ndescription: [1]\n---\nbody\n", 2, 14, "invalid type"),
            (
                "---\ndescription: x\nbudget_usd: -1\n---\nbody\n",
                3,
                1,
                "above 0",
            ),
            (
                "---\ndescription: x\nmax_minutes: 0\n---\nbody\n",
                3,
                1,
                "from 1 to",
            ),
            (
                "---\ndescription: x\ntools: [\"rm -rf\"]\n---\nbody\n",
                3,
                1,
                "no tool name",
            ),
            (
                "---\ndescription: \"\"\n---\nbody\n",
                2,
                1,
                "`description` is empty",
            ),
            ("---\ndescription: x\n---\n\n", 4, 1, "no prompt"),
        ];
        for (text, line, column, said) in cases {
            let problem = parse("r", "roles/r.md", text).unwrap_err();
            assert_eq!(
                (problem.line, problem.column),
                (line, column),
                "{text:?}: {problem}"
            );
            assert!(problem.message.contains(said), "{text:?}: {problem}");
            assert!(
                problem
                    .to_string()
                    .starts_with(&format!("roles/r.md:{line}:{column}: "))
            );
        }
        let bad_name = parse("Big Role", "roles/Big Role.md", GOOD).unwrap_err();
        assert!(bad_name.message.contains("no role name"), "{bad_name}");
    }

    #[test]
    fn files_add_roles_and_replace_built_in_ones_and_a_refused_file_leaves_its_name_refused() {
        let dir = std::env::temp_dir().join(format!("sausage-roles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("flaky.md"), GOOD).unwrap();
        std::fs::write(
            dir.join("scout.md"),
            "---\ndescription: A slower scout.\ntools: [read_file]\n---\nLook slowly.\n",
        )
        .unwrap();
        std::fs::write(dir.join("reviewer.md"), "---\ndescription: x\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a role").unwrap();
        let roles = load(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<&str> = roles.roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["worker", "flaky", "scout"]);
        let scout = roles.get("scout").unwrap();
        assert_eq!(scout.description, "A slower scout.");
        assert!(!scout.offers("search"));
        let refused = roles.get("reviewer").unwrap_err();
        assert!(refused.contains("reviewer.md:3:1"), "{refused}");
        let unknown = roles.get("nobody").unwrap_err();
        assert!(unknown.contains("worker, flaky, scout"), "{unknown}");
        assert_eq!(load(Path::new("/nonexistent")).roles.len(), 3);
    }
}
