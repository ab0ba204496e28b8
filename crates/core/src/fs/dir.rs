//! Directories of a mount and the resolution of guest paths in them.
//! Every operation that takes a guest path goes through [`Dir::resolve`], the only place that turns
//! a guest path into a host path. Invariant: a resolved path stays under its mount's root, has no
//! symlink on the way and no temporary name in it.

use super::file::File;
use super::{BeforeChange, Change, Changing, Edit, ErrorCode, FsResult, Mount, is_temporary_name};
use std::ffi::OsString;
use std::fs::{FileTimes, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Longest guest path accepted, in bytes. Longer ones fail with `name-too-long` before any work,
/// so a guest cannot make the host split and join megabytes of path on every call. Linux's own
/// `PATH_MAX` is the same.
pub const MAX_GUEST_PATH_LEN: usize = 4096;

/// The root of one mount, shared by every directory opened under it.
#[derive(Debug)]
struct Root {
    host: PathBuf,
    writable: bool,
}

/// An open directory of a guest: a mount and a path under its root. It holds no host handle, so
/// it follows the path: renaming the folder away makes it fail with `no-entry`.
#[derive(Clone, Debug)]
pub struct Dir {
    root: Arc<Root>,
    /// Names from the mount's root to this directory; none is `.`, `..`, empty or temporary.
    rel: Vec<OsString>,
}

/// What kind of thing a name is. Symlinks and special files exist only when the host made them;
/// guests can list them but not use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Directory,
    File,
    Symlink,
    Other,
}

/// The metadata a guest may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub kind: Kind,
    pub size: u64,
    pub links: u64,
    pub accessed: Option<SystemTime>,
    pub modified: Option<SystemTime>,
    pub changed: Option<SystemTime>,
    /// Device and inode identify the object (`is-same-object`, `metadata-hash`).
    pub device: u64,
    pub inode: u64,
}

/// One name listed in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
}

/// How `set-times` changes one timestamp.
#[derive(Clone, Copy, Debug)]
pub enum SetTime {
    NoChange,
    Now,
    At(SystemTime),
}

/// What a guest asks of `open-at`, with the names of `wasi:filesystem`'s open and descriptor
/// flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub create: bool,
    pub exclusive: bool,
    pub truncate: bool,
    pub directory: bool,
    pub read: bool,
    pub write: bool,
}

/// The result of `open-at`: a directory or a file.
#[derive(Debug)]
pub enum Opened {
    Dir(Dir),
    File(File),
}

/// A guest path resolved inside a mount.
struct Resolved {
    rel: Vec<OsString>,
    host: PathBuf,
    /// The guest path ended with `/`: it must name a directory.
    dir_only: bool,
}

/// Whether a path names something that must exist or something about to be created. A temporary
/// name does not exist for a guest (`no-entry`) and cannot be created (`not-permitted`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Existing,
    New,
}

impl Stat {
    pub(super) fn from_metadata(meta: &Metadata) -> Stat {
        let kind = if meta.is_dir() {
            Kind::Directory
        } else if meta.is_file() {
            Kind::File
        } else if meta.is_symlink() {
            Kind::Symlink
        } else {
            Kind::Other
        };
        // `ctime` has no portable accessor; a negative one (before 1970) is left out. The
        // nanoseconds are below 10^9, so the cast keeps them.
        let changed = u64::try_from(meta.ctime()).ok().and_then(|secs| {
            SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, meta.ctime_nsec() as u32))
        });
        Stat {
            kind,
            size: meta.len(),
            links: meta.nlink(),
            accessed: meta.accessed().ok(),
            modified: meta.modified().ok(),
            changed,
            device: meta.dev(),
            inode: meta.ino(),
        }
    }
}

impl Dir {
    /// The root directory of a mount: the guest's preopen.
    pub fn root(mount: &Mount) -> Dir {
        Dir {
            root: Arc::new(Root {
                host: mount.host.clone(),
                writable: mount.writable,
            }),
            rel: Vec::new(),
        }
    }

    /// False on a read-only mount, where every change fails with `read-only`.
    pub fn writable(&self) -> bool {
        self.root.writable
    }

    fn deny_read_only(&self) -> FsResult<()> {
        if self.root.writable {
            Ok(())
        } else {
            Err(ErrorCode::ReadOnly)
        }
    }

    /// Turns a guest path relative to this directory into a host path, deny-first:
    /// - too long: `name-too-long`; empty: `no-entry`; a NUL byte: `invalid`;
    /// - absolute, or `..` past the mount's root: `not-permitted`;
    /// - a temporary name: `no-entry`, or `not-permitted` as the last name of a `Want::New`;
    /// - a symlink on the way or at the end (existing ones are made by the host only): `not-permitted`.
    ///
    /// `.` and empty components (`a//b`) are skipped, as POSIX does.
    fn resolve(&self, path: &str, want: Want) -> FsResult<Resolved> {
        if path.len() > MAX_GUEST_PATH_LEN {
            return Err(ErrorCode::NameTooLong);
        }
        if path.is_empty() {
            return Err(ErrorCode::NoEntry);
        }
        if path.contains('\0') {
            return Err(ErrorCode::Invalid);
        }
        if path.starts_with('/') {
            return Err(ErrorCode::NotPermitted);
        }
        let parts: Vec<&str> = path
            .split('/')
            .filter(|part| !part.is_empty() && *part != ".")
            .collect();
        let mut rel = self.rel.clone();
        for (i, part) in parts.iter().enumerate() {
            if *part == ".." {
                if rel.pop().is_none() {
                    return Err(ErrorCode::NotPermitted);
                }
            } else if is_temporary_name(part.as_ref()) {
                // Checked on every name, not on the result: `.sausage-tmp-x/..` would otherwise
                // reveal that the temporary exists.
                return Err(if want == Want::New && i + 1 == parts.len() {
                    ErrorCode::NotPermitted
                } else {
                    ErrorCode::NoEntry
                });
            } else {
                rel.push(part.into());
            }
        }
        let mut host = self.root.host.clone();
        // Nothing exists below a missing name, so no symlink either: checking stops there and the
        // operation itself reports the missing name.
        let mut checking = true;
        for name in &rel {
            host.push(name);
            if checking {
                match std::fs::symlink_metadata(&host) {
                    Ok(meta) if meta.is_symlink() => return Err(ErrorCode::NotPermitted),
                    Ok(_) => {}
                    Err(_) => checking = false,
                }
            }
        }
        let dir_only = path.ends_with('/') || path.ends_with("/.") || path == ".";
        Ok(Resolved {
            rel,
            host,
            dir_only,
        })
    }

    /// Resolves a path naming an entry to change (rename, unlink, rmdir). The mount's root is
    /// not an entry of anything the guest can reach: `busy`, as Linux says for a mount point.
    fn resolve_entry(&self, path: &str, want: Want) -> FsResult<Resolved> {
        let resolved = self.resolve(path, want)?;
        if resolved.rel.is_empty() {
            return Err(ErrorCode::Busy);
        }
        Ok(resolved)
    }

    /// `open-at`. Opening for writing (write or truncate) returns a file that writes to a hidden
    /// temporary and commits when its last handle is closed; the target is untouched until then.
    pub fn open(&self, path: &str, options: OpenOptions) -> FsResult<Opened> {
        let OpenOptions {
            create,
            exclusive,
            truncate,
            directory,
            read,
            write,
        } = options;
        if directory && (create || exclusive || truncate) {
            return Err(ErrorCode::Invalid);
        }
        let writes = write || truncate;
        if writes || create {
            self.deny_read_only()?;
        }
        let want = if create { Want::New } else { Want::Existing };
        let target = self.resolve(path, want)?;
        match std::fs::symlink_metadata(&target.host) {
            Ok(meta) if meta.is_dir() => {
                if writes {
                    Err(ErrorCode::IsDirectory)
                } else if create && exclusive {
                    Err(ErrorCode::Exist)
                } else {
                    Ok(Opened::Dir(Dir {
                        root: self.root.clone(),
                        rel: target.rel,
                    }))
                }
            }
            Ok(meta) if meta.is_file() => {
                if directory || target.dir_only {
                    Err(ErrorCode::NotDirectory)
                } else if create && exclusive {
                    Err(ErrorCode::Exist)
                } else if writes {
                    Ok(Opened::File(File::begin_write(
                        target.host,
                        !truncate,
                        read,
                        write,
                    )?))
                } else {
                    Ok(Opened::File(File::open_read(
                        &target.host,
                        read,
                        self.root.writable,
                    )?))
                }
            }
            // Symlinks were refused by `resolve`; fifos, sockets and devices could block or
            // reach beyond the mount, so guests cannot open them.
            Ok(_) => Err(ErrorCode::NotPermitted),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                if directory || target.dir_only {
                    return Err(ErrorCode::IsDirectory);
                }
                // The new file appears only when the writer commits.
                Ok(Opened::File(File::begin_write(
                    target.host,
                    false,
                    read,
                    write,
                )?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `create-directory-at`: takes effect at once.
    pub fn create_dir(&self, path: &str) -> FsResult<()> {
        self.create_dir_noting(path, &|_| Ok(()))
    }

    /// [`Dir::create_dir`], calling `before` just before the folder is made.
    pub fn create_dir_noting(&self, path: &str, before: BeforeChange<'_>) -> FsResult<()> {
        self.deny_read_only()?;
        let target = self.resolve(path, Want::New)?;
        if target.rel.is_empty() {
            return Err(ErrorCode::Exist);
        }
        before(&Changing {
            landing: Change::Present {
                path: target.host.clone(),
            },
            edit: Edit::MakeDir { path: &target.host },
            durable: false,
        })?;
        Ok(std::fs::create_dir(&target.host)?)
    }

    /// `remove-directory-at`: takes effect at once; fails with `not-empty` while it holds
    /// anything, temporaries of open writers included.
    pub fn remove_dir(&self, path: &str) -> FsResult<()> {
        self.remove_dir_noting(path, &|_| Ok(()))
    }

    /// [`Dir::remove_dir`], calling `before` just before the folder is removed.
    pub fn remove_dir_noting(&self, path: &str, before: BeforeChange<'_>) -> FsResult<()> {
        self.deny_read_only()?;
        let target = self.resolve_entry(path, Want::Existing)?;
        before(&Changing {
            landing: Change::Absent {
                path: target.host.clone(),
            },
            edit: Edit::Remove { path: &target.host },
            durable: false,
        })?;
        Ok(std::fs::remove_dir(&target.host)?)
    }

    /// `unlink-file-at`: takes effect at once. Open writers of the file still commit on close.
    pub fn unlink(&self, path: &str) -> FsResult<()> {
        self.unlink_noting(path, &|_| Ok(()))
    }

    /// [`Dir::unlink`], calling `before` just before the file is removed.
    pub fn unlink_noting(&self, path: &str, before: BeforeChange<'_>) -> FsResult<()> {
        self.deny_read_only()?;
        let target = self.resolve_entry(path, Want::Existing)?;
        let meta = std::fs::symlink_metadata(&target.host)?;
        if meta.is_dir() {
            return Err(ErrorCode::IsDirectory);
        }
        if target.dir_only {
            return Err(ErrorCode::NotDirectory);
        }
        before(&Changing {
            landing: Change::Absent {
                path: target.host.clone(),
            },
            edit: Edit::Remove { path: &target.host },
            durable: false,
        })?;
        Ok(std::fs::remove_file(&target.host)?)
    }

    /// `rename-at`: takes effect at once, within one mount (`cross-device` between mounts, so
    /// a guest copies instead, as it would between two disks).
    pub fn rename(&self, old: &str, new_dir: &Dir, new: &str) -> FsResult<()> {
        self.rename_noting(old, new_dir, new, &|_| Ok(()))
    }

    /// [`Dir::rename`], calling `before` just before the rename.
    pub fn rename_noting(
        &self,
        old: &str,
        new_dir: &Dir,
        new: &str,
        before: BeforeChange<'_>,
    ) -> FsResult<()> {
        self.deny_read_only()?;
        new_dir.deny_read_only()?;
        if !Arc::ptr_eq(&self.root, &new_dir.root) {
            return Err(ErrorCode::CrossDevice);
        }
        let from = self.resolve_entry(old, Want::Existing)?;
        let to = new_dir.resolve_entry(new, Want::New)?;
        // Checked first so a missing source says `no-entry` whatever the target.
        let meta = std::fs::symlink_metadata(&from.host)?;
        before(&Changing {
            landing: Change::Holds {
                path: to.host.clone(),
                dev: meta.dev(),
                ino: meta.ino(),
            },
            edit: Edit::Rename {
                from: &from.host,
                to: &to.host,
            },
            durable: false,
        })?;
        Ok(std::fs::rename(&from.host, &to.host)?)
    }

    /// `stat` of this directory.
    pub fn stat(&self) -> FsResult<Stat> {
        self.stat_at(".")
    }

    /// `stat-at`. Symlinks are never followed, whatever the guest asks: they are refused.
    pub fn stat_at(&self, path: &str) -> FsResult<Stat> {
        let target = self.resolve(path, Want::Existing)?;
        let meta = std::fs::symlink_metadata(&target.host)?;
        if target.dir_only && !meta.is_dir() {
            return Err(ErrorCode::NotDirectory);
        }
        Ok(Stat::from_metadata(&meta))
    }

    /// `set-times` of this directory.
    pub fn set_times(&self, accessed: SetTime, modified: SetTime) -> FsResult<()> {
        self.set_times_at(".", accessed, modified)
    }

    /// `set-times-at`: takes effect at once (on the committed file, not on open writers).
    pub fn set_times_at(&self, path: &str, accessed: SetTime, modified: SetTime) -> FsResult<()> {
        self.deny_read_only()?;
        let target = self.resolve(path, Want::Existing)?;
        let meta = std::fs::symlink_metadata(&target.host)?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(ErrorCode::NotPermitted);
        }
        // Opening read-only is enough: `futimens` asks for ownership, not write access.
        let handle = std::fs::File::open(&target.host)?;
        set_file_times(&handle, accessed, modified)
    }

    /// `read-directory`: every name but temporaries, in the host's order.
    pub fn entries(&self) -> FsResult<Vec<Entry>> {
        let this = self.resolve(".", Want::Existing)?;
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&this.host)? {
            let entry = entry?;
            let name = entry.file_name();
            if is_temporary_name(&name) {
                continue;
            }
            let kind = entry.file_type()?;
            let kind = if kind.is_dir() {
                Kind::Directory
            } else if kind.is_file() {
                Kind::File
            } else if kind.is_symlink() {
                Kind::Symlink
            } else {
                Kind::Other
            };
            let name = name
                .into_string()
                .map_err(|_| ErrorCode::IllegalByteSequence)?;
            entries.push(Entry { name, kind });
        }
        Ok(entries)
    }
}

/// Applies `set-times` to an open host file.
pub(super) fn set_file_times(
    file: &std::fs::File,
    accessed: SetTime,
    modified: SetTime,
) -> FsResult<()> {
    let mut times = FileTimes::new();
    let now = SystemTime::now();
    match accessed {
        SetTime::NoChange => {}
        SetTime::Now => times = times.set_accessed(now),
        SetTime::At(t) => times = times.set_accessed(t),
    }
    match modified {
        SetTime::NoChange => {}
        SetTime::Now => times = times.set_modified(now),
        SetTime::At(t) => times = times.set_modified(t),
    }
    Ok(file.set_times(times)?)
}
