//! Transcript tests (DESIGN §3): the files `<source>/tests/*.jsonl` a candidate must pass.
//!
//! This module parses transcripts and judges what a candidate wrote; running the candidate is
//! `candidate`'s job. Every error names the file and line, so a person can fix it. An `http`
//! step (DESIGN §24) becomes the very message the public address would send, and its
//! `expect_http` is judged on the answer as the public address would read it.

use std::path::Path;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::message::http::Request;

/// How long an `expect` (or an `expect_http`, for each message of the answer) waits for the
/// candidate's next message.
pub const EXPECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The sender of a `send` step without `from`.
pub const DEFAULT_FROM: &str = "test";

/// The sender of an `http` step's request: the public address's native actor.
pub const HTTP_FROM: &str = "http";

/// The client address an `http` step's request says it came from.
pub const HTTP_REMOTE: &str = "127.0.0.1:0";

/// How much of an answer's body a failed `expect_http` quotes.
const BODY_SHOWN_CHARS: usize = 500;

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
    /// Deliver an HTTP request as the public address would; the next step is its
    /// [`StepKind::ExpectHttp`].
    Http(HttpRequest),
    /// The answer to the `http` step before must match (a subset).
    ExpectHttp(ExpectedAnswer),
}

/// An `http` step's request: `{"method", "path", "headers", "body"}`.
#[derive(Debug, PartialEq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The body of the message the public address sends for this request, with the headers
    /// `pass` names kept (those of the route its `actor.json` gives the path).
    pub fn to_body(&self, pass: &[String]) -> Value {
        let request = Request {
            method: &self.method,
            path: &self.path,
            query: self.query.as_deref(),
            headers: &self.headers,
            remote: HTTP_REMOTE.to_string(),
            body: &self.body,
            pass,
        };
        serde_json::to_value(&request).expect("a request serialises")
    }
}

/// An `expect_http` step: `{"status", "headers", "body"}`, each checked only when given.
#[derive(Debug, PartialEq)]
pub struct ExpectedAnswer {
    /// The step as written, for error messages.
    pub written: Value,
    pub status: Option<u16>,
    /// Lower-case names to the values expected (repeated headers joined with `, `).
    pub headers: Map<String, Value>,
    pub body: Option<Value>,
}

/// What the candidate answered an `http` step, streamed chunks included.
pub struct Answered {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
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
            return Err(at(
                "a step is a JSON object with `send`, `expect`, `http` or `expect_http`".into(),
            ));
        };
        steps.push(Step {
            line,
            kind: step_kind(&step).map_err(at)?,
        });
    }
    paired(name, &steps)?;
    if !steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Expect { .. } | StepKind::ExpectHttp(_)))
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

/// Checks that each `http` step is followed by its `expect_http`, and each `expect_http`
/// follows an `http` step.
fn paired(name: &str, steps: &[Step]) -> Result<(), String> {
    for (index, step) in steps.iter().enumerate() {
        let next = steps.get(index + 1).map(|s| &s.kind);
        let before = index.checked_sub(1).map(|i| &steps[i].kind);
        match &step.kind {
            StepKind::Http(_) if !matches!(next, Some(StepKind::ExpectHttp(_))) => {
                return Err(format!(
                    "{name} line {}: an `http` step is answered by the step right after it; \
                     write {{\"expect_http\": {{\"status\": 200}}}} (with the `body` you \
                     expect) on the next line",
                    step.line
                ));
            }
            StepKind::ExpectHttp(_) if !matches!(before, Some(StepKind::Http(_))) => {
                return Err(format!(
                    "{name} line {}: `expect_http` judges the answer to the `http` step right \
                     before it, and there is none; write {{\"http\": {{\"path\": \"/\"}}}} \
                     before it, or use `expect` for a message",
                    step.line
                ));
            }
            _ => {}
        }
    }
    Ok(())
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
    if let Some(request) = step.get("http") {
        known(&["http"])?;
        return http_request(request).map(StepKind::Http);
    }
    if let Some(expected) = step.get("expect_http") {
        known(&["expect_http"])?;
        return expected_answer(expected).map(StepKind::ExpectHttp);
    }
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
            "unknown step {}; a step is {{\"send\": <body>}}, {{\"expect\": <body>}}, \
             {{\"http\": {{\"method\", \"path\", \"headers\", \"body\"}}}} or \
             {{\"expect_http\": {{\"status\", \"headers\", \"body\"}}}}",
            Value::Object(step.clone())
        )),
    }
}

/// The fields of `object` (the value of the step's `step` field), refusing unknown ones.
fn fields<'a>(
    step: &str,
    object: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let Value::Object(fields) = object else {
        return Err(format!(
            "`{step}` must be a JSON object with {}, not {object}",
            allowed.join(", ")
        ));
    };
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(extra) => Err(format!(
            "`{step}` has an unknown field `{extra}`; it has {}",
            allowed.join(", ")
        )),
        None => Ok(fields),
    }
}

/// Reads `{"http": {"method", "path", "headers", "body"}}`: the method defaults to GET, a
/// `?` in the path starts its query, and a body that is not a string is sent as JSON text.
fn http_request(request: &Value) -> Result<HttpRequest, String> {
    let fields = fields("http", request, &["method", "path", "headers", "body"])?;
    let method = match fields.get("method") {
        None => "GET".to_string(),
        Some(Value::String(method)) if http::Method::from_bytes(method.as_bytes()).is_ok() => {
            method.clone()
        }
        Some(other) => {
            return Err(format!(
                "`http`'s `method` is {other}, not a method such as \"GET\" or \"POST\""
            ));
        }
    };
    let whole = match fields.get("path") {
        Some(Value::String(path)) if path.starts_with('/') => path.as_str(),
        other => {
            return Err(format!(
                "`http`'s `path` is {}, not a path such as \"/api/items?page=2\"",
                other.map_or("missing".to_string(), Value::to_string)
            ));
        }
    };
    let (path, query) = match whole.split_once('?') {
        Some((path, query)) => (path.to_string(), Some(query.to_string())),
        None => (whole.to_string(), None),
    };
    let mut headers = HeaderMap::new();
    match fields.get("headers") {
        None => {}
        Some(Value::Object(given)) => {
            for (name, value) in given {
                let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
                    return Err(format!("`http`'s header name {name:?} is not a valid one"));
                };
                let value = match value {
                    Value::String(text) => HeaderValue::from_str(text).map_err(|_| {
                        format!("`http`'s header `{name}` holds a character a header cannot")
                    })?,
                    other => {
                        return Err(format!("`http`'s header `{name}` is {other}, not a string"));
                    }
                };
                headers.append(header, value);
            }
        }
        Some(other) => {
            return Err(format!(
                "`http`'s `headers` is {other}, not an object such as {{\"accept\": \"text/html\"}}"
            ));
        }
    }
    let body = match fields.get("body") {
        None => Vec::new(),
        Some(Value::String(text)) => text.clone().into_bytes(),
        Some(json) => json.to_string().into_bytes(),
    };
    Ok(HttpRequest {
        method,
        path,
        query,
        headers,
        body,
    })
}

/// Reads `{"expect_http": {"status", "headers", "body"}}`.
fn expected_answer(expected: &Value) -> Result<ExpectedAnswer, String> {
    let fields = fields("expect_http", expected, &["status", "headers", "body"])?;
    let status = match fields.get("status") {
        None => None,
        Some(status) => Some(
            status
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (200..1000).contains(s))
                .ok_or_else(|| {
                    format!("`expect_http`'s `status` is {status}, not a number from 200 to 999")
                })?,
        ),
    };
    let headers = match fields.get("headers") {
        None => Map::new(),
        Some(Value::Object(given)) => {
            let mut headers = Map::new();
            for (name, value) in given {
                if !value.is_string() {
                    return Err(format!(
                        "`expect_http`'s header `{name}` is {value}, not a string"
                    ));
                }
                headers.insert(name.to_ascii_lowercase(), value.clone());
            }
            headers
        }
        Some(other) => {
            return Err(format!(
                "`expect_http`'s `headers` is {other}, not an object"
            ));
        }
    };
    Ok(ExpectedAnswer {
        written: expected.clone(),
        status,
        headers,
        body: fields.get("body").cloned(),
    })
}

/// Judges an answer: the status equal, each expected header present with that value, and
/// the body equal to a string expected, or (an object, array or other JSON expected) the body
/// read as JSON matching it as [`matches`] does. `Err` names what was expected and what came.
pub fn judge_answer(expected: &ExpectedAnswer, answered: &Answered) -> Result<(), String> {
    let text = String::from_utf8_lossy(&answered.body);
    let status_ok = expected.status.is_none_or(|s| s == answered.status);
    let headers_ok = expected.headers.iter().all(|(name, value)| {
        let values: Vec<String> = answered
            .headers
            .get_all(name.as_str())
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        !values.is_empty() && value.as_str() == Some(values.join(", ").as_str())
    });
    let body_ok = match &expected.body {
        None => true,
        Some(Value::String(want)) => *want == text,
        Some(want) => {
            serde_json::from_slice::<Value>(&answered.body).is_ok_and(|got| matches(want, &got))
        }
    };
    if status_ok && headers_ok && body_ok {
        return Ok(());
    }
    // A JSON body is shown as JSON, any other as a quoted string, either cut to its start.
    let body = match serde_json::from_slice::<Value>(&answered.body) {
        Ok(json) if !json.is_string() => json.to_string(),
        _ => format!("{text:?}"),
    };
    let shown: String = body.chars().take(BODY_SHOWN_CHARS).collect();
    let cut = if shown.len() < body.len() { "…" } else { "" };
    let mut came = format!("status {} and body {shown}{cut}", answered.status);
    if !headers_ok {
        let headers: Map<String, Value> = answered
            .headers
            .keys()
            .map(|name| {
                let values: Vec<&str> = answered
                    .headers
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                (name.to_string(), Value::from(values.join(", ")))
            })
            .collect();
        came.push_str(&format!(" with headers {}", Value::Object(headers)));
    }
    Err(format!(
        "expected an answer {}, got {came}",
        expected.written
    ))
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
    fn an_http_step_is_the_message_the_public_address_sends() {
        let t = parse(
            "tests/h.jsonl",
            "{\"http\": {\"path\": \"/api/items?page=2\", \"headers\": {\"Accept\": \"text/html\", \"authorization\": \"Bearer t\"}}}\n\
             {\"expect_http\": {\"status\": 200}}\n\
             {\"http\": {\"method\": \"POST\", \"path\": \"/api/items\", \"body\": {\"name\": \"a\"}}}\n\
             {\"expect_http\": {\"status\": 201, \"headers\": {\"X-Id\": \"7\"}, \"body\": {\"id\": 7}}}\n",
        )
        .unwrap();
        let [get, expect, post, created] = &t.steps[..] else {
            panic!("four steps: {:?}", t.steps);
        };
        let StepKind::Http(get) = &get.kind else {
            panic!("{get:?}");
        };
        assert_eq!(
            get.to_body(&[]),
            json!({
                "type": "http", "method": "GET", "path": "/api/items", "query": "page=2",
                "headers": {"accept": "text/html"}, "remote": HTTP_REMOTE, "body": "",
            })
        );
        let passed = get.to_body(&["authorization".into()]);
        assert_eq!(passed["headers"]["authorization"], "Bearer t");
        assert!(matches!(&expect.kind, StepKind::ExpectHttp(e) if e.status == Some(200)));
        let StepKind::Http(post) = &post.kind else {
            panic!("{post:?}");
        };
        let body = post.to_body(&[]);
        assert_eq!(
            (&body["method"], &body["query"], &body["body"]),
            (&json!("POST"), &json!(""), &json!("{\"name\":\"a\"}"))
        );
        let StepKind::ExpectHttp(created) = &created.kind else {
            panic!("{created:?}");
        };
        assert_eq!(created.headers, *json!({"x-id": "7"}).as_object().unwrap());
        assert_eq!(created.body, Some(json!({"id": 7})));
    }

    #[test]
    fn wrong_http_steps_say_what_to_write() {
        let answer = "\n{\"expect_http\": {}}";
        for (text, expected) in [
            (
                "{\"http\": {\"path\": \"/\"}}\n{\"expect\": {}}".to_string(),
                "tests/t.jsonl line 1: an `http` step is answered by the step right after it; \
                 write {\"expect_http\"",
            ),
            (
                "{\"http\": {\"path\": \"/\"}}".into(),
                "line 1: an `http` step is answered",
            ),
            (
                "{\"send\": {}}\n{\"expect_http\": {\"status\": 200}}".into(),
                "line 2: `expect_http` judges the answer to the `http` step right before it, \
                 and there is none",
            ),
            (
                format!("{{\"http\": {{\"path\": \"/\", \"query\": \"a=1\"}}}}{answer}"),
                "line 1: `http` has an unknown field `query`; it has method, path, headers, body",
            ),
            (
                format!("{{\"http\": {{\"path\": \"/\"}}, \"from\": \"x\"}}{answer}"),
                "unknown field `from`; a step has http",
            ),
            (
                "{\"http\": {\"path\": \"/\"}}\n{\"expect_http\": {\"code\": 200}}".into(),
                "line 2: `expect_http` has an unknown field `code`",
            ),
            (
                format!("{{\"http\": \"/\"}}{answer}"),
                "`http` must be a JSON object",
            ),
            (format!("{{\"http\": {{}}}}{answer}"), "`path` is missing"),
            (
                format!("{{\"http\": {{\"path\": \"api\"}}}}{answer}"),
                "not a path such as",
            ),
            (
                format!("{{\"http\": {{\"path\": \"/\", \"method\": \"G T\"}}}}{answer}"),
                "not a method",
            ),
            (
                format!("{{\"http\": {{\"path\": \"/\", \"headers\": {{\"x\": 1}}}}}}{answer}"),
                "header `x` is 1, not a string",
            ),
            (
                "{\"http\": {\"path\": \"/\"}}\n{\"expect_http\": {\"status\": \"200\"}}".into(),
                "`status` is \"200\", not a number",
            ),
        ] {
            let err = parse("tests/t.jsonl", &text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn an_answer_is_judged_by_status_headers_and_body() {
        let expected = |written: Value| {
            let text = format!("{{\"http\": {{\"path\": \"/\"}}}}\n{{\"expect_http\": {written}}}");
            match parse("tests/t.jsonl", &text).unwrap().steps.remove(1).kind {
                StepKind::ExpectHttp(expected) => expected,
                other => panic!("{other:?}"),
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let json_answer = Answered {
            status: 201,
            headers,
            body: br#"{"id": 7, "tags": ["a"]}"#.to_vec(),
        };
        for ok in [
            json!({}),
            json!({"status": 201}),
            json!({"body": {"id": 7}}),
            json!({"body": {"tags": ["a"]}, "headers": {"Content-Type": "application/json"}}),
            json!({"body": "{\"id\": 7, \"tags\": [\"a\"]}"}),
        ] {
            assert_eq!(
                judge_answer(&expected(ok.clone()), &json_answer),
                Ok(()),
                "{ok}"
            );
        }
        for (wrong, says) in [
            (
                json!({"status": 200}),
                "got status 201 and body {\"id\":7,\"tags\":[\"a\"]}",
            ),
            (
                json!({"body": {"id": 8}}),
                "expected an answer {\"body\":{\"id\":8}}",
            ),
            (json!({"body": "{\"id\": 7}"}), "got status 201"),
            (
                json!({"headers": {"x-id": "7"}}),
                "with headers {\"content-type\":\"application/json\"}",
            ),
        ] {
            let err = judge_answer(&expected(wrong.clone()), &json_answer).unwrap_err();
            assert!(err.contains(says), "{wrong}: {err}");
        }
        let text_answer = Answered {
            status: 200,
            headers: HeaderMap::new(),
            body: b"not json".to_vec(),
        };
        assert!(judge_answer(&expected(json!({"body": "not json"})), &text_answer).is_ok());
        let err = judge_answer(&expected(json!({"body": {"a": 1}})), &text_answer).unwrap_err();
        assert!(
            err.contains("got status 200 and body \"not json\""),
            "{err}"
        );
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
