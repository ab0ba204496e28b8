//! A turn's trace (DESIGN §22): the turn's span, and one span per model request and per tool
//! call under it, kept in `turn.json` with the turn (a restart goes on with the same ids and
//! times), sent to `broker` as one `spans` request when the turn ends, and shown to people as
//! the turn's waterfall, the `steps` of its final answer.
//! **Invariant:** the agent's lines name a span of the turn only when the message that started
//! it had a trace; the spans are sent either way, since the broker counts turns, tokens and cost
//! from them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::message::{Api, Incoming, shorten};
use crate::provider::Usage;

/// The most steps a turn's waterfall shows, in start order; the rest are counted in its
/// `steps_dropped`.
pub const MAX_STEPS_SHOWN: usize = 200;

/// The most spans one `spans` request may carry (the broker refuses more): the turn's own and
/// one fewer steps. Tool calls stop being kept at [`MAX_STEPS_SHOWN`]; model requests are kept
/// up to here, since their spans carry the tokens and cost the broker counts.
pub const MAX_SPANS: usize = 256;

/// The most characters of a span's name (the broker refuses longer ones).
const MAX_NAME_CHARS: usize = 128;

/// The most characters of a span's `error` (of its first line): the first words say what failed.
const ERROR_CHARS: usize = 200;

/// The turn's span and its steps so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnTrace {
    /// 32 hex: the trace of the message that started the turn, or a new one when it had none.
    pub trace_id: String,
    /// The message's traceparent, the turn span's parent; `None` when it had none (the turn
    /// span is then the root of a new trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The turn span's id (16 hex).
    pub id: String,
    /// When the turn began, in Unix milliseconds.
    pub start_ms: f64,
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Steps not kept (see [`MAX_SPANS`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
}

/// One model request or tool call of the turn: a span and a row of the waterfall.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Its span id (16 hex).
    pub id: String,
    pub start_ms: f64,
    /// `None` while a tool call runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// What went wrong, for a request that failed or a call that answered an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// A request to the model; `cost_usd` is `None` when the model has no price.
    Model {
        model: String,
        api: Api,
        usage: Usage,
        cost_usd: Option<f64>,
    },
    /// A tool call, with its preview as the `tool` message showed it.
    Tool {
        tool: String,
        preview: String,
        ok: bool,
    },
}

/// How the turn ended, for its span: when, and why early (`stopped`) or in failure (`error`).
pub struct Ended {
    pub end_ms: f64,
    pub stopped: Option<&'static str>,
    pub error: Option<String>,
}

impl TurnTrace {
    /// The trace of a turn that starts now, for `message`.
    pub fn begin(message: &Incoming, start_ms: f64, random: &mut dyn FnMut() -> u64) -> Self {
        let parent = message.trace.clone();
        let trace_id = match &parent {
            // `Incoming` keeps only a valid traceparent: `00-` then the 32 hex of the trace id.
            Some(parent) => parent[3..35].to_string(),
            None => loop {
                let (high, low) = (random(), random());
                if high | low != 0 {
                    break format!("{high:016x}{low:016x}");
                }
            },
        };
        TurnTrace {
            trace_id,
            parent,
            id: span_id(random),
            start_ms,
            steps: Vec::new(),
            dropped: 0,
        }
    }

    /// The traceparent the agent's lines carry: naming the tool call's span `inside` when one
    /// runs, else the turn's; `None` when the turn's message had no trace.
    pub fn line_trace(&self, inside: Option<&str>) -> Option<String> {
        self.parent.as_ref()?;
        Some(self.traceparent(inside.unwrap_or(&self.id)))
    }

    fn traceparent(&self, span: &str) -> String {
        format!("00-{}-{span}-01", self.trace_id)
    }

    /// Keeps a step; `false` when the turn already keeps as many as it may (see [`MAX_SPANS`]).
    pub fn add(&mut self, step: Step) -> bool {
        let room = match step.what {
            What::Model { .. } => MAX_SPANS - 1,
            What::Tool { .. } => MAX_STEPS_SHOWN,
        };
        if self.steps.len() >= room {
            self.dropped += 1;
            return false;
        }
        self.steps.push(step);
        true
    }

    /// Ends the tool call `id`: `error` is its output when it failed.
    pub fn finish_tool(&mut self, id: &str, end_ms: f64, error: Option<&str>) {
        let Some(step) = self.steps.iter_mut().rev().find(|s| s.id == id) else {
            return;
        };
        step.end_ms = Some(end_ms);
        step.error = error.map(|e| shorten(e, ERROR_CHARS));
        if let What::Tool { ok, .. } = &mut step.what {
            *ok = error.is_none();
        }
    }

    /// Ends every step still running (a restart cut it off) at `end_ms`, as failed with `why`.
    pub fn interrupt(&mut self, end_ms: f64, why: &str) {
        for step in self.steps.iter_mut().filter(|s| s.end_ms.is_none()) {
            step.end_ms = Some(end_ms);
            step.error = Some(why.to_string());
            if let What::Tool { ok, .. } = &mut step.what {
                *ok = false;
            }
        }
    }

    /// The waterfall: the first [`MAX_STEPS_SHOWN`] steps in start order, with times in
    /// whole milliseconds since the turn began (a step still running ends `now_ms`), and how
    /// many more there were.
    pub fn waterfall(&self, now_ms: f64) -> (Vec<Value>, u64) {
        let whole = |ms: f64| ms.max(0.0).round() as u64;
        let steps = (self.steps.iter().take(MAX_STEPS_SHOWN))
            .map(|step| {
                let start_ms = whole(step.start_ms - self.start_ms);
                let ms = whole(step.end_ms.unwrap_or(now_ms) - step.start_ms);
                match &step.what {
                    What::Model {
                        model,
                        usage,
                        cost_usd,
                        ..
                    } => json!({
                        "kind": "model", "name": model, "start_ms": start_ms, "ms": ms,
                        "input_tokens": input_tokens(usage), "output_tokens": usage.output_tokens,
                        "cost_usd": cost_usd.map(round_usd),
                    }),
                    What::Tool { tool, preview, ok } => json!({
                        "kind": "tool", "name": tool, "preview": preview, "start_ms": start_ms,
                        "ms": ms, "ok": ok,
                    }),
                }
            })
            .collect();
        let more = self.steps.len().saturating_sub(MAX_STEPS_SHOWN) as u64;
        (steps, self.dropped + more)
    }

    /// The `spans` request that reports the turn to the broker: the turn's span (`agent` is the
    /// agent's name, `turn` the id of the message that started it, `person` whom it acted for),
    /// then one span per kept step, its child.
    pub fn request(&self, agent: &str, turn: &str, person: Option<&str>, ended: Ended) -> Value {
        let mut attributes = Map::new();
        attributes.insert("gen_ai.operation.name".into(), json!("invoke_agent"));
        attributes.insert("gen_ai.agent.name".into(), json!(agent));
        attributes.insert("sausage.turn".into(), json!(turn));
        if let Some(person) = person {
            attributes.insert("sausage.person".into(), json!(person));
        }
        if let Some(stopped) = ended.stopped {
            attributes.insert("sausage.stopped".into(), json!(stopped));
        }
        let turn_span = span(
            &format!("invoke_agent {agent}"),
            self.parent.clone(),
            &self.id,
            (self.start_ms, ended.end_ms),
            attributes,
            ended.error.as_deref(),
        );
        let parent = Some(self.traceparent(&self.id));
        let steps = self.steps.iter().map(|step| {
            let mut attributes = Map::new();
            let name = match &step.what {
                What::Model {
                    model,
                    api,
                    usage,
                    cost_usd,
                } => {
                    attributes.insert("gen_ai.operation.name".into(), json!("chat"));
                    attributes.insert("gen_ai.provider.name".into(), json!(provider(*api)));
                    attributes.insert("gen_ai.request.model".into(), json!(model));
                    attributes.insert(
                        "gen_ai.usage.input_tokens".into(),
                        json!(input_tokens(usage)),
                    );
                    attributes.insert(
                        "gen_ai.usage.output_tokens".into(),
                        json!(usage.output_tokens),
                    );
                    attributes.insert(
                        "gen_ai.usage.cache_read.input_tokens".into(),
                        json!(usage.cache_read_tokens),
                    );
                    if let Some(usd) = cost_usd {
                        attributes.insert("gen_ai.usage.cost_usd".into(), json!(round_usd(*usd)));
                    }
                    format!("chat {model}")
                }
                What::Tool { tool, ok, .. } => {
                    attributes.insert("gen_ai.operation.name".into(), json!("execute_tool"));
                    attributes.insert("gen_ai.tool.name".into(), json!(tool));
                    attributes.insert("sausage.ok".into(), json!(ok));
                    format!("execute_tool {tool}")
                }
            };
            let end_ms = step.end_ms.unwrap_or(ended.end_ms);
            let times = (step.start_ms, end_ms);
            span(
                &name,
                parent.clone(),
                &step.id,
                times,
                attributes,
                step.error.as_deref(),
            )
        });
        let spans: Vec<Value> = std::iter::once(turn_span).chain(steps).collect();
        json!({"type": "spans", "spans": spans})
    }
}

/// One span as the `spans` request writes it.
fn span(
    name: &str,
    parent: Option<String>,
    id: &str,
    (start_ms, end_ms): (f64, f64),
    attributes: Map<String, Value>,
    error: Option<&str>,
) -> Value {
    let mut span = json!({
        "name": name.chars().take(MAX_NAME_CHARS).collect::<String>(),
        "parent": parent, "id": id, "start_ms": start_ms, "end_ms": end_ms.max(start_ms),
        "attributes": attributes,
    });
    if let Some(error) = error {
        let first_line = error.lines().next().unwrap_or_default();
        span["error"] = json!(shorten(first_line, ERROR_CHARS));
    }
    span
}

/// A new span id: 16 lowercase hex, never all zeros.
pub fn span_id(random: &mut dyn FnMut() -> u64) -> String {
    loop {
        let n = random();
        if n != 0 {
            return format!("{n:016x}");
        }
    }
}

/// A wall-clock time in Unix milliseconds.
pub fn unix_ms(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The broker's answer to a `spans` request (`spans_recorded`, or an `error` about it): it
/// concerns no turn and no conversation, and is dropped where it arrives.
pub fn is_answer(message: &Incoming) -> bool {
    message.from == "broker"
        && message.reply_to.is_some()
        && match message.kind() {
            "spans_recorded" => true,
            "error" => message.body["request"] == "spans",
            _ => false,
        }
}

/// `gen_ai.provider.name` of an API shape: local servers speaking OpenAI's chat API count as
/// `openai`, the shape they speak.
fn provider(api: Api) -> &'static str {
    match api {
        Api::OpenaiResponses | Api::OpenaiChat => "openai",
        Api::AnthropicMessages => "anthropic",
    }
}

/// Every token of the prompt, cached or not, as OpenTelemetry's `gen_ai.usage.input_tokens`
/// counts them (the cached part is `gen_ai.usage.cache_read.input_tokens` too).
fn input_tokens(usage: &Usage) -> u64 {
    usage.prompt_tokens()
}

/// Dollars to the millionth, as the answer's `usage` gives them.
fn round_usd(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
