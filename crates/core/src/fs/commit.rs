//! How a writer's hidden temporary becomes its target. At close: one rename. At a sync (DESIGN §2:
//! `fsync` commits): the temporary, synced, trades names with the target in one exchange, the
//! folder is synced, and the writer goes on in a new temporary. That is the file the exchange
//! displaced, brought up to date by copying only the ranges written since, when it is the
//! writer's own previous commit and nobody else can see it; otherwise a clone or a full copy.
//! Invariant: a committed file is never written while anyone else can see it (a name, a hard
//! link of a snapshot, an open descriptor in any process); the target is only replaced whole.

use super::dirty::Dirty;
use std::ffi::CString;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// An uncommitted write: the temporary and its target, both named in their folder, and what a sync
/// needs to make the next temporary cheaply.
#[derive(Debug)]
pub(super) struct Pending {
    /// The folder of the target, held open: the temporary moves with it when the guest renames
    /// the folder (a directory operation takes effect at once), so the commit lands in the
    /// folder's new place and a discard still finds the temporary. With paths, both would miss
    /// and leave an invisible temporary that keeps the folder from being removed.
    folder: std::fs::File,
    temporary: CString,
    target: CString,
    /// The committed file that the temporary equals outside `dirty`: the one the write started
    /// from, then the one the last sync committed. Held open so that its inode, and so its
    /// number, stays its own while a sync compares it with the file an exchange displaced.
    /// `None` when the temporary did not start as a copy (a new or truncated file).
    base: Option<std::fs::File>,
    dirty: Dirty,
}

/// A failed sync, by what the writer may do next.
#[derive(Debug)]
pub(super) enum SyncFailed {
    /// It has a temporary and goes on: nothing was committed, or the commit happened and only
    /// syncing the folder failed (the new content is in place but maybe not durable).
    GoesOn(io::Error),
    /// The commit happened but no next temporary could be made (a full disk): the file the
    /// writer holds is the committed one and must never be written again, so the writer ends.
    Ends(io::Error),
}

impl Pending {
    pub(super) fn new(
        folder: std::fs::File,
        temporary: CString,
        target: CString,
        base: Option<std::fs::File>,
    ) -> Pending {
        Pending {
            folder,
            temporary,
            target,
            base,
            dirty: Dirty::default(),
        }
    }

    /// The target's path (where its folder is now), and what it will be once `file`, the
    /// temporary, is committed: the temporary's inode there.
    pub(super) fn landing(&self, file: &std::fs::File) -> io::Result<(PathBuf, super::Change)> {
        use std::os::unix::ffi::OsStrExt;
        let meta = file.metadata()?;
        let folder = std::fs::read_link(format!("/proc/self/fd/{}", self.folder.as_raw_fd()))?;
        let path = folder.join(std::ffi::OsStr::from_bytes(self.target.as_bytes()));
        let change = super::Change::Holds {
            path: path.clone(),
            dev: meta.dev(),
            ino: meta.ino(),
        };
        Ok((path, change))
    }

    /// Bytes `start..end` of the temporary were written.
    pub(super) fn wrote(&mut self, start: u64, end: u64) {
        self.dirty.add(start, end);
    }

    /// The temporary's size changed from `old` to `new`.
    pub(super) fn resized(&mut self, old: u64, new: u64) {
        self.dirty.resize(old, new);
    }

    /// Close: the temporary replaces the target by one rename (not synced: a close promises
    /// atomicity, not durability). On failure the temporary is removed and the target left whole.
    pub(super) fn commit(self) -> io::Result<()> {
        let renamed = self.rename();
        if renamed.is_err() {
            self.discard();
        }
        renamed
    }

    pub(super) fn discard(self) {
        // SAFETY: one NUL-terminated name that outlives the call, and a descriptor this value
        // owns. A temporary that cannot be removed now is invisible to guests and removed at the
        // next start by `clean_temporaries`, so the result is ignored (no such name is fine too).
        let _ = unsafe { libc::unlinkat(self.folder.as_raw_fd(), self.temporary.as_ptr(), 0) };
    }

    /// `fsync`: commits `file` (the temporary) atomically and durably, then replaces `file` with
    /// a new temporary holding the same bytes, whose later writes are invisible until the next
    /// sync or close. On [`SyncFailed::Ends`] the caller must drop this value with
    /// [`Pending::discard`].
    pub(super) fn sync(&mut self, file: &mut std::fs::File) -> Result<(), SyncFailed> {
        file.sync_all().map_err(SyncFailed::GoesOn)?;
        let displaced = self.publish()?;
        // The exchange is durable once the folder is; a failure here is reported, but the
        // commit has happened, so the writer still needs its next temporary.
        let durable = self.folder.sync_all();
        let next = self
            .next_temporary(file, displaced)
            .map_err(SyncFailed::Ends)?;
        self.base = Some(std::mem::replace(file, next));
        self.dirty.clear();
        durable.map_err(SyncFailed::GoesOn)
    }

    /// Puts the temporary in the target's place. True when the exchange left the file the
    /// target held under the temporary's name; false when a plain rename replaced (or created)
    /// the target, as at close.
    fn publish(&self) -> Result<bool, SyncFailed> {
        let rename = || self.rename().map(|()| false).map_err(SyncFailed::GoesOn);
        if !self
            .is_regular_file(&self.target)
            .map_err(SyncFailed::GoesOn)?
        {
            // No file to keep (a new or unlinked target), or a folder or link that the rename
            // refuses or replaces exactly as a close would.
            return rename();
        }
        if let Err(e) = self.exchange() {
            return match e.raw_os_error() {
                // The target went meanwhile, or the filesystem cannot exchange names.
                Some(libc::ENOENT | libc::EINVAL) => rename(),
                _ => Err(SyncFailed::GoesOn(e)),
            };
        }
        // The look above and the exchange are two steps; only this writer's instance changes
        // its folder, and it is busy here, so what they found is still what was exchanged,
        // unless someone outside the world's rules put a folder or link there meanwhile. Then
        // it gets its name back, and the rename does what a close would with it.
        if !self.is_regular_file(&self.temporary).unwrap_or(false) {
            self.exchange().map_err(SyncFailed::Ends)?;
            return rename();
        }
        Ok(true)
    }

    /// The temporary for the writes after a sync, holding the bytes of `committed`. `displaced`
    /// says whether the temporary's name holds the file the commit replaced.
    fn next_temporary(
        &mut self,
        committed: &std::fs::File,
        displaced: bool,
    ) -> io::Result<std::fs::File> {
        if displaced {
            if let Some(previous) = self.reusable_displaced() {
                self.bring_up_to_date(&previous, committed)?;
                return Ok(previous);
            }
            // The displaced file lives on only where others still see it; the name is ours.
            // SAFETY: as in `discard`.
            if unsafe { libc::unlinkat(self.folder.as_raw_fd(), self.temporary.as_ptr(), 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let fresh = self.open_temporary(libc::O_CREAT | libc::O_EXCL)?;
        fresh.set_permissions(committed.metadata()?.permissions())?;
        clone_or_copy(committed, &fresh)?;
        Ok(fresh)
    }

    /// The displaced file, opened for writing, if it may become the next temporary: it is
    /// `base`, so it differs from the committed file only in `dirty`, and nobody else can see it:
    /// it has no other name (a snapshot's hard link) and no other open descriptor anywhere (a
    /// reader of the old content, another writer's base). After that check, only the
    /// temporary's hidden name reaches it. `None` when any of this fails or is unknown.
    fn reusable_displaced(&mut self) -> Option<std::fs::File> {
        let base = self.base.take()?;
        let displaced = self.open_temporary(0).ok()?;
        // Both are open, so equal numbers mean the same file (neither can be freed and reused).
        let (was, is) = (base.metadata().ok()?, displaced.metadata().ok()?);
        if (was.dev(), was.ino()) != (is.dev(), is.ino()) || is.nlink() != 1 {
            return None;
        }
        // Our own second descriptor would count as another opener.
        drop(base);
        only_opener(&displaced).then_some(displaced)
    }

    /// Makes `previous` (the displaced base) equal to `committed`: its size first (cutting, or
    /// growing with zeros), then every range written since the base was committed.
    fn bring_up_to_date(
        &self,
        previous: &std::fs::File,
        committed: &std::fs::File,
    ) -> io::Result<()> {
        let len = committed.metadata()?.len();
        previous.set_len(len)?;
        for (start, end) in self.dirty.ranges_below(len) {
            copy_range(committed, previous, start, end - start)?;
        }
        Ok(())
    }

    /// Opens the temporary's name for reading and writing, with extra `flags`. Never follows a
    /// link nor waits on a fifo, whatever is there.
    fn open_temporary(&self, flags: libc::c_int) -> io::Result<std::fs::File> {
        let flags = flags | libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        // SAFETY: openat reads one NUL-terminated name that outlives the call, in a folder this
        // value owns; the mode is an integer argument.
        let fd = unsafe {
            libc::openat(
                self.folder.as_raw_fd(),
                self.temporary.as_ptr(),
                flags,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { std::fs::File::from_raw_fd(fd) })
    }

    fn rename(&self) -> io::Result<()> {
        let folder = self.folder.as_raw_fd();
        // SAFETY: renameat only reads the two NUL-terminated names, which outlive the call, and
        // `folder` is a descriptor this value owns.
        let renamed = unsafe {
            libc::renameat(
                folder,
                self.temporary.as_ptr(),
                folder,
                self.target.as_ptr(),
            )
        };
        if renamed != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Trades the names of the temporary and the target in one step: readers see one file or
    /// the other at the target, never neither.
    fn exchange(&self) -> io::Result<()> {
        let folder = self.folder.as_raw_fd();
        super::exchange_at(folder, &self.temporary, folder, &self.target)
    }

    /// Whether `name` in the folder is a regular file (false when there is no such name).
    fn is_regular_file(&self, name: &CString) -> io::Result<bool> {
        // SAFETY: `stat` is plain old data, valid when zeroed, and fstatat fills it; the name
        // outlives the call and the folder is a descriptor this value owns.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        let found = unsafe {
            libc::fstatat(
                self.folder.as_raw_fd(),
                name.as_ptr(),
                &mut stat,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if found != 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::NotFound => Ok(false),
                _ => Err(error),
            };
        }
        Ok(stat.st_mode & libc::S_IFMT == libc::S_IFREG)
    }
}

/// True when `file` is the only open description of its inode on the machine: the kernel
/// grants a write lease only then (fcntl(2), "Leases"), and it is given back at once. Any
/// failure (leases disabled, a file of another owner) answers false, which only costs a copy.
fn only_opener(file: &std::fs::File) -> bool {
    // SAFETY: fcntl with integer arguments on a descriptor that `file` owns.
    super::take_write_lease(file)
        && unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) } == 0
}

/// Fills the empty `to` with the bytes of `from`: a reflink where the filesystem shares blocks
/// (`FICLONE`: btrfs, XFS), a copy otherwise.
fn clone_or_copy(from: &std::fs::File, to: &std::fs::File) -> io::Result<()> {
    // SAFETY: FICLONE takes the source descriptor as its integer argument; both are owned by
    // the two files, which outlive the call.
    let cloned = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
    if cloned == 0 {
        return Ok(());
    }
    copy_range(from, to, 0, from.metadata()?.len())
}

/// Copies `len` bytes at `offset` of `from` to the same offset of `to`, in the kernel where it
/// can (std's `io::copy` between files uses `copy_file_range`, with fallbacks). The cursors of
/// both descriptors move; every other access of the layer gives its offset explicitly.
fn copy_range(from: &std::fs::File, to: &std::fs::File, offset: u64, len: u64) -> io::Result<()> {
    let (mut from, mut to) = (from, to);
    from.seek(SeekFrom::Start(offset))?;
    to.seek(SeekFrom::Start(offset))?;
    let copied = io::copy(&mut io::Read::take(from, len), &mut to)?;
    if copied != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the temporary ended {} bytes early", len - copied),
        ));
    }
    Ok(())
}
