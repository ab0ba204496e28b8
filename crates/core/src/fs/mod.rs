//! Commit-on-close files for guests (DESIGN §2): mounts, guest path resolution, hidden temporary
//! files, commit or discard of writers, and the clean-up of temporaries at start.
//! It knows nothing of wasmtime, actors, messages or versions: it is given mounts and gives
//! directories and files whose writes become visible only when the last handle is closed, or
//! when the writer syncs.
//! Invariant: no guest path ever resolves outside its mount, through a symlink, or to a
//! temporary name; every write of a guest goes to a temporary file until it is committed.

mod commit;
mod dir;
mod dirty;
mod file;
#[cfg(test)]
mod tests;
mod tree;

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use dir::{Dir, Entry, Kind, MAX_GUEST_PATH_LEN, OpenOptions, Opened, SetTime, Stat};
pub use file::{File, MAX_READ_LEN, PendingCommit};
pub use tree::{copy_tree, link_tree};

/// What a change of a guest's files leaves behind once it happened, so that after a kill of the
/// host one can tell whether it did (DESIGN §20: the messages a change settles are settled only
/// if it happened). Each change is one rename, unlink or mkdir: either it happened or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `path` is the file (or folder) `ino` of device `dev`: a commit, a sync, a rename.
    Holds { path: PathBuf, dev: u64, ino: u64 },
    /// Nothing is at `path`: an unlink or a rmdir.
    Absent { path: PathBuf },
    /// Something is at `path`: a mkdir.
    Present { path: PathBuf },
}

impl Change {
    /// Whether the change happened, judged by what is on disk now. Only meaningful for the last
    /// change of its folder: a later one may have replaced the file again.
    pub fn happened(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match self {
            Change::Holds { path, dev, ino } => std::fs::symlink_metadata(path)
                .is_ok_and(|meta| (meta.dev(), meta.ino()) == (*dev, *ino)),
            Change::Absent { path } => {
                std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
            }
            Change::Present { path } => std::fs::symlink_metadata(path).is_ok(),
        }
    }
}

/// A change of a guest's files about to be made, as [`BeforeChange`] sees it: how to tell later
/// whether it happened (`landing`), and what it does, for a copy of the files elsewhere
/// (`edit`; DESIGN §20, commits replicated on a cluster). Paths are the host's.
pub struct Changing<'a> {
    pub landing: Change,
    pub edit: Edit<'a>,
    /// The change is made durable (a writer's sync: its data and the folder are synced), so
    /// what it settles must survive a power loss with it.
    pub durable: bool,
}

/// What a change does.
pub enum Edit<'a> {
    /// `path` gets the content of `file` (a writer's commit at close or sync), read from its
    /// start.
    Write {
        path: &'a Path,
        file: &'a std::fs::File,
    },
    /// A rename of a file or folder.
    Rename { from: &'a Path, to: &'a Path },
    /// An unlink of a file or a rmdir of an empty folder.
    Remove { path: &'a Path },
    /// A mkdir.
    MakeDir { path: &'a Path },
}

/// Called just before a change is made (on the blocking pool; it may block). An error refuses
/// the change: it is not made, and the guest gets the error.
pub type BeforeChange<'a> = &'a (dyn Fn(&Changing<'_>) -> FsResult<()> + Sync);

/// One folder of the host shown to a guest under a path of its own.
#[derive(Clone, Debug)]
pub struct Mount {
    /// Where the guest sees it, e.g. `/data`; also the name of its preopen.
    pub guest: String,
    /// The host folder behind it; the guest can reach nothing outside it.
    pub host: PathBuf,
    /// Without it every change (write, mkdir, rename, unlink, set-size, set-times) fails with
    /// [`ErrorCode::ReadOnly`].
    pub writable: bool,
}

/// What a guest is told when a filesystem operation fails. The names are those of
/// `wasi:filesystem`'s `error-code`, so the adapter maps them one to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    Access,
    BadDescriptor,
    Busy,
    CrossDevice,
    Exist,
    FileTooLarge,
    IllegalByteSequence,
    InsufficientMemory,
    InsufficientSpace,
    Interrupted,
    Invalid,
    Io,
    IsDirectory,
    Loop,
    NameTooLong,
    NoEntry,
    NotDirectory,
    NotEmpty,
    NotPermitted,
    Quota,
    ReadOnly,
    TooManyLinks,
    Unsupported,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for ErrorCode {}

impl From<io::Error> for ErrorCode {
    fn from(error: io::Error) -> Self {
        use io::ErrorKind as K;
        match error.kind() {
            K::NotFound => Self::NoEntry,
            K::AlreadyExists => Self::Exist,
            K::NotADirectory => Self::NotDirectory,
            K::IsADirectory => Self::IsDirectory,
            K::DirectoryNotEmpty => Self::NotEmpty,
            K::ReadOnlyFilesystem => Self::ReadOnly,
            K::PermissionDenied => Self::Access,
            K::InvalidInput => Self::Invalid,
            K::InvalidFilename => Self::NameTooLong,
            K::StorageFull => Self::InsufficientSpace,
            K::QuotaExceeded => Self::Quota,
            K::FileTooLarge => Self::FileTooLarge,
            K::CrossesDevices => Self::CrossDevice,
            K::ResourceBusy => Self::Busy,
            K::TooManyLinks => Self::TooManyLinks,
            K::Unsupported => Self::Unsupported,
            K::OutOfMemory => Self::InsufficientMemory,
            K::Interrupted => Self::Interrupted,
            _ => Self::Io,
        }
    }
}

/// Results of guest-visible operations.
pub type FsResult<T> = Result<T, ErrorCode>;

/// Every temporary file starts with this. Guests can neither see nor create such names, so a
/// guest file can never be mistaken for a temporary one (and removed at start).
const TEMPORARY_PREFIX: &str = ".sausage-tmp-";

/// How many names [`create_temporary`] tries before giving up. Names are unique within a run;
/// a clash only comes from a leftover of a crashed run with the same pid, so a second try almost
/// always succeeds and the limit only guards against a loop on a broken folder.
const TEMPORARY_NAME_ATTEMPTS: u32 = 16;

/// True for names the commit-on-close layer uses for temporary files (hidden from guests).
pub fn is_temporary_name(name: &OsStr) -> bool {
    name.as_encoded_bytes()
        .starts_with(TEMPORARY_PREFIX.as_bytes())
}

/// A new temporary name in `dir`, unique within this run (it carries the process's id, so a
/// later start's walk removes what is left of it after a crash).
pub fn temporary_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{TEMPORARY_PREFIX}{}-{n}", std::process::id()))
}

/// Creates a new, empty temporary file in `dir` (opened for reading and writing) and returns it
/// with its path. The name is unique: `create_new` refuses to reuse a leftover.
fn create_temporary(dir: &Path) -> io::Result<(std::fs::File, PathBuf)> {
    let mut last_error = None;
    for _ in 0..TEMPORARY_NAME_ATTEMPTS {
        let path = temporary_path(dir);
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    // The loop ran at least once and only continues after storing an error.
    Err(last_error.expect("TEMPORARY_NAME_ATTEMPTS is not zero"))
}

/// Creates a new, empty folder with a temporary name in `dir` (hidden from guests, removed at the
/// next start if it is still there) and returns its path.
pub fn create_temporary_dir(dir: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut last_error = None;
    for _ in 0..TEMPORARY_NAME_ATTEMPTS {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{TEMPORARY_PREFIX}dir-{}-{n}", std::process::id()));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.expect("TEMPORARY_NAME_ATTEMPTS is not zero"))
}

/// Swaps two paths in one atomic step (`renameat2` with `RENAME_EXCHANGE`): anyone looking sees
/// either both before or both after, and a crash leaves one or the other.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let (a, b) = (path_to_c(a)?, path_to_c(b)?);
    exchange_at(libc::AT_FDCWD, &a, libc::AT_FDCWD, &b)
}

/// [`exchange`] of names relative to folder descriptors (or `AT_FDCWD`).
fn exchange_at(
    folder_a: std::os::fd::RawFd,
    a: &std::ffi::CStr,
    folder_b: std::os::fd::RawFd,
    b: &std::ffi::CStr,
) -> io::Result<()> {
    // SAFETY: renameat2 only reads the two NUL-terminated names, which outlive the call; the
    // descriptors are the caller's, open for the call, and the flag is an integer.
    let done = unsafe {
        libc::renameat2(
            folder_a,
            a.as_ptr(),
            folder_b,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn path_to_c(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

/// Removes every hidden temporary file and folder left under `root` by an earlier host that
/// died; returns how many. Symlinks are not followed, so nothing outside `root` is touched.
/// Folders in `skip`, where nothing of Sausage writes (a build's target folder of thousands of
/// files), are not walked. It may run while this process works in `root`: this process's own
/// temporaries (their names carry its pid) are left alone, and a folder or file that goes
/// away meanwhile is passed over. A leftover of an earlier host that had this pid stays until
/// a start by another pid; guests never see it.
pub fn clean_temporaries(root: &Path, skip: &[PathBuf]) -> io::Result<u64> {
    let own = [
        format!("{TEMPORARY_PREFIX}{}-", std::process::id()),
        format!("{TEMPORARY_PREFIX}dir-{}-", std::process::id()),
    ];
    let left_by_another = |name: &OsStr| {
        let name = name.as_encoded_bytes();
        name.starts_with(TEMPORARY_PREFIX.as_bytes())
            && !own.iter().any(|own| name.starts_with(own.as_bytes()))
    };
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    let mut removed = 0;
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Err(e) if gone(&e) && folder != root => continue,
            entries => entries?,
        };
        for entry in entries {
            let entry = entry?;
            let kind = match entry.file_type() {
                Err(e) if gone(&e) => continue,
                kind => kind?,
            };
            let leftover = left_by_another(&entry.file_name());
            let done = if kind.is_dir() {
                let path = entry.path();
                if leftover {
                    // A folder a host was building (or about to delete) when it died.
                    std::fs::remove_dir_all(&path)
                } else {
                    if !skip.contains(&path) {
                        folders.push(path);
                    }
                    continue;
                }
            } else if leftover {
                std::fs::remove_file(entry.path())
            } else {
                continue;
            };
            match done {
                Ok(()) => removed += 1,
                Err(e) if gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// Host-side atomic write (temp file with the same hidden naming + rename): used by the host for
/// the registry, versions and the like. Readers see the old content or the new one, never a part.
/// The data is synced before the rename, so even a power loss leaves one of the two whole.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file(path, bytes, true)
}

/// [`write_atomically`] without the sync: whole after a crash of the host, but a power loss may
/// leave the old content. For derived state rewritten often, such as `status.json`, where a sync
/// per change would cost more than the change.
pub fn write_atomically_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file(path, bytes, false)
}

/// The largest file [`rewrite_unsynced`] rewrites in place: one page, which a write copies into
/// the page cache whole (a kill of the host lands before or after it, never inside).
const IN_PLACE_LIMIT: usize = 4096;

/// Spaces a rewrite in place may leave after a shorter content rather than cut the file: a
/// cut costs ext4 a journal transaction, and `status.json` shrinks by a byte or two at most of
/// its changes (`starting` to `running`). Past this, the file is cut.
const IN_PLACE_SLACK: usize = 64;

/// [`write_atomically_unsynced`] for a small file that only the host writes and rewrites often
/// (`status.json`): while nobody else has it open, it is rewritten in place, in one write of at
/// most [`IN_PLACE_LIMIT`] bytes, with no new file and no rename. Creating a file and renaming
/// it over the old one allocates an inode and frees another, and ext4 writes the new file's
/// data out before the rename (`auto_da_alloc`), once per actor at every start: a warm start
/// of 10,000 actors took 10.2 s that way and takes 1.6 s this way (`cargo bench --bench scale`).
///
/// Readers still see the old content or the new, never a part: the write happens under a write
/// lease, which the kernel grants only when no other descriptor of the file is open anywhere,
/// and an `open` by anyone else waits until it is given back (at the end of this call). A
/// shorter content is written padded with spaces to the old length (JSON allows them), then,
/// if more than [`IN_PLACE_SLACK`] of them follow it, the file is cut, so a kill between the
/// two leaves a whole file. A power cut may leave the old content or, rarely, a torn one, as
/// an unsynced write can. A missing file, a bigger one, one with other links or one someone
/// has open is replaced by a rename instead.
pub fn rewrite_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match rewrite_in_place(path, bytes) {
        Ok(true) => Ok(()),
        // A failed write in place is repaired by the whole replacement.
        Ok(false) | Err(_) => replace_file(path, bytes, false),
    }
}

/// Rewrites `path` in place if that is safe (see [`rewrite_unsynced`]); false when it is not.
fn rewrite_in_place(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let metadata = file.metadata()?;
    let old_len = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
    let padded_len = old_len.max(bytes.len());
    if !metadata.is_file()
        || metadata.nlink() != 1
        || padded_len > IN_PLACE_LIMIT
        || !take_write_lease(&file)
    {
        return Ok(false);
    }
    let mut padded = Vec::with_capacity(padded_len);
    padded.extend_from_slice(bytes);
    padded.resize(padded_len, b' ');
    file.write_all_at(&padded, 0)?;
    if old_len > bytes.len() + IN_PLACE_SLACK {
        file.set_len(bytes.len() as u64)?;
    }
    // Closing the file gives the lease back: an `open` waiting for it goes on now.
    Ok(true)
}

/// Takes a write lease on `file`: granted only while `file` is the only open description of its
/// inode on the machine (fcntl(2), "Leases"). Until it is given back (`F_UNLCK`, or closing
/// `file`), anyone else's `open` of the inode waits. Any failure (leases disabled, a file of
/// another owner, another opener) answers false.
fn take_write_lease(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    /// `F_SETSIG` of Linux's `<fcntl.h>` (the same on every architecture), which the libc crate
    /// does not export for glibc.
    const F_SETSIG: libc::c_int = 10;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl with integer arguments on a descriptor that `file` owns. Someone opening the
    // file while the lease is held makes the kernel signal the holder, with SIGIO by default,
    // which ends a process; SIGURG, ignored unless handled, is asked for instead.
    unsafe {
        libc::fcntl(fd, F_SETSIG, libc::SIGURG) == 0
            && libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) == 0
    }
}

fn replace_file(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let (mut file, temp) = create_temporary(dir)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| if sync { file.sync_all() } else { Ok(()) })
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        // The write already failed; a temporary left behind would be cleaned at next start.
        let _ = std::fs::remove_file(&temp);
    }
    written
}
