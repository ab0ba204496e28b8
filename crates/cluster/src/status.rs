//! `sausage cluster status --cluster nats://ADDR[,…]`: the hosts, the leases and the mailboxes'
//! depths, read from the stores by a process that is not a host.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;

use super::fence::LEASE_PREFIX;
use super::placement::Beat;
use super::{
    HOSTS_BUCKET, LEASE_TIMEOUT_SECS, MAILBOX_STREAM, REGISTRY_BUCKET, Servers, connect, mailboxes,
};

/// The report, as printed.
pub async fn report(servers: &Servers) -> Result<String> {
    let connection = connect(servers, "sausage cluster status").await?;
    let js = jetstream::new(connection.client);
    let missing = || {
        format!(
            "{servers} holds no cluster yet: start a host with `sausage run WORLD --cluster \
             {servers} --host-id ID`"
        )
    };
    let hosts = js.get_key_value(HOSTS_BUCKET).await.with_context(missing)?;
    let registry = js
        .get_key_value(REGISTRY_BUCKET)
        .await
        .with_context(missing)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);

    let mut out = String::new();
    let mut states: BTreeMap<String, String> = BTreeMap::new();
    writeln!(out, "hosts:").expect("a string takes writes");
    for (host, entry) in entries(&hosts, "").await? {
        let beat: Beat = serde_json::from_slice(&entry.value).unwrap_or_default();
        let ago = now - entry.created.unix_timestamp();
        let alive = !beat.leaving && ago < LEASE_TIMEOUT_SECS;
        let state = match (alive, beat.leaving) {
            (true, _) => "alive",
            (false, true) => "left",
            (false, false) => "dead",
        };
        writeln!(
            out,
            "  {host:<16} {state:<6} {:>6} actors   heard {ago} s ago",
            beat.states.len()
        )
        .expect("a string takes writes");
        states.extend(beat.states);
    }
    let mut depths: BTreeMap<String, u64> = BTreeMap::new();
    if let Ok(stream) = js.get_stream(MAILBOX_STREAM).await {
        let mut subjects = stream
            .info_with_subjects(format!("{}.>", mailboxes::SUBJECT_PREFIX))
            .await
            .context("the mailbox stream's subjects")?;
        while let Some(Ok((subject, count))) = subjects.next().await {
            if let Some(actor) = subject.strip_prefix(&format!("{}.", mailboxes::SUBJECT_PREFIX)) {
                depths.insert(actor.to_string(), count as u64);
            }
        }
    }
    writeln!(out, "leases:").expect("a string takes writes");
    writeln!(
        out,
        "  {:<24} {:<16} {:<10} publications waiting",
        "actor", "host", "state"
    )
    .expect("a string takes writes");
    for (actor, entry) in entries(&registry, LEASE_PREFIX).await? {
        let host = String::from_utf8_lossy(&entry.value);
        let state = states.get(&actor).map_or("-", String::as_str);
        let waiting = depths.get(&actor).copied().unwrap_or(0);
        writeln!(out, "  {actor:<24} {host:<16} {state:<10} {waiting}")
            .expect("a string takes writes");
    }
    Ok(out)
}

/// Every live key of a bucket that starts with `prefix`, with its entry, by the key's rest.
async fn entries(store: &kv::Store, prefix: &str) -> Result<BTreeMap<String, kv::Entry>> {
    let mut all = BTreeMap::new();
    let mut keys = store.keys().await?;
    while let Some(key) = keys.next().await {
        let key = key?;
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        if let Some(entry) = store.entry(&key).await?
            && entry.operation == kv::Operation::Put
        {
            all.insert(rest.to_string(), entry);
        }
    }
    Ok(all)
}
