//! Secrets sealed for a cluster (DESIGN §25): the hosts share the secrets file through NATS
//! sealed with XChaCha20-Poly1305 under a key kept on each host's disk
//! (`broker/secrets/cluster.key`, 32 random bytes, mode 0600), never in NATS. The first host
//! makes the key; every other host is given a copy of it by whoever runs them.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use crate::world::World;

const NONCE_BYTES: usize = 24;

/// The cluster key of a host.
pub struct ClusterKey(XChaCha20Poly1305);

impl ClusterKey {
    /// Where a host keeps the key.
    pub fn path(world: &World) -> PathBuf {
        world.secrets_dir().join("cluster.key")
    }

    /// The key this host has; `None` when it has none.
    pub fn read(world: &World) -> Result<Option<ClusterKey>> {
        let path = Self::path(world);
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => Ok(Some(ClusterKey(XChaCha20Poly1305::new(
                Key::from_slice(&bytes),
            )))),
            Ok(bytes) => bail!(
                "{}: a cluster key is 32 bytes, not {}; copy it again from a host of the cluster",
                path.display(),
                bytes.len()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("{}: cannot read", path.display())),
        }
    }

    /// The key this host has, made now when it has none (the first host of a cluster).
    pub fn read_or_make(world: &World) -> Result<ClusterKey> {
        if let Some(key) = Self::read(world)? {
            return Ok(key);
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
        let path = Self::path(world);
        let dir = path.parent().expect("in broker/secrets");
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .with_context(|| format!("{}: cannot make the folder", dir.display()))?;
        crate::fs::write_atomically(&path, &bytes)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)))
            .with_context(|| format!("{}: cannot keep the cluster key", path.display()))?;
        Ok(ClusterKey(XChaCha20Poly1305::new(Key::from_slice(&bytes))))
    }

    /// `bytes` sealed: a random nonce, then the ciphertext with its tag.
    pub fn seal(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
        let sealed = (self.0)
            .encrypt(XNonce::from_slice(&nonce), bytes)
            .map_err(|_| anyhow::anyhow!("cannot seal the secrets"))?;
        Ok([&nonce[..], &sealed].concat())
    }

    /// What [`ClusterKey::seal`] sealed; an error when another key sealed it, or it was
    /// changed.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>> {
        if sealed.len() < NONCE_BYTES {
            bail!("the shared secrets are too short to be sealed ones");
        }
        let (nonce, sealed) = sealed.split_at(NONCE_BYTES);
        (self.0)
            .decrypt(XNonce::from_slice(nonce), sealed)
            .map_err(|_| {
                anyhow::anyhow!(
                    "the shared secrets do not open with this host's cluster key: copy \
                 broker/secrets/cluster.key from a host of the cluster"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_bytes_open_with_the_same_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (
            World::new(dir.path().join("a")),
            World::new(dir.path().join("b")),
        );
        assert!(matches!(ClusterKey::read(&one), Ok(None)));
        let key = ClusterKey::read_or_make(&one).unwrap();
        let mode = std::fs::metadata(ClusterKey::path(&one))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sealed = key.seal(b"pl4nted").unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"pl4nted"));
        assert_eq!(key.open(&sealed).unwrap(), b"pl4nted");
        assert_ne!(
            key.seal(b"pl4nted").unwrap(),
            sealed,
            "a nonce of its own each time"
        );
        let other = ClusterKey::read_or_make(&two).unwrap();
        let err = other.open(&sealed).unwrap_err().to_string();
        assert!(err.contains("copy broker/secrets/cluster.key"), "{err}");
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert!(key.open(&changed).is_err());
        assert!(key.open(b"short").is_err());
        std::fs::write(ClusterKey::path(&two), b"too short").unwrap();
        let Err(err) = ClusterKey::read(&two) else {
            panic!("a short key is refused")
        };
        assert!(err.to_string().contains("32 bytes"), "{err}");
    }
}
