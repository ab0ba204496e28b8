//! Tests a candidate version before `spawn` or `upgrade` installs it (DESIGN §3).
//!
//! Transcripts (`tests/*.jsonl` of the new source) run each in a fresh instance; without any,
//! the candidate must pass the smoke test. A candidate runs on scratch copies of the actor's
//! `/data` and `/public`, without network and with `SAUSAGE_CANDIDATE=1`; nothing it writes
//! reaches the real actor or any other (its answers to `http` steps included: every line it
//! writes is only captured here).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::mailbox::Mailbox;
use super::stdio::{Captured, Line, Lines, WRITE_CHUNK};
use super::transcript::{self, Answered, EXPECT_TIMEOUT, HTTP_FROM, StepKind, Transcript};
use crate::message::http::{Chunk, answer, chunk};
use crate::message::{ActorId, Envelope, Trace, raw};
use crate::runtime::network::Network;
use crate::runtime::stdio::{BoxFuture, GuestOutput};
use crate::runtime::{DEFAULT_MEMORY_MB, Exit, InstanceConfig, Program, Runtime};
use crate::world::routes::RouteTable;
use crate::world::{World, read_manifest};

/// A candidate without transcript tests must start and stay up this long.
pub const SMOKE_TEST: Duration = Duration::from_secs(2);

/// How much of a failed candidate's stderr an error quotes.
const STDERR_TAIL_CHARS: usize = 1500;

/// The scratch folders of one candidate run; emptied when dropped.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// Snapshots the actor's current `/data` and `/public` by hard links (empty for a new
    /// actor): a candidate's writes commit by rename, so the originals are never touched.
    fn new(world: &World, id: &ActorId, run: &str) -> std::io::Result<Scratch> {
        let root = world.scratch_dir().join(format!("{id}-{run}"));
        let scratch = Scratch { root };
        for (name, real) in [
            ("data", world.data_dir(id)),
            ("public", world.public_dir(id)),
        ] {
            let copy = scratch.root.join(name);
            if real.is_dir() {
                crate::fs::link_tree(&real, &copy)?;
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

/// Tests a candidate: its transcripts if its source has `tests/*.jsonl`, else the smoke test.
/// Returns the test report for the reply, or a reason a person can act on.
pub async fn test(
    runtime: &Arc<Runtime>,
    world: &World,
    id: &ActorId,
    version: u32,
    program: &Program,
    source: Option<&Path>,
) -> Result<Value, String> {
    let transcripts = match source {
        Some(source) => transcript::load(source)?,
        None => Vec::new(),
    };
    // The candidate runs with the memory its own manifest asks for, as it will once installed,
    // and its `http` steps pass the headers its manifest's routes pass.
    let manifest = source.map(read_manifest);
    let memory_mb = (manifest.as_ref())
        .and_then(|manifest| manifest.memory_mb.clone().ok().flatten())
        .unwrap_or(DEFAULT_MEMORY_MB);
    let routes: BTreeMap<_, _> = (manifest.and_then(|manifest| manifest.http.ok()))
        .unwrap_or_default()
        .into_iter()
        .collect();
    let under = Under {
        runtime,
        world,
        id,
        version,
        program,
        memory_mb,
        routes: RouteTable::new(&routes),
    };
    if transcripts.is_empty() {
        return smoke_test(&under).await;
    }
    let mut report = Vec::new();
    for (n, transcript) in transcripts.iter().enumerate() {
        let scratch = Scratch::new(world, id, &format!("{version}-{n}"))
            .map_err(|e| format!("cannot prepare the scratch copy of its files: {e}"))?;
        run_transcript(&under, &scratch, transcript).await?;
        report.push(json!({"file": transcript.name, "steps": transcript.steps.len()}));
    }
    Ok(json!({"transcripts": report, "passed": true}))
}

/// The candidate under test, and what its instances run with.
struct Under<'a> {
    runtime: &'a Arc<Runtime>,
    world: &'a World,
    id: &'a ActorId,
    version: u32,
    program: &'a Program,
    memory_mb: u32,
    /// The routes of its `actor.json`, for the headers an `http` step's route passes.
    routes: RouteTable,
}

/// One candidate instance: its stdin, what it writes, and its stderr.
struct Instance {
    stdin: Arc<Mailbox>,
    written: mpsc::UnboundedReceiver<Value>,
    stderr: Captured,
    run: tokio::task::JoinHandle<Exit>,
}

impl Instance {
    fn start(under: &Under<'_>, scratch: &Scratch) -> Instance {
        let Under {
            runtime,
            world,
            id,
            version,
            program,
            memory_mb,
            ..
        } = *under;
        let stdin = Arc::new(Mailbox::default());
        let stderr = Captured::default();
        let (sent, written) = mpsc::unbounded_channel();
        let config = InstanceConfig {
            env: vec![
                ("SAUSAGE_ACTOR".into(), id.to_string()),
                ("SAUSAGE_VERSION".into(), version.to_string()),
                ("SAUSAGE_CANDIDATE".into(), "1".into()),
            ],
            mounts: world.mounts_with(scratch.root.join("data"), scratch.root.join("public")),
            stdin: stdin.attach(),
            stdout: InstanceConfig::output(Written {
                lines: Lines::default(),
                sent,
            }),
            stderr: InstanceConfig::output(stderr.clone()),
            // Candidates under test reach no network, and their scratch files stay here.
            network: Network::default(),
            replica: None,
            replay: None,
            memory_in_use: None,
            pack_at_first_wait: false,
        };
        let (runtime, program) = (runtime.clone(), program.clone());
        let run =
            tokio::spawn(async move { runtime.run_with(&program, config, memory_mb, || ()).await });
        Instance {
            stdin,
            written,
            stderr,
            run,
        }
    }

    /// Why a candidate that exited failed, with the tail of its stderr.
    fn exited(&self, exit: &Exit) -> String {
        let tail = self.stderr.tail(STDERR_TAIL_CHARS);
        if tail.is_empty() {
            format!("the candidate {exit} (stderr was empty)")
        } else {
            format!("the candidate {exit}; stderr ends with:\n{tail}")
        }
    }

    /// The next message the candidate writes; `Err` (for the step at `at`, which expected
    /// `wanted`) when it ends or writes nothing within [`EXPECT_TIMEOUT`].
    async fn next(&mut self, at: &str, wanted: &str) -> Result<Value, String> {
        // Waits for: the candidate's next message, its exit (its stdout closes first, so a
        // closed stdout waits for the exit to say how it ended), or the expect's timeout.
        let got = tokio::select! {
            got = self.written.recv() => got.ok_or(true),
            _ = tokio::time::sleep(EXPECT_TIMEOUT) => Err(false),
        };
        match got {
            Ok(got) => Ok(got),
            Err(true) => {
                let ended = tokio::time::timeout(EXPECT_TIMEOUT, &mut self.run).await;
                Err(match ended {
                    Ok(exit) => {
                        let exit = exit.unwrap_or_else(|e| Exit::Trap(e.to_string()));
                        format!("{at}: expected {wanted}, but {}", self.exited(&exit))
                    }
                    Err(_) => format!("{at}: expected {wanted}, but it closed its stdout"),
                })
            }
            Err(false) => Err(format!(
                "{at}: expected {wanted}, but no message came within {} s",
                EXPECT_TIMEOUT.as_secs()
            )),
        }
    }

    /// The next message that answers the request `id` (sent to `http` with that `reply_to`),
    /// as the public address would take it; the messages it writes meanwhile wait in `aside`
    /// for the `expect` steps after.
    async fn next_answer(
        &mut self,
        id: &str,
        aside: &mut VecDeque<Value>,
        at: &str,
        wanted: &str,
    ) -> Result<Value, String> {
        let mut first_other = None;
        loop {
            let got = self.next(at, wanted).await.map_err(|e| match &first_other {
                None => e,
                Some(other) => format!(
                    "{e}; it wrote {other} instead, which answers no request (an answer goes to \
                     `{HTTP_FROM}` with `reply_to` the request's `id`)"
                ),
            })?;
            if got["to"] == HTTP_FROM && got["reply_to"] == id {
                return Ok(got["body"].clone());
            }
            first_other.get_or_insert_with(|| got.to_string());
            aside.push_back(got);
        }
    }

    /// The whole answer to the request `id`: its `http_response`, and when that streams, every
    /// `http_chunk` up to its `http_end`, read as the public address reads them.
    async fn answer(
        &mut self,
        id: &str,
        aside: &mut VecDeque<Value>,
        at: &str,
        wanted: &str,
    ) -> Result<Answered, String> {
        let wrong = |e: String| format!("{at}: expected {wanted}, but {e}");
        let first = self.next_answer(id, aside, at, wanted).await?;
        let answer = answer(&crate::message::raw(&first)).map_err(wrong)?;
        let mut body = answer.body;
        if answer.stream {
            loop {
                let part = self.next_answer(id, aside, at, wanted).await?;
                match chunk(&part).map_err(wrong)? {
                    Chunk::Data(data) => body.extend(data),
                    Chunk::End => break,
                }
            }
        }
        Ok(Answered {
            status: answer.status.as_u16(),
            headers: answer.headers,
            body,
        })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // The test is over: kill the candidate; its writes go with the scratch folder.
        self.run.abort();
    }
}

async fn run_transcript(
    under: &Under<'_>,
    scratch: &Scratch,
    transcript: &Transcript,
) -> Result<(), String> {
    let mut instance = Instance::start(under, scratch);
    // What the candidate wrote while an `expect_http` waited for its answer, for the `expect`
    // steps after, in the order written.
    let mut aside = VecDeque::new();
    // The id of the request the last `http` step sent.
    let mut asked = String::new();
    for step in &transcript.steps {
        let at = format!("{} line {}", transcript.name, step.line);
        match &step.kind {
            StepKind::Send { from, body } => {
                let from = ActorId::parse(from).map_err(|e| format!("{at}: `from`: {e}"))?;
                deliver(&instance, &at, format!("t-{}", step.line), from, body)?;
            }
            StepKind::Http(request) => {
                let pass = (under.routes.find(&request.path))
                    .map(|(_, route)| route.pass.clone())
                    .unwrap_or_default();
                // Shaped as the public address's own ids (`http/m-12`).
                asked = format!("{HTTP_FROM}/t-{}", step.line);
                let from = ActorId::parse(HTTP_FROM).expect("`http` is a valid actor name");
                deliver(&instance, &at, asked.clone(), from, &request.to_body(&pass))?;
            }
            StepKind::Expect { to, body } => {
                let wanted = match to {
                    Some(to) => format!("{body} to `{to}`"),
                    None => body.to_string(),
                };
                let got = match aside.pop_front() {
                    Some(got) => got,
                    None => instance.next(&at, &wanted).await?,
                };
                let to_ok = to.as_deref().is_none_or(|to| got["to"] == to);
                if !to_ok || !transcript::matches(body, &got["body"]) {
                    let came = match got.get("to") {
                        Some(Value::String(to)) => format!("{} to `{to}`", got["body"]),
                        _ => format!("{} (published, no `to`)", got["body"]),
                    };
                    return Err(format!("{at}: expected {wanted}, got {came}"));
                }
            }
            StepKind::ExpectHttp(expected) => {
                let wanted = format!("an answer {}", expected.written);
                let answered = instance.answer(&asked, &mut aside, &at, &wanted).await?;
                transcript::judge_answer(expected, &answered).map_err(|e| format!("{at}: {e}"))?;
            }
        }
    }
    Ok(())
}

/// Puts a message on the candidate's stdin.
fn deliver(
    instance: &Instance,
    at: &str,
    id: String,
    from: ActorId,
    body: &Value,
) -> Result<(), String> {
    let envelope = Envelope {
        id,
        from,
        reply_to: None,
        speaker: None,
        schedule: None,
        trace: Trace::NONE,
        body: raw(body),
    };
    instance
        .stdin
        .try_push(Arc::new(envelope))
        .map_err(|_| format!("{at}: the candidate stopped reading its stdin"))
}

/// A candidate's stdout: every message it writes, parsed, for `expect` to judge. Lines that are
/// not messages are skipped, as routing would skip them.
struct Written {
    lines: Lines,
    sent: mpsc::UnboundedSender<Value>,
}

impl GuestOutput for Written {
    fn capacity(&mut self) -> usize {
        WRITE_CHUNK
    }

    fn write(&mut self, bytes: &[u8]) {
        let sent = &self.sent;
        self.lines.push(bytes, |line| {
            if let Line::Whole(line) = line
                && let Ok(message @ Value::Object(_)) = serde_json::from_slice::<Value>(line)
                && message["body"].is_object()
            {
                // The test may be over already; then nobody needs the message.
                let _ = sent.send(message);
            }
        });
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// Runs the smoke test: the candidate must stay up for [`SMOKE_TEST`] without input.
async fn smoke_test(under: &Under<'_>) -> Result<Value, String> {
    let scratch = Scratch::new(under.world, under.id, &format!("{}-smoke", under.version))
        .map_err(|e| format!("cannot prepare the scratch copy of its files: {e}"))?;
    let mut instance = Instance::start(under, &scratch);
    match tokio::time::timeout(SMOKE_TEST, &mut instance.run).await {
        Err(_) => Ok(json!({
            "smoke": format!("stayed up for {} s", SMOKE_TEST.as_secs()),
            "passed": true,
        })),
        Ok(exit) => {
            let exit = exit.unwrap_or_else(|e| Exit::Trap(e.to_string()));
            Err(format!(
                "{} during its {} s smoke test (it has no tests/*.jsonl, so it must start \
                 and keep reading stdin)",
                instance.exited(&exit),
                SMOKE_TEST.as_secs()
            ))
        }
    }
}
