//! `spans` (DESIGN §22): an actor reports spans of its own work (the agent: its turns, model
//! requests and tool calls), which the host exports with its own and counts for its metrics.

use opentelemetry::{KeyValue, Value as OtelValue};
use serde_json::{Value, json};

use super::Broker;
use super::counters::Counters;
use crate::message::{Envelope, Trace};
use crate::traces::{self, Reported};

/// Spans one request may report.
pub const MAX_SPANS: usize = 256;
/// Characters of a span's name.
const MAX_NAME: usize = 128;
/// Attributes of one span.
const MAX_ATTRIBUTES: usize = 32;
/// Characters of one attribute's value, or of `error`.
const MAX_TEXT: usize = 4096;

/// The world's agent: only its reports count as turns, model tokens and cost in the metrics
/// (any actor may report spans, which are exported naming it).
const AGENT: &str = "agent";

impl Broker {
    /// `{"type":"spans","spans":[{"name","parent","id","start_ms","end_ms","attributes"?,
    /// "error"?}]}`: checked whole before any is kept; answered `spans_recorded`.
    pub(super) fn spans(&self, request: &Envelope, body: &Value) -> Result<Value, String> {
        let spans = read_spans(body)?;
        let count = spans.len();
        if request.from.as_str() == AGENT {
            count_usage(&self.counters, &spans);
        } else {
            Counters::add(&self.counters.spans, count as u64);
        }
        traces::reported(spans, &request.from);
        Ok(json!({"type": "spans_recorded", "count": count}))
    }
}

fn read_spans(body: &Value) -> Result<Vec<Reported>, String> {
    let Some(list) = body.get("spans").and_then(Value::as_array) else {
        return Err(
            "`spans` must be a list of spans, each {\"name\",\"parent\",\"id\",\
                    \"start_ms\",\"end_ms\",\"attributes\"}"
                .into(),
        );
    };
    if list.len() > MAX_SPANS {
        return Err(format!(
            "{} spans in one request; send at most {MAX_SPANS} at a time",
            list.len()
        ));
    }
    let mut spans = list
        .iter()
        .enumerate()
        .map(|(i, span)| read_span(span).map_err(|e| format!("span {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    // A root (no parent) takes the trace id its children name it under, so an actor that
    // starts a trace of its own can report it whole; otherwise a new one.
    for i in 0..spans.len() {
        if spans[i].trace.trace != 0 {
            continue;
        }
        let span = spans[i].trace.span;
        let named = spans
            .iter()
            .find(|child| child.trace.parent == span && child.trace.trace != 0)
            .map(|child| child.trace.trace);
        spans[i].trace.trace = named.unwrap_or_else(|| Trace::child_of(None, false).trace);
    }
    Ok(spans)
}

fn read_span(span: &Value) -> Result<Reported, String> {
    let name = span
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && n.chars().count() <= MAX_NAME)
        .ok_or(format!("`name` must be text of 1 to {MAX_NAME} characters"))?;
    let id = span
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .and_then(|id| u64::from_str_radix(id, 16).ok())
        .filter(|id| *id != 0)
        .ok_or("`id` must be the span's own id: 16 lowercase hex digits, not all zero")?;
    let parent = match span.get("parent") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            Some(Trace::parse(text).map_err(|e| e.replace("`trace`", "`parent`"))?)
        }
        Some(_) => return Err("`parent` must be a traceparent (text) or null".into()),
    };
    let time = |key: &str| {
        span.get(key)
            .and_then(Value::as_f64)
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .ok_or(format!("`{key}` must be a time in milliseconds since 1970"))
    };
    let (start_ms, end_ms) = (time("start_ms")?, time("end_ms")?);
    if end_ms < start_ms {
        return Err("`end_ms` is before `start_ms`".into());
    }
    let attributes = match span.get("attributes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) if map.len() <= MAX_ATTRIBUTES => map
            .iter()
            .map(|(key, value)| attribute(key, value))
            .collect::<Result<_, _>>()?,
        Some(Value::Object(_)) => {
            return Err(format!("more than {MAX_ATTRIBUTES} attributes"));
        }
        Some(_) => return Err("`attributes` must be an object".into()),
    };
    let error = match span.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.chars().take(MAX_TEXT).collect()),
        Some(_) => return Err("`error` must be text".into()),
    };
    let trace = Trace {
        trace: parent.map_or(0, |p| p.trace),
        span: id,
        parent: parent.map_or(0, |p| p.span),
        sampled: true,
        at: 0,
    };
    Ok(Reported {
        trace,
        name: name.to_string(),
        start_ms,
        end_ms,
        attributes,
        error,
    })
}

fn attribute(key: &str, value: &Value) -> Result<KeyValue, String> {
    if key.is_empty() || key.len() > MAX_NAME {
        return Err(format!("an attribute's name must be 1 to {MAX_NAME} bytes"));
    }
    let value: OtelValue = match value {
        Value::String(text) => text.chars().take(MAX_TEXT).collect::<String>().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or(0.0).into(),
        },
        _ => {
            return Err(format!(
                "attribute `{key}` must be text, a number or true/false"
            ));
        }
    };
    Ok(KeyValue::new(key.to_string(), value))
}

/// Turns, tokens and cost from the spans' gen_ai attributes (the agent's turns and model
/// requests).
fn count_usage(counters: &Counters, spans: &[Reported]) {
    for span in spans {
        let attr = |key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| &kv.value)
        };
        let number = |key: &str| match attr(key) {
            Some(OtelValue::I64(i)) => (*i).max(0) as f64,
            Some(OtelValue::F64(f)) if f.is_finite() => f.max(0.0),
            _ => 0.0,
        };
        match attr("gen_ai.operation.name").map(|v| v.as_str()) {
            Some(op) if op == "invoke_agent" => {
                Counters::add(&counters.turns, 1);
                let seconds = (span.end_ms - span.start_ms) / 1000.0;
                counters.durations.turns.observe(seconds);
            }
            Some(op) if op == "chat" => {
                Counters::add(
                    &counters.input_tokens,
                    number("gen_ai.usage.input_tokens") as u64,
                );
                Counters::add(
                    &counters.output_tokens,
                    number("gen_ai.usage.output_tokens") as u64,
                );
                Counters::add(
                    &counters.cache_read_tokens,
                    number("gen_ai.usage.cache_read.input_tokens") as u64,
                );
                Counters::add(
                    &counters.cost_micro_usd,
                    (number("gen_ai.usage.cost_usd") * 1e6).round() as u64,
                );
            }
            _ => {}
        }
    }
    Counters::add(&counters.spans, spans.len() as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn span(extra: Value) -> Value {
        let mut span = json!({"name": "chat m", "id": "00000000000000aa", "parent": PARENT,
            "start_ms": 1000.0, "end_ms": 1500.5});
        for (k, v) in extra.as_object().unwrap() {
            span[k] = v.clone();
        }
        span
    }

    #[test]
    fn spans_are_read_with_their_parents_and_counted() {
        let body = json!({"type": "spans", "spans": [
            span(json!({"attributes": {"gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30,
                "gen_ai.usage.cost_usd": 0.0125}})),
            span(json!({"id": "00000000000000bb", "attributes":
                {"gen_ai.operation.name": "invoke_agent"}})),
        ]});
        let spans = read_spans(&body).unwrap();
        assert_eq!(spans[0].trace.trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(
            (spans[0].trace.span, spans[0].trace.parent),
            (0xaa, 0x00f067aa0ba902b7)
        );
        let counters = Counters::default();
        count_usage(&counters, &spans);
        assert_eq!(Counters::get(&counters.turns), 1);
        let mut registry = prometheus_client::registry::Registry::default();
        let turns = counters.durations.turns.clone();
        registry.register("turns", "", turns);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("\nturns_sum 0.5005\nturns_count 1\n"),
            "{text}"
        );
        assert_eq!(Counters::get(&counters.input_tokens), 120);
        assert_eq!(Counters::get(&counters.output_tokens), 30);
        assert_eq!(Counters::get(&counters.cost_micro_usd), 12_500);
    }

    #[test]
    fn a_root_takes_the_trace_its_children_name() {
        let body = json!({"spans": [
            span(json!({"parent": null, "id": "0000000000000001"})),
            span(json!({"id": "0000000000000002",
                "parent": "00-0000000000000000000000000000abcd-0000000000000001-01"})),
        ]});
        let spans = read_spans(&body).unwrap();
        assert_eq!(spans[0].trace.trace, 0xabcd);
        assert_eq!(spans[0].trace.parent, 0);
    }

    #[test]
    fn wrong_spans_are_refused_saying_which_and_why() {
        let cases = [
            (json!({"spans": "x"}), "must be a list"),
            (json!({}), "must be a list"),
            (
                json!({"spans": [span(json!({"name": ""}))]}),
                "span 0: `name`",
            ),
            (
                json!({"spans": [span(json!({"name": "x".repeat(129)}))]}),
                "`name`",
            ),
            (
                json!({"spans": [span(json!({"id": "0000000000000000"}))]}),
                "`id`",
            ),
            (
                json!({"spans": [span(json!({"id": "ABCDEF0000000000"}))]}),
                "`id`",
            ),
            (
                json!({"spans": [span(json!({"parent": "01-x"}))]}),
                "`parent`",
            ),
            (json!({"spans": [span(json!({"parent": 5}))]}), "`parent`"),
            (
                json!({"spans": [span(json!({"start_ms": "now"}))]}),
                "`start_ms`",
            ),
            (
                json!({"spans": [span(json!({"start_ms": -1}))]}),
                "`start_ms`",
            ),
            (json!({"spans": [span(json!({"end_ms": 10}))]}), "before"),
            (
                json!({"spans": [span(json!({"attributes": [1]}))]}),
                "`attributes`",
            ),
            (
                json!({"spans": [span(json!({"attributes": {"a": [1]}}))]}),
                "attribute `a`",
            ),
            (json!({"spans": [span(json!({"error": 3}))]}), "`error`"),
            (
                json!({"spans": vec![span(json!({})); MAX_SPANS + 1]}),
                "at most 256",
            ),
        ];
        for (body, expected) in cases {
            let err = read_spans(&body)
                .err()
                .unwrap_or_else(|| panic!("accepted {body}"));
            assert!(err.contains(expected), "{body}: {err}");
        }
    }
}
