//! Transcript tests (DESIGN §3): the files `<source>/tests/*.jsonl` a candidate must pass.
//!
//! This module parses transcripts and judges what a candidate wrote; running the candidate is
//! `candidate`'s job. Every error names the file and line, so a person can fix it.

use std::path::Path;

use serde_json::{Map, Value};

/// How long an `expect` waits for the candidate's next message.
pub const EXPECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The sender of a `send` step without `from`.
pub const DEFAULT_FROM: &str = "test";

/// One transcript file, parsed.
#[derive(Debug, PartialEq)]
pub struct Transcript {
    /// `tests/<name>.jsonl`, as errors name it.
    pub name: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, PartialEq)]
pub struct Step {
    /// 1-based line number in the file.
    pub line: usize,
    pub kind: StepKind,
}

#[derive(Debug, PartialEq)]
pub enum StepKind {
    /// Deliver `body` to the candidate as from `from`.
    Send { from: String, body: Value },
    /// The candidate's next message must match `body` (a subset) and, if given, go `to`.
    Expect { to: Option<String>, body: Value },
}

/// Reads every `tests/*.jsonl` of a source folder, sorted by name. No folder, no transcripts.
pub fn load(source: &Path) -> Result<Vec<Transcript>, String> {
    let dir = source.join("tests");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let name = format!(
                "tests/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            );
            let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
            parse(&name, &text)
        })
        .collect()
}

/// Parses one transcript. Blank lines and `//` comments are skipped.
pub fn parse(name: &str, text: &str) -> Result<Transcript, String> {
    let mut steps = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let at = |problem: String| format!("{name} line {line}: {problem}");
        let value: Value = serde_json::from_str(trimmed).map_err(|e| at(not_json(&e)))?;
        let Value::Object(step) = value else {
            return Err(at("a step is a JSON object with `send` or `expect`".into()));
        };
        steps.push(Step {
            line,
            kind: step_kind(&step).map_err(at)?,
        });
    }
    if !steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Expect { .. }))
    {
        return Err(format!(
            "{name}: it has no `expect` step, so it tests nothing"
        ));
    }
    Ok(Transcript {
        name: name.to_string(),
        steps,
    })
}

/// Why a line is not JSON, with serde_json's position cut down to the column: its `line 1`
/// would contradict the line of the file the error names.
fn not_json(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let problem = text.strip_suffix(&position).unwrap_or(&text);
    format!("not valid JSON at column {} ({problem})", e.column())
}

fn step_kind(step: &Map<String, Value>) -> Result<StepKind, String> {
    let known = |allowed: &[&str]| -> Result<(), String> {
        match step.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(extra) => Err(format!(
                "unknown field `{extra}`; a step has {}",
                allowed.join(", ")
            )),
            None => Ok(()),
        }
    };
    let text_field = |name: &str| -> Result<Option<String>, String> {
        match step.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("`{name}` must be a string, not {other}")),
        }
    };
    let object = |name: &str, value: &Value| -> Result<Value, String> {
        match value {
            Value::Object(_) => Ok(value.clone()),
            other => Err(format!(
                "`{name}` must be a JSON object (a message body), not {other}"
            )),
        }
    };
    match (step.get("send"), step.get("expect")) {
        (Some(body), None) => {
            known(&["send", "from"])?;
            Ok(StepKind::Send {
                from: text_field("from")?.unwrap_or_else(|| DEFAULT_FROM.to_string()),
                body: object("send", body)?,
            })
        }
        (None, Some(body)) => {
            known(&["expect", "to"])?;
            Ok(StepKind::Expect {
                to: text_field("to")?,
                body: object("expect", body)?,
            })
        }
        (Some(_), Some(_)) => Err("a step has either `send` or `expect`, not both".into()),
        (None, None) => Err(format!(
            "unknown step {}; a step is {{\"send\": <body>}} or {{\"expect\": <body>}}",
            Value::Object(step.clone())
        )),
    }
}

/// Whether `actual` matches `expected`: every key of an expected object is present with a
/// matching value, recursively; arrays and other values must be equal.
pub fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => want
            .iter()
            .all(|(key, value)| got.get(key).is_some_and(|g| matches(value, g))),
        _ => expected == actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_comments_and_defaults() {
        let t = parse(
            "tests/a.jsonl",
            "// hello\n\n{\"send\": {\"type\": \"x\"}}\n{\"send\": {\"type\": \"y\"}, \"from\": \"alice\"}\n{\"expect\": {\"type\": \"z\"}, \"to\": \"alice\"}\n",
        )
        .unwrap();
        assert_eq!(
            t.steps,
            vec![
                Step {
                    line: 3,
                    kind: StepKind::Send {
                        from: "test".into(),
                        body: json!({"type": "x"})
                    }
                },
                Step {
                    line: 4,
                    kind: StepKind::Send {
                        from: "alice".into(),
                        body: json!({"type": "y"})
                    }
                },
                Step {
                    line: 5,
                    kind: StepKind::Expect {
                        to: Some("alice".into()),
                        body: json!({"type": "z"})
                    }
                },
            ]
        );
    }

    #[test]
    fn wrong_transcripts_name_the_file_and_line() {
        for (text, expected) in [
            (
                "{\"send\": {}}\n{not json",
                "tests/t.jsonl line 2: not valid JSON",
            ),
            ("[1]", "line 1: a step is a JSON object"),
            ("{\"wait\": 3}", "line 1: unknown step"),
            ("{\"send\": {}, \"expect\": {}}", "not both"),
            ("{\"send\": 3}", "`send` must be a JSON object"),
            ("{\"expect\": {}, \"from\": \"x\"}", "unknown field `from`"),
            ("{\"send\": {}, \"to\": \"x\"}", "unknown field `to`"),
            ("{\"expect\": {}, \"to\": 5}", "`to` must be a string"),
            ("{\"send\": {}}", "no `expect` step"),
        ] {
            let err = parse("tests/t.jsonl", text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn subset_matching() {
        let got = json!({"type": "notes", "count": 2, "notes": [1, 2], "meta": {"a": 1, "b": 2}});
        assert!(matches(&json!({"type": "notes"}), &got));
        assert!(matches(&json!({"meta": {"a": 1}}), &got));
        assert!(matches(&json!({"notes": [1, 2]}), &got));
        assert!(
            !matches(&json!({"notes": [1]}), &got),
            "arrays must be equal"
        );
        assert!(!matches(&json!({"type": "other"}), &got));
        assert!(!matches(&json!({"missing": null}), &got));
        assert!(!matches(&json!({"count": "2"}), &got));
        assert!(matches(&json!({}), &got));
    }

    #[test]
    fn load_reads_tests_jsonl_sorted_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty(), "no tests folder");
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/b.jsonl"), "{\"expect\": {}}").unwrap();
        std::fs::write(dir.path().join("tests/a.jsonl"), "{\"expect\": {}}").unwrap();
        std::fs::write(dir.path().join("tests/notes.txt"), "ignored").unwrap();
        let names: Vec<String> = load(dir.path())
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["tests/a.jsonl", "tests/b.jsonl"]);
    }
}
