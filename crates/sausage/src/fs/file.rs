//! Open files of guests, and commit-on-close for the ones opened for writing.
//! A writer writes to a hidden temporary beside its target; the last handle to go renames it into
//! place if the guest closed the file, and removes it otherwise (a trap, a kill).
//! Invariant: the target is only ever replaced whole, by one rename, after a guest close.

use super::dir::{SetTime, Stat, set_file_times};
use super::{ErrorCode, FsResult, create_temporary};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Most bytes one read returns. A guest asks for a length of its choice; the host allocates at
/// most this much per call and the guest simply reads again (streams and `read` both allow short
/// reads).
pub const MAX_READ_LEN: usize = 1 << 20;

/// A handle to an open file. Clones share the file: a descriptor and the streams made from it
/// each hold one, and a writer commits or discards when the last of them is dropped.
#[derive(Clone, Debug)]
pub struct File {
    inner: Arc<Inner>,
}

/// A writer that has not committed yet, seen from outside its handles: lets the host commit the
/// files of a guest that exited normally ([`PendingCommit::commit`]).
#[derive(Clone, Debug)]
pub struct PendingCommit {
    inner: Weak<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The temporary of a writer, or the target itself for a reader.
    file: std::fs::File,
    readable: bool,
    writable: bool,
    /// False on a read-only mount, where changes fail with `read-only` rather than
    /// `bad-descriptor`.
    mount_writable: bool,
    /// Set when the guest closes a handle: the last handle to go then commits. Left unset when
    /// handles are dropped with the store (a trap, a kill), so the writes are discarded.
    closed_by_guest: AtomicBool,
    /// The temporary and its target while the write is uncommitted; `None` for readers and once
    /// committed or discarded.
    pending: Mutex<Option<Pending>>,
}

/// An uncommitted write: the temporary and its target, both named in their folder.
#[derive(Debug)]
struct Pending {
    /// The folder of the target, held open: the temporary moves with it when the guest renames
    /// the folder (a directory operation takes effect at once), so the commit lands in the
    /// folder's new place and a discard still finds the temporary. With paths, both would miss
    /// and leave an invisible temporary that keeps the folder from being removed.
    folder: std::fs::File,
    temporary: CString,
    target: CString,
}

impl Pending {
    fn commit(self) -> io::Result<()> {
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
            let error = io::Error::last_os_error();
            self.discard();
            return Err(error);
        }
        Ok(())
    }

    fn discard(self) {
        // SAFETY: as in `commit`: one name that outlives the call, a descriptor this value owns.
        // A temporary that cannot be removed now is invisible to guests and removed at the next
        // start by `clean_temporaries`, so the result is ignored.
        let _ = unsafe { libc::unlinkat(self.folder.as_raw_fd(), self.temporary.as_ptr(), 0) };
    }
}

/// A name in a folder as C wants it: `invalid` without a name (a path ending in `..`) or with a
/// NUL, neither of which `Dir::resolve` lets through.
fn c_name(name: Option<&OsStr>) -> FsResult<CString> {
    let name = name.ok_or(ErrorCode::Invalid)?;
    CString::new(name.as_bytes()).map_err(|_| ErrorCode::Invalid)
}

impl Drop for Inner {
    fn drop(&mut self) {
        let pending = self
            .pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pending) = pending {
            if *self.closed_by_guest.get_mut() {
                // A close has no way to report an error to the guest (wasi-libc ignores it too);
                // a failed rename leaves the old file whole, as a crash would.
                let _ = pending.commit();
            } else {
                pending.discard();
            }
        }
    }
}

impl File {
    /// Opens `target` for reading, as it is now; later commits do not change what this reads.
    pub(super) fn open_read(target: &Path, readable: bool, mount_writable: bool) -> FsResult<File> {
        let file = std::fs::File::open(target)?;
        Ok(File::new(file, readable, false, mount_writable, None))
    }

    /// Starts a write of `target` in a new temporary beside it, starting from a copy of the
    /// current content when `keep_content` (append, or edit without truncate) and empty otherwise.
    pub(super) fn begin_write(
        target: PathBuf,
        keep_content: bool,
        readable: bool,
        writable: bool,
    ) -> FsResult<File> {
        let dir = target.parent().ok_or(ErrorCode::Invalid)?;
        let target_name = c_name(target.file_name())?;
        // Opened before the temporary is made beside it, within one call of the guest, so
        // nothing renames the folder in between (an instance makes one call at a time, and
        // only its own instance changes an actor's mounts while it runs).
        let folder = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(dir)?;
        let (mut file, temporary) = create_temporary(dir)?;
        let pending = Pending {
            folder,
            // `create_temporary` names a file in `dir`, and the name is ours: ASCII, no NUL.
            temporary: c_name(temporary.file_name()).expect("a temporary name is a C name"),
            target: target_name,
        };
        if keep_content {
            let copied = std::fs::File::open(&target).and_then(|mut old| {
                io::copy(&mut old, &mut file)?;
                file.set_permissions(old.metadata()?.permissions())
            });
            if let Err(e) = copied {
                pending.discard();
                return Err(e.into());
            }
        }
        Ok(File::new(file, readable, writable, true, Some(pending)))
    }

    fn new(
        file: std::fs::File,
        readable: bool,
        writable: bool,
        mount_writable: bool,
        pending: Option<Pending>,
    ) -> File {
        File {
            inner: Arc::new(Inner {
                file,
                readable,
                writable,
                mount_writable,
                closed_by_guest: AtomicBool::new(false),
                pending: Mutex::new(pending),
            }),
        }
    }

    /// The guest closed this handle: the file commits when its last handle is dropped (now, if
    /// this was the last).
    pub fn close(self) {
        self.inner.closed_by_guest.store(true, Ordering::Relaxed);
    }

    /// The handle the host keeps to commit this file at a normal exit; `None` for readers.
    pub fn pending_commit(&self) -> Option<PendingCommit> {
        self.lock_pending().is_some().then(|| PendingCommit {
            inner: Arc::downgrade(&self.inner),
        })
    }

    pub fn readable(&self) -> bool {
        self.inner.readable
    }

    /// True while the guest may write: opened for writing and not committed yet.
    pub fn writable(&self) -> bool {
        self.inner.writable && self.lock_pending().is_some()
    }

    fn lock_pending(&self) -> MutexGuard<'_, Option<Pending>> {
        // The lock is never held across anything that can panic; a poisoned one is still valid.
        self.inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails unless this handle may read: `bad-descriptor` (as POSIX's `EBADF`).
    pub fn check_readable(&self) -> FsResult<()> {
        if self.inner.readable {
            Ok(())
        } else {
            Err(ErrorCode::BadDescriptor)
        }
    }

    /// Fails unless this handle may write: `read-only` on a read-only mount, `bad-descriptor`
    /// when not opened for writing or already committed.
    pub fn check_writable(&self) -> FsResult<()> {
        if !self.inner.mount_writable {
            Err(ErrorCode::ReadOnly)
        } else if !self.writable() {
            Err(ErrorCode::BadDescriptor)
        } else {
            Ok(())
        }
    }

    /// Reads up to `len` bytes (at most [`MAX_READ_LEN`]) at `offset`; an empty result means
    /// end of file.
    pub fn read_at(&self, len: usize, offset: u64) -> FsResult<Vec<u8>> {
        self.check_readable()?;
        let len = len.min(MAX_READ_LEN);
        let mut buffer = vec![0; len];
        let mut filled = 0;
        // `read_at` may return less than asked before the end; a short result here would read as
        // "nothing more" to callers that stop at a partial read.
        while filled < len {
            match self
                .inner
                .file
                .read_at(&mut buffer[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buffer.truncate(filled);
        Ok(buffer)
    }

    /// Writes all of `bytes` at `offset` (into the temporary).
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> FsResult<()> {
        self.check_writable()?;
        offset
            .checked_add(bytes.len() as u64)
            .ok_or(ErrorCode::FileTooLarge)?;
        Ok(self.inner.file.write_all_at(bytes, offset)?)
    }

    /// Writes all of `bytes` at the current end of the file.
    pub fn append(&self, bytes: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let end = self.inner.file.metadata()?.len();
        self.write_at(bytes, end)
    }

    pub fn set_size(&self, size: u64) -> FsResult<()> {
        self.check_writable()?;
        Ok(self.inner.file.set_len(size)?)
    }

    /// Sets the times of what this handle reads and writes: the temporary of a writer (the
    /// times travel with it at commit), the file itself for a reader.
    pub fn set_times(&self, accessed: SetTime, modified: SetTime) -> FsResult<()> {
        if !self.inner.mount_writable {
            return Err(ErrorCode::ReadOnly);
        }
        set_file_times(&self.inner.file, accessed, modified)
    }

    /// Metadata of what this handle reads and writes: a writer sees its own size.
    pub fn stat(&self) -> FsResult<Stat> {
        Ok(Stat::from_metadata(&self.inner.file.metadata()?))
    }

    /// `sync` and `sync-data`: flushes the temporary of a writer to disk. This does not commit:
    /// only a close does.
    pub fn sync(&self) -> FsResult<()> {
        if self.writable() {
            self.inner.file.sync_data()?;
        }
        Ok(())
    }
}

impl PendingCommit {
    /// Commits now if the file is still open and uncommitted; later writes through its handles
    /// fail with `bad-descriptor`. Returns whether there was something to commit.
    pub fn commit(&self) -> io::Result<bool> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(false);
        };
        let pending = inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match pending {
            Some(pending) => pending.commit().map(|()| true),
            None => Ok(false),
        }
    }

    /// False once every handle of the file is gone (committed or discarded already).
    pub fn is_open(&self) -> bool {
        self.inner.strong_count() > 0
    }
}
