//! What waits for approval (DESIGN §25), shared by the hosts: one key of the registry holding
//! the approvals file, changed by compare-and-set on its revision, so that a decision is made
//! once whichever host's page or console makes it, and a held request outlives its host.

use std::sync::Arc;

use anyhow::{Result, anyhow};
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use sausage_core::approvals::{Approvals, SharedApprovals};
use sausage_core::broker::Broker;

use super::Cluster;

/// The registry's key for the shared approvals file.
const APPROVALS: &str = "approvals";

/// The shared approvals file in the registry, read and replaced from blocking threads.
pub struct SharedFile {
    registry: kv::Store,
    runtime: tokio::runtime::Handle,
}

impl SharedFile {
    pub fn new(cluster: &Cluster) -> SharedFile {
        SharedFile {
            registry: cluster.registry.clone(),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl SharedApprovals for SharedFile {
    fn read(&self) -> Result<Option<(Vec<u8>, u64)>> {
        let entry = (self.runtime.block_on(self.registry.entry(APPROVALS)))
            .map_err(|e| anyhow!("the cluster's approvals cannot be read: {e}"))?;
        Ok(entry
            .filter(|entry| entry.operation == kv::Operation::Put)
            .map(|entry| (entry.value.to_vec(), entry.revision)))
    }

    fn replace(&self, bytes: &[u8], revision: Option<u64>) -> Result<bool> {
        let value = bytes.to_vec().into();
        let written = match revision {
            None => match self
                .runtime
                .block_on(self.registry.create(APPROVALS, value))
            {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e.to_string()),
            },
            Some(revision) => {
                let update = self.registry.update(APPROVALS, value, revision);
                match self.runtime.block_on(update) {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        written.map_err(|e| anyhow!("the cluster's approvals cannot be written: {e}"))
    }
}

impl Cluster {
    /// Keeps this host's `broker/approvals.json` what the cluster shares, for what reads the
    /// folder (`sausage approvals`, `sausage status`; the broker itself reads the shared
    /// copy), and has the broker carry out what was decided on another host for this one.
    pub async fn follow_approvals(self: Arc<Self>, broker: Arc<Broker>) {
        let here = Approvals::new(&broker.world);
        let mut outage = super::Outage::default();
        loop {
            // Made again a moment after it fails (its node died, say).
            match self.registry.watch_with_history(APPROVALS).await {
                Ok(mut shared) => {
                    outage.ended(|| "the cluster's approvals are followed".into());
                    while let Some(Ok(entry)) = shared.next().await {
                        if entry.operation != kv::Operation::Put {
                            continue;
                        }
                        let bytes = entry.value.to_vec();
                        let here = here.clone();
                        let followed = tokio::task::spawn_blocking(move || here.follow(&bytes));
                        if let Ok(Err(e)) = followed.await {
                            tracing::warn!("{e:#}");
                        }
                        broker.carry_out_decided().await;
                    }
                }
                Err(e) => outage
                    .failed(|| format!("the cluster's approvals are not followed for now: {e}")),
            }
            tokio::time::sleep(super::HEARTBEAT).await;
        }
    }
}
