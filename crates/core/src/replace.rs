//! Folders replaced together, whole or not at all: the swaps of upgrades and rollbacks (the
//! running source, `/data`, `/public`, snapshots).
//!
//! Each new tree is first built beside its target under a hidden temporary name, sharing files
//! with its origin by hard links ([`link_tree`]); a failure while building changes nothing.
//! Then every target is swapped with its new tree by an atomic exchange, and the old trees wait
//! under the hidden names until [`Applied::finish`] removes them, so [`Applied::undo`] can swap
//! them back (say, when the registry cannot be saved). A crash of the host leaves each folder
//! whole, old or new, and the next start removes the hidden leftovers.
//!
//! A swap that must agree with other state (the registry naming a version) is applied with a
//! log ([`Replacement::apply_logged`]): it lists every swap and the caller's note, so that a host
//! killed between the swaps and [`Applied::finish`] is settled at the next start by [`recover`],
//! forwards or backwards as the caller decides from the note.
//!
//! Invariant: a target is never removed before its replacement is complete beside it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fs::link_tree;
use crate::fs::{create_temporary_dir, exchange, write_atomically};

/// Replacements prepared and not applied yet; dropping it removes what was built.
#[must_use = "nothing changes until it is applied"]
pub struct Replacement {
    swaps: Vec<Swap>,
}

/// Replacements applied; the old trees are kept until [`Applied::finish`] or [`Applied::undo`].
#[must_use = "finish it, or undo it"]
pub struct Applied {
    swaps: Vec<Swap>,
    /// The log of [`Replacement::apply_logged`], removed once settled.
    log: Option<PathBuf>,
}

#[derive(Serialize, Deserialize)]
struct Swap {
    target: PathBuf,
    /// The new tree before the swap, the old one after it.
    beside: PathBuf,
    /// False when there was nothing at `target`: the swap is a plain rename.
    target_existed: bool,
    /// The inode of the new tree: after a kill, the target is the new tree if it has it.
    new_inode: u64,
}

/// What [`Replacement::apply_logged`] writes before the first swap.
#[derive(Serialize, Deserialize)]
struct Log {
    swaps: Vec<Swap>,
    /// The caller's note, given back to its decision in [`recover`].
    note: Value,
}

impl Replacement {
    /// Builds each new tree: `(from, to)` makes `to` a copy of the folder `from` (an empty
    /// folder when `from` is missing). Nothing at any `to` changes yet.
    pub fn prepare(pairs: Vec<(PathBuf, PathBuf)>) -> io::Result<Replacement> {
        let mut prepared = Replacement { swaps: Vec::new() };
        for (from, to) in pairs {
            let parent = to.parent().expect("a target inside some folder");
            std::fs::create_dir_all(parent)?;
            let beside = create_temporary_dir(parent)?;
            prepared.swaps.push(Swap {
                target_existed: to.exists(),
                target: to,
                beside: beside.clone(),
                new_inode: std::fs::metadata(&beside)?.ino(),
            });
            if from.is_dir() {
                link_tree(&from, &beside)?;
            }
        }
        Ok(prepared)
    }

    /// [`Replacement::apply`], after writing (synced) a log of the swaps with `note` at `log`.
    /// The log goes when the result is finished or undone; one found at start is settled by
    /// [`recover`].
    pub fn apply_logged(mut self, log: PathBuf, note: Value) -> io::Result<Applied> {
        let record = Log {
            swaps: std::mem::take(&mut self.swaps),
            note,
        };
        let written = std::fs::create_dir_all(log.parent().expect("a log inside a folder"))
            .and_then(|()| {
                let bytes = serde_json::to_vec(&record).expect("a log serialises");
                write_atomically(&log, &bytes)
            });
        self.swaps = record.swaps;
        written?;
        let mut applied = self.apply()?;
        applied.log = Some(log);
        Ok(applied)
    }

    /// Swaps every new tree in. On an error, the swaps done are swapped back and nothing has
    /// changed.
    pub fn apply(mut self) -> io::Result<Applied> {
        let swaps = std::mem::take(&mut self.swaps);
        let mut applied = Applied {
            swaps: Vec::new(),
            log: None,
        };
        for swap in swaps {
            let swapped = if swap.target_existed {
                exchange(&swap.beside, &swap.target)
            } else {
                std::fs::rename(&swap.beside, &swap.target)
            };
            match swapped {
                Ok(()) => applied.swaps.push(swap),
                Err(e) => {
                    remove_quietly(&swap.beside);
                    applied.undo();
                    return Err(e);
                }
            }
        }
        Ok(applied)
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        for swap in &self.swaps {
            remove_quietly(&swap.beside);
        }
    }
}

impl Applied {
    /// Removes the old trees: the replacement is final.
    pub fn finish(self) {
        for swap in &self.swaps {
            if swap.target_existed {
                remove_quietly(&swap.beside);
            }
        }
        self.forget_log();
    }

    /// Swaps the old trees back, last first, and removes the new ones.
    pub fn undo(self) {
        self.swap_back();
        self.forget_log();
    }

    fn forget_log(&self) {
        if let Some(log) = &self.log
            && let Err(e) = std::fs::remove_file(log)
        {
            tracing::warn!(
                "cannot remove {} ({e}); the next start settles it again",
                log.display()
            );
        }
    }

    fn swap_back(&self) {
        for swap in self.swaps.iter().rev() {
            let back = if swap.target_existed {
                exchange(&swap.beside, &swap.target)
            } else {
                std::fs::rename(&swap.target, &swap.beside)
            };
            match back {
                Ok(()) => remove_quietly(&swap.beside),
                Err(e) => tracing::error!(
                    "cannot put {} back as it was ({e}); the old content is in {}",
                    swap.target.display(),
                    swap.beside.display()
                ),
            }
        }
    }
}

/// Settles a swap a killed host left half done, from its log: when `keep_new` says yes to the
/// caller's note (the registry names the new version, say) and every swap was made, the old
/// trees go; otherwise every swap that was made is swapped back. Then the log goes. Run it
/// before the start's clean-up of temporaries, which would take the old trees with it.
pub fn recover(log: &Path, keep_new: impl FnOnce(&Value) -> bool) -> io::Result<()> {
    let record: Log = serde_json::from_slice(&std::fs::read(log)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let made = |swap: &Swap| {
        std::fs::symlink_metadata(&swap.target).is_ok_and(|m| m.ino() == swap.new_inode)
    };
    let all_made = record.swaps.iter().all(made);
    if all_made && keep_new(&record.note) {
        for swap in record.swaps.iter().filter(|s| s.target_existed) {
            remove_quietly(&swap.beside);
        }
    } else {
        let applied = Applied {
            swaps: record.swaps.into_iter().filter(made).collect(),
            log: None,
        };
        applied.swap_back();
    }
    std::fs::remove_file(log)
}

/// Removes a hidden tree; one left behind (an error) goes at the next start.
fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(
            "cannot remove {} ({e}); it goes at the next start",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    fn read(path: &Path) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = walk(path)
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p.strip_prefix(path).unwrap().display().to_string(), text)
            })
            .collect();
        files.sort();
        files
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
        files
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn applied_and_finished_every_target_is_its_new_tree_and_nothing_is_left_beside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(&root.join("new-a"), &[("x", "new x"), ("sub/y", "new y")]);
        tree(&root.join("a"), &[("x", "old x"), ("gone", "old")]);
        let pairs = vec![
            (root.join("new-a"), root.join("a")),
            (root.join("missing"), root.join("made/b")),
        ];
        Replacement::prepare(pairs)
            .unwrap()
            .apply()
            .unwrap()
            .finish();
        assert_eq!(
            read(&root.join("a")),
            [
                ("sub/y".into(), "new y".into()),
                ("x".into(), "new x".into())
            ]
        );
        assert!(read(&root.join("made/b")).is_empty());
        assert_eq!(names(root), ["a", "made", "new-a"]);
        assert_eq!(names(&root.join("made")), ["b"]);
    }

    #[test]
    fn undone_every_target_is_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(&root.join("new"), &[("x", "new")]);
        tree(&root.join("a"), &[("x", "old")]);
        let pairs = vec![
            (root.join("new"), root.join("a")),
            (root.join("new"), root.join("b")),
        ];
        Replacement::prepare(pairs).unwrap().apply().unwrap().undo();
        assert_eq!(read(&root.join("a")), [("x".into(), "old".into())]);
        assert!(!root.join("b").exists());
        assert_eq!(names(root), ["a", "new"]);
    }

    /// A host killed after the swaps: the log brings the targets forward or back.
    #[test]
    fn a_logged_swap_left_unsettled_is_recovered_forwards_or_backwards() {
        for keep in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            tree(&root.join("new"), &[("x", "new")]);
            tree(&root.join("a"), &[("x", "old")]);
            let log = root.join("logs/a.json");
            let applied = Replacement::prepare(vec![
                (root.join("new"), root.join("a")),
                (root.join("new"), root.join("b")),
            ])
            .unwrap()
            .apply_logged(log.clone(), serde_json::json!({"version": 2}))
            .unwrap();
            std::mem::forget(applied); // the kill
            recover(&log, |note| {
                assert_eq!(note["version"], 2);
                keep
            })
            .unwrap();
            let expected = if keep { "new" } else { "old" };
            assert_eq!(read(&root.join("a")), [("x".into(), expected.into())]);
            assert_eq!(root.join("b").exists(), keep);
            assert_eq!(
                names(root),
                if keep {
                    ["a", "b", "logs", "new"].as_slice()
                } else {
                    ["a", "logs", "new"].as_slice()
                }
            );
            assert!(!log.exists());
        }
    }

    /// A host killed part-way through the swaps: what was swapped goes back, whatever the note.
    #[test]
    fn a_logged_swap_killed_half_way_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(&root.join("new"), &[("x", "new")]);
        tree(&root.join("a"), &[("x", "old a")]);
        tree(&root.join("b"), &[("x", "old b")]);
        let log = root.join("a.log");
        let prepared = Replacement::prepare(vec![
            (root.join("new"), root.join("a")),
            (root.join("new"), root.join("b")),
        ])
        .unwrap();
        // Written as apply_logged writes it, then only the first swap made.
        let first = (&prepared.swaps[0].beside, &prepared.swaps[0].target);
        let record = Log {
            swaps: prepared
                .swaps
                .iter()
                .map(|s| Swap {
                    target: s.target.clone(),
                    beside: s.beside.clone(),
                    target_existed: s.target_existed,
                    new_inode: s.new_inode,
                })
                .collect(),
            note: Value::Null,
        };
        std::fs::write(&log, serde_json::to_vec(&record).unwrap()).unwrap();
        exchange(first.0, first.1).unwrap();
        std::mem::forget(prepared);
        recover(&log, |_| true).unwrap();
        assert_eq!(read(&root.join("a")), [("x".into(), "old a".into())]);
        assert_eq!(read(&root.join("b")), [("x".into(), "old b".into())]);
    }

    #[test]
    fn a_failure_while_preparing_or_applying_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(&root.join("new"), &[("x", "new")]);
        tree(&root.join("a"), &[("x", "old")]);
        // A target whose folder cannot be made: a file stands where it would go.
        std::fs::write(root.join("file"), "in the way").unwrap();
        let failing = vec![
            (root.join("new"), root.join("a")),
            (root.join("new"), root.join("file/b")),
        ];
        assert!(Replacement::prepare(failing).is_err());
        assert_eq!(read(&root.join("a")), [("x".into(), "old".into())]);
        assert_eq!(names(root), ["a", "file", "new"]);

        // The second swap fails after the first was done (its target is a file, which cannot
        // be exchanged with a folder's place under a missing parent): the first is undone.
        let prepared = Replacement::prepare(vec![
            (root.join("new"), root.join("a")),
            (root.join("new"), root.join("c")),
        ])
        .unwrap();
        std::fs::create_dir_all(root.join("c/blocker")).unwrap();
        std::fs::write(root.join("c/blocker/f"), "").unwrap();
        // `c` appeared after preparing, so the swap tries a plain rename onto a non-empty
        // folder, which fails.
        assert!(prepared.apply().is_err());
        assert_eq!(read(&root.join("a")), [("x".into(), "old".into())]);
        assert_eq!(names(root), ["a", "c", "file", "new"]);
    }
}
