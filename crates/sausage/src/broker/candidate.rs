//! Tests a candidate version before `spawn` or `upgrade` installs it (DESIGN §3).
//!
//! A candidate runs on scratch copies of the actor's `/data` and `/public`, without HTTP and
//! with `SAUSAGE_CANDIDATE=1`; nothing it writes reaches the real actor or any other.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::mailbox::Mailbox;
use super::stdio::Captured;
use crate::message::ActorId;
use crate::runtime::{InstanceConfig, Program, Runtime};
use crate::world::World;

/// A candidate without transcript tests must start and stay up this long.
pub const SMOKE_TEST: Duration = Duration::from_secs(2);

/// How much of a failed candidate's stderr an error quotes.
const STDERR_TAIL_CHARS: usize = 1500;

/// The scratch folders of one candidate run; emptied when dropped.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// Copies the actor's current `/data` and `/public` (empty for a new actor).
    fn new(world: &World, id: &ActorId, run: &str) -> std::io::Result<Scratch> {
        let root = world.scratch_dir().join(format!("{id}-{run}"));
        let scratch = Scratch { root };
        for (name, real) in [
            ("data", world.data_dir(id)),
            ("public", world.public_dir(id)),
        ] {
            let copy = scratch.root.join(name);
            if real.is_dir() {
                super::copy_tree(&real, &copy)?;
            } else {
                std::fs::create_dir_all(&copy)?;
            }
        }
        Ok(scratch)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A leftover is emptied at the next start; nothing depends on it.
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs the smoke test: the candidate must stay up for [`SMOKE_TEST`] without input.
/// Returns the test report for the reply, or a reason a person can act on.
pub async fn smoke_test(
    runtime: &Arc<Runtime>,
    world: &World,
    id: &ActorId,
    version: u32,
    program: &Program,
) -> Result<Value, String> {
    let scratch = Scratch::new(world, id, &format!("{version}-smoke"))
        .map_err(|e| format!("cannot prepare the scratch copy of its files: {e}"))?;
    let stderr = Captured::default();
    let stdin = Arc::new(Mailbox::default());
    let config = InstanceConfig {
        env: vec![
            ("SAUSAGE_ACTOR".into(), id.to_string()),
            ("SAUSAGE_VERSION".into(), version.to_string()),
            ("SAUSAGE_CANDIDATE".into(), "1".into()),
        ],
        mounts: world.mounts_with(scratch.root.join("data"), scratch.root.join("public")),
        stdin: stdin.attach(),
        stdout: InstanceConfig::output(Captured::default()),
        stderr: InstanceConfig::output(stderr.clone()),
        http: false,
    };
    let run = runtime.run(program, config);
    match tokio::time::timeout(SMOKE_TEST, run).await {
        // Up for the whole test: dropping the run kills it and discards its writes.
        Err(_) => Ok(json!({
            "smoke": format!("stayed up for {} s", SMOKE_TEST.as_secs()),
            "passed": true,
        })),
        Ok(exit) => {
            let tail = stderr.tail(STDERR_TAIL_CHARS);
            let tail = if tail.is_empty() {
                "(stderr was empty)".to_string()
            } else {
                format!("stderr ends with:\n{tail}")
            };
            Err(format!(
                "the candidate {exit} during its {} s smoke test (it has no tests/*.jsonl, so \
                 it must start and keep reading stdin); {tail}",
                SMOKE_TEST.as_secs()
            ))
        }
    }
}
