//! What the broker asks of the other hosts of its world (DESIGN §16, §19): two small ports,
//! beside `router::Remote` and `mailbox::MailboxStream`. The core names no NATS type; the
//! `sausage-cluster` crate implements these and the binary wires them. A single host has no
//! [`Ports`] (`Broker::cluster` is `None`), so no cluster code path runs there.
//!
//! Every method's error is for a person: subject first, with the fix when there is one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use futures_util::future::BoxFuture;

use super::mailbox::Mailbox;
use super::router::Router;
use crate::message::{ActorId, Envelope};
use crate::world::{Registry, World};

/// How a request forwarded by another host names a file it shipped with it
/// (`cluster:<name>`); the broker takes such a path only from the request it came with.
pub const SHIPPED_PREFIX: &str = "cluster:";

/// The cluster a broker runs its part of the world in.
#[derive(Clone)]
pub struct Ports {
    pub placement: Arc<dyn Placement>,
    pub shared: Arc<dyn SharedStore>,
}

/// A host as `list` shows it.
pub struct HostView {
    pub id: String,
    pub alive: bool,
    /// How many actors it runs.
    pub actors: usize,
}

/// Who runs what, and where a request goes.
pub trait Placement: Send + Sync {
    /// This host's id in the cluster.
    fn host(&self) -> &str;

    /// Joins `router` to the cluster, before any actor is placed: WASM actors' mailboxes become
    /// streams, message ids come from this host's block, and this host's inbox opens.
    fn attach<'a>(&'a self, router: &'a Arc<Router>) -> BoxFuture<'a, Result<()>>;

    /// The host that runs `id`, when that is another one.
    fn runs_elsewhere(&self, id: &ActorId) -> Option<String>;

    /// The host that holds `id`'s lease and what its heartbeat said of the actor's state
    /// (`None` when it did not say); `None` when no host holds it.
    fn placement_of(&self, id: &str) -> Option<(String, Option<String>)>;

    /// The hosts this one knows of.
    fn hosts(&self) -> Vec<HostView>;

    /// Chooses the host that runs the new actor `id` (this one when `here`) and gives it the
    /// lease.
    fn place_new<'a>(&'a self, id: &'a ActorId, here: bool) -> BoxFuture<'a, Result<String>>;

    /// Hands `request` (to the broker) to the broker of `host`, which runs the actor it is about
    /// and answers its sender.
    fn forward_request(&self, host: &str, request: Arc<Envelope>);

    /// Starts feeding `mailbox` from `id`'s stream: this host runs `id` now.
    fn consume(&self, id: &ActorId, mailbox: Arc<Mailbox>);

    /// Stops feeding `id`'s mailbox; what it holds unread goes back to the stream.
    fn stop_consuming(&self, id: &ActorId, mailbox: Option<&Mailbox>);

    /// Forgets the removed actor `id`: its lease, stream and snapshot.
    fn forget_actor<'a>(&'a self, id: &'a ActorId) -> BoxFuture<'a, ()>;

    /// Resolves once this host leads the native actor `native` (one led by one host,
    /// `message::Runs::LedByOne`).
    fn lead<'a>(&'a self, native: &'a str) -> BoxFuture<'a, ()>;

    /// Resolves once this host no longer leads `native`.
    fn lost<'a>(&'a self, native: &'a str) -> BoxFuture<'a, ()>;

    /// Leaves the cluster as the host stops: snapshots of the actors it `ran`, its leases given
    /// up so that others take them at once.
    fn leave<'a>(&'a self, ran: &'a [ActorId], world: &'a World) -> BoxFuture<'a, ()>;

    /// How long a host may go unheard before it loses its actors (said in errors).
    fn lease_timeout(&self) -> Duration;
}

/// What the hosts share: the registry, versions, snapshots of actors' files, credentials, the
/// schedules, and the files a forwarded request names.
pub trait SharedStore: Send + Sync {
    /// Writes what changed from `old` to `new` to the shared registry; an error means no other
    /// host sees the change, and the broker does not make it either.
    fn put_registry_changes<'a>(
        &'a self,
        old: &'a Registry,
        new: &'a Registry,
    ) -> BoxFuture<'a, Result<()>>;

    /// Shares version `version` of `id` (its wasm, meta and source) from this host's folder.
    fn upload_version<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
        version: u32,
    ) -> BoxFuture<'a, Result<()>>;

    /// Fetches version `version` of `id` into this host's folder when it lacks it.
    fn ensure_version<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
        version: u32,
    ) -> BoxFuture<'a, Result<()>>;

    /// Writes the credentials `id` was granted into this host's folder.
    fn take_credentials<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
    ) -> BoxFuture<'a, Result<()>>;

    /// Shares a snapshot of `id`'s `/data` and `/public` (unless nothing changed since the last).
    fn snapshot<'a>(&'a self, world: &'a World, id: &'a ActorId) -> BoxFuture<'a, Result<()>>;

    /// Where each change of `id`'s files goes before this host makes it (DESIGN §20,
    /// replicated commits), its `mailbox` telling what the actor had read; `None` when changes
    /// are not copied.
    fn replica(
        &self,
        world: &World,
        id: &ActorId,
        mailbox: Arc<Mailbox>,
    ) -> Option<Arc<dyn crate::runtime::Replica>> {
        let _ = (world, id, mailbox);
        None
    }

    /// Replaces `id`'s files with its last shared snapshot; false when it has none.
    fn restore_snapshot<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
    ) -> BoxFuture<'a, Result<bool>>;

    /// `request` with the files its `body` names shared and renamed `cluster:…`, so that the
    /// host it is forwarded to can read them.
    fn ship_files<'a>(
        &'a self,
        world: &'a World,
        request: Arc<Envelope>,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Arc<Envelope>>;

    /// A file another host shipped (`name`, after [`SHIPPED_PREFIX`]), copied to this host.
    fn fetch_shipped<'a>(
        &'a self,
        world: &'a World,
        name: &'a str,
    ) -> BoxFuture<'a, Result<PathBuf>>;

    /// Shares the scheduler's table (`schedules.json`'s bytes) for the next host that leads it.
    fn share_schedules(&self, table: Vec<u8>) -> BoxFuture<'_, Result<()>>;

    /// Writes the last shared table of schedules (when there is one) to `path`, whole.
    fn take_schedules<'a>(&'a self, path: &'a std::path::Path) -> BoxFuture<'a, Result<()>>;

    /// The copy of what waits for approval that the hosts share (DESIGN §25).
    fn approvals(&self) -> Arc<dyn crate::approvals::SharedApprovals>;
}
