//! Open files of guests, and commit-on-close for the ones opened for writing.
//! A writer writes to a hidden temporary beside its target; the last handle to go renames it into
//! place if the guest closed the file, and removes it otherwise (a trap, a kill). A sync commits
//! what the writer holds and lets it go on in a new temporary (`fs::commit`).
//! Invariant: the target is only ever replaced whole, after a guest close or sync.

use super::commit::{Pending, SyncFailed};
use super::dir::{SetTime, Stat, set_file_times};
use super::{BeforeChange, Changing, Edit, ErrorCode, FsResult, create_temporary};
use std::ffi::{CString, OsStr};
use std::io;
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
    readable: bool,
    writable: bool,
    /// False on a read-only mount, where changes fail with `read-only` rather than
    /// `bad-descriptor`.
    mount_writable: bool,
    /// Set when the guest closes a handle: the last handle to go then commits. Left unset when
    /// handles are dropped with the store (a trap, a kill), so the writes are discarded.
    closed_by_guest: AtomicBool,
    /// Locked for every access: a sync swaps the file of a writer under the other handles.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The temporary of a writer, or the target itself for a reader (and for a writer once
    /// committed for good, so its handles can still read).
    file: std::fs::File,
    /// The temporary and its target while the write is uncommitted; `None` for readers and once
    /// committed or discarded.
    pending: Option<Pending>,
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
            .state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
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
        // `create_temporary` names a file in `dir`, and the name is ours: ASCII, no NUL.
        let temporary = c_name(temporary.file_name()).expect("a temporary name is a C name");
        if !keep_content {
            let pending = Pending::new(folder, temporary, target_name, None);
            return Ok(File::new(file, readable, writable, true, Some(pending)));
        }
        let copied = std::fs::File::open(&target).and_then(|mut old| {
            io::copy(&mut old, &mut file)?;
            file.set_permissions(old.metadata()?.permissions())?;
            Ok(old)
        });
        // The file copied from is the base of the first sync (see `Pending::base`).
        let (base, copied) = match copied {
            Ok(old) => (Some(old), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let pending = Pending::new(folder, temporary, target_name, base);
        if let Err(e) = copied {
            pending.discard();
            return Err(e.into());
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
                readable,
                writable,
                mount_writable,
                closed_by_guest: AtomicBool::new(false),
                state: Mutex::new(State { file, pending }),
            }),
        }
    }

    /// The guest closed this handle: the file commits when its last handle is dropped (now, if
    /// this was the last).
    pub fn close(self) {
        self.inner.closed_by_guest.store(true, Ordering::Relaxed);
    }

    /// [`File::close`], calling `before` just before the commit when this handle is the last
    /// of a writer (with other handles left, the commit comes later, unannounced). When `before`
    /// refuses, the write is discarded, as after a crash: the guest's close has no way to hear
    /// of it (wasi-libc ignores a close's errors).
    pub fn close_noting(self, before: BeforeChange<'_>) {
        if Arc::strong_count(&self.inner) == 1 && self.announce(before, false).is_err() {
            // Dropped without the guest's close: the temporary goes.
            return;
        }
        self.close();
    }

    /// Calls `before` with the commit this writer is about to make, if it has one to make;
    /// `durable` for a sync.
    fn announce(&self, before: BeforeChange<'_>, durable: bool) -> FsResult<()> {
        let state = self.lock();
        let Some(pending) = state.pending.as_ref() else {
            return Ok(());
        };
        let (path, landing) = pending.landing(&state.file)?;
        before(&Changing {
            landing,
            edit: Edit::Write {
                path: &path,
                file: &state.file,
            },
            durable,
        })
    }

    /// The handle the host keeps to commit this file at a normal exit; `None` for readers.
    pub fn pending_commit(&self) -> Option<PendingCommit> {
        self.lock().pending.is_some().then(|| PendingCommit {
            inner: Arc::downgrade(&self.inner),
        })
    }

    pub fn readable(&self) -> bool {
        self.inner.readable
    }

    /// True while the guest may write: opened for writing and not committed yet.
    pub fn writable(&self) -> bool {
        self.inner.writable && self.lock().pending.is_some()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
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
        self.writer().map(drop)
    }

    /// The locked state of a writer that may write, with its pending commit, or why not (as
    /// [`File::check_writable`]).
    fn writer(&self) -> FsResult<MutexGuard<'_, State>> {
        if !self.inner.mount_writable {
            return Err(ErrorCode::ReadOnly);
        }
        let state = self.lock();
        if !self.inner.writable || state.pending.is_none() {
            return Err(ErrorCode::BadDescriptor);
        }
        Ok(state)
    }

    /// Reads up to `len` bytes (at most [`MAX_READ_LEN`]) at `offset`; an empty result means
    /// end of file.
    pub fn read_at(&self, len: usize, offset: u64) -> FsResult<Vec<u8>> {
        self.check_readable()?;
        let len = len.min(MAX_READ_LEN);
        let mut buffer = vec![0; len];
        let mut filled = 0;
        let state = self.lock();
        // `read_at` may return less than asked before the end; a short result here would read as
        // "nothing more" to callers that stop at a partial read.
        while filled < len {
            match state
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
        let mut state = self.writer()?;
        write_locked(&mut state, bytes, offset)
    }

    /// Writes all of `bytes` at the current end of the file.
    pub fn append(&self, bytes: &[u8]) -> FsResult<()> {
        let mut state = self.writer()?;
        let end = state.file.metadata()?.len();
        write_locked(&mut state, bytes, end)
    }

    pub fn set_size(&self, size: u64) -> FsResult<()> {
        let mut state = self.writer()?;
        let State { file, pending } = &mut *state;
        let old = file.metadata()?.len();
        // Marked before the change: a failed resize may still have changed part of the file.
        if let Some(pending) = pending {
            pending.resized(old, size);
        }
        Ok(file.set_len(size)?)
    }

    /// Sets the times of what this handle reads and writes: the temporary of a writer (the
    /// times travel with it at commit), the file itself for a reader.
    pub fn set_times(&self, accessed: SetTime, modified: SetTime) -> FsResult<()> {
        if !self.inner.mount_writable {
            return Err(ErrorCode::ReadOnly);
        }
        set_file_times(&self.lock().file, accessed, modified)
    }

    /// Metadata of what this handle reads and writes: a writer sees its own size.
    pub fn stat(&self) -> FsResult<Stat> {
        Ok(Stat::from_metadata(&self.lock().file.metadata()?))
    }

    /// `sync` and `sync-data` (DESIGN §2): a writer commits what it holds, atomically and
    /// durably, as a close would, and goes on writing to a new uncommitted state. Other handles
    /// of the same file follow it. Nothing to do for a reader. When the commit happened but no
    /// new temporary could be made (a full disk), the error is returned and the writer can no
    /// longer write, as after a close.
    pub fn sync(&self) -> FsResult<()> {
        self.sync_noting(&|_| Ok(()))
    }

    /// [`File::sync`], calling `before` just before the commit; when it refuses, nothing is
    /// committed and its error comes back.
    pub fn sync_noting(&self, before: BeforeChange<'_>) -> FsResult<()> {
        if !self.writable() {
            return Ok(());
        }
        self.announce(before, true)?;
        let mut state = self.lock();
        let State { file, pending } = &mut *state;
        let Some(writer) = pending else {
            return Ok(());
        };
        match writer.sync(file) {
            Ok(()) => Ok(()),
            Err(SyncFailed::GoesOn(e)) => Err(e.into()),
            Err(SyncFailed::Ends(e)) => {
                if let Some(done) = pending.take() {
                    done.discard();
                }
                Err(e.into())
            }
        }
    }
}

/// Writes into a writer's temporary and marks the bytes as changed since the last commit.
fn write_locked(state: &mut State, bytes: &[u8], offset: u64) -> FsResult<()> {
    let end = offset
        .checked_add(bytes.len() as u64)
        .ok_or(ErrorCode::FileTooLarge)?;
    let State { file, pending } = state;
    // Marked before the write: a failed write may still have changed part of the range.
    if let Some(pending) = pending {
        pending.wrote(offset, end);
    }
    Ok(file.write_all_at(bytes, offset)?)
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The lock is never held across anything that can panic; a poisoned one is still valid.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PendingCommit {
    /// Commits now if the file is still open and uncommitted; later writes through its handles
    /// fail with `bad-descriptor`. Returns whether there was something to commit.
    pub fn commit(&self) -> io::Result<bool> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(false);
        };
        let pending = inner.lock().pending.take();
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
