//! How the console shows the messages it gets. Scripts see every message as one line
//! (`[from] (reply) {json}` or `[from] text`), the format tests and scripts parse. A person at a
//! terminal sees the agent's turns as they happen (DESIGN §12): the streamed text on lines of
//! its own (the unfinished one as it grows), one line per tool, the final reply once, and what
//! the turn cost; an error reply in words (`[scheduler] error: …`).
//! Every decision here is a plain function of the messages in order (and of where the screen
//! moved under the streamed text, [`Renderer::freeze`]): no terminal, no clock.

use std::collections::HashMap;

use serde_json::{Value, json};

/// Fields whose multi-line text is printed below the message, indented.
const BLOCK_FIELDS: [&str; 3] = ["errors", "warnings", "reason"];

/// A tool's end is shown only when it failed or took at least this long. A quick success says
/// nothing its start line did not, and that line cannot be rewritten once the prompt (or other
/// output) sits below it.
const SLOW_TOOL_SECONDS: f64 = 1.0;

/// The width streamed text is cut to when the terminal does not say its own.
pub const DEFAULT_WIDTH: usize = 80;

/// Streamed text keeps at least this many columns beside its prefix, however narrow the
/// terminal, so a line is never cut into single letters.
const MIN_TEXT_WIDTH: usize = 20;

/// Faint text (usage lines): ANSI "dim" and "reset".
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// One message as a script sees it: `[from] text` for a plain text body (`type` and `text`
/// only), `[from] {json}` otherwise (so a script also sees a turn's `usage` and `stopped`), with
/// multi-line `errors`/`warnings`/`reason` below as indented blocks; replies are marked.
pub fn script_line(from: &str, reply: bool, mut body: Value) -> String {
    let mark = if reply { " (reply)" } else { "" };
    let head = format!("[{from}]{mark}");
    if body["type"] == "text"
        && body.as_object().is_some_and(|fields| fields.len() == 2)
        && let Some(text) = body["text"].as_str()
    {
        return format!("{head} {text}");
    }
    let mut blocks = String::new();
    for field in BLOCK_FIELDS {
        if let Some(text) = body.get(field).and_then(Value::as_str)
            && text.contains('\n')
        {
            blocks.push_str(&format!("\n  {field}:"));
            let mut lines = 0;
            for line in text.lines() {
                blocks.push_str(&format!("\n    {line}"));
                lines += 1;
            }
            // The count tells a reader (a person or a script) where the message ends.
            body[field] = json!(format!("({lines} lines below)"));
        }
    }
    format!("{head} {body}{blocks}")
}

/// The scheduler's `schedules` reply as `/schedules` prints it: one line per schedule (`id`,
/// creator → recipient, when, next and last fire, the body), or why there is none.
/// The lines `/approvals` and `sausage approvals` print: one per entry, its id first.
pub fn approval_lines(reply: &Value) -> Vec<String> {
    let Some(waiting) = reply["approvals"].as_array() else {
        let reason = reply["reason"]
            .as_str()
            .unwrap_or("the broker answered something else");
        return vec![format!("approvals: {reason}")];
    };
    if waiting.is_empty() {
        return vec!["approvals: nothing waits for a decision".into()];
    }
    waiting.iter().map(approval_line).collect()
}

/// One held action or request: `h3  network  mia via agent: spawn `x`…  why: …  decides: an
/// owner  expires 2026-12-07 14:02 UTC`.
pub fn approval_line(held: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let asker = match held["actor"].as_str() {
        Some(actor) => format!("{} via {actor}", text(&held["asked_by"])),
        None => text(&held["asked_by"]),
    };
    let decides = match held["for"].as_str() {
        Some(person) => person.to_string(),
        None => format!("an {}", text(&held["approver"])),
    };
    let expires = (held["expires"].as_i64())
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map_or("?".into(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
    let why = match held["why"].as_str() {
        Some(why) if !why.is_empty() => format!("  why: {why}"),
        _ => String::new(),
    };
    format!(
        "{}  {}  {asker}: {}{why}  decides: {decides}  expires {expires}",
        text(&held["id"]),
        text(&held["action"]),
        text(&held["what"]),
    )
}

pub fn schedule_lines(reply: &Value) -> Vec<String> {
    let Some(schedules) = reply["schedules"].as_array() else {
        let reason = reply["reason"]
            .as_str()
            .unwrap_or("the scheduler answered something else");
        return vec![format!("schedules: {reason}")];
    };
    if schedules.is_empty() {
        return vec!["schedules: none".into()];
    }
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    schedules
        .iter()
        .map(|s| {
            let when = if let Some(cron) = s["cron"].as_str() {
                match s["tz"].as_str() {
                    Some(tz) => format!("cron {cron:?} {tz}"),
                    None => format!("cron {cron:?} UTC"),
                }
            } else if let Some(every) = s["every"].as_u64() {
                format!("every {every} s")
            } else {
                format!("at {}", text(&s["at"]))
            };
            let last = s["last"].as_str().unwrap_or("never");
            format!(
                "{}  {} → {}  {when}  next {}  last {last}  {}",
                text(&s["id"]),
                text(&s["creator"]),
                text(&s["to"]),
                text(&s["next"]),
                s["body"],
            )
        })
        .collect()
}

/// What a person at a terminal sees. Streamed text is given a whole line at a time, cut at a
/// space when it would pass `width`, and its unfinished line apart ([`Renderer::partial`]),
/// which the console redraws as it grows; the first line of a block carries `[from] `, the
/// next ones are indented under it.
pub struct Renderer {
    /// Columns a streamed line may take.
    pub width: usize,
    /// The block of streamed text being printed, if its last line has not ended yet.
    block: Option<Block>,
    /// What each turn streamed so far, to tell whether its final reply was already seen.
    streamed: HashMap<String, Streamed>,
    /// Each sub-agent's streamed text after its last whole line, with the indent it prints at.
    sub_partial: HashMap<String, (String, String)>,
}

/// Streamed text of one turn, printed line by line as it comes.
struct Block {
    turn: String,
    from: String,
    /// Text after the last line printed.
    partial: String,
    /// Whether a line of the block was printed (later lines are indented, not prefixed).
    continued: bool,
}

#[derive(Default)]
struct Streamed {
    /// Everything the turn streamed.
    all: String,
    /// What it streamed since its last tool began: the final reply is usually this.
    since_tool: String,
    /// The tool running, as its start line named it (`write_file /data/x`).
    tool: Option<String>,
    /// Calls that run together (`delegate`), by their call id, as their start lines named them.
    calls: HashMap<String, String>,
}

impl Renderer {
    pub fn new(width: usize) -> Renderer {
        Renderer {
            width,
            block: None,
            streamed: HashMap::new(),
            sub_partial: HashMap::new(),
        }
    }

    /// The lines to print for one message, in order. There may be none: streamed text whose
    /// line has not ended, or a tool that ended well and quickly.
    pub fn message(&mut self, from: &str, reply: bool, body: Value) -> Vec<String> {
        let turn = body["turn"].as_str().map(str::to_string);
        match (body["type"].as_str(), turn) {
            (Some("progress"), Some(turn)) => {
                self.progress(from, &turn, body["text"].as_str().unwrap_or(""))
            }
            (Some("tool"), Some(turn)) => {
                let mut lines = self.end_block();
                lines.extend(self.tool(&turn, &body));
                lines
            }
            (Some("subagent"), Some(_)) => {
                let mut lines = self.end_block();
                lines.extend(self.subagent(&body, 2));
                lines
            }
            (Some("question"), _) => {
                let mut lines = self.end_block();
                lines.extend(question(from, &body));
                lines
            }
            (Some("text"), Some(turn)) => self.final_reply(from, reply, &turn, body),
            (Some("error"), _) if error_words(&body).is_some() => {
                let mut lines = self.end_block();
                lines.extend(error_words(&body).map(|words| format!("[{from}] error: {words}")));
                lines
            }
            (Some("actors"), _) if from == "broker" && body["actors"].is_array() => {
                let mut lines = self.end_block();
                lines.extend(actors_table(&body));
                lines
            }
            _ => {
                let mut lines = self.end_block();
                lines.push(script_line(from, reply, body));
                lines
            }
        }
    }

    /// The unfinished line of the streamed text, as it would be printed now, if there is one.
    /// It is at most `width` characters long.
    pub fn partial(&self) -> Option<String> {
        let block = self.block.as_ref()?;
        let rest = block.partial.trim_end();
        (!rest.is_empty()).then(|| block.format(rest))
    }

    /// The unfinished line stays on the screen as it was last drawn, and something the
    /// renderer did not print (a line the person typed) is below it: the block ends there, and
    /// the rest of its text starts a new one.
    pub fn freeze(&mut self) {
        self.block = None;
    }

    /// Ends the block of streamed text, giving its unfinished line, so that something else can
    /// be printed below it. Later text of the same turn starts a new block.
    pub fn end_block(&mut self) -> Vec<String> {
        let Some(mut block) = self.block.take() else {
            return Vec::new();
        };
        let rest = block.partial.trim_end().to_string();
        if rest.is_empty() {
            Vec::new()
        } else {
            vec![block.line(&rest)]
        }
    }

    fn progress(&mut self, from: &str, turn: &str, text: &str) -> Vec<String> {
        let mut lines = Vec::new();
        if self
            .block
            .as_ref()
            .is_some_and(|b| b.turn != turn || b.from != from)
        {
            lines = self.end_block();
        }
        let streamed = self.streamed.entry(turn.to_string()).or_default();
        streamed.all.push_str(text);
        streamed.since_tool.push_str(text);
        let block = self.block.get_or_insert_with(|| Block {
            turn: turn.to_string(),
            from: from.to_string(),
            partial: String::new(),
            continued: false,
        });
        block.partial.push_str(text);
        while let Some(end) = block.partial.find('\n') {
            let line: String = block.partial.drain(..=end).collect();
            let line = line.trim_end();
            // A block does not open with an empty line.
            if !line.is_empty() || block.continued {
                lines.push(block.line(line));
            }
        }
        let room = self
            .width
            .saturating_sub(block.prefix_width())
            .max(MIN_TEXT_WIDTH);
        while block.partial.chars().count() > room {
            let cut = cut_point(&block.partial, room);
            let line: String = block.partial.drain(..cut).collect();
            lines.push(block.line(line.trim_end()));
            let spaces = block.partial.len() - block.partial.trim_start_matches(' ').len();
            block.partial.drain(..spaces);
        }
        lines
    }

    fn tool(&mut self, turn: &str, body: &Value) -> Vec<String> {
        let name = body["tool"].as_str().unwrap_or("a tool");
        let streamed = self.streamed.entry(turn.to_string()).or_default();
        match body["state"].as_str() {
            Some("started") => {
                let what = format!("{name} {}", body["preview"].as_str().unwrap_or(""));
                let what = what.trim_end().to_string();
                streamed.since_tool.clear();
                match body["call"].as_str() {
                    Some(call) => drop(streamed.calls.insert(call.to_string(), what.clone())),
                    None => streamed.tool = Some(what.clone()),
                }
                vec![format!("  ⚙ {what}")]
            }
            Some("finished") => {
                let what = match body["call"].as_str() {
                    Some(call) => streamed.calls.remove(call),
                    None => streamed.tool.take(),
                };
                let what = what.unwrap_or_else(|| name.to_string());
                let seconds = body["seconds"].as_f64().unwrap_or(0.0);
                // A call's sub-agents have reported: the last words they streamed are whole.
                let mut lines = match body["call"].is_string() {
                    true => self.sub_end_all(),
                    false => Vec::new(),
                };
                if body["ok"] != true {
                    lines.push(format!("  ✗ {what} failed ({seconds:.1} s)"));
                } else if seconds >= SLOW_TOOL_SECONDS {
                    lines.push(format!("  ✓ {what} ({seconds:.1} s)"));
                }
                lines
            }
            _ => vec![script_line("?", false, body.clone())],
        }
    }

    /// What a sub-agent did, `indent` columns in, under the call that started it: its brief,
    /// its tools, its streamed text line by line (each prefixed with its id), and a sub-agent's
    /// own sub-agents further in.
    fn subagent(&mut self, body: &Value, indent: usize) -> Vec<String> {
        let pad = " ".repeat(indent);
        let actor = body["actor"].as_str().unwrap_or("a sub-agent");
        let event = &body["event"];
        match event["type"].as_str() {
            Some("started") => vec![format!(
                "{pad}  ↳ {actor} ({}): {}",
                body["role"].as_str().unwrap_or("?"),
                event["brief"].as_str().unwrap_or("")
            )],
            Some("tool") => {
                let name = event["tool"].as_str().unwrap_or("a tool");
                let mut lines = self.sub_end(actor);
                match event["state"].as_str() {
                    Some("started") => {
                        let preview = event["preview"].as_str().unwrap_or("");
                        let line = format!("{pad}  ⚙ {actor} {name} {preview}");
                        lines.push(line.trim_end().to_string());
                    }
                    Some("finished") if event["ok"] != true => {
                        lines.push(format!("{pad}  ✗ {actor} {name} failed"));
                    }
                    _ => {}
                }
                lines
            }
            Some("progress") => {
                let (_, partial) = (self.sub_partial)
                    .entry(actor.to_string())
                    .or_insert_with(|| (pad.clone(), String::new()));
                partial.push_str(event["text"].as_str().unwrap_or(""));
                let mut lines = Vec::new();
                while let Some(end) = partial.find('\n') {
                    let line: String = partial.drain(..=end).collect();
                    let line = line.trim_end();
                    if !line.is_empty() {
                        lines.push(format!("{pad}  │ {actor}: {line}"));
                    }
                }
                lines
            }
            Some("subagent") => {
                let mut lines = self.sub_end(actor);
                lines.extend(self.subagent(event, indent + 2));
                lines
            }
            // Its plan and the like stay with it; its report is the call's output.
            _ => Vec::new(),
        }
    }

    /// A sub-agent's unfinished line, printed whole before something else of it.
    fn sub_end(&mut self, actor: &str) -> Vec<String> {
        let Some((pad, rest)) = self.sub_partial.remove(actor) else {
            return Vec::new();
        };
        let rest = rest.trim();
        match rest.is_empty() {
            true => Vec::new(),
            false => vec![format!("{pad}  │ {actor}: {rest}")],
        }
    }

    /// Every sub-agent's unfinished line, in the order of their ids.
    fn sub_end_all(&mut self) -> Vec<String> {
        let mut actors: Vec<String> = self.sub_partial.keys().cloned().collect();
        actors.sort();
        actors
            .iter()
            .flat_map(|actor| self.sub_end(actor))
            .collect()
    }

    /// The final reply of a turn: printed unless its text was streamed already, then its usage
    /// and why it stopped early, if it did.
    fn final_reply(&mut self, from: &str, reply: bool, turn: &str, body: Value) -> Vec<String> {
        let mut lines = self.end_block();
        let streamed = self.streamed.remove(turn).unwrap_or_default();
        let text = body["text"].as_str().unwrap_or("").trim();
        let seen =
            !text.is_empty() && (text == streamed.all.trim() || text == streamed.since_tool.trim());
        let usage = body.get("usage").filter(|u| u.is_object()).cloned();
        let stopped = body["stopped"].as_str().map(stopped_line);
        if !seen {
            let mark = if reply { " (reply)" } else { "" };
            lines.push(format!("[{from}]{mark} {text}"));
        }
        if let Some(usage) = usage {
            lines.push(format!("{DIM}{}{RESET}", usage_line(&usage)));
        }
        lines.extend(stopped);
        lines
    }
}

impl Block {
    fn prefix_width(&self) -> usize {
        self.from.chars().count() + "[] ".len()
    }

    fn line(&mut self, text: &str) -> String {
        let line = self.format(text);
        self.continued = true;
        line
    }

    /// `text` as the block's next line.
    fn format(&self, text: &str) -> String {
        let line = if self.continued {
            format!("{}{text}", " ".repeat(self.prefix_width()))
        } else {
            // A block may start in the middle of the text (after a tool, or a line of the
            // console's own), where the next word comes with its space.
            format!("[{}] {}", self.from, text.trim_start())
        };
        line.trim_end().to_string()
    }
}

/// Where to cut `text` (longer than `room` characters) into a line: after the last space
/// within `room` characters, or at `room` characters when a word is longer than the line.
fn cut_point(text: &str, room: usize) -> usize {
    let limit = text
        .char_indices()
        .nth(room)
        .map_or(text.len(), |(at, _)| at);
    match text[..limit].rfind(' ') {
        Some(space) if space > 0 => space + 1,
        _ => limit,
    }
}

/// A question of the agent: its text, its choices, and what the next line does.
/// An error reply as a person reads it: its `reason`, further lines indented below. `None` when
/// the error carries more than `type`, `reason` and `request`: then all of it is shown as JSON.
fn error_words(body: &Value) -> Option<String> {
    let fields = body.as_object()?;
    let plain = fields
        .keys()
        .all(|k| matches!(k.as_str(), "type" | "reason" | "request"));
    let reason = body["reason"].as_str().filter(|_| plain)?;
    Some(reason.trim_end().replace('\n', "\n  "))
}

fn question(from: &str, body: &Value) -> Vec<String> {
    let text = body["text"].as_str().unwrap_or("");
    let mut lines = vec![format!("[{from}] asks: {}", text.replace('\n', "\n    "))];
    let choices: Vec<&str> = body["choices"]
        .as_array()
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !choices.is_empty() {
        lines.push(format!("  choices: {}", choices.join(" · ")));
    }
    lines.push("  (the next line you type is the answer)".to_string());
    lines
}

/// `12,345 in · 2,000 cached · 678 out · $0.0123` (or `cost unknown` when the model has no
/// price).
fn usage_line(usage: &Value) -> String {
    let tokens = |field: &str| usage[field].as_u64().unwrap_or(0);
    let mut parts = vec![format!("{} in", thousands(tokens("input_tokens")))];
    if tokens("cache_read_tokens") > 0 {
        parts.push(format!("{} cached", thousands(tokens("cache_read_tokens"))));
    }
    parts.push(format!("{} out", thousands(tokens("output_tokens"))));
    parts.push(match usage["cost_usd"].as_f64() {
        Some(cost) => format!("${cost:.4}"),
        None => "cost unknown".to_string(),
    });
    format!("  {}", parts.join(" · "))
}

fn stopped_line(why: &str) -> String {
    match why {
        "budget" => "  stopped: the turn reached its cost limit (max_turn_usd in the agent's \
                     /data/config.json)"
            .to_string(),
        "steps" => "  stopped: the turn used all its steps; say \"go on\" to continue".to_string(),
        "stop" => "  stopped on request".to_string(),
        other => format!("  stopped: {other}"),
    }
}

/// 1234567 → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// An actor's routes as one cell: `/api/*, /hooks/github`, or `—`.
fn routes(routes: &Value) -> String {
    let paths: Vec<&str> = (routes.as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    match paths.is_empty() {
        true => "—".to_string(),
        false => paths.join(", "),
    }
}

/// Bytes as MiB with one decimal: `1.1 MiB`.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The broker's `list` as a table for a person (DESIGN §22): one row per actor, by id, with its
/// state, version, owner, host (on a cluster), waiting messages, restarts, memory and the HTTP
/// routes it serves.
pub fn actors_table(list: &Value) -> Vec<String> {
    const HEADS: [&str; 9] = [
        "id", "state", "version", "owner", "host", "queued", "restarts", "memory", "routes",
    ];
    let cell = |value: &Value| match value {
        Value::Null => "—".to_string(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let mut rows: Vec<Vec<String>> = list["actors"]
        .as_array()
        .map(|actors| {
            actors
                .iter()
                .map(|actor| {
                    let state = match (actor["kind"].as_str(), actor["state"].as_str()) {
                        (Some("native"), _) => "native".to_string(),
                        (_, Some(state)) => state.to_string(),
                        _ => "—".to_string(),
                    };
                    // A sub-agent says whose and in which role: `agent-s1 (scout of agent)`.
                    let id = match actor["subagent"].as_object() {
                        Some(sub) => format!(
                            "{} ({} of {})",
                            cell(&actor["id"]),
                            cell(&sub["role"]),
                            cell(&sub["parent"])
                        ),
                        None => cell(&actor["id"]),
                    };
                    vec![
                        id,
                        state,
                        cell(&actor["version"]),
                        cell(&actor["owner"]),
                        cell(&actor["host"]),
                        cell(&actor["queued"]),
                        cell(&actor["restarts"]),
                        actor["memory"].as_u64().map_or("—".into(), mebibytes),
                        routes(&actor["routes"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    rows.sort();
    let mut widths: Vec<usize> = HEADS.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut lines = vec![line(HEADS.iter().map(|h| h.to_string()).collect())];
    let count = rows.len();
    lines.extend(rows.into_iter().map(line));
    lines.push(format!(
        "{count} actor{}",
        if count == 1 { "" } else { "s" }
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a person sees for these messages (all from `agent`, all replies), one string.
    fn screen(width: usize, messages: &[Value]) -> String {
        let mut renderer = Renderer::new(width);
        let mut lines = Vec::new();
        for body in messages {
            lines.extend(renderer.message("agent", true, body.clone()));
        }
        lines.extend(renderer.end_block());
        lines.join("\n")
    }

    fn progress(text: &str) -> Value {
        json!({"type": "progress", "turn": "m-1", "text": text})
    }

    fn usage(cost: Value) -> Value {
        json!({"input_tokens": 12345, "output_tokens": 678, "cache_read_tokens": 2000, "cost_usd": cost})
    }

    #[test]
    fn schedules_are_one_line_each() {
        let reply = json!({"type": "schedules", "schedules": [
            {"id": "s1", "creator": "ann", "creator_kind": "person", "to": "agent",
             "body": {"type": "text", "text": "hi"}, "cron": "0 9 * * *", "tz": "Europe/Berlin",
             "next": "2026-01-12T08:00:00Z", "last": null},
            {"id": "tea", "creator": "notes", "creator_kind": "actor", "to": "console",
             "body": {"type": "ping"}, "every": 600, "next": "2026-01-12T08:10:00Z",
             "last": "2026-01-12T08:00:00Z"},
        ]});
        assert_eq!(
            schedule_lines(&reply),
            [
                r#"s1  ann → agent  cron "0 9 * * *" Europe/Berlin  next 2026-01-12T08:00:00Z  last never  {"text":"hi","type":"text"}"#,
                r#"tea  notes → console  every 600 s  next 2026-01-12T08:10:00Z  last 2026-01-12T08:00:00Z  {"type":"ping"}"#,
            ]
        );
        assert_eq!(
            schedule_lines(&json!({"type": "schedules", "schedules": []})),
            ["schedules: none"]
        );
    }

    #[test]
    fn scripts_see_one_line_per_message_with_blocks_below() {
        assert_eq!(
            script_line("echo", false, json!({"type": "text", "text": "hi"})),
            "[echo] hi"
        );
        assert_eq!(
            script_line("echo", true, json!({"type": "pong"})),
            r#"[echo] (reply) {"type":"pong"}"#
        );
        // A text with more than its text (a turn's usage) is JSON, so a script sees it all.
        assert_eq!(
            script_line(
                "agent",
                true,
                json!({"type": "text", "text": "hi", "turn": "m-1"})
            ),
            r#"[agent] (reply) {"text":"hi","turn":"m-1","type":"text"}"#
        );
        assert_eq!(
            script_line(
                "echo",
                true,
                json!({"type": "error", "reason": "line one\nline two"})
            ),
            "[echo] (reply) {\"reason\":\"(2 lines below)\",\"type\":\"error\"}\n  reason:\n    line one\n    line two"
        );
    }

    #[test]
    fn a_streamed_turn_prints_lines_as_they_end_and_its_reply_once() {
        let shown = screen(
            80,
            &[
                progress("I will write"),
                progress(" the greeter.\nFirst the manifest"),
                json!({"type": "tool", "turn": "m-1", "tool": "write_file", "state": "started", "preview": "/data/greeter/Cargo.toml"}),
                json!({"type": "tool", "turn": "m-1", "tool": "write_file", "state": "finished", "ok": true, "seconds": 0.01}),
                json!({"type": "tool", "turn": "m-1", "tool": "send_message", "state": "started", "preview": "cargo build"}),
                json!({"type": "tool", "turn": "m-1", "tool": "send_message", "state": "finished", "ok": true, "seconds": 12.34}),
                json!({"type": "tool", "turn": "m-1", "tool": "read_file", "state": "started", "preview": "/data/nothing"}),
                json!({"type": "tool", "turn": "m-1", "tool": "read_file", "state": "finished", "ok": false, "seconds": 0.0}),
                progress("The greeter runs."),
                json!({"type": "text", "turn": "m-1", "text": "The greeter runs.", "usage": usage(json!(0.0123))}),
            ],
        );
        assert_eq!(
            shown,
            "[agent] I will write the greeter.\n        First the manifest\n  \
             ⚙ write_file /data/greeter/Cargo.toml\n  ⚙ send_message cargo build\n  \
             ✓ send_message cargo build (12.3 s)\n  ⚙ read_file /data/nothing\n  \
             ✗ read_file /data/nothing failed (0.0 s)\n[agent] The greeter runs.\n\
             \x1b[2m  12,345 in · 2,000 cached · 678 out · $0.0123\x1b[0m"
        );
    }

    #[test]
    fn sub_agents_show_nested_under_their_calls() {
        let sub = |actor: &str, event: Value| {
            json!({"type": "subagent", "turn": "m-1", "actor": actor, "role": "scout",
                   "call": format!("c-{actor}"), "event": event})
        };
        let delegate = |call: &str, state: &str| {
            json!({"type": "tool", "turn": "m-1", "tool": "delegate", "state": state,
                   "call": call, "preview": format!("scout: look at {call}"), "ok": true,
                   "seconds": 3.0})
        };
        let shown = screen(
            80,
            &[
                delegate("c-a", "started"),
                delegate("c-b", "started"),
                sub("a", json!({"type": "started", "brief": "look at the logs"})),
                sub("a", json!({"type": "progress", "text": "Reading the"})),
                sub(
                    "b",
                    json!({"type": "tool", "tool": "read_file", "state": "started",
                                "preview": "/data/x"}),
                ),
                sub("a", json!({"type": "progress", "text": " logs now.\nDone"})),
                sub(
                    "a",
                    json!({"type": "subagent", "actor": "a-s1", "role": "reviewer",
                                "event": {"type": "started", "brief": "review it"}}),
                ),
                sub("b", json!({"type": "progress", "text": "Reported."})),
                delegate("c-a", "finished"),
            ],
        );
        assert_eq!(
            shown,
            "  ⚙ delegate scout: look at c-a\n  ⚙ delegate scout: look at c-b\n    \
             ↳ a (scout): look at the logs\n    ⚙ b read_file /data/x\n    \
             │ a: Reading the logs now.\n    │ a: Done\n      ↳ a-s1 (reviewer): review it\n    \
             │ b: Reported.\n  ✓ delegate scout: look at c-a (3.0 s)"
        );
    }

    #[test]
    fn a_reply_that_was_not_streamed_is_printed_with_what_stopped_it() {
        let shown = screen(
            80,
            &[
                progress("Thinking"),
                json!({"type": "text", "turn": "m-1", "text": "Something else.", "stopped": "budget",
                       "usage": {"input_tokens": 5, "output_tokens": 1, "cache_read_tokens": 0, "cost_usd": null}}),
            ],
        );
        assert_eq!(
            shown,
            "[agent] Thinking\n[agent] (reply) Something else.\n\x1b[2m  5 in · 1 out · cost \
             unknown\x1b[0m\n  stopped: the turn reached its cost limit (max_turn_usd in the \
             agent's /data/config.json)"
        );
    }

    #[test]
    fn long_streamed_text_is_cut_at_spaces_to_the_width() {
        let shown = screen(
            36,
            &[progress(
                "one two three four five six seven eight nine ten eleven twelve",
            )],
        );
        assert_eq!(
            shown,
            "[agent] one two three four five six\n        seven eight nine ten eleven\n        \
             twelve"
        );
        let word = "x".repeat(30);
        assert_eq!(
            screen(28, &[progress(&word)]),
            format!("[agent] {}\n        {}", "x".repeat(20), "x".repeat(10)),
            "a word longer than the line is cut where the line ends"
        );
    }

    #[test]
    fn other_output_ends_the_streamed_line_and_the_next_text_starts_a_block() {
        let mut renderer = Renderer::new(80);
        assert!(
            renderer
                .message("agent", true, progress("Half a "))
                .is_empty()
        );
        assert_eq!(
            renderer.message("echo", false, json!({"type": "text", "text": "hi"})),
            ["[agent] Half a", "[echo] hi"]
        );
        assert!(
            renderer
                .message("agent", true, progress(" line."))
                .is_empty()
        );
        assert_eq!(renderer.end_block(), ["[agent] line."]);
    }

    #[test]
    fn the_unfinished_line_is_given_apart_until_it_ends_or_is_frozen() {
        let mut renderer = Renderer::new(80);
        assert!(
            renderer
                .message("agent", true, progress("Hello wor"))
                .is_empty()
        );
        assert_eq!(renderer.partial().as_deref(), Some("[agent] Hello wor"));
        assert_eq!(
            renderer.message("agent", true, progress("ld.\nAnd ")),
            ["[agent] Hello world."]
        );
        assert_eq!(renderer.partial().as_deref(), Some("        And"));
        renderer.freeze();
        assert_eq!(renderer.partial(), None, "it stays as drawn");
        assert!(renderer.message("agent", true, progress("more")).is_empty());
        assert_eq!(
            renderer.partial().as_deref(),
            Some("[agent] more"),
            "the rest starts a block of its own"
        );
        assert_eq!(renderer.end_block(), ["[agent] more"]);
        assert_eq!(renderer.partial(), None);
    }

    #[test]
    fn a_question_shows_its_choices_and_what_the_next_line_does() {
        assert_eq!(
            screen(
                80,
                &[
                    json!({"type": "question", "turn": "m-1", "text": "Which colour?", "choices": ["red", "blue"]})
                ]
            ),
            "[agent] asks: Which colour?\n  choices: red · blue\n  (the next line you type is \
             the answer)"
        );
    }

    #[test]
    fn an_error_reply_is_words_for_a_person() {
        let screen = screen(
            80,
            &[
                json!({"type": "error", "request": "schedule", "reason": "cron: bad hour"}),
                json!({"type": "error", "reason": "first\nsecond"}),
                json!({"type": "error", "reason": "with more", "report": {"ok": false}}),
            ],
        );
        assert_eq!(
            screen,
            "[agent] error: cron: bad hour\n[agent] error: first\n  second\n[agent] (reply) \
             {\"reason\":\"with more\",\"report\":{\"ok\":false},\"type\":\"error\"}"
        );
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn a_list_from_the_broker_is_a_table_for_a_person() {
        let list = json!({"type": "actors", "actors": [
            {"id": "notes", "kind": "wasm", "version": 3, "owner": "ann", "state": "running",
             "restarts": 1, "queued": 12, "memory": 1179648, "routes": ["/", "/api/*"]},
            {"id": "broker", "kind": "native", "version": null, "owner": null, "state": "running",
             "restarts": 0, "queued": 0},
            {"id": "counter", "kind": "wasm", "version": 1, "owner": "owner", "state": "broken",
             "restarts": 4, "queued": 0, "host": "b"},
        ]});
        let mut renderer = Renderer::new(100);
        let lines = renderer.message("broker", true, list);
        assert_eq!(
            lines,
            [
                "id       state    version  owner  host  queued  restarts  memory   routes",
                "broker   native   —        —      —     0       0         —        —",
                "counter  broken   1        owner  b     0       4         —        —",
                "notes    running  3        ann    —     12      1         1.1 MiB  /, /api/*",
                "3 actors",
            ]
        );
        // What is not a list stays one line.
        let other = renderer.message("broker", true, json!({"type": "actors", "actors": 3}));
        assert_eq!(other.len(), 1);
    }
}
