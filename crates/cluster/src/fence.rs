//! The lease revision as the fencing token (DESIGN §20): every write a host makes for an actor
//! (its registry entry, which snapshot is current, the schedules of the scheduler it leads) is
//! a publish into the registry bucket's stream that JetStream refuses unless the actor's lease
//! (`lease.<id>`, in the same stream) is still at the revision this host holds it at
//! (`Nats-Expected-Last-Subject-Sequence` checked against the lease's subject).
//!
//! Nothing here compares revisions itself: the server does, at the moment it stores the write.
//! A refused write is said, naming the actor and its new owner, and placement stops the actor
//! here at its next look ([`super::placement`]).

use anyhow::{Result, bail};
use async_nats::HeaderMap;
use async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv;

use super::Cluster;

/// The header that points `Nats-Expected-Last-Subject-Sequence` at another subject of the
/// stream (NATS 2.11): the lease's, while the write goes to its own key.
const EXPECTED_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";
/// The key-value operation header of a delete, as the bucket's own deletes write it.
const KV_OPERATION: &str = "KV-Operation";

/// The key of `id`'s lease (an actor's, or a native's that one host leads) in the registry.
pub fn lease_key(id: &str) -> String {
    format!("{LEASE_PREFIX}{id}")
}

pub const LEASE_PREFIX: &str = "lease.";

/// What a write for an actor is conditional on.
#[derive(Clone, Copy, Debug)]
pub struct Token {
    /// The lease's revision the write expects (see [`Cluster::token`]).
    pub revision: u64,
    /// Whether this host holds the lease: then its deadline must allow the write too (a
    /// write for an actor nobody holds, at seeding or a spawn, needs no lease of its own).
    pub held: bool,
}

impl Cluster {
    /// The revision of lease `id` that this host's writes for it are conditional on: the one it
    /// holds the lease at while it runs the actor; for an actor no host holds (a new one), the
    /// revision of the lease's removal, or 0 when it never had one; a revision no lease has
    /// when another host holds it (see `placement::View::token`).
    pub(crate) fn token(&self, id: &str) -> Token {
        let view = self.view.lock().expect("view lock");
        Token {
            revision: view.token(id),
            held: view.holds(id),
        }
    }

    /// Writes `value` (`None`: deletes) at `key` of the registry bucket, conditional on lease
    /// `id` being at [`Cluster::token`]; `what` names the write for the log. Refused when
    /// another host took the lease since, or when this host holds it and its own deadline has
    /// passed.
    pub(crate) async fn fenced_write(
        &self,
        id: &str,
        key: &str,
        value: Option<bytes::Bytes>,
        what: &str,
    ) -> Result<u64> {
        let token = self.token(id);
        self.write_under(id, token, key, value, what).await
    }

    /// [`Cluster::fenced_write`] with the token given.
    pub(crate) async fn write_under(
        &self,
        id: &str,
        token: Token,
        key: &str,
        value: Option<bytes::Bytes>,
        what: &str,
    ) -> Result<u64> {
        if token.held && !self.run_until.allows(self.run_until.term()) {
            bail!(
                "actor {id}: its {what} was not written: host {} has not renewed its leases \
                 for {} s",
                self.host,
                super::SELF_STOP_AFTER.as_secs()
            );
        }
        let prefix = &self.registry.prefix;
        let mut headers = HeaderMap::new();
        let revision = token.revision.to_string();
        headers.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, revision.as_str());
        headers.insert(
            EXPECTED_SUBJECT,
            format!("{prefix}{}", lease_key(id)).as_str(),
        );
        if value.is_none() {
            headers.insert(KV_OPERATION, "DEL");
        }
        let stored = match self
            .js
            .publish_with_headers(format!("{prefix}{key}"), headers, value.unwrap_or_default())
            .await
        {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match stored {
            Ok(ack) => Ok(ack.sequence),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                let owner = self.lease_now(id).await.map(|(host, _)| host);
                let owner = owner.as_deref().unwrap_or("none");
                tracing::warn!(
                    "actor {id}: host {} does not hold its lease (host {owner} does); its {what} \
                     was not written, and the actor stops here if it runs here",
                    self.host
                );
                bail!("actor {id}: its {what} was refused: host {owner} runs it now")
            }
            Err(e) => bail!("actor {id}: its {what} cannot be written: {e}"),
        }
    }

    /// Reads lease `id` from the store (not the watch, which may lag) into this host's view and
    /// returns its holder and revision, when some host holds it.
    pub(crate) async fn lease_now(&self, id: &str) -> Option<(String, u64)> {
        let entry = self.registry.entry(lease_key(id)).await.ok()??;
        self.saw_lease_entry(id, &entry);
        (entry.operation == kv::Operation::Put).then(|| {
            let host = String::from_utf8_lossy(&entry.value).into_owned();
            (host, entry.revision)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::REGISTRY_BUCKET;
    use super::*;
    use std::process::{Child, Command, Stdio};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A `nats-server -js` of this test's own on a free port (`scripts/install-nats` puts the
    /// binary in `target/nats-venv`), killed when dropped.
    struct Server {
        child: Child,
        port: u16,
        _store: tempfile::TempDir,
    }

    impl Server {
        fn start() -> Server {
            let binary = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/nats-venv/bin/nats-server");
            assert!(
                binary.exists(),
                "{}: run scripts/install-nats",
                binary.display()
            );
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let store = tempfile::tempdir().unwrap();
            let child = Command::new(binary)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
                .arg(store.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Server {
                child,
                port,
                _store: store,
            }
        }

        async fn join(&self, host: &str) -> Arc<Cluster> {
            let servers: crate::Servers =
                format!("nats://127.0.0.1:{}", self.port).parse().unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match Cluster::join(&servers, host, None).await {
                    Ok(cluster) => return cluster,
                    Err(e) if Instant::now() > deadline => panic!("{e:#}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            // The server is this test's own.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Lets `cluster` write (as a renewal just made would).
    fn renewed(cluster: &Cluster) {
        let (term, now) = (cluster.run_until.term(), Instant::now());
        assert!(
            cluster
                .run_until
                .renewed(term, now, now + Duration::from_secs(60))
        );
    }

    #[tokio::test]
    async fn a_new_actor_is_placed_once_and_a_second_placing_takes_no_lease() {
        let server = Server::start();
        let (a, b) = (server.join("a").await, server.join("b").await);
        let id = sausage_core::message::ActorId::parse("fresh").unwrap();
        assert_eq!(a.place_new(&id, true).await.unwrap(), "a");
        // b finds it placed: it runs where its lease is, and b takes nothing.
        assert_eq!(b.place_new(&id, true).await.unwrap(), "a");
        let lease = a.registry.get(lease_key("fresh")).await.unwrap().unwrap();
        assert_eq!(&lease[..], b"a", "a's lease stays a's");
    }

    #[tokio::test]
    async fn a_write_under_a_lease_revision_another_host_replaced_is_refused() {
        let server = Server::start();
        let (a, b) = (server.join("a").await, server.join("b").await);
        renewed(&a);
        renewed(&b);
        assert_eq!(a.registry.name, REGISTRY_BUCKET);

        // a holds the lease of `counter` and writes under it.
        let held = a
            .registry
            .create(lease_key("counter"), "a".into())
            .await
            .unwrap();
        a.view.lock().unwrap().hold("counter", held);
        a.fenced_write(
            "counter",
            "snapshot.counter",
            Some("one".into()),
            "snapshot",
        )
        .await
        .expect("a holds the lease");
        a.fenced_write(
            "counter",
            "snapshot.counter",
            Some("two".into()),
            "snapshot",
        )
        .await
        .expect("its own writes do not move the lease");

        // b takes the lease over (a was silent too long, say): a's next write is refused, and
        // says who holds the lease now.
        b.registry
            .update(lease_key("counter"), "b".into(), held)
            .await
            .unwrap();
        let refused = a
            .fenced_write(
                "counter",
                "snapshot.counter",
                Some("stale".into()),
                "snapshot",
            )
            .await
            .unwrap_err();
        assert!(
            format!("{refused}").contains("host b runs it now"),
            "{refused}"
        );
        let stale_delete = a
            .fenced_write("counter", "actor.counter", None, "registry entry")
            .await;
        assert!(stale_delete.is_err(), "a delete is fenced too");
        let current = a.registry.get("snapshot.counter").await.unwrap().unwrap();
        assert_eq!(&current[..], b"two", "the stale write changed nothing");
        // a's view now names b: placement stops the actor here at its next look.
        assert_eq!(
            a.view.lock().unwrap().holder("counter").as_deref(),
            Some("b")
        );

        // b writes under the revision it took the lease at.
        b.fenced_write(
            "counter",
            "snapshot.counter",
            Some("three".into()),
            "snapshot",
        )
        .await
        .expect_err("b has not recorded its lease yet");
        let taken = b
            .registry
            .entry(lease_key("counter"))
            .await
            .unwrap()
            .unwrap();
        b.view.lock().unwrap().hold("counter", taken.revision);
        b.fenced_write(
            "counter",
            "snapshot.counter",
            Some("three".into()),
            "snapshot",
        )
        .await
        .expect("the new owner writes");

        // A host whose deadline passed writes nothing, whatever it holds.
        b.run_until.end_term();
        assert!(
            b.fenced_write(
                "counter",
                "snapshot.counter",
                Some("late".into()),
                "snapshot"
            )
            .await
            .is_err()
        );
        let current = b.registry.get("snapshot.counter").await.unwrap().unwrap();
        assert_eq!(&current[..], b"three");
    }
}
