//! The recording file system: a [`Tree`] served over FUSE at a folder by a child process, every
//! change logged as an [`Op`] in the order the kernel sent it; then the log's crash states,
//! served one at a time at the same folder. FUSE is the disk here: the kernel's page cache sits
//! above it, so what reaches the log is what a power loss could keep. Writes go straight through
//! (no writeback cache), so a `write` reaches the log before the call returns; a store into a
//! shared mapping reaches it only when the kernel writes the page back (`msync`, `fsync`, the
//! flusher, [`Mount::sync`]).
//! Invariant: the tree changes only through `Tree::apply` of the op that is logged, or wholesale
//! by serving a crash state, which makes the kernel forget every inode it knew (a new
//! generation).

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::states::{Counts, Kept, crash_states};
use crate::tree::{Ino, Kind, Op, Tree};

/// How long the kernel may trust a name or an attribute without asking again: not at all, so a
/// crash state served in place of another is seen at once and sizes are always the tree's.
const TTL: Duration = Duration::ZERO;

/// A recording file system mounted by a child process; unmounted when dropped. The file system
/// is served by another process than the caller's because a process that faults in pages of a
/// mapped file from its own FUSE server can deadlock on its own address space (the fault holds
/// it while the server thread waits to change it): the caller may map files of the mount.
pub struct Mount {
    path: PathBuf,
    /// Caller → server: one command a line; server → caller: one answer a line. Closing it
    /// makes the server unmount and exit.
    commands: UnixStream,
    answers: BufReader<UnixStream>,
    server: libc::pid_t,
}

/// A crash state the server now serves, as [`Mount::next_state`] reports it.
#[derive(Clone, Debug)]
pub struct Served {
    pub point: usize,
    pub kept: Kept,
    /// False for a prefix state whose tree was served before (served again so that every
    /// prefix can be read; nothing new to check there).
    pub fresh: bool,
    /// The folder whose `fsync` arrived last before the crash, when that was the last op: from
    /// this state on, its names are durable.
    pub synced_dir: Option<Ino>,
}

impl Mount {
    /// Mounts `tree` at the existing, empty folder `path`, served by a child process. Needs
    /// `/dev/fuse` and root (the mount system call; there is no `fusermount` here), and says
    /// so when either is missing.
    pub fn new(path: &Path, tree: Tree) -> io::Result<Mount> {
        if !Path::new("/dev/fuse").exists() {
            return Err(io::Error::other(
                "/dev/fuse is missing: load the fuse module (`modprobe fuse`) to record crash states",
            ));
        }
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(io::Error::other(
                "mounting a FUSE file system without fusermount needs root: run the test as root",
            ));
        }
        let (ours, theirs) = UnixStream::pair()?;
        // SAFETY: the child only runs `serve` (which allocates and starts threads, as glibc
        // allows after a fork) and leaves by `_exit`, never returning into the caller's code.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(ours);
                let code = match serve(path, tree, theirs) {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("crashfs {}: {e}", path.display());
                        1
                    }
                };
                // SAFETY: ends the child without running the parent's exit handlers.
                unsafe { libc::_exit(code) }
            }
            server => {
                drop(theirs);
                let mut mount = Mount {
                    path: path.to_path_buf(),
                    answers: BufReader::new(ours.try_clone()?),
                    commands: ours,
                    server,
                };
                mount.answer()?;
                Ok(mount)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes back every dirty page of the mount (`syncfs`), as the kernel's flusher would.
    pub fn sync(&self) -> io::Result<()> {
        let root = std::fs::File::open(&self.path)?;
        // SAFETY: a plain system call on a descriptor `root` owns.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn ask(&mut self, command: &str) -> io::Result<String> {
        writeln!(self.commands, "{command}")?;
        self.answer()
    }

    fn answer(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.answers.read_line(&mut line)? == 0 {
            return Err(io::Error::other(format!(
                "{}: the file system's server ended",
                self.path.display()
            )));
        }
        match line.trim_end().strip_prefix("error ") {
            Some(error) => Err(io::Error::other(error.to_string())),
            None => Ok(line.trim_end().to_string()),
        }
    }

    /// Writes back what is dirty, then starts logging changes: the tree as it is now is the
    /// state every crash state starts from.
    pub fn record(&mut self) -> io::Result<()> {
        self.sync()?;
        self.ask("record").map(drop)
    }

    /// Writes back what is dirty (a killed program's stores into shared mappings included),
    /// then stops logging; returns how many ops were logged. From then on, [`Mount::next_state`]
    /// walks the crash states of the log.
    pub fn stop(&mut self) -> io::Result<usize> {
        self.sync()?;
        let answer = self.ask("stop")?;
        answer
            .parse()
            .map_err(|_| io::Error::other(format!("stop: {answer}")))
    }

    /// Serves the next crash state and says which it is; `None` after the last, with the counts.
    /// What the caller's checks left dirty in the state before is written back to it first.
    pub fn next_state(&mut self) -> io::Result<Result<Served, Counts>> {
        self.sync()?;
        let answer = self.ask("next")?;
        let parsed = match answer.strip_prefix("done ") {
            Some(counts) => parse_counts(counts).map(Err),
            None => parse_served(&answer).map(Ok),
        };
        parsed.ok_or_else(|| io::Error::other(format!("next: cannot read {answer:?}")))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Detached first: a plain unmount fails while the kernel still holds an inode of it
        // (busy), and the mount would outlive the test. The server then ends with its commands.
        if let Ok(path) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) {
            // SAFETY: one NUL-terminated path that outlives the call. A failure leaves a mount
            // behind, which nothing here could undo.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = self.commands.shutdown(std::net::Shutdown::Both);
        let mut status = 0;
        // SAFETY: waits for the child this value forked; `status` outlives the call.
        unsafe { libc::waitpid(self.server, &mut status, 0) };
    }
}

/// The server's files and its log.
struct Disk {
    tree: Tree,
    /// Changes since `record`, in arrival order; `None` while not recording.
    log: Option<Vec<Op>>,
    /// Given with every inode; a new one at each crash state served makes the kernel drop the
    /// inodes (and cached pages) of the state before.
    generation: u64,
}

/// The server's side: mounts `tree` at `path` and answers commands until they end.
fn serve(path: &Path, tree: Tree, commands: UnixStream) -> io::Result<()> {
    let disk = Arc::new(Mutex::new(Disk {
        tree,
        log: None,
        generation: 1,
    }));
    let mut config = Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("sausage-crashfs".into()),
        fuser::MountOption::RW,
    ];
    let mut answers = commands.try_clone()?;
    let session = match fuser::spawn_mount(Recorder(disk.clone()), path, &config) {
        Ok(session) => session,
        Err(e) => {
            writeln!(answers, "error {}: cannot mount: {e}", path.display())?;
            return Err(e);
        }
    };
    writeln!(answers, "ready")?;
    let mut lines = BufReader::new(commands).lines();
    let mut base = None;
    while let Some(command) = lines.next().transpose()? {
        match command.as_str() {
            "record" => {
                let mut disk = lock(&disk);
                disk.log = Some(Vec::new());
                base = Some(disk.tree.clone());
                writeln!(answers, "ok")?;
            }
            "stop" => {
                let log = lock(&disk).log.take().unwrap_or_default();
                let Some(base) = base.take() else {
                    writeln!(answers, "error stop: not recording")?;
                    continue;
                };
                writeln!(answers, "{}", log.len())?;
                let counts = crash_states(&base, &log, |state, fresh| {
                    // The caller asks for each state once it wrote back what it left dirty in
                    // the one before; a closed connection ends the walk.
                    if !matches!(lines.next(), Some(Ok(ref next)) if next == "next") {
                        return false;
                    }
                    {
                        let mut disk = lock(&disk);
                        let mut tree = state.tree.clone();
                        tree.next_ino = tree.next_ino.max(disk.tree.next_ino);
                        disk.tree = tree;
                        disk.generation += 1;
                    }
                    let synced_dir = match state.point.checked_sub(1).map(|at| &log[at]) {
                        Some(&Op::FsyncDir { ino }) => ino,
                        _ => 0,
                    };
                    let (point, kept) = (state.point, describe(&state.kept));
                    let fresh = u8::from(fresh);
                    writeln!(answers, "{point} {fresh} {synced_dir} {kept}").is_ok()
                });
                if matches!(lines.next(), Some(Ok(ref next)) if next == "next") {
                    let Counts {
                        ops,
                        points,
                        generated,
                        distinct,
                    } = counts;
                    writeln!(answers, "done {ops} {points} {generated} {distinct}")?;
                }
            }
            other => writeln!(answers, "error unknown command {other:?}")?,
        }
    }
    match session.umount_and_join() {
        // Not mounted any more: the caller detached it (see `Drop for Mount`).
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        ended => ended,
    }
}

/// `prefix`, `lost 3,5` or `torn 7 512`, as [`parse_served`] reads it.
fn describe(kept: &Kept) -> String {
    match kept {
        Kept::Prefix => "prefix".into(),
        Kept::Lost(ops) => {
            let ops: Vec<String> = ops.iter().map(usize::to_string).collect();
            format!("lost {}", ops.join(","))
        }
        Kept::Torn { op, bytes } => format!("torn {op} {bytes}"),
    }
}

/// A state's line: its point, whether it is fresh, the folder synced last (0: none), and what
/// it kept.
fn parse_served(line: &str) -> Option<Served> {
    let mut words = line.split(' ');
    let point = words.next()?.parse().ok()?;
    let fresh = words.next()? == "1";
    let synced_dir = Some(words.next()?.parse().ok()?).filter(|&ino| ino != 0);
    let kept = match words.next()? {
        "prefix" => Kept::Prefix,
        "lost" => Kept::Lost(
            words
                .next()?
                .split(',')
                .map(|op| op.parse().ok())
                .collect::<Option<_>>()?,
        ),
        "torn" => Kept::Torn {
            op: words.next()?.parse().ok()?,
            bytes: words.next()?.parse().ok()?,
        },
        _ => return None,
    };
    Some(Served {
        point,
        kept,
        fresh,
        synced_dir,
    })
}

fn parse_counts(line: &str) -> Option<Counts> {
    let numbers: Vec<usize> = line
        .split(' ')
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    let [ops, points, generated, distinct] = numbers[..] else {
        return None;
    };
    Some(Counts {
        ops,
        points,
        generated,
        distinct,
    })
}

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    // A panic while holding the lock is a bug of this file system; keep serving.
    disk.lock().unwrap_or_else(|e| e.into_inner())
}

/// The FUSE side: each request looks at or changes the tree under the lock.
struct Recorder(Arc<Mutex<Disk>>);

impl Disk {
    /// Logs `op` (while recording) and applies it.
    fn change(&mut self, op: Op) {
        self.tree.apply(&op);
        if let Some(log) = &mut self.log {
            log.push(op);
        }
    }

    fn attr(&self, ino: Ino) -> Option<FileAttr> {
        let node = self.tree.node(ino)?;
        let (kind, size) = match &node.kind {
            Kind::File(data) => (FileType::RegularFile, data.len() as u64),
            Kind::Dir(entries) => (FileType::Directory, entries.len() as u64),
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: node.mtime,
            mtime: node.mtime,
            ctime: node.mtime,
            crtime: node.mtime,
            kind,
            perm: node.mode as u16,
            nlink: node.links.max(1),
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn reply_entry(&self, ino: Ino, reply: ReplyEntry) {
        match self.attr(ino) {
            Some(attr) => reply.entry(&TTL, &attr, Generation(self.generation)),
            None => reply.error(Errno::ENOENT),
        }
    }

    /// Makes a file or folder `name` in `parent`; its inode, or why not.
    fn create(&mut self, parent: Ino, name: &OsStr, dir: bool, mode: u32) -> Result<Ino, Errno> {
        if self.tree.entries(parent).is_none() {
            return Err(Errno::ENOTDIR);
        }
        if self.tree.child(parent, name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.tree.next_ino;
        self.change(Op::Create {
            parent,
            name: name.to_os_string(),
            ino,
            dir,
        });
        self.tree.node_mut(ino).expect("just made").mode = mode & 0o7777;
        Ok(ino)
    }

    fn is_dir(&self, ino: Ino) -> bool {
        self.tree.entries(ino).is_some()
    }
}

impl Filesystem for Recorder {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let disk = lock(&self.0);
        match disk.tree.child(parent.0, name) {
            Some(ino) => disk.reply_entry(ino, reply),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match lock(&self.0).attr(ino.0) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut disk = lock(&self.0);
        let Some(attr) = disk.attr(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(size) = size {
            if disk.is_dir(ino.0) {
                return reply.error(Errno::EISDIR);
            }
            if size != attr.size {
                disk.change(Op::SetSize { ino: ino.0, size });
            }
        }
        let node = disk.tree.node_mut(ino.0).expect("looked up above");
        if let Some(mode) = mode {
            node.mode = mode & 0o7777;
        }
        match mtime {
            Some(TimeOrNow::SpecificTime(time)) => node.mtime = time,
            Some(TimeOrNow::Now) => node.mtime = SystemTime::now(),
            None => {}
        }
        let attr = disk.attr(ino.0).expect("looked up above");
        reply.attr(&TTL, &attr);
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let mut disk = lock(&self.0);
        match disk.create(parent.0, name, false, mode) {
            Ok(ino) => disk.reply_entry(ino, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut disk = lock(&self.0);
        match disk.create(parent.0, name, true, mode) {
            Ok(ino) => disk.reply_entry(ino, reply),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut disk = lock(&self.0);
        match disk.create(parent.0, name, false, mode) {
            Ok(ino) => {
                let attr = disk.attr(ino).expect("just made");
                let generation = Generation(disk.generation);
                reply.created(&TTL, &attr, generation, FileHandle(0), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut disk = lock(&self.0);
        let Some(ino) = disk.tree.child(parent.0, name) else {
            return reply.error(Errno::ENOENT);
        };
        if disk.is_dir(ino) {
            return reply.error(Errno::EISDIR);
        }
        let name = name.to_os_string();
        disk.change(Op::Remove {
            parent: parent.0,
            name,
            ino,
        });
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut disk = lock(&self.0);
        let Some(ino) = disk.tree.child(parent.0, name) else {
            return reply.error(Errno::ENOENT);
        };
        match disk.tree.entries(ino) {
            None => return reply.error(Errno::ENOTDIR),
            Some(entries) if !entries.is_empty() => return reply.error(Errno::ENOTEMPTY),
            Some(_) => {}
        }
        let name = name.to_os_string();
        disk.change(Op::Remove {
            parent: parent.0,
            name,
            ino,
        });
        reply.ok();
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut disk = lock(&self.0);
        let Some(moved) = disk.tree.child(parent.0, name) else {
            return reply.error(Errno::ENOENT);
        };
        if disk.tree.entries(newparent.0).is_none() {
            return reply.error(Errno::ENOTDIR);
        }
        let displaced = disk.tree.child(newparent.0, newname);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        if exchange && displaced.is_none() {
            return reply.error(Errno::ENOENT);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && displaced.is_some() {
            return reply.error(Errno::EEXIST);
        }
        if displaced == Some(moved) {
            return reply.ok();
        }
        if let (Some(old), false) = (displaced, exchange) {
            match (disk.is_dir(moved), disk.tree.entries(old)) {
                (false, Some(_)) => return reply.error(Errno::EISDIR),
                (true, None) => return reply.error(Errno::ENOTDIR),
                (true, Some(entries)) if !entries.is_empty() => {
                    return reply.error(Errno::ENOTEMPTY);
                }
                _ => {}
            }
        }
        disk.change(Op::Rename {
            from: (parent.0, name.to_os_string()),
            to: (newparent.0, newname.to_os_string()),
            moved,
            displaced,
            exchange,
        });
        reply.ok();
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut disk = lock(&self.0);
        if disk.tree.node(ino.0).is_none() || disk.is_dir(ino.0) {
            return reply.error(Errno::EPERM);
        }
        if disk.tree.child(newparent.0, newname).is_some() {
            return reply.error(Errno::EEXIST);
        }
        disk.change(Op::Link {
            ino: ino.0,
            parent: newparent.0,
            name: newname.to_os_string(),
        });
        disk.reply_entry(ino.0, reply);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No FOPEN_KEEP_CACHE: every open drops the kernel's cached pages of the file.
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let disk = lock(&self.0);
        match disk.tree.node(ino.0).map(|node| &node.kind) {
            Some(Kind::File(data)) => {
                let start = (offset as usize).min(data.len());
                let end = (start + size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            Some(Kind::Dir(_)) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut disk = lock(&self.0);
        let same = match disk.tree.node(ino.0).map(|node| &node.kind) {
            Some(Kind::File(old)) => {
                let start = offset as usize;
                old.get(start..start + data.len()) == Some(data)
            }
            Some(Kind::Dir(_)) => return reply.error(Errno::EISDIR),
            // A page of a file of a state served before, written back late: that state is
            // gone, and an error would only fail the caller's next `syncfs`.
            None => return reply.written(data.len() as u32),
        };
        // A write of the bytes already there (pages written back unchanged, such as a
        // mapping's pages faulted in for writing) changes no state: it is not logged.
        if !same {
            disk.change(Op::Write {
                ino: ino.0,
                offset,
                data: data.to_vec(),
            });
        }
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.0).change(Op::Fsync { ino: ino.0 });
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let disk = lock(&self.0);
        let Some(entries) = disk.tree.entries(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ino.0, FileType::Directory, OsStr::new("..")),
        ];
        let named = entries.iter().map(|(name, child)| {
            let kind = match disk.is_dir(*child) {
                true => FileType::Directory,
                false => FileType::RegularFile,
            };
            (*child, kind, name.as_os_str())
        });
        for (index, (child, kind, name)) in dots
            .into_iter()
            .chain(named)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(child), index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.0).change(Op::FsyncDir { ino: ino.0 });
        reply.ok();
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Only the plain allocation (`posix_fallocate`): it grows the file with zeros.
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let mut disk = lock(&self.0);
        let Some(attr) = disk.attr(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if offset + length > attr.size {
            disk.change(Op::SetSize {
                ino: ino.0,
                size: offset + length,
            });
        }
        reply.ok();
    }
}
