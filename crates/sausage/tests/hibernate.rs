//! Hibernation with real guests, at the runtime's boundary (lines in, lines out, the runtime's
//! count of packed instances): idle instances are packed by the sweep thread, and a packed
//! guest answers as before, ends cleanly or is killed, its memory whole; and through a whole host
//! (its `/metrics`), a world starting 256 actors or more packs each at its first wait.

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use sausage_core::runtime::stdio::{BoxFuture, GuestInput, GuestOutput};
use sausage_core::runtime::{Exit, InstanceConfig, Program, Runtime};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// A guest's stdin: lines the test pushes, then the end.
#[derive(Default)]
struct Input {
    queue: Mutex<(VecDeque<u8>, bool)>,
    arrived: Notify,
}

impl Input {
    fn push(&self, line: &Value) {
        let mut queue = self.queue.lock().unwrap();
        queue.0.extend(format!("{line}\n").bytes());
        self.arrived.notify_one();
    }

    fn close(&self) {
        self.queue.lock().unwrap().1 = true;
        self.arrived.notify_one();
    }
}

impl GuestInput for Input {
    fn read(&self, max: usize) -> Option<Bytes> {
        let mut queue = self.queue.lock().unwrap();
        if queue.0.is_empty() {
            return (!queue.1).then(Bytes::new);
        }
        let n = max.min(queue.0.len());
        Some(queue.0.drain(..n).collect::<Vec<u8>>().into())
    }

    fn readable(&self) -> BoxFuture<'_> {
        Box::pin(async move {
            loop {
                {
                    let queue = self.queue.lock().unwrap();
                    if !queue.0.is_empty() || queue.1 {
                        return;
                    }
                }
                self.arrived.notified().await;
            }
        })
    }
}

/// A guest's stdout: every chunk it writes, to the test.
struct Output(mpsc::UnboundedSender<Vec<u8>>);

impl GuestOutput for Output {
    fn capacity(&mut self) -> usize {
        1 << 20
    }

    fn write(&mut self, bytes: &[u8]) {
        // The test may have stopped listening; the guest need not know.
        let _ = self.0.send(bytes.to_vec());
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// One running guest: its input, its output as lines, and how it ended.
struct Guest {
    input: Arc<Input>,
    output: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Vec<u8>,
    run: tokio::task::JoinHandle<Exit>,
}

impl Guest {
    /// Starts a guest; with `pack_at_first_wait`, as an actor of a world that starts many.
    fn start(runtime: &Arc<Runtime>, program: &Program, pack_at_first_wait: bool) -> Guest {
        let input = Arc::new(Input::default());
        let (out, output) = mpsc::unbounded_channel();
        let (err, _) = mpsc::unbounded_channel();
        let config = InstanceConfig {
            env: vec![("SAUSAGE_ACTOR".into(), "sleepy".into())],
            mounts: Vec::new(),
            stdin: input.clone(),
            stdout: InstanceConfig::output(Output(out)),
            stderr: InstanceConfig::output(Output(err)),
            network: Default::default(),
            replica: None,
            replay: None,
            memory_in_use: None,
            pack_at_first_wait,
        };
        let (runtime, program) = (runtime.clone(), program.clone());
        let run = tokio::task::spawn_local(async move { runtime.run(&program, config).await });
        Guest {
            input,
            output,
            pending: Vec::new(),
            run,
        }
    }

    /// The next line the guest writes.
    async fn line(&mut self) -> Value {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = tokio::time::timeout(support::PATIENCE, self.output.recv())
                .await
                .expect("the guest answers in time")
                .expect("the guest's stdout is open");
            self.pending.extend(chunk);
        }
    }
}

/// Sweeps (as the sweep thread does every `HIBERNATE_AFTER`) until `runtime` holds exactly
/// `n` packed instances: a first sweep notes which are idle, the next packs them.
async fn until_packed(runtime: &Runtime, n: usize) {
    let deadline = Instant::now() + support::PATIENCE;
    while runtime.hibernated().instances != n {
        assert!(
            Instant::now() < deadline,
            "{n} instances packed: {:?}",
            runtime.hibernated()
        );
        runtime.hibernate_idle();
        tokio::time::sleep(SWEEP_PAUSE).await;
    }
}

/// Between two sweeps of the test: time for a guest that was just answered to reach its next
/// read (a sweep while it runs leaves it awake, and the loop sweeps again).
const SWEEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A runtime of its own and the `echo` actor compiled for it.
fn echo_runtime() -> (Arc<Runtime>, Program) {
    let runtime = Runtime::new(None).unwrap();
    let echo = runtime
        .compile(&std::fs::read(support::wasm("echo")).unwrap())
        .unwrap();
    (runtime, echo)
}

#[test]
fn idle_guests_are_packed_and_answer_as_before_then_end_or_are_killed_while_packed() {
    let (runtime, echo) = echo_runtime();
    let world = sausage_core::scheduler().unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&world, async {
        let mut guests: Vec<Guest> = (0..3)
            .map(|_| Guest::start(&runtime, &echo, false))
            .collect();
        for round in 0..3 {
            // Every guest answers each message whole (a body that spans several pages of its
            // heap), so its heap, stack and statics came back as they were.
            for (n, guest) in guests.iter_mut().enumerate() {
                let blob: String = (0..20_000)
                    .map(|i| char::from(b'a' + ((i * 7 + n + round) % 26) as u8))
                    .collect();
                let body = json!({"type": "check", "round": round, "guest": n, "blob": blob});
                guest
                    .input
                    .push(&json!({"id": format!("m-{round}"), "from": "test", "body": body}));
                let reply = guest.line().await;
                assert_eq!(reply["body"], body, "guest {n}, round {round}");
                assert_eq!(reply["reply_to"], format!("m-{round}"));
            }
            until_packed(&runtime, 3).await;
            let packed = runtime.hibernated();
            eprintln!("round {round}: 3 idle echo instances packed: {packed:?}");
            assert!(
                packed.kept_bytes * 4 < packed.resident_bytes,
                "an idle echo keeps a small part of its pages: {packed:?}"
            );
        }

        // A packed guest ends cleanly at the end of its input; a packed one is killed (its
        // future dropped, which unwinds its fiber on a stack unpacked first).
        let mut guests = guests.into_iter();
        let ends = guests.next().unwrap();
        ends.input.close();
        assert_eq!(ends.run.await.unwrap(), Exit::Clean);
        let killed = guests.next().unwrap();
        killed.run.abort();
        assert!(killed.run.await.unwrap_err().is_cancelled());
        until_packed(&runtime, 1).await;

        // The last one, woken once more, still answers.
        let mut last = guests.next().unwrap();
        last.input
            .push(&json!({"id": "m-last", "from": "test", "body": {"type": "last"}}));
        assert_eq!(last.line().await["body"]["type"], "last");
        last.input.close();
        assert_eq!(last.run.await.unwrap(), Exit::Clean);
        assert_eq!(runtime.hibernated().instances, 0);
    });
}

#[test]
fn a_guest_started_among_many_is_packed_as_soon_as_it_waits_and_only_that_once() {
    let (runtime, echo) = echo_runtime();
    let world = sausage_core::scheduler().unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&world, async {
        let mut guests: Vec<Guest> = (0..2)
            .map(|_| Guest::start(&runtime, &echo, true))
            .collect();
        let mut alone = Guest::start(&runtime, &echo, false);
        // No sweep: the two are packed as they reach their first read.
        let deadline = Instant::now() + support::PATIENCE;
        while runtime.hibernated().instances != 2 {
            assert!(Instant::now() < deadline, "{:?}", runtime.hibernated());
            tokio::time::sleep(SWEEP_PAUSE).await;
        }
        let packed = runtime.hibernated();
        assert!(packed.kept_bytes * 4 < packed.resident_bytes, "{packed:?}");
        // The third, started alone, waits with its pages until a sweep finds it idle.
        tokio::time::sleep(SWEEP_PAUSE).await;
        assert_eq!(runtime.hibernated().instances, 2);

        // Each answers as before, and waits again awake: packed at its first wait only.
        for (n, guest) in guests.iter_mut().chain([&mut alone]).enumerate() {
            let body = json!({"type": "check", "guest": n});
            guest
                .input
                .push(&json!({"id": format!("m-{n}"), "from": "test", "body": body}));
            assert_eq!(guest.line().await["body"], body, "guest {n}");
        }
        tokio::time::sleep(SWEEP_PAUSE).await;
        assert_eq!(runtime.hibernated().instances, 0);
        // Their pages went back to the kernel before they were woken, never after: a sweep
        // (which gives back whatever still waits) leaves them whole, heap and stack.
        runtime.hibernate_idle();
        for (n, guest) in guests.iter_mut().enumerate() {
            let blob: String = (0..20_000)
                .map(|i| char::from(b'a' + ((i * 7 + n) % 26) as u8))
                .collect();
            let body = json!({"type": "check", "guest": n, "blob": blob});
            guest
                .input
                .push(&json!({"id": "again", "from": "test", "body": body}));
            assert_eq!(guest.line().await["body"], body, "guest {n}");
        }
        for guest in guests.into_iter().chain([alone]) {
            guest.input.close();
            assert_eq!(guest.run.await.unwrap(), Exit::Clean);
        }
    });
}

/// The host's count of packed instances, from its `/metrics`.
fn hibernated_instances(web: &support::web::WebHost, token: &str) -> u64 {
    let auth = format!("Bearer {token}");
    let metrics = support::http::request(
        &web.addr,
        "GET",
        "/metrics",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    let text = metrics.text();
    let line = text
        .lines()
        .find(|l| l.starts_with("sausage_hibernated_instances "))
        .unwrap_or_else(|| panic!("no sausage_hibernated_instances in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_world_starting_256_actors_packs_each_at_its_first_wait_and_one_of_255_waits_for_the_sweep() {
    use sausage_core::runtime::hibernate::HIBERNATE_AFTER;
    for (count, packed_at_start) in [(256, true), (255, false)] {
        let world = support::TestWorld::new();
        for n in 0..count {
            world.install(&format!("e{n}"), "echo");
        }
        let token =
            support::sausage(&["metrics", "token", "--world", world.root.to_str().unwrap()]);
        let token = support::text(&token.stdout).trim().to_string();
        let started = Instant::now();
        let mut web = support::web::WebHost::start(&world);
        // A sweep packs only instances idle for HIBERNATE_AFTER: whatever is packed sooner was
        // packed at its first wait.
        let before_a_sweep = started + HIBERNATE_AFTER;
        if packed_at_start {
            while hibernated_instances(&web, &token) < count {
                assert!(
                    Instant::now() < before_a_sweep,
                    "{count} actors started: {} packed after {HIBERNATE_AFTER:?}",
                    hibernated_instances(&web, &token)
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        } else {
            support::eventually("every actor running", || {
                let list = web.host.request(json!({"type": "list"}));
                (list["actors"].as_array().unwrap().iter())
                    .filter(|a| a["state"] == "running" && a["kind"] == "wasm")
                    .count()
                    == count as usize
            });
            std::thread::sleep(std::time::Duration::from_secs(1));
            assert_eq!(
                hibernated_instances(&web, &token),
                0,
                "{count} actors started"
            );
            assert!(
                Instant::now() < before_a_sweep,
                "the machine took {HIBERNATE_AFTER:?} to start {count} actors: a sweep may have \
                 run, so this says nothing"
            );
        }
        // Each answers as before.
        web.host.tell("e7", json!({"type": "ping"}));
        assert_eq!(web.host.wait_type("e7", "ping")["type"], "ping");
    }
}
