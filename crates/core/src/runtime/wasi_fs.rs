//! `wasi:filesystem/types` and `wasi:filesystem/preopens` (0.2.x) for guests, over [`crate::fs`].
//! This is a thin adapter: it moves descriptors in and out of the resource table and converts
//! types; every rule (paths, temporaries, commit-on-close, read-only mounts) lives in `fs`.
//! Invariant: only a guest's explicit drop of a descriptor closes a file; dropping the store
//! (a trap, a kill) drops handles without closing, so their writes are discarded.
//! Invariant: every call that moves file data or changes the disk (open, which may copy a whole
//! file, read, write, sync, set-size, directory changes, the commit at close) runs on tokio's
//! blocking pool while the guest waits: never on the thread that routes messages (DESIGN §11).

use super::stdio::{GuestInput, Stdout};
use crate::fs::{self, Mount, PendingCommit, SetTime};
use std::mem;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::task::JoinHandle;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable, ResourceTableError};
use wasmtime_wasi_io::bytes::Bytes;
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{
    DynInputStream, DynOutputStream, InputStream, OutputStream, StreamError, StreamResult,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "sausage:host/filesystem",
        imports: { default: async | trappable },
        trappable_error_type: {
            "wasi:filesystem/types.error-code" => super::FsError,
        },
        with: {
            // Streams, pollables and errors are wasmtime-wasi's own, so the rest of WASI (which
            // the runtime links from wasmtime-wasi) reads and polls our file streams.
            "wasi:io/poll": wasmtime_wasi_io::bindings::wasi::io::poll,
            "wasi:io/streams": wasmtime_wasi_io::bindings::wasi::io::streams,
            "wasi:io/error": wasmtime_wasi_io::bindings::wasi::io::error,
            "wasi:clocks/wall-clock": wasmtime_wasi::p2::bindings::clocks::wall_clock,
            "wasi:filesystem/types.descriptor": super::Descriptor,
            "wasi:filesystem/types.directory-entry-stream": super::DirEntries,
        },
    });
}

use bindings::wasi::clocks::wall_clock::Datetime;
use bindings::wasi::filesystem::{preopens, types};
use types::{DescriptorFlags, DescriptorType, ErrorCode};

/// Most bytes a guest may hand to one write of a file stream (`check-write`). It bounds what the
/// host copies per call; a guest with more simply writes again.
const STREAM_WRITE_PERMIT: usize = 1 << 20;

/// The filesystem of one instance: its mounts and the writers it has not closed yet.
pub struct FsState {
    /// One root per mount, made once so that every descriptor of a mount shares it (renames
    /// within a mount are told apart from renames between mounts by that sharing).
    preopens: Vec<(fs::Dir, String)>,
    /// Every writer opened by the guest, to commit at a normal exit; dead entries are pruned
    /// on each open.
    writers: Vec<PendingCommit>,
    /// What each change of the guest's files waits for and tells: [`FsState::before_change`].
    hooks: Option<Hooks>,
}

/// Where a host of a cluster copies each change of an actor's files before making it (DESIGN
/// §20, replicated commits). Called on the blocking pool; it may block until the copy is
/// stored. An error refuses the change: it is not made (the host lost the actor, or the
/// cluster cannot be reached), and the guest gets the error.
pub trait Replica: Send + Sync {
    fn record(&self, changing: &fs::Changing<'_>) -> fs::FsResult<()>;
}

/// Tells, just before a change of the guest's files, the replica (which may refuse it) and
/// stdin (which change settles what the guest read, [`GuestInput::before_change`]); called
/// on the blocking pool.
#[derive(Clone, Default)]
pub struct Noting {
    stdin: Option<Arc<dyn GuestInput>>,
    replica: Option<Arc<dyn Replica>>,
}

impl Noting {
    fn note(&self, changing: &fs::Changing<'_>) -> fs::FsResult<()> {
        if let Some(replica) = &self.replica {
            replica.record(changing)?;
        }
        if let Some(stdin) = &self.stdin {
            stdin.before_change(&changing.landing, changing.durable);
        }
        Ok(())
    }
}

/// What a change of the guest's files waits for and tells (DESIGN §20): every line written on
/// `stdout` accepted first, the change copied to the `replica` on a cluster, and every message
/// read on `stdin` settled as handled.
pub struct Hooks {
    pub stdin: Arc<dyn GuestInput>,
    pub stdout: Stdout,
    pub replica: Option<Arc<dyn Replica>>,
}

impl FsState {
    /// The filesystem of an instance over `mounts`; with `hooks`, every change of a file waits
    /// for them first.
    pub fn new(mounts: Vec<Mount>, hooks: Option<Hooks>) -> Self {
        let preopens = mounts
            .into_iter()
            .map(|mount| (fs::Dir::root(&mount), mount.guest))
            .collect();
        FsState {
            preopens,
            writers: Vec::new(),
            hooks,
        }
    }

    /// Output before commit: the guest is about to commit a file (or rename, remove or make
    /// one), so the lines it wrote before are accepted first. The [`Noting`] it returns tells
    /// stdin, just before the change, which change settles what the guest read; after the
    /// change, [`FsState::after_change`] settles it. "Send, then record that it was sent" never
    /// loses the send across a kill, and a message whose handling committed is not given again.
    pub async fn before_change(&self) -> Noting {
        if let Some(hooks) = &self.hooks {
            hooks.stdout.settled().await;
        }
        match &self.hooks {
            Some(hooks) => Noting {
                stdin: Some(hooks.stdin.clone()),
                replica: hooks.replica.clone(),
            },
            None => Noting::default(),
        }
    }

    /// The change is made (or failed): what the guest read is handled.
    pub async fn after_change(&self) {
        if let Some(hooks) = &self.hooks {
            hooks.stdin.settle().await;
        }
    }

    /// The guest ended (however): the lines it wrote are delivered all the same, as a process's
    /// output is read after it exits.
    pub async fn settle_output(&self) {
        if let Some(hooks) = &self.hooks {
            hooks.stdout.settled().await;
        }
    }

    /// Normal exit: commit every file the guest still has open for writing, once what it
    /// wrote and read has settled ([`FsState::before_change`]).
    /// A commit that fails (the folder was removed meanwhile) leaves the old file whole, as a
    /// crash would; there is no guest left to tell.
    pub async fn commit_open_files(&mut self) {
        self.writers.retain(PendingCommit::is_open);
        if self.writers.is_empty() {
            return;
        }
        // What the guest read settles when its instance ends, just after.
        self.before_change().await;
        for writer in self.writers.drain(..) {
            let _ = writer.commit();
        }
    }
}

/// What the filesystem interfaces may touch of a store: the resource table shared with the rest
/// of WASI (streams live there too) and this instance's [`FsState`].
pub struct FsView<'a> {
    pub table: &'a mut ResourceTable,
    pub state: &'a mut FsState,
}

/// Links wasi:filesystem/types and wasi:filesystem/preopens (all versions 0.2.x a component may
/// import; wasmtime's linker does semver matching).
///
/// wasmtime-wasi's `add_to_linker_async` links its own filesystem too: call it first, then
/// `linker.allow_shadowing(true)` and this function, so these definitions replace its ones.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> FsView<'_>,
) -> wasmtime::Result<()> {
    types::add_to_linker::<T, HasFs>(linker, get)?;
    preopens::add_to_linker::<T, HasFs>(linker, get)?;
    Ok(())
}

struct HasFs;

impl HasData for HasFs {
    type Data<'a> = FsView<'a>;
}

/// A guest's `descriptor`: a directory or an open file.
pub enum Descriptor {
    Dir(fs::Dir),
    File(fs::File),
}

/// A guest's `directory-entry-stream`: the names listed when it was made.
pub struct DirEntries(std::vec::IntoIter<fs::Entry>);

/// What a filesystem call returns on failure: an error code for the guest, or a trap when a host
/// invariant broke (a handle missing from the table).
pub enum FsError {
    Code(fs::ErrorCode),
    Trap(wasmtime::Error),
}

type FsResult<T> = Result<T, FsError>;

impl From<fs::ErrorCode> for FsError {
    fn from(code: fs::ErrorCode) -> Self {
        FsError::Code(code)
    }
}

impl From<ResourceTableError> for FsError {
    fn from(error: ResourceTableError) -> Self {
        FsError::Trap(error.into())
    }
}

impl FsState {
    /// Makes a change of the guest's files: `change` runs on the blocking pool with the
    /// [`Noting`] it calls just before the disk changes, after what a change waits for and
    /// before what settles once it is made (DESIGN §20).
    async fn change<T: Send + 'static>(
        &self,
        change: impl FnOnce(&Noting) -> fs::FsResult<T> + Send + 'static,
    ) -> FsResult<T> {
        let noting = self.before_change().await;
        let changed = off_thread(move || change(&noting)).await;
        self.after_change().await;
        changed
    }
}

/// Runs `work` on tokio's blocking pool and waits for it. The guest's call waits (an instance
/// makes one call at a time, so its calls keep their order); the thread that routes messages
/// and runs the other actors does not.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> fs::FsResult<T> + Send + 'static,
) -> FsResult<T> {
    joined(tokio::task::spawn_blocking(work).await)
}

/// The result of a blocking task: a panic in it goes on in the caller, as if the work had run
/// there; a task cancelled by the runtime's shutdown traps the guest, which is being dropped.
fn joined<T>(result: Result<fs::FsResult<T>, tokio::task::JoinError>) -> FsResult<T> {
    match result {
        Ok(result) => Ok(result?),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => Err(FsError::Trap(wasmtime::Error::msg(format!(
                "a file operation was cancelled: {e}"
            )))),
        },
    }
}

fn error_code(code: fs::ErrorCode) -> ErrorCode {
    use fs::ErrorCode as C;
    match code {
        C::Access => ErrorCode::Access,
        C::BadDescriptor => ErrorCode::BadDescriptor,
        C::Busy => ErrorCode::Busy,
        C::CrossDevice => ErrorCode::CrossDevice,
        C::Exist => ErrorCode::Exist,
        C::FileTooLarge => ErrorCode::FileTooLarge,
        C::IllegalByteSequence => ErrorCode::IllegalByteSequence,
        C::InsufficientMemory => ErrorCode::InsufficientMemory,
        C::InsufficientSpace => ErrorCode::InsufficientSpace,
        C::Interrupted => ErrorCode::Interrupted,
        C::Invalid => ErrorCode::Invalid,
        C::Io => ErrorCode::Io,
        C::IsDirectory => ErrorCode::IsDirectory,
        C::Loop => ErrorCode::Loop,
        C::NameTooLong => ErrorCode::NameTooLong,
        C::NoEntry => ErrorCode::NoEntry,
        C::NotDirectory => ErrorCode::NotDirectory,
        C::NotEmpty => ErrorCode::NotEmpty,
        C::NotPermitted => ErrorCode::NotPermitted,
        C::Quota => ErrorCode::Quota,
        C::ReadOnly => ErrorCode::ReadOnly,
        C::TooManyLinks => ErrorCode::TooManyLinks,
        C::Unsupported => ErrorCode::Unsupported,
    }
}

fn datetime(time: Option<SystemTime>) -> Option<Datetime> {
    let since = time?.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some(Datetime {
        seconds: since.as_secs(),
        nanoseconds: since.subsec_nanos(),
    })
}

fn descriptor_stat(stat: fs::Stat) -> types::DescriptorStat {
    types::DescriptorStat {
        type_: match stat.kind {
            fs::Kind::Directory => DescriptorType::Directory,
            fs::Kind::File => DescriptorType::RegularFile,
            fs::Kind::Symlink => DescriptorType::SymbolicLink,
            fs::Kind::Other => DescriptorType::Unknown,
        },
        link_count: stat.links,
        size: stat.size,
        data_access_timestamp: datetime(stat.accessed),
        data_modification_timestamp: datetime(stat.modified),
        status_change_timestamp: datetime(stat.changed),
    }
}

/// Device and inode identify an object; wasi-libc turns the pair into `st_dev` and `st_ino`.
fn metadata_hash(stat: fs::Stat) -> types::MetadataHashValue {
    types::MetadataHashValue {
        lower: stat.inode,
        upper: stat.device,
    }
}

fn set_time(time: types::NewTimestamp) -> FsResult<SetTime> {
    Ok(match time {
        types::NewTimestamp::NoChange => SetTime::NoChange,
        types::NewTimestamp::Now => SetTime::Now,
        types::NewTimestamp::Timestamp(t) => SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(t.seconds, t.nanoseconds))
            .map(SetTime::At)
            .ok_or(fs::ErrorCode::Invalid)?,
    })
}

impl FsView<'_> {
    fn descriptor(&self, fd: &Resource<Descriptor>) -> FsResult<&Descriptor> {
        Ok(self.table.get(fd)?)
    }

    fn dir(&self, fd: &Resource<Descriptor>) -> FsResult<&fs::Dir> {
        match self.descriptor(fd)? {
            Descriptor::Dir(dir) => Ok(dir),
            Descriptor::File(_) => Err(fs::ErrorCode::NotDirectory.into()),
        }
    }

    fn file(&self, fd: &Resource<Descriptor>) -> FsResult<&fs::File> {
        match self.descriptor(fd)? {
            Descriptor::File(file) => Ok(file),
            Descriptor::Dir(_) => Err(fs::ErrorCode::IsDirectory.into()),
        }
    }

    fn stat_of(&self, fd: &Resource<Descriptor>) -> FsResult<fs::Stat> {
        Ok(match self.descriptor(fd)? {
            Descriptor::Dir(dir) => dir.stat()?,
            Descriptor::File(file) => file.stat()?,
        })
    }

    fn push_output(
        &mut self,
        file: fs::File,
        position: Option<u64>,
    ) -> FsResult<Resource<DynOutputStream>> {
        file.check_writable()?;
        let stream: DynOutputStream = Box::new(FileWriter {
            file,
            position,
            state: WriteState::Ready,
        });
        Ok(self.table.push(stream)?)
    }
}

impl preopens::Host for FsView<'_> {
    async fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let mut directories = Vec::with_capacity(self.state.preopens.len());
        for (dir, guest) in &self.state.preopens {
            let fd = self.table.push(Descriptor::Dir(dir.clone()))?;
            directories.push((fd, guest.clone()));
        }
        Ok(directories)
    }
}

impl types::Host for FsView<'_> {
    fn convert_error_code(&mut self, error: FsError) -> wasmtime::Result<ErrorCode> {
        match error {
            FsError::Code(code) => Ok(error_code(code)),
            FsError::Trap(trap) => Err(trap),
        }
    }

    async fn filesystem_error_code(
        &mut self,
        error: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        let error = self.table.get(&error)?;
        if let Some(code) = error.downcast_ref::<fs::ErrorCode>() {
            return Ok(Some(error_code(*code)));
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Ok(Some(error_code(std::io::Error::from(io.kind()).into())));
        }
        Ok(None)
    }
}

impl types::HostDescriptor for FsView<'_> {
    async fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: u64,
    ) -> FsResult<Resource<DynInputStream>> {
        let file = self.file(&fd)?.clone();
        file.check_readable()?;
        let stream: DynInputStream = Box::new(FileReader {
            file,
            position: offset,
            state: ReadState::Idle,
        });
        Ok(self.table.push(stream)?)
    }

    async fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: u64,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd)?.clone();
        self.push_output(file, Some(offset))
    }

    async fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd)?.clone();
        self.push_output(file, None)
    }

    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        _offset: u64,
        _length: u64,
        _advice: types::Advice,
    ) -> FsResult<()> {
        // Advice is a hint; local files need none.
        self.file(&fd)?;
        Ok(())
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.sync(fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        Ok(match self.descriptor(&fd)? {
            Descriptor::Dir(dir) if dir.writable() => {
                DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY
            }
            Descriptor::Dir(_) => DescriptorFlags::READ,
            Descriptor::File(file) => {
                let mut flags = DescriptorFlags::empty();
                if file.readable() {
                    flags |= DescriptorFlags::READ;
                }
                if file.writable() {
                    flags |= DescriptorFlags::WRITE;
                }
                flags
            }
        })
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        Ok(match self.descriptor(&fd)? {
            Descriptor::Dir(_) => DescriptorType::Directory,
            Descriptor::File(_) => DescriptorType::RegularFile,
        })
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: u64) -> FsResult<()> {
        let file = self.file(&fd)?.clone();
        off_thread(move || file.set_size(size)).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        accessed: types::NewTimestamp,
        modified: types::NewTimestamp,
    ) -> FsResult<()> {
        let (accessed, modified) = (set_time(accessed)?, set_time(modified)?);
        match self.descriptor(&fd)? {
            Descriptor::Dir(dir) => dir.set_times(accessed, modified)?,
            Descriptor::File(file) => file.set_times(accessed, modified)?,
        }
        Ok(())
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        length: u64,
        offset: u64,
    ) -> FsResult<(Vec<u8>, bool)> {
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        let file = self.file(&fd)?.clone();
        let bytes = off_thread(move || file.read_at(length, offset)).await?;
        let end = bytes.is_empty() && length > 0;
        Ok((bytes, end))
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buffer: Vec<u8>,
        offset: u64,
    ) -> FsResult<u64> {
        let file = self.file(&fd)?.clone();
        let len = buffer.len() as u64;
        off_thread(move || file.write_at(&buffer, offset)).await?;
        Ok(len)
    }

    async fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<DirEntries>> {
        let dir = self.dir(&fd)?.clone();
        let entries = off_thread(move || dir.entries()).await?;
        Ok(self.table.push(DirEntries(entries.into_iter()))?)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        if let Descriptor::File(file) = self.descriptor(&fd)? {
            let file = file.clone();
            if !file.writable() {
                return off_thread(move || file.sync()).await;
            }
            self.state
                .change(move |noting| file.sync_noting(&|changing| noting.note(changing)))
                .await?;
        }
        Ok(())
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let dir = self.dir(&fd)?.clone();
        self.state
            .change(move |noting| dir.create_dir_noting(&path, &|changing| noting.note(changing)))
            .await
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorStat> {
        Ok(descriptor_stat(self.stat_of(&fd)?))
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        _path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        // `symlink-follow` changes nothing: symlinks are refused either way.
        Ok(descriptor_stat(self.dir(&fd)?.stat_at(&path)?))
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        _path_flags: types::PathFlags,
        path: String,
        accessed: types::NewTimestamp,
        modified: types::NewTimestamp,
    ) -> FsResult<()> {
        let (accessed, modified) = (set_time(accessed)?, set_time(modified)?);
        Ok(self.dir(&fd)?.set_times_at(&path, accessed, modified)?)
    }

    async fn link_at(
        &mut self,
        _fd: Resource<Descriptor>,
        _old_path_flags: types::PathFlags,
        _old_path: String,
        _new_fd: Resource<Descriptor>,
        _new_path: String,
    ) -> FsResult<()> {
        // A hard link would let one name's commit change another name's content.
        Err(fs::ErrorCode::NotPermitted.into())
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        _path_flags: types::PathFlags,
        path: String,
        open_flags: types::OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        // Synced writes are not offered: a write is durable only once committed by a sync (or
        // visible once committed by a close), never each write on its own.
        let sync_flags = DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC;
        if flags.intersects(sync_flags) {
            return Err(fs::ErrorCode::Unsupported.into());
        }
        let options = fs::OpenOptions {
            create: open_flags.contains(types::OpenFlags::CREATE),
            exclusive: open_flags.contains(types::OpenFlags::EXCLUSIVE),
            truncate: open_flags.contains(types::OpenFlags::TRUNCATE),
            directory: open_flags.contains(types::OpenFlags::DIRECTORY),
            read: flags.contains(DescriptorFlags::READ),
            write: flags.contains(DescriptorFlags::WRITE),
        };
        let dir = self.dir(&fd)?.clone();
        // Opening for append or edit copies the whole file into the writer's temporary.
        let descriptor = match off_thread(move || dir.open(&path, options)).await? {
            fs::Opened::Dir(dir) => Descriptor::Dir(dir),
            fs::Opened::File(file) => {
                if let Some(writer) = file.pending_commit() {
                    self.state.writers.retain(PendingCommit::is_open);
                    self.state.writers.push(writer);
                }
                Descriptor::File(file)
            }
        };
        Ok(self.table.push(descriptor)?)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        // Symlinks are refused by resolution; anything else that exists is not a symlink.
        self.dir(&fd)?.stat_at(&path)?;
        Err(fs::ErrorCode::Invalid.into())
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let dir = self.dir(&fd)?.clone();
        self.state
            .change(move |noting| dir.remove_dir_noting(&path, &|changing| noting.note(changing)))
            .await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (dir, new_dir) = (self.dir(&fd)?.clone(), self.dir(&new_fd)?.clone());
        self.state
            .change(move |noting| {
                dir.rename_noting(&old_path, &new_dir, &new_path, &|changing| {
                    noting.note(changing)
                })
            })
            .await
    }

    async fn symlink_at(
        &mut self,
        _fd: Resource<Descriptor>,
        _old_path: String,
        _new_path: String,
    ) -> FsResult<()> {
        // A symlink could point out of its mount; guests cannot make them.
        Err(fs::ErrorCode::NotPermitted.into())
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let dir = self.dir(&fd)?.clone();
        self.state
            .change(move |noting| dir.unlink_noting(&path, &|changing| noting.note(changing)))
            .await
    }

    async fn is_same_object(
        &mut self,
        fd: Resource<Descriptor>,
        other: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        let same = |this: &Self| -> FsResult<bool> {
            let (a, b) = (this.stat_of(&fd)?, this.stat_of(&other)?);
            Ok((a.device, a.inode) == (b.device, b.inode))
        };
        match same(self) {
            Ok(same) => Ok(same),
            // Two descriptors whose objects are gone cannot be compared: they are not the same.
            Err(FsError::Code(_)) => Ok(false),
            Err(FsError::Trap(trap)) => Err(trap),
        }
    }

    async fn metadata_hash(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<types::MetadataHashValue> {
        Ok(metadata_hash(self.stat_of(&fd)?))
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        _path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        Ok(metadata_hash(self.dir(&fd)?.stat_at(&path)?))
    }

    /// The guest closed the descriptor: a file commits when its last stream is gone too (a
    /// rename that also frees the old content, so it runs off the thread). The store dropping
    /// its table never comes here, which is what discards on a trap or a kill.
    async fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        if let Descriptor::File(file) = self.table.delete(fd)? {
            let closed = if file.writable() {
                self.state
                    .change(move |noting| {
                        file.close_noting(&|changing| noting.note(changing));
                        Ok(())
                    })
                    .await
            } else {
                off_thread(move || {
                    file.close();
                    Ok(())
                })
                .await
            };
            match closed {
                Ok(()) | Err(FsError::Code(_)) => {}
                Err(FsError::Trap(trap)) => return Err(trap),
            }
        }
        Ok(())
    }
}

impl types::HostDirectoryEntryStream for FsView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<DirEntries>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        let entries = self.table.get_mut(&stream)?;
        Ok(entries.0.next().map(|entry| types::DirectoryEntry {
            type_: match entry.kind {
                fs::Kind::Directory => DescriptorType::Directory,
                fs::Kind::File => DescriptorType::RegularFile,
                fs::Kind::Symlink => DescriptorType::SymbolicLink,
                fs::Kind::Other => DescriptorType::Unknown,
            },
            name: entry.name,
        }))
    }

    async fn drop(&mut self, stream: Resource<DirEntries>) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}

/// An `input-stream` reading a file from a position. Each read runs on the blocking pool: a
/// non-blocking `read` starts one and returns nothing until it is done (`ready` waits for it),
/// `blocking-read` waits for its own. At most one read is in flight, so reads stay in order.
struct FileReader {
    file: fs::File,
    position: u64,
    state: ReadState,
}

enum ReadState {
    Idle,
    Reading(JoinHandle<fs::FsResult<Vec<u8>>>),
    /// A finished read whose bytes (or failure) the guest has not taken yet.
    Done(FsResult<Bytes>),
}

/// How much a read started by `ready` (without a size from the guest) asks for.
const READ_AHEAD: usize = 64 * 1024;

impl FileReader {
    fn start(&mut self, size: usize) {
        let (file, position) = (self.file.clone(), self.position);
        self.state = ReadState::Reading(tokio::task::spawn_blocking(move || {
            file.read_at(size, position)
        }));
    }

    /// Waits for the read in flight, if any.
    async fn finish(&mut self) {
        if let ReadState::Reading(task) = &mut self.state {
            let done = joined(task.await).map(Bytes::from);
            self.state = ReadState::Done(done);
        }
    }
}

/// An `output-stream` writing a file at a position, or at its end (`append-via-stream`) when
/// `position` is `None`. Each write runs on the blocking pool while `check-write` grants
/// nothing (`ready` waits for it); `blocking-write-and-flush` waits for its own. At most one
/// write is in flight, so writes stay in order. The bytes become visible to others only when
/// the file is committed.
struct FileWriter {
    file: fs::File,
    position: Option<u64>,
    state: WriteState,
}

enum WriteState {
    Ready,
    Writing(JoinHandle<fs::FsResult<()>>),
    /// The last write failed; the guest is told at its next call, then the stream is closed.
    Failed(FsError),
    Closed,
}

impl FileWriter {
    /// Starts writing `bytes` where the stream is; the position moves on at once.
    fn start(&mut self, bytes: Bytes) -> JoinHandle<fs::FsResult<()>> {
        let file = self.file.clone();
        let at = self.position;
        if let Some(position) = &mut self.position {
            *position += bytes.len() as u64;
        }
        tokio::task::spawn_blocking(move || match at {
            Some(position) => file.write_at(&bytes, position),
            None => file.append(&bytes),
        })
    }

    /// The failure of the last write, once; `closed` after it.
    fn check_failed(&mut self) -> StreamResult<()> {
        match mem::replace(&mut self.state, WriteState::Closed) {
            WriteState::Failed(error) => Err(stream_failure(error)),
            WriteState::Closed => Err(StreamError::Closed),
            state => {
                self.state = state;
                Ok(())
            }
        }
    }
}

/// Failures of file streams carry the `fs` error code, which `filesystem-error-code` reads back.
fn stream_error(code: fs::ErrorCode) -> StreamError {
    StreamError::LastOperationFailed(wasmtime::Error::from(code))
}

fn stream_failure(error: FsError) -> StreamError {
    match error {
        FsError::Code(code) => stream_error(code),
        FsError::Trap(trap) => StreamError::Trap(trap),
    }
}

#[wasmtime_wasi_io::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {
        if let ReadState::Idle = self.state {
            self.start(READ_AHEAD);
        }
        self.finish().await;
    }
}

#[wasmtime_wasi_io::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match mem::replace(&mut self.state, ReadState::Idle) {
            ReadState::Idle if size > 0 => {
                self.start(size);
                Ok(Bytes::new())
            }
            ReadState::Idle => Ok(Bytes::new()),
            reading @ ReadState::Reading(_) => {
                self.state = reading;
                Ok(Bytes::new())
            }
            ReadState::Done(Err(error)) => Err(stream_failure(error)),
            ReadState::Done(Ok(bytes)) if bytes.is_empty() => Err(StreamError::Closed),
            ReadState::Done(Ok(mut bytes)) => {
                let taken = bytes.split_to(size.min(bytes.len()));
                if !bytes.is_empty() {
                    self.state = ReadState::Done(Ok(bytes));
                }
                self.position += taken.len() as u64;
                Ok(taken)
            }
        }
    }

    async fn blocking_read(&mut self, size: usize) -> StreamResult<Bytes> {
        self.finish().await;
        if let ReadState::Idle = self.state {
            if size == 0 {
                return Ok(Bytes::new());
            }
            self.start(size);
            self.finish().await;
        }
        self.read(size)
    }

    /// The stream is dropped: a read in flight finishes first, so no work of this instance
    /// outlives its handles.
    async fn cancel(&mut self) {
        self.finish().await;
    }
}

#[wasmtime_wasi_io::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {
        if let WriteState::Writing(task) = &mut self.state {
            self.state = match joined(task.await) {
                Ok(()) => WriteState::Ready,
                Err(error) => WriteState::Failed(error),
            };
        }
    }
}

#[wasmtime_wasi_io::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if bytes.len() > STREAM_WRITE_PERMIT {
            return Err(StreamError::trap("write beyond the permit of check-write"));
        }
        self.check_failed()?;
        if let WriteState::Writing(_) = self.state {
            return Err(StreamError::trap("write while check-write grants nothing"));
        }
        self.file.check_writable().map_err(stream_error)?;
        let task = self.start(bytes);
        self.state = WriteState::Writing(task);
        Ok(())
    }

    /// Nothing is buffered here: a write in flight is done when `check-write` grants again.
    fn flush(&mut self) -> StreamResult<()> {
        self.check_failed()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.check_failed()?;
        if let WriteState::Writing(_) = self.state {
            return Ok(0);
        }
        self.file.check_writable().map_err(stream_error)?;
        Ok(STREAM_WRITE_PERMIT)
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.ready().await;
        self.check_failed()?;
        if bytes.len() > STREAM_WRITE_PERMIT {
            return Err(StreamError::trap("write beyond the permit of check-write"));
        }
        self.file.check_writable().map_err(stream_error)?;
        let task = self.start(bytes);
        joined(task.await).map_err(|error| {
            self.state = WriteState::Closed;
            stream_failure(error)
        })
    }

    /// The stream is dropped: a write in flight finishes first, so the file's commit at close
    /// comes after it.
    async fn cancel(&mut self) {
        self.ready().await;
    }
}

#[cfg(test)]
mod tests {
    //! The adapter called as wasmtime would, without a guest: host trait methods on a table.
    //! The rules themselves are tested in `fs`; these check the plumbing (descriptors, streams,
    //! error codes, close on guest drop, discard on store drop) and the linking.

    use super::*;
    use types::{HostDescriptor, HostDirectoryEntryStream as _, OpenFlags};

    struct Host {
        table: ResourceTable,
        state: FsState,
        root: std::path::PathBuf,
    }

    impl Host {
        fn new() -> Host {
            Host::with_hooks(None)
        }

        /// A host whose file changes wait for `stdio` ([`FsState::before_change`]).
        fn with_hooks(hooks: Option<Hooks>) -> Host {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let root =
                std::env::temp_dir().join(format!("sausage-wasi-fs-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for dir in ["data", "actor"] {
                std::fs::create_dir_all(root.join(dir)).unwrap();
            }
            let mounts = vec![
                Mount {
                    guest: "/data".into(),
                    host: root.join("data"),
                    writable: true,
                },
                Mount {
                    guest: "/actor".into(),
                    host: root.join("actor"),
                    writable: false,
                },
            ];
            Host {
                table: ResourceTable::new(),
                state: FsState::new(mounts, hooks),
                root,
            }
        }

        fn view(&mut self) -> FsView<'_> {
            FsView {
                table: &mut self.table,
                state: &mut self.state,
            }
        }

        /// The preopen named `guest`.
        async fn preopen(&mut self, guest: &str) -> Resource<Descriptor> {
            let dirs = preopens::Host::get_directories(&mut self.view())
                .await
                .unwrap();
            dirs.into_iter().find(|(_, name)| name == guest).unwrap().0
        }

        fn on_disk(&self, path: &str) -> Option<String> {
            std::fs::read_to_string(self.root.join(path)).ok()
        }

        fn names_on_disk(&self, dir: &str) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(self.root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        }
    }

    /// Stdio whose output settles only when `accepted` is notified, counting the settlements
    /// of what was read.
    struct Held {
        accepted: Arc<tokio::sync::Notify>,
        settled: Arc<std::sync::atomic::AtomicUsize>,
        /// Each change announced, and whether it was durable.
        noted: Arc<std::sync::Mutex<Vec<(fs::Change, bool)>>>,
    }

    impl super::super::stdio::GuestOutput for Held {
        fn capacity(&mut self) -> usize {
            1
        }

        fn write(&mut self, _: &[u8]) {}

        fn writable(&mut self) -> super::super::stdio::BoxFuture<'_> {
            Box::pin(async {})
        }

        fn settled(&mut self) -> super::super::stdio::BoxFuture<'_> {
            Box::pin(self.accepted.notified())
        }
    }

    impl GuestInput for Held {
        fn read(&self, _: usize) -> Option<Bytes> {
            None
        }

        fn readable(&self) -> super::super::stdio::BoxFuture<'_> {
            Box::pin(std::future::pending())
        }

        fn before_change(&self, change: &fs::Change, durable: bool) {
            self.noted.lock().unwrap().push((change.clone(), durable));
        }

        fn settle(&self) -> super::super::stdio::BoxFuture<'_> {
            self.settled
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    /// Output before commit (DESIGN §20): a close of a written file, a sync, a rename and an
    /// unlink each wait until the guest's output is accepted, and settle what it read, before
    /// the disk changes; a close of a file only read waits for nothing.
    #[tokio::test]
    async fn a_change_of_a_file_waits_for_the_output_before_it_and_settles_the_reads() {
        let accepted = Arc::new(tokio::sync::Notify::new());
        let settled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let noted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = || Held {
            accepted: accepted.clone(),
            settled: settled.clone(),
            noted: noted.clone(),
        };
        let mut host = Host::with_hooks(Some(Hooks {
            stdin: Arc::new(held()),
            stdout: Stdout::new(held()),
            replica: None,
        }));
        let data = host.preopen("/data").await;
        let fd = open(&mut host, &data, "sent.txt", write_flags())
            .await
            .ok()
            .unwrap();
        host.view()
            .write(Resource::new_borrow(fd.rep()), b"sent".to_vec(), 0)
            .await
            .ok()
            .unwrap();
        let committed = host.root.join("data/sent.txt");
        {
            let mut view = host.view();
            let close = HostDescriptor::drop(&mut view, fd);
            tokio::pin!(close);
            for _ in 0..10 {
                tokio::select! {
                    _ = &mut close => panic!("the file committed before the output was accepted"),
                    _ = tokio::task::yield_now() => {}
                }
            }
            assert!(!committed.exists());
            assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 0);
            accepted.notify_one();
            close.await.unwrap();
        }
        assert_eq!(host.on_disk("data/sent.txt").as_deref(), Some("sent"));
        assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 1);

        // A reader's close changes nothing: it does not wait.
        let read = open(
            &mut host,
            &data,
            "sent.txt",
            (OpenFlags::empty(), DescriptorFlags::READ),
        )
        .await
        .ok()
        .unwrap();
        HostDescriptor::drop(&mut host.view(), read).await.unwrap();
        assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 1);

        // A rename and an unlink wait too.
        accepted.notify_one();
        let renamed = host
            .view()
            .rename_at(
                Resource::new_borrow(data.rep()),
                "sent.txt".into(),
                Resource::new_borrow(data.rep()),
                "kept.txt".into(),
            )
            .await;
        assert!(renamed.is_ok());
        accepted.notify_one();
        let unlinked = host
            .view()
            .unlink_file_at(Resource::new_borrow(data.rep()), "kept.txt".into())
            .await;
        assert!(unlinked.is_ok());
        assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(host.names_on_disk("data"), Vec::<String>::new());

        // A sync commits durably, and says so: the journal is synced before it (DESIGN §20).
        let fd = open(&mut host, &data, "synced.txt", write_flags())
            .await
            .ok()
            .unwrap();
        accepted.notify_one();
        let synced = host.view().sync(Resource::new_borrow(fd.rep())).await;
        assert!(synced.is_ok());
        assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 4);

        // Each change was named just before it was made, as the disk shows it once made.
        let noted = noted.lock().unwrap().clone();
        let kinds: Vec<(&str, std::path::PathBuf, bool)> = noted
            .iter()
            .map(|(change, durable)| match change {
                fs::Change::Holds { path, .. } => ("holds", path.clone(), *durable),
                fs::Change::Absent { path } => ("absent", path.clone(), *durable),
                fs::Change::Present { path } => ("present", path.clone(), *durable),
            })
            .collect();
        let data = std::fs::canonicalize(host.root.join("data")).unwrap();
        assert_eq!(
            kinds,
            [
                ("holds", data.join("sent.txt"), false),
                ("holds", host.root.join("data/kept.txt"), false),
                ("absent", host.root.join("data/kept.txt"), false),
                ("holds", data.join("synced.txt"), true),
            ]
        );
    }

    impl Drop for Host {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn code<T>(result: FsResult<T>) -> ErrorCode {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(FsError::Code(code)) => error_code(code),
            Err(FsError::Trap(trap)) => panic!("unexpected trap: {trap}"),
        }
    }

    fn write_flags() -> (OpenFlags, DescriptorFlags) {
        (
            OpenFlags::CREATE | OpenFlags::TRUNCATE,
            DescriptorFlags::WRITE,
        )
    }

    async fn open(
        host: &mut Host,
        dir: &Resource<Descriptor>,
        path: &str,
        (open_flags, flags): (OpenFlags, DescriptorFlags),
    ) -> FsResult<Resource<Descriptor>> {
        let dir = Resource::new_borrow(dir.rep());
        let follow = types::PathFlags::empty();
        host.view()
            .open_at(dir, follow, path.into(), open_flags, flags)
            .await
    }

    /// Writes through `write-via-stream` (check-write, write, flush, wait), then drops the
    /// stream as wasmtime does (cancel, then delete).
    async fn write_stream(host: &mut Host, fd: &Resource<Descriptor>, text: &str) {
        let fd = Resource::new_borrow(fd.rep());
        let stream = host.view().write_via_stream(fd, 0).await.ok().unwrap();
        let out = host.table.get_mut(&stream).unwrap();
        assert!(out.check_write().unwrap() >= text.len());
        out.write(Bytes::copy_from_slice(text.as_bytes())).unwrap();
        out.flush().unwrap();
        assert!(out.write_ready().await.unwrap() > 0);
        out.cancel().await;
        host.table.delete(stream).unwrap();
    }

    #[tokio::test]
    async fn a_guest_drop_commits_and_a_store_drop_discards() {
        let mut host = Host::new();
        std::fs::write(host.root.join("data/kept.txt"), "old").unwrap();
        let data = host.preopen("/data").await;

        let fd = open(&mut host, &data, "new.txt", write_flags())
            .await
            .ok()
            .unwrap();
        write_stream(&mut host, &fd, "hello").await;
        let borrowed = Resource::new_borrow(data.rep());
        let missing = host
            .view()
            .stat_at(borrowed, types::PathFlags::empty(), "new.txt".into())
            .await;
        assert_eq!(code(missing), ErrorCode::NoEntry);
        HostDescriptor::drop(&mut host.view(), fd).await.unwrap();
        assert_eq!(host.on_disk("data/new.txt").as_deref(), Some("hello"));

        let fd = open(&mut host, &data, "kept.txt", write_flags())
            .await
            .ok()
            .unwrap();
        write_stream(&mut host, &fd, "lost").await;
        let Host { table, state, .. } = &mut host;
        drop(std::mem::take(table));
        drop(std::mem::replace(state, FsState::new(Vec::new(), None)));
        assert_eq!(host.on_disk("data/kept.txt").as_deref(), Some("old"));
        assert_eq!(host.names_on_disk("data"), ["kept.txt", "new.txt"]);
    }

    #[tokio::test]
    async fn commit_open_files_commits_what_the_guest_left_open() {
        let mut host = Host::new();
        let data = host.preopen("/data").await;
        let fd = open(&mut host, &data, "left-open.txt", write_flags())
            .await
            .ok()
            .unwrap();
        let borrowed = Resource::new_borrow(fd.rep());
        host.view()
            .write(borrowed, b"kept".to_vec(), 0)
            .await
            .ok()
            .unwrap();
        host.state.commit_open_files().await;
        assert_eq!(host.on_disk("data/left-open.txt").as_deref(), Some("kept"));
    }

    #[tokio::test]
    async fn streams_read_append_and_report_error_codes() {
        let mut host = Host::new();
        std::fs::write(host.root.join("data/log.txt"), "one\n").unwrap();
        let data = host.preopen("/data").await;
        let flags = (
            OpenFlags::empty(),
            DescriptorFlags::READ | DescriptorFlags::WRITE,
        );
        let fd = open(&mut host, &data, "log.txt", flags).await.ok().unwrap();
        let borrowed = Resource::new_borrow(fd.rep());
        let stream = host.view().append_via_stream(borrowed).await.ok().unwrap();
        let out = host.table.get_mut(&stream).unwrap();
        out.blocking_write_and_flush(Bytes::from_static(b"two\n"))
            .await
            .unwrap();
        host.table.delete(stream).unwrap();

        let borrowed = Resource::new_borrow(fd.rep());
        let stream = host.view().read_via_stream(borrowed, 0).await.ok().unwrap();
        let input = host.table.get_mut(&stream).unwrap();
        assert!(
            input.read(100).unwrap().is_empty(),
            "a read starts off the thread"
        );
        input.ready().await;
        assert_eq!(&input.read(3).unwrap()[..], b"one");
        assert_eq!(&input.blocking_read(100).await.unwrap()[..], b"\ntwo\n");
        let end = input.blocking_read(100).await;
        assert!(matches!(end, Err(StreamError::Closed)));
        host.table.delete(stream).unwrap();
        assert_eq!(host.on_disk("data/log.txt").as_deref(), Some("one\n"));
        HostDescriptor::drop(&mut host.view(), fd).await.unwrap();
        assert_eq!(host.on_disk("data/log.txt").as_deref(), Some("one\ntwo\n"));

        // A read-only descriptor's write stream is refused; a stream error maps back to a code.
        let flags = (OpenFlags::empty(), DescriptorFlags::READ);
        let fd = open(&mut host, &data, "log.txt", flags).await.ok().unwrap();
        let borrowed = Resource::new_borrow(fd.rep());
        let refused = host.view().write_via_stream(borrowed, 0).await;
        assert_eq!(code(refused), ErrorCode::BadDescriptor);
        let error = host
            .table
            .push(wasmtime::Error::from(fs::ErrorCode::ReadOnly))
            .unwrap();
        let mapped = types::Host::filesystem_error_code(&mut host.view(), error)
            .await
            .unwrap();
        assert_eq!(mapped, Some(ErrorCode::ReadOnly));
    }

    #[tokio::test]
    async fn read_only_mounts_symlinks_and_listing_map_to_wasi_codes() {
        let mut host = Host::new();
        std::fs::write(host.root.join("actor/status.json"), "{}").unwrap();
        let actor = host.preopen("/actor").await;
        let refused = open(&mut host, &actor, "status.json", write_flags()).await;
        assert_eq!(code(refused), ErrorCode::ReadOnly);
        let borrowed = Resource::new_borrow(actor.rep());
        let symlink = host
            .view()
            .symlink_at(borrowed, "/etc".into(), "etc".into())
            .await;
        assert_eq!(code(symlink), ErrorCode::NotPermitted);
        let borrowed = Resource::new_borrow(actor.rep());
        let escape = host
            .view()
            .stat_at(borrowed, types::PathFlags::empty(), "../data".into())
            .await;
        assert_eq!(code(escape), ErrorCode::NotPermitted);

        let data = host.preopen("/data").await;
        let _open_writer = open(&mut host, &data, "w.txt", write_flags())
            .await
            .ok()
            .unwrap();
        std::fs::create_dir(host.root.join("data/sub")).unwrap();
        let borrowed = Resource::new_borrow(data.rep());
        let entries = host.view().read_directory(borrowed).await.ok().unwrap();
        let mut names = Vec::new();
        loop {
            let borrowed = Resource::new_borrow(entries.rep());
            match host
                .view()
                .read_directory_entry(borrowed)
                .await
                .ok()
                .unwrap()
            {
                Some(entry) => names.push((entry.name, entry.type_)),
                None => break,
            }
        }
        assert_eq!(names, [("sub".to_string(), DescriptorType::Directory)]);
        assert_eq!(
            host.names_on_disk("data").len(),
            2,
            "the writer's temporary is on disk"
        );
    }

    #[test]
    fn links_over_wasmtime_wasi_with_shadowing() {
        struct State {
            table: ResourceTable,
            wasi: wasmtime_wasi::WasiCtx,
            fs: FsState,
        }
        impl wasmtime_wasi::WasiView for State {
            fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
                wasmtime_wasi::WasiCtxView {
                    ctx: &mut self.wasi,
                    table: &mut self.table,
                }
            }
        }
        let engine = wasmtime::Engine::default();
        let mut linker = Linker::<State>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        linker.allow_shadowing(true);
        add_to_linker(&mut linker, |s| FsView {
            table: &mut s.table,
            state: &mut s.fs,
        })
        .unwrap();
    }
}
