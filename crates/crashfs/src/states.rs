//! The states a crash may leave, from the tree when recording began and the log of changes: at
//! every crash point, the prefix (everything that arrived survives, as after a kill of the
//! program), and the power-loss states a POSIX file system allows: every change not yet made
//! durable by a later barrier may be lost, alone or with others, and the last write not yet
//! durable may be torn.
//! Durable means: a file's writes and size changes once that file is `fsync`ed; a folder's
//! names (create, rename, link, remove) once that folder is `fsync`ed (both folders for a
//! rename between two). Identical trees are given once.
//! Invariant: a state is the base plus a subset of the prefix's ops applied in log order (only
//! the last write may be cut); no op is made up or changed.

use std::collections::HashSet;

use crate::tree::{Op, Tree};

/// Up to this many changes not yet durable at a crash point, every subset of them is lost in
/// turn (2^10 states at most per point); beyond it, each one alone, so a long run of unsynced
/// writes costs a number of states linear, not exponential, in its length.
pub const MAX_SUBSET_OPS: usize = 10;

/// A torn write keeps only its first sector (a disk writes sectors whole), or its first half.
pub const SECTOR: usize = 512;

/// What a crash state kept of the log's first `point` ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Every op up to the crash point: a kill, or a power loss after everything reached the
    /// disk.
    Prefix,
    /// Every op but these (indices in the log), which were not durable yet.
    Lost(Vec<usize>),
    /// Every op, but of the last write not yet durable (at index `op`) only the first
    /// `bytes` arrived.
    Torn { op: usize, bytes: usize },
}

impl Kept {
    /// Whether every op up to the crash point survived whole.
    pub fn is_prefix(&self) -> bool {
        *self == Kept::Prefix
    }
}

/// One state a crash may leave.
pub struct CrashState {
    /// How many ops of the log had arrived (0: none).
    pub point: usize,
    pub kept: Kept,
    pub tree: Tree,
}

/// For each op of a log, the index of the barrier after which it is durable, if any.
pub struct Durability(Vec<Option<usize>>);

impl Durability {
    pub fn of(log: &[Op]) -> Durability {
        let first = |from: usize, barrier: &dyn Fn(&Op) -> bool| {
            log.iter()
                .enumerate()
                .skip(from + 1)
                .find(|(_, op)| barrier(op))
                .map(|(at, _)| at)
        };
        let synced = |from: usize, file: u64| {
            first(from, &|op| matches!(op, Op::Fsync { ino } if *ino == file))
        };
        let dir_synced = |from: usize, dir: u64| {
            first(
                from,
                &|op| matches!(op, Op::FsyncDir { ino } if *ino == dir),
            )
        };
        let durable = log
            .iter()
            .enumerate()
            .map(|(at, op)| match op {
                Op::Write { ino, .. } | Op::SetSize { ino, .. } => synced(at, *ino),
                Op::Create { parent, .. } | Op::Link { parent, .. } | Op::Remove { parent, .. } => {
                    dir_synced(at, *parent)
                }
                Op::Rename { from, to, .. } => dir_synced(at, from.0)
                    .zip(dir_synced(at, to.0))
                    .map(|(a, b)| a.max(b)),
                Op::Fsync { .. } | Op::FsyncDir { .. } => Some(at),
            })
            .collect();
        Durability(durable)
    }

    /// Whether op `op` is durable once the first `point` ops arrived.
    pub fn durable(&self, op: usize, point: usize) -> bool {
        self.0[op].is_some_and(|barrier| barrier < point)
    }
}

/// How many states a log gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub ops: usize,
    pub points: usize,
    pub generated: usize,
    pub distinct: usize,
}

/// Calls `visit` for every distinct crash state of `log` run on `base` (the first state with a
/// given tree stands for the others), point by point, and for every prefix state (with `false`
/// when its tree was visited before), so a caller sees the file versions each point had.
/// `visit` returns false to stop the walk. Returns the counts.
pub fn crash_states(
    base: &Tree,
    log: &[Op],
    mut visit: impl FnMut(&CrashState, bool) -> bool,
) -> Counts {
    let durability = Durability::of(log);
    let known = base.content_hashes();
    let mut seen = HashSet::new();
    let mut counts = Counts {
        ops: log.len(),
        points: log.len() + 1,
        ..Counts::default()
    };
    let mut going = true;
    let mut offer = |state: CrashState| {
        if !going {
            return;
        }
        counts.generated += 1;
        let fresh = seen.insert(state.tree.hash(&known));
        counts.distinct += usize::from(fresh);
        if fresh || state.kept.is_prefix() {
            going = visit(&state, fresh);
        }
    };
    for point in 0..=log.len() {
        let prefix = &log[..point];
        offer(CrashState {
            point,
            kept: Kept::Prefix,
            tree: replay(base, prefix, &[]),
        });
        let loose: Vec<usize> = (0..point)
            .filter(|&at| !prefix[at].is_barrier() && !durability.durable(at, point))
            .collect();
        let lost_sets: Vec<Vec<usize>> = if loose.len() <= MAX_SUBSET_OPS {
            (1u32..1 << loose.len())
                .map(|mask| {
                    (0..loose.len())
                        .filter(|bit| mask & (1 << bit) != 0)
                        .map(|bit| loose[bit])
                        .collect()
                })
                .collect()
        } else {
            loose.iter().map(|&at| vec![at]).collect()
        };
        for lost in lost_sets {
            let tree = replay(base, prefix, &lost);
            offer(CrashState {
                point,
                kept: Kept::Lost(lost),
                tree,
            });
        }
        let last_write = (0..point)
            .rev()
            .find(|&at| matches!(prefix[at], Op::Write { .. }) && !durability.durable(at, point));
        if let Some(at) = last_write
            && let Op::Write { ino, offset, data } = &prefix[at]
        {
            let cuts = [SECTOR, data.len() / 2];
            for bytes in cuts.into_iter().filter(|&b| b > 0 && b < data.len()) {
                let mut torn = prefix.to_vec();
                torn[at] = Op::Write {
                    ino: *ino,
                    offset: *offset,
                    data: data[..bytes].to_vec(),
                };
                offer(CrashState {
                    point,
                    kept: Kept::Torn { op: at, bytes },
                    tree: replay(base, &torn, &[]),
                });
            }
        }
    }
    counts
}

/// `base` with the ops of `ops` applied in order, but those at the indices in `lost` (sorted).
fn replay(base: &Tree, ops: &[Op], lost: &[usize]) -> Tree {
    let mut tree = base.clone();
    for (at, op) in ops.iter().enumerate() {
        if lost.binary_search(&at).is_err() {
            tree.apply(op);
        }
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::ROOT;
    use std::path::Path;

    /// The log of `write_atomically` over an existing `f`: a temporary written and synced, then
    /// renamed over it, the folder not synced.
    fn atomic_replace() -> (Tree, Vec<Op>) {
        let mut base = Tree::empty();
        base.apply(&Op::Create {
            parent: ROOT,
            name: "f".into(),
            ino: 2,
            dir: false,
        });
        base.apply(&Op::Write {
            ino: 2,
            offset: 0,
            data: b"old".to_vec(),
        });
        let log = vec![
            Op::Create {
                parent: ROOT,
                name: "t".into(),
                ino: 3,
                dir: false,
            },
            Op::Write {
                ino: 3,
                offset: 0,
                data: vec![b'n'; 1000],
            },
            Op::Fsync { ino: 3 },
            Op::Rename {
                from: (ROOT, "t".into()),
                to: (ROOT, "f".into()),
                moved: 3,
                displaced: Some(2),
                exchange: false,
            },
        ];
        (base, log)
    }

    #[test]
    fn a_synced_write_is_never_lost_and_an_unsynced_rename_may_be() {
        let (base, log) = atomic_replace();
        let mut seen = Vec::new();
        let counts = crash_states(&base, &log, |state, _| {
            seen.push(state.tree.read(Path::new("f")).unwrap().to_vec());
            true
        });
        assert_eq!(counts.points, 5);
        assert!(seen.contains(&b"old".to_vec()));
        assert!(seen.contains(&vec![b'n'; 1000]));
        // Before the sync, the write may be torn or lost, but only under the temporary's name;
        // after it, the rename moves the whole file or nothing.
        assert!(
            seen.iter().all(|f| f == b"old" || *f == vec![b'n'; 1000]),
            "{seen:?}"
        );
    }

    #[test]
    fn without_the_sync_the_rename_may_land_with_a_torn_or_lost_write() {
        let (base, mut log) = atomic_replace();
        log.remove(2);
        let mut contents = HashSet::new();
        crash_states(&base, &log, |state, _| {
            contents.insert(state.tree.read(Path::new("f")).unwrap().len());
            true
        });
        assert!(contents.contains(&0), "the write lost: {contents:?}");
        assert!(contents.contains(&SECTOR), "the write torn: {contents:?}");
    }
}
