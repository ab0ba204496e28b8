//! The broker's ports (`sausage_core::broker::ports`), implemented by a host's membership of
//! the cluster: each method is a three-line adapter to the [`Cluster`] method that does the
//! work (in `placement` or `shared`), so the NATS side reads without the traits in the way.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use futures_util::future::BoxFuture;
use sausage_core::broker::mailbox::Mailbox;
use sausage_core::broker::ports::{HostView, Placement, SharedStore};
use sausage_core::broker::router::{Remote, Router};
use sausage_core::message::{ActorId, Envelope};
use sausage_core::world::{Registry, World};

use super::{Cluster, LEASE_TIMEOUT};

impl Placement for Cluster {
    fn host(&self) -> &str {
        &self.host
    }

    fn attach<'a>(&'a self, router: &'a Arc<Router>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let ids = self.reserve_ids().await?;
            router.join(self.streams.clone(), self.streams.clone(), ids);
            self.streams.attach(router).await
        })
    }

    fn runs_elsewhere(&self, id: &ActorId) -> Option<String> {
        Cluster::runs_elsewhere(self, id)
    }

    fn placement_of(&self, id: &str) -> Option<(String, Option<String>)> {
        Cluster::placement_of(self, id)
    }

    fn hosts(&self) -> Vec<HostView> {
        self.hosts_view()
    }

    fn place_new<'a>(&'a self, id: &'a ActorId, here: bool) -> BoxFuture<'a, Result<String>> {
        Box::pin(Cluster::place_new(self, id, here))
    }

    fn forward_request(&self, host: &str, request: Arc<Envelope>) {
        self.streams.forward(host, &ActorId::broker(), &request);
    }

    fn consume(&self, id: &ActorId, mailbox: Arc<Mailbox>) {
        Cluster::consume(self, id, mailbox)
    }

    fn stop_consuming(&self, id: &ActorId, mailbox: Option<&Mailbox>) {
        Cluster::stop_consuming(self, id, mailbox)
    }

    fn forget_actor<'a>(&'a self, id: &'a ActorId) -> BoxFuture<'a, ()> {
        Box::pin(Cluster::forget_actor(self, id))
    }

    fn lead<'a>(&'a self, native: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(Cluster::lead(self, native))
    }

    fn lost<'a>(&'a self, native: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(Cluster::lost(self, native))
    }

    fn leave<'a>(&'a self, ran: &'a [ActorId], world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(Cluster::leave(self, ran, world))
    }

    fn lease_timeout(&self) -> Duration {
        LEASE_TIMEOUT
    }
}

impl SharedStore for Cluster {
    fn put_registry_changes<'a>(
        &'a self,
        old: &'a Registry,
        new: &'a Registry,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::put_registry_changes(self, old, new))
    }

    fn upload_version<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
        version: u32,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::upload_version(self, world, id, version))
    }

    fn ensure_version<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
        version: u32,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::ensure_version(self, world, id, version))
    }

    fn take_credentials<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::take_credentials(self, world, id))
    }

    fn snapshot<'a>(&'a self, world: &'a World, id: &'a ActorId) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::snapshot(self, world, id))
    }

    fn replica(
        &self,
        world: &World,
        id: &ActorId,
        mailbox: Arc<Mailbox>,
    ) -> Option<Arc<dyn sausage_core::runtime::Replica>> {
        Some(Arc::new(crate::commits::ActorReplica {
            commits: self.commits.clone(),
            world: world.clone(),
            id: id.clone(),
            mailbox,
            runtime: tokio::runtime::Handle::current(),
            run_until: self.run_until.clone(),
            term: self.run_until.term(),
        }))
    }

    fn restore_snapshot<'a>(
        &'a self,
        world: &'a World,
        id: &'a ActorId,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(Cluster::restore_snapshot(self, world, id))
    }

    fn ship_files<'a>(
        &'a self,
        world: &'a World,
        request: Arc<Envelope>,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Arc<Envelope>> {
        Box::pin(Cluster::ship_files(self, world, request, body))
    }

    fn fetch_shipped<'a>(
        &'a self,
        world: &'a World,
        name: &'a str,
    ) -> BoxFuture<'a, Result<PathBuf>> {
        Box::pin(Cluster::fetch_shipped(self, world, name))
    }

    fn share_schedules(&self, table: Vec<u8>) -> BoxFuture<'_, Result<()>> {
        Box::pin(Cluster::share_schedules(self, table))
    }

    fn take_schedules<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<()>> {
        Box::pin(Cluster::take_schedules(self, path))
    }

    fn approvals(&self) -> Arc<dyn sausage_core::approvals::SharedApprovals> {
        Arc::new(super::approvals::SharedFile::new(self))
    }
}
