//! Helpers of the tests that drive the agent through the fake model provider: its configuration
//! and world, asking it, and reading what it sent back to the model.

use std::time::Duration;

use sausage_fake_llm::FakeLlm;
use serde_json::{Value, json};

use super::{Host, TestWorld};

/// The agent's `/data/config.json` for `api` on the fake: without the token, which the host
/// keeps.
pub fn config(fake: &FakeLlm, api: &str) -> Value {
    json!({"api": api, "base_url": fake.base_url(), "model": "test-model"})
}

/// A world with the agent configured for `api` on the fake, as `sausage init` leaves it.
pub fn world_with_agent(fake: &FakeLlm, api: &str) -> TestWorld {
    world_with_config(fake, api, config(fake, api))
}

/// Types text for the agent and waits for its answer.
pub fn ask(host: &mut Host, text: &str) -> String {
    host.send(text);
    final_reply(host)["text"].as_str().unwrap().to_string()
}

/// The config of [`config`] with `extra` keys added.
pub fn config_with(fake: &FakeLlm, api: &str, extra: Value) -> Value {
    let mut config = config(fake, api);
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    config
}

/// A world with the agent configured by `config` for `api` on the fake.
pub fn world_with_config(fake: &FakeLlm, api: &str, config: Value) -> TestWorld {
    let world = TestWorld::new();
    world.install_agent(Some(config));
    world.give_agent_credentials(&fake.base_url(), api);
    world
}

/// Waits for the final reply of a turn (a text that is a reply), returning its body.
pub fn final_reply(host: &mut Host) -> Value {
    host.wait_for_within(Duration::from_secs(120), "the agent's final reply", |m| {
        m.from == "agent" && m.reply && m.body["type"] == "text"
    })
    .body
}

/// The outputs of the tool calls the `n`-th request sent back, in order, whichever of the three
/// API shapes it has.
pub fn tool_outputs(fake: &FakeLlm, n: usize) -> Vec<String> {
    let body = &fake.requests()[n].body;
    let items = body["input"]
        .as_array()
        .or(body["messages"].as_array())
        .unwrap();
    let mut outputs = Vec::new();
    for item in items {
        if item["type"] == "function_call_output" {
            outputs.push(&item["output"]); // OpenAI Responses
        } else if item["role"] == "tool" {
            outputs.push(&item["content"]); // OpenAI Chat
        }
        for block in item["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                outputs.push(&block["content"]); // Anthropic Messages
            }
        }
    }
    outputs
        .into_iter()
        .map(|output| output.as_str().unwrap().to_string())
        .collect()
}
