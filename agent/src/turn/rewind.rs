//! Rewind (DESIGN §21): before a turn first changes the world, a checkpoint. Before its first
//! request that changes an actor (spawn, upgrade, rollback, remove, fork), the broker keeps that
//! actor's version and files (`checkpoint`); before its first change of a file of the agent's
//! own, the file (or folder) is copied aside; and the record says where the conversation stood
//! and which messages left for other actors. `{"type":"rewind","turn"}` puts it all back: each
//! actor through the broker's `restore`, the files, and the conversation cut before the turn's
//! message; the answer lists what cannot be recalled.
//!
//! Records live in `/data/checkpoints/<turn>/` (`record.json`, and `files/<n>` for what was
//! copied aside), 7 days at most and the last [`MAX_PER_CONVERSATION`] of each conversation.
//! Owners may rewind any turn; members their own turns that touched only their actors.
//! **Invariant:** a change a checkpoint could not be kept for is not made: the call is refused.

use std::path::{Path, PathBuf};

use super::*;

/// How many rewindable turns each conversation keeps.
pub const MAX_PER_CONVERSATION: usize = 50;
/// How long a checkpoint is kept, in seconds (7 days, as the broker keeps its part).
pub const KEEP_SECONDS: u64 = 7 * 24 * 3600;
/// How long the broker's answer to a checkpoint or a restore is awaited.
const BROKER_WAIT_SECONDS: u64 = 120;
/// The broker requests that change an actor, and the field naming it.
const CHANGES: &[(&str, &str)] = &[
    ("spawn", "actor"),
    ("upgrade", "actor"),
    ("rollback", "actor"),
    ("remove", "actor"),
    ("fork", "as"),
];

/// One turn's checkpoint, `record.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub turn: String,
    pub conversation: Conversation,
    /// The person the turn acted for.
    #[serde(default)]
    pub person: Option<String>,
    /// When the checkpoint was made (Unix seconds).
    pub time: u64,
    /// Actors the broker kept, in the order the turn first changed them.
    #[serde(default)]
    pub actors: Vec<String>,
    /// The agent's own files and folders copied aside before the turn first changed them.
    #[serde(default)]
    pub paths: Vec<Saved>,
    /// Messages the turn sent to other actors (`<to>: <type>`), which a rewind cannot recall.
    #[serde(default)]
    pub sent: Vec<String>,
    /// What the turn's sub-agents changed (DESIGN §26): each one's turn (its brief's id), under
    /// which the broker kept the actors it changed, in the order they reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegated: Vec<Delegated>,
}

/// The actors one sub-agent's turn changed, kept by the broker under that turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Delegated {
    pub turn: String,
    pub actors: Vec<String>,
}

/// A path the turn changed, as it was before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    pub path: String,
    /// Its copy under `files/`, or `None` when nothing was at the path.
    pub copy: Option<String>,
}

/// The folder of a turn's checkpoint: the id kept to letters, digits, `_` and `-`, the rest
/// written `%XX`, so no id names another folder.
fn folder(data: &Path, turn: &str) -> PathBuf {
    let mut name = String::new();
    for byte in turn.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' => name.push(byte as char),
            _ => name.push_str(&format!("%{byte:02X}")),
        }
    }
    data.join("checkpoints").join(name)
}

pub fn load(data: &Path, turn: &str) -> Option<Record> {
    read_json(&folder(data, turn).join("record.json"))
}

fn save(data: &Path, record: &Record) -> Result<(), String> {
    let dir = folder(data, &record.turn);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_json(&dir.join("record.json"), record)
}

/// Every record kept, oldest first.
fn all(data: &Path) -> Vec<(PathBuf, Record)> {
    let mut records: Vec<(PathBuf, Record)> = std::fs::read_dir(data.join("checkpoints"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let record: Record = read_json(&entry.path().join("record.json"))?;
            Some((entry.path(), record))
        })
        .collect();
    records.sort_by_key(|(_, record)| record.time);
    records
}

/// Removes records past [`KEEP_SECONDS`] and those beyond the last [`MAX_PER_CONVERSATION`] of
/// `conversation` (the one about to get a new record).
fn prune(data: &Path, conversation: &Conversation, now: u64) {
    let records = all(data);
    let mine = records
        .iter()
        .filter(|(_, r)| &r.conversation == conversation)
        .count();
    let mut extra = (mine + 1).saturating_sub(MAX_PER_CONVERSATION);
    for (dir, record) in records {
        let old = now.saturating_sub(record.time) > KEEP_SECONDS;
        let over = extra > 0 && &record.conversation == conversation;
        if old || over {
            if over {
                extra -= 1;
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Copies a file or a folder tree.
fn copy_path(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_path(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(drop)
    }
}

fn remove_path(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

impl<H: Host> Agent<H> {
    /// This turn's record, made (and the conversation's old ones pruned) if it has none yet.
    fn record_of(&self, turn: &SavedTurn) -> Record {
        load(&self.data, &turn.message.id).unwrap_or_else(|| {
            let now = unix_seconds(self.host.now());
            prune(&self.data, &turn.conversation, now);
            Record {
                turn: turn.message.id.clone(),
                conversation: turn.conversation.clone(),
                person: turn.who().person,
                time: now,
                ..Record::default()
            }
        })
    }

    /// A sub-agent of this turn reported that its turn `sub_turn` changed `actors`: a rewind
    /// of this turn puts them back too.
    pub(super) fn keep_delegated(
        &mut self,
        turn: &SavedTurn,
        sub_turn: &str,
        actors: Vec<String>,
    ) -> Result<(), String> {
        if self.candidate || actors.is_empty() {
            return Ok(());
        }
        let mut record = self.record_of(turn);
        record.delegated.push(Delegated {
            turn: sub_turn.to_string(),
            actors,
        });
        save(&self.data, &record)
    }

    /// Before a tool changes `path` (a file or folder of the agent's own): the first change of
    /// it in this turn copies it aside. `Err` refuses the change.
    pub(super) fn keep_path(&mut self, turn: &SavedTurn, path: &Path) -> Result<(), String> {
        if self.candidate {
            return Ok(());
        }
        let mut record = self.record_of(turn);
        let shown = path.display().to_string();
        if record.paths.iter().any(|saved| saved.path == shown) {
            return Ok(());
        }
        let copy = if std::fs::symlink_metadata(path).is_ok() {
            let name = record.paths.len().to_string();
            let to = folder(&self.data, &turn.message.id)
                .join("files")
                .join(&name);
            let copied = std::fs::create_dir_all(to.parent().expect("inside files/"))
                .and_then(|()| copy_path(path, &to));
            if let Err(e) = copied {
                return Err(format!(
                    "refused: {shown} could not be copied aside so that this turn can be \
                     rewound ({e}); nothing was changed"
                ));
            }
            Some(name)
        } else {
            None
        };
        record.paths.push(Saved { path: shown, copy });
        save(&self.data, &record).map_err(|e| {
            format!("refused: the turn's checkpoint could not be saved ({e}); nothing was changed")
        })
    }

    /// Before `body` goes to `to`: a request that changes an actor first has the broker keep
    /// that actor (once per turn); a message to another actor is noted as one a rewind cannot
    /// recall. `Err` refuses the message.
    pub(super) fn keep_before_send(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        to: &str,
        body: &Value,
    ) -> Result<(), String> {
        if self.candidate {
            return Ok(());
        }
        let kind = body["type"].as_str().unwrap_or_default();
        if to != "broker" {
            if !matches!(to, "cargo" | "scheduler") && to != self.actor {
                let mut record = self.record_of(turn);
                record.sent.push(format!("{to}: {kind}"));
                save(&self.data, &record).map_err(|e| {
                    format!("refused: the turn's checkpoint could not be saved ({e})")
                })?;
            }
            return Ok(());
        }
        let Some((_, field)) = CHANGES.iter().find(|(k, _)| *k == kind) else {
            return Ok(());
        };
        let Some(actor) = body[*field].as_str().filter(|a| valid_id(a)) else {
            // The broker refuses it for its own reason; it changes nothing.
            return Ok(());
        };
        let record = self.record_of(turn);
        if record.actors.iter().any(|a| a == actor) {
            return Ok(());
        }
        // Asked and awaited here, not as a tool's wait: a restart meanwhile must not take the
        // broker's answer for the answer to the change itself, which was never sent.
        let checkpoint = json!({"type": "checkpoint", "turn": turn.message.id, "actor": actor});
        let published = self.tell_broker(history, turn, 'k', checkpoint);
        let answer =
            match self.await_reply(&published, BROKER_WAIT_SECONDS, Expected::Actor("broker")) {
                Awaited::Reply(reply) => reply,
                Awaited::Stop => return Err("stopped".into()),
                Awaited::TimedOut | Awaited::Stopped => Incoming::default(),
            };
        let reply = answer.body.clone();
        if reply["type"] != "checkpointed" {
            return Err(format!(
                "refused: the broker could not keep {actor} as it is, so this turn could not be \
                 rewound ({}); nothing was sent",
                shorten(&answer.body.to_string(), STEP_DESCRIPTION_CHARS)
            ));
        }
        let mut record = self.record_of(turn);
        record.actors.push(actor.to_string());
        save(&self.data, &record)
            .map_err(|e| format!("refused: the turn's checkpoint could not be saved ({e})"))
    }

    /// `{"type":"rewind","turn"?}`: puts back what the turn changed (without `turn`, the last
    /// turn of the asker's conversation that changed something) and cuts its conversation
    /// before it, for whom `acting` names; answers `rewound`, or an `error` that says why
    /// nothing was done.
    pub(super) fn rewind(&mut self, message: Incoming, acting: &Acting) {
        let refuse = |words: String| json!({"type": "error", "request": "rewind", "reason": words});
        let named = message.body["turn"].as_str().unwrap_or_default();
        let turn = if named.is_empty() {
            match self.last_changed(&message) {
                Some(turn) => turn,
                None => {
                    let words = format!(
                        "nothing to rewind: no turn of this conversation changed an actor or a \
                         file in the last 7 days (or the last {MAX_PER_CONVERSATION} such turns \
                         were rewound)"
                    );
                    return self.reply(&message, refuse(words));
                }
            }
        } else {
            named.to_string()
        };
        if self.running.is_some() || self.rewinding {
            let words = "refused: a turn is running; rewind once it has ended".to_string();
            return self.reply(&message, refuse(words));
        }
        let Some(record) = load(&self.data, &turn) else {
            let words = format!(
                "turn {turn} has nothing to rewind: it changed no actor and no file, or it is \
                 older than 7 days or than the last {MAX_PER_CONVERSATION} such turns of its \
                 conversation"
            );
            return self.reply(&message, refuse(words));
        };
        let (person, tier) = (acting.person.clone(), acting.tier);
        match tier {
            Tier::Owner => {}
            Tier::Member if person.is_some() && person == record.person => {
                if let Err(words) = self.touched_only_own(&record, person.as_deref()) {
                    return self.reply(&message, refuse(words));
                }
            }
            _ => {
                let words = format!(
                    "refused: turn {turn} is not yours to rewind (owners rewind any turn, \
                     members their own)"
                );
                return self.reply(&message, refuse(words));
            }
        }
        self.rewinding = true;
        let mut restored = Vec::new();
        let mut not_recalled: Vec<String> = Vec::new();
        // The sub-agents' changes came after the turn's own first changes: undone first, the
        // last reported first.
        let own = record
            .actors
            .iter()
            .rev()
            .map(|actor| (turn.as_str(), actor));
        let delegated = (record.delegated.iter().rev()).flat_map(|d| {
            d.actors
                .iter()
                .rev()
                .map(move |actor| (d.turn.as_str(), actor))
        });
        for (turn, actor) in delegated.chain(own) {
            let body = json!({"type": "restore", "turn": turn, "actor": actor});
            match self.ask_broker(body, person.clone()) {
                Some(reply) if reply["type"] == "restored" => restored.push(reply),
                Some(reply) => not_recalled.push(format!(
                    "{actor}: {}",
                    reply["reason"]
                        .as_str()
                        .unwrap_or("the broker did not restore it")
                )),
                None => not_recalled.push(format!("{actor}: the broker did not answer")),
            }
        }
        let dir = folder(&self.data, &turn);
        let mut files = Vec::new();
        for saved in record.paths.iter().rev() {
            let path = Path::new(&saved.path);
            let put = remove_path(path).and_then(|()| match &saved.copy {
                Some(copy) => copy_path(&dir.join("files").join(copy), path),
                None => Ok(()),
            });
            match put {
                Ok(()) => files.push(saved.path.clone()),
                Err(e) => not_recalled.push(format!("{}: {e}", saved.path)),
            }
        }
        let conversation = self.cut_conversation(&record);
        not_recalled.extend(
            record
                .sent
                .iter()
                .map(|sent| format!("the message to {sent}: it has left")),
        );
        self.rewinding = false;
        if not_recalled.iter().all(|n| n.contains("it has left")) {
            let _ = std::fs::remove_dir_all(&dir);
        }
        eprintln!("agent: {} rewound turn {turn}", message.from);
        self.reply(
            &message,
            json!({
                "type": "rewound", "turn": turn, "actors": restored, "files": files,
                "conversation": conversation, "not_recalled": not_recalled,
            }),
        );
    }

    /// The last turn of the asker's conversation that changed something: the newest kept
    /// checkpoint (a turn that changed nothing has none), which a rewind without a `turn` undoes.
    fn last_changed(&self, message: &Incoming) -> Option<String> {
        let asked = Conversation::of_text(message, &self.data).ok()?;
        all(&self.data)
            .into_iter()
            .rev()
            .find(|(_, record)| record.conversation == asked)
            .map(|(_, record)| record.turn)
    }

    /// For a member's rewind: every actor the turn changed is theirs (or gone).
    fn touched_only_own(&mut self, record: &Record, person: Option<&str>) -> Result<(), String> {
        let changed: Vec<&String> = (record.actors.iter())
            .chain(record.delegated.iter().flat_map(|d| d.actors.iter()))
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let Some(list) = self.ask_broker(json!({"type": "list"}), None) else {
            return Err("refused: the broker did not say who owns the actors".into());
        };
        for actor in changed {
            let owner = list["actors"]
                .as_array()
                .and_then(|all| all.iter().find(|a| a["id"] == actor.as_str()))
                .map(|a| a["owner"].as_str());
            if let Some(owner) = owner
                && owner != person
            {
                return Err(format!(
                    "refused: the turn changed {actor}, which is not yours; only an owner may \
                     rewind it"
                ));
            }
        }
        Ok(())
    }

    /// Sends `body` to the broker (for `person`) and waits for its answer.
    fn ask_broker(&mut self, body: Value, person: Option<String>) -> Option<Value> {
        self.rewind_asks += 1;
        let id = format!("rewind.r{}", self.rewind_asks);
        let published = format!("{}/{id}", self.actor);
        self.remember_sent(&published, "broker");
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            // A sub-agent's requests speak for its owner, that person, without `"as"`.
            speaks_for: person.filter(|_| self.subagent.is_none()),
            trace: None,
            body,
        });
        match self.await_reply(&published, BROKER_WAIT_SECONDS, Expected::Actor("broker")) {
            Awaited::Reply(reply) => Some(reply.body),
            _ => None,
        }
    }

    /// Cuts the turn's conversation before the message that started the turn; says what it did.
    fn cut_conversation(&mut self, record: &Record) -> String {
        let mut history = self.load_history(&record.conversation);
        let start = format!("Message {} from ", record.turn);
        let at = history
            .entries
            .iter()
            .rposition(|entry| matches!(entry, Entry::User { text } if text.starts_with(&start)));
        let Some(at) = at else {
            return format!(
                "not cut: the conversation no longer holds message {} (it was compacted since)",
                record.turn
            );
        };
        let cut = history.entries.len() - at;
        history.entries.truncate(at);
        match self.save_history(&record.conversation, &history) {
            Ok(()) => format!("cut before message {}: {cut} entries removed", record.turn),
            Err(e) => format!("not cut: {e}"),
        }
    }
}
