//! The rules every API shares: authentication, headers, streaming, and the small JSON checks
//! (objects, known keys, names, schemas) the three APIs' modules build on. Each check returns
//! the real service's message with the subject first (`input[2].call_id: …`); none records a
//! violation itself, the judge in `script` does.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::Api;

/// The `anthropic-version` values the real API accepts.
const ANTHROPIC_VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];

/// The rule every request of every API must keep.
const MUST_STREAM: &str = "stream: the agent must stream every request (DESIGN §12)";

pub(crate) fn check_auth(
    api: Api,
    token: &str,
    headers: &BTreeMap<String, String>,
) -> Result<(), String> {
    match api {
        Api::OpenAi | Api::Chat => match headers.get("authorization") {
            None => Err(
                "You didn't provide an API key. You need to provide your API key in an \
                         Authorization header using Bearer auth (i.e. Authorization: Bearer \
                         YOUR_KEY)."
                    .to_string(),
            ),
            Some(value) if value.strip_prefix("Bearer ") == Some(token) => Ok(()),
            Some(value) => Err(format!("Incorrect API key provided: {value:?}.")),
        },
        Api::Anthropic => match headers.get("x-api-key") {
            None => Err("x-api-key header is required".to_string()),
            Some(value) if value == token => Ok(()),
            Some(_) => Err("invalid x-api-key".to_string()),
        },
    }
}

pub(crate) fn check_headers(api: Api, headers: &BTreeMap<String, String>) -> Result<(), String> {
    let content_type = headers.get("content-type").map_or("", String::as_str);
    if !content_type.starts_with("application/json") {
        return Err(format!(
            "content-type: expected application/json, got {content_type:?}"
        ));
    }
    if api == Api::Anthropic {
        match headers.get("anthropic-version") {
            None => return Err("anthropic-version: header is required".to_string()),
            Some(v) if !ANTHROPIC_VERSIONS.contains(&v.as_str()) => {
                return Err(format!("anthropic-version: {v:?} is not a valid version"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

pub(crate) fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or(format!("{at}: expected an object"))
}

pub(crate) fn only_keys(
    object: &Map<String, Value>,
    allowed: &[&str],
    at: &str,
) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{at}.{key}: Unknown parameter (allowed: {allowed:?})"
        )),
        None => Ok(()),
    }
}

pub(crate) fn non_empty_str<'a>(value: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(format!("{at}: required, a non-empty string"))
}

pub(crate) fn one_of(value: Option<&Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_str().is_some_and(|s| allowed.contains(&s)) => Ok(()),
        Some(v) => Err(format!("{at}: {v} is not one of {allowed:?}")),
    }
}

/// Every API: `^[a-zA-Z0-9_-]{1,64}$`.
pub(crate) fn tool_name<'a>(value: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
    let name = non_empty_str(value, &format!("{at}.name"))?;
    let valid = name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(format!(
            "{at}.name: {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    Ok(name)
}

pub(crate) fn check_schema_object(schema: &Value, at: &str) -> Result<(), String> {
    if schema["type"] != "object" {
        return Err(format!(
            "{at}: expected a JSON schema with \"type\": \"object\", got {schema}"
        ));
    }
    Ok(())
}

/// Strict mode's rule, which the real API enforces when `strict` is true: every object schema
/// has `additionalProperties: false` and lists all its properties in `required`.
pub(crate) fn check_strict_schema(schema: &Value, at: &str) -> Result<(), String> {
    if schema["type"] == "object" {
        if schema["additionalProperties"] != json!(false) {
            return Err(format!(
                "{at}: strict mode requires 'additionalProperties' to be supplied and false"
            ));
        }
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            if !required.contains(&json!(name)) {
                return Err(format!(
                    "{at}: strict mode requires 'required' to list every property; missing {name:?}"
                ));
            }
            check_strict_schema(property, &format!("{at}.properties.{name}"))?;
        }
    }
    if let Some(items) = schema.get("items") {
        check_strict_schema(items, &format!("{at}.items"))?;
    }
    Ok(())
}

/// DESIGN §12: every request streams, so a person sees the model's progress while it writes.
pub(crate) fn must_stream(body: &Map<String, Value>) -> Result<(), String> {
    if body.get("stream") != Some(&json!(true)) {
        return Err(MUST_STREAM.to_string());
    }
    Ok(())
}
