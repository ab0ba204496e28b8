//! The audit log (DESIGN §25): `broker/audit.log`, one JSON object a line, appended to and
//! never rewritten: every secret set, grant, revocation, removal and use, with when (`at`,
//! RFC 3339, UTC) and who. It holds no value. Owners read it (`sausage audit`).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::world::World;

#[derive(Clone)]
pub struct Audit {
    path: PathBuf,
}

impl Audit {
    pub fn new(world: &World) -> Audit {
        Audit {
            path: world.root().join("broker/audit.log"),
        }
    }

    /// Appends `entry` with the time. One `write` of a whole line on a file opened to append,
    /// so lines of the host and of `sausage secret …` never mix. A failure is logged: the
    /// action it records has happened.
    pub fn append(&self, mut entry: Value) {
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut line = serde_json::Map::new();
        line.insert("at".into(), Value::from(at));
        if let Value::Object(fields) = entry.take() {
            line.extend(fields);
        }
        let mut bytes = serde_json::to_vec(&line).expect("an audit line serialises");
        bytes.push(b'\n');
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .and_then(|mut file| file.write_all(&bytes));
        if let Err(e) = written {
            tracing::warn!(
                "{}: cannot append to the audit log: {e}",
                self.path.display()
            );
        }
    }

    /// Every line, oldest first; a line that is not JSON (cut by a full disk) is skipped.
    pub fn read(&self) -> Result<Vec<Value>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(e).with_context(|| format!("{}: cannot read", self.path.display()));
            }
        };
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }

    /// The last use of each secret, by name.
    pub fn last_uses(&self) -> HashMap<String, Value> {
        let mut last = HashMap::new();
        for entry in self.read().unwrap_or_default() {
            if entry["event"] == "use"
                && let Some(secret) = entry["secret"].as_str()
            {
                last.insert(secret.to_string(), entry.clone());
            }
        }
        last
    }
}
