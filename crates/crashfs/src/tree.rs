//! Files in memory, by inode: what the recording file system serves, and what a crash state is.
//! A change is an [`Op`]; [`Tree::apply`] is the only place one takes effect, whether it comes
//! from a program through FUSE or from a replay.
//! Invariant: an op names inodes, not paths, so a replay that left out an earlier op (a rename,
//! a create) never applies a later one to another file: an op whose inode is missing does nothing.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::hash::Hasher;
use std::io;
use std::path::{Component, Path};
use std::sync::Arc;
use std::time::SystemTime;

/// An inode number, as `stat` shows it on the mount.
pub type Ino = u64;

/// The root folder's inode (FUSE's own number for it).
pub const ROOT: Ino = 1;

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    /// Permission bits; not recorded as ops (no check looks at them).
    pub mode: u32,
    /// Names that lead here.
    pub links: u32,
    pub mtime: SystemTime,
}

#[derive(Clone, Debug)]
pub enum Kind {
    /// Shared until a replay writes it, so a state costs only the files it changes.
    File(Arc<Vec<u8>>),
    Dir(BTreeMap<OsString, Ino>),
}

/// One change, as the file system received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A new file or folder `ino` named `name` in `parent` (create, mknod, mkdir).
    Create {
        parent: Ino,
        name: OsString,
        ino: Ino,
        dir: bool,
    },
    Write {
        ino: Ino,
        offset: u64,
        data: Vec<u8>,
    },
    /// A truncate, or an allocation that grew the file.
    SetSize {
        ino: Ino,
        size: u64,
    },
    /// `rename` or, with `exchange`, `RENAME_EXCHANGE`: `moved` goes from one name to the other;
    /// `displaced` is what the target name held (swapped back to the source by an exchange).
    Rename {
        from: (Ino, OsString),
        to: (Ino, OsString),
        moved: Ino,
        displaced: Option<Ino>,
        exchange: bool,
    },
    Link {
        ino: Ino,
        parent: Ino,
        name: OsString,
    },
    /// An unlink or rmdir of `ino` named `name` in `parent`.
    Remove {
        parent: Ino,
        name: OsString,
        ino: Ino,
    },
    /// The barriers: `fsync` (or `fdatasync`) of a file, `fsync` of a folder.
    Fsync {
        ino: Ino,
    },
    FsyncDir {
        ino: Ino,
    },
}

impl Op {
    /// Whether the op changes nothing by itself (a barrier).
    pub fn is_barrier(&self) -> bool {
        matches!(self, Op::Fsync { .. } | Op::FsyncDir { .. })
    }
}

#[derive(Clone, Debug)]
pub struct Tree {
    nodes: HashMap<Ino, Node>,
    /// The next inode number a new file gets; never goes down, so a number is never reused.
    pub next_ino: Ino,
}

impl Tree {
    /// A tree holding only an empty root folder.
    pub fn empty() -> Tree {
        let root = Node {
            kind: Kind::Dir(BTreeMap::new()),
            mode: 0o755,
            links: 2,
            mtime: SystemTime::now(),
        };
        Tree {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
        }
    }

    /// A copy of the folder `dir` on disk: its files and folders (symlinks and other kinds are
    /// refused: the worlds the tests copy hold none).
    pub fn from_dir(dir: &Path) -> io::Result<Tree> {
        let mut tree = Tree::empty();
        tree.copy_in(dir, ROOT)?;
        Ok(tree)
    }

    fn copy_in(&mut self, dir: &Path, parent: Ino) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            let ino = self.next_ino;
            let op = Op::Create {
                parent,
                name: entry.file_name(),
                ino,
                dir: meta.is_dir(),
            };
            self.apply(&op);
            self.node_mut(ino).expect("just made").mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                self.copy_in(&entry.path(), ino)?;
            } else if meta.is_file() {
                let data = std::fs::read(entry.path())?;
                self.apply(&Op::Write {
                    ino,
                    offset: 0,
                    data,
                });
            } else {
                return Err(io::Error::other(format!(
                    "{}: neither a file nor a folder",
                    entry.path().display()
                )));
            }
        }
        Ok(())
    }

    pub fn node(&self, ino: Ino) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn node_mut(&mut self, ino: Ino) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// The entries of folder `ino`; `None` when it is not a folder.
    pub fn entries(&self, ino: Ino) -> Option<&BTreeMap<OsString, Ino>> {
        match &self.nodes.get(&ino)?.kind {
            Kind::Dir(entries) => Some(entries),
            Kind::File(_) => None,
        }
    }

    /// The inode `name` names in folder `parent`.
    pub fn child(&self, parent: Ino, name: &OsStr) -> Option<Ino> {
        self.entries(parent)?.get(name).copied()
    }

    /// The inode at `path`, relative to the root (`a/b`).
    pub fn lookup(&self, path: &Path) -> Option<Ino> {
        let mut ino = ROOT;
        for component in path.components() {
            match component {
                Component::Normal(name) => ino = self.child(ino, name)?,
                Component::CurDir => {}
                _ => return None,
            }
        }
        Some(ino)
    }

    /// The bytes of the file at `path`; `None` when there is none.
    pub fn read(&self, path: &Path) -> Option<&[u8]> {
        match &self.nodes.get(&self.lookup(path)?)?.kind {
            Kind::File(data) => Some(data),
            Kind::Dir(_) => None,
        }
    }

    /// Every path under the root that leads to a file or folder, folders before their contents.
    pub fn paths(&self) -> Vec<(std::path::PathBuf, Ino)> {
        let mut out = Vec::new();
        let mut stack = vec![(std::path::PathBuf::new(), ROOT)];
        while let Some((path, ino)) = stack.pop() {
            if let Some(entries) = self.entries(ino) {
                for (name, child) in entries.iter().rev() {
                    stack.push((path.join(name), *child));
                }
            }
            if ino != ROOT {
                out.push((path, ino));
            }
        }
        out
    }

    /// Makes `op` take effect. An op that refers to an inode or folder this tree does not hold
    /// (its creation was left out of a replay) does nothing.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Create {
                parent,
                name,
                ino,
                dir,
            } => {
                if self.entries(*parent).is_none() || self.nodes.contains_key(ino) {
                    return;
                }
                let kind = match dir {
                    true => Kind::Dir(BTreeMap::new()),
                    false => Kind::File(Arc::default()),
                };
                let node = Node {
                    kind,
                    mode: if *dir { 0o755 } else { 0o644 },
                    links: 0,
                    mtime: SystemTime::now(),
                };
                self.nodes.insert(*ino, node);
                self.next_ino = self.next_ino.max(ino + 1);
                self.set_entry(*parent, name, Some(*ino));
            }
            Op::Write { ino, offset, data } => {
                let Some(bytes) = self.file_mut(*ino) else {
                    return;
                };
                let start = *offset as usize;
                let end = start + data.len();
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[start..end].copy_from_slice(data);
            }
            Op::SetSize { ino, size } => {
                if let Some(bytes) = self.file_mut(*ino) {
                    bytes.resize(*size as usize, 0);
                }
            }
            Op::Rename {
                from,
                to,
                moved,
                displaced,
                exchange,
            } => {
                let present = |ino: &Ino| self.nodes.contains_key(ino);
                if !present(moved) || self.entries(from.0).is_none() || self.entries(to.0).is_none()
                {
                    return;
                }
                if *exchange {
                    let back = displaced.filter(present);
                    self.set_entry(from.0, &from.1, back);
                    self.set_entry(to.0, &to.1, Some(*moved));
                } else {
                    if self.child(from.0, &from.1) == Some(*moved) {
                        self.set_entry(from.0, &from.1, None);
                    }
                    self.set_entry(to.0, &to.1, Some(*moved));
                }
            }
            Op::Link { ino, parent, name } => {
                if self.nodes.contains_key(ino) && self.entries(*parent).is_some() {
                    self.set_entry(*parent, name, Some(*ino));
                }
            }
            Op::Remove { parent, name, ino } => {
                if self.child(*parent, name) == Some(*ino) {
                    self.set_entry(*parent, name, None);
                }
            }
            Op::Fsync { .. } | Op::FsyncDir { .. } => {}
        }
    }

    /// Points `name` in folder `parent` at `ino` (or removes it), keeping link counts.
    fn set_entry(&mut self, parent: Ino, name: &OsStr, ino: Option<Ino>) {
        let Some(Node {
            kind: Kind::Dir(entries),
            mtime,
            ..
        }) = self.nodes.get_mut(&parent)
        else {
            return;
        };
        *mtime = SystemTime::now();
        let old = match ino {
            Some(ino) => entries.insert(name.to_os_string(), ino),
            None => entries.remove(name),
        };
        if let Some(old) = old.and_then(|old| self.nodes.get_mut(&old)) {
            old.links = old.links.saturating_sub(1);
        }
        if let Some(new) = ino.and_then(|ino| self.nodes.get_mut(&ino)) {
            new.links += 1;
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Option<&mut Vec<u8>> {
        let node = self.nodes.get_mut(&ino)?;
        node.mtime = SystemTime::now();
        match &mut node.kind {
            Kind::File(data) => Some(Arc::make_mut(data)),
            Kind::Dir(_) => None,
        }
    }

    /// A hash of what a program can see: every path, its kind and its bytes (not inode numbers,
    /// times or modes). `known` holds hashes of file contents already computed, by the address
    /// of their shared bytes; it must only hold contents that stay alive while it is used.
    pub fn hash(&self, known: &HashMap<usize, u64>) -> u64 {
        let mut hasher = rustc_hash::FxHasher::default();
        for (path, ino) in self.paths() {
            hasher.write(path.as_os_str().as_encoded_bytes());
            hasher.write_u8(0);
            match &self.nodes[&ino].kind {
                Kind::Dir(_) => hasher.write_u8(1),
                Kind::File(data) => {
                    let address = Arc::as_ptr(data) as usize;
                    let content = known
                        .get(&address)
                        .copied()
                        .unwrap_or_else(|| content_hash(data));
                    hasher.write_u64(content);
                }
            }
        }
        hasher.finish()
    }

    /// The content hashes of every file of this tree, by address, for [`Tree::hash`]: valid as
    /// long as this tree (or a clone sharing its files) is alive and those files unchanged.
    pub fn content_hashes(&self) -> HashMap<usize, u64> {
        self.nodes
            .values()
            .filter_map(|node| match &node.kind {
                Kind::File(data) => Some((Arc::as_ptr(data) as usize, content_hash(data))),
                Kind::Dir(_) => None,
            })
            .collect()
    }
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write_usize(bytes.len());
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> OsString {
        s.into()
    }

    #[test]
    fn a_rename_moves_the_inode_and_an_exchange_swaps_two() {
        let mut tree = Tree::empty();
        for (ino, n) in [(2, "a"), (3, "b")] {
            tree.apply(&Op::Create {
                parent: ROOT,
                name: name(n),
                ino,
                dir: false,
            });
            tree.apply(&Op::Write {
                ino,
                offset: 0,
                data: n.as_bytes().to_vec(),
            });
        }
        tree.apply(&Op::Rename {
            from: (ROOT, name("a")),
            to: (ROOT, name("b")),
            moved: 2,
            displaced: Some(3),
            exchange: true,
        });
        assert_eq!(tree.read(Path::new("b")), Some(&b"a"[..]));
        assert_eq!(tree.read(Path::new("a")), Some(&b"b"[..]));
        tree.apply(&Op::Rename {
            from: (ROOT, name("a")),
            to: (ROOT, name("b")),
            moved: 3,
            displaced: Some(2),
            exchange: false,
        });
        assert_eq!(tree.read(Path::new("b")), Some(&b"b"[..]));
        assert_eq!(tree.read(Path::new("a")), None);
        assert_eq!(tree.node(2).unwrap().links, 0);
    }

    #[test]
    fn an_op_on_a_file_whose_creation_was_left_out_does_nothing() {
        let mut tree = Tree::empty();
        tree.apply(&Op::Write {
            ino: 7,
            offset: 0,
            data: b"x".to_vec(),
        });
        tree.apply(&Op::Rename {
            from: (ROOT, name("t")),
            to: (ROOT, name("f")),
            moved: 7,
            displaced: None,
            exchange: false,
        });
        assert!(tree.paths().is_empty());
    }
}
