//! The jail every build runs in (DESIGN §28). A build is the one native code a person can make
//! the host run, so it runs as an attacker's code is run; this module alone decides how a build's
//! processes start and what they see. Invariants, each attacked by `tests/build_jail.rs`:
//! - **No capability**: uid [`BUILD_UID`] in new user, PID, mount, network, IPC and UTS
//!   namespaces, `CapEff` 0, `no_new_privs`, [`REFUSED_SYSCALLS`] refused by seccomp, rlimits
//!   ([`Limits`]); on a host run as root the build's processes are the host's uid 65534 as well.
//! - **Nothing of the world visible**: only [`View`]'s folders, at fixed names under `/sausage`.
//! - **Nothing outlives the build**: its PID namespace ends with the command.
//! - **The artefact is a regular file** of the target folder: [`take_artifact`].

use std::ffi::{CString, OsStr, OsString};
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The id a build runs as: inside its user namespace, and on a host run as root outside it too
/// (the kernel's `nobody`, who owns no file of the host), so that the process limit binds it:
/// the kernel never counts the processes of uid 0 against `RLIMIT_NPROC`.
pub const BUILD_UID: u32 = 65534;

/// Where the jail shows the staged crate (read-only).
pub const JAIL_CRATE: &str = "/sausage/crate";
/// Where the jail shows the principal's target folder (the one folder a build writes).
pub const JAIL_TARGET: &str = "/sausage/target";
/// Where the jail shows cargo's programs and download cache (`CARGO_HOME`, read-only).
pub const JAIL_CARGO_HOME: &str = "/sausage/cargo";
/// Where the jail shows rustup's toolchains (`RUSTUP_HOME`, read-only).
pub const JAIL_RUSTUP_HOME: &str = "/sausage/rustup";

/// The folders of the machine every build reads as they are: programs, the libraries the
/// system's linker and a build script's C compiler load, and those compilers. A folder that is
/// a symlink (Debian's merged `/usr`: `/bin` → `usr/bin`) becomes the same symlink; a missing
/// one is left out. Nothing else of the machine is there: no `/home`, `/root`, `/work`, `/opt`.
pub const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The entries of `/etc` a build reads: where the dynamic loader finds libraries, and the
/// alternatives `cc`, `c++` and `ld` point through. Nothing else of `/etc` (no users, no hosts,
/// no certificates: the build is offline).
const ETC_ENTRIES: [&str; 4] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
];

/// The folders of cargo's home a build reads: its programs and the registry and git sources
/// `cargo fetch` downloaded. Not its `config.toml` nor its `credentials.toml` (registry tokens).
const CARGO_HOME_DIRS: [&str; 3] = ["bin", "registry", "git"];

/// System calls the jail refuses with `EPERM` (seccomp), on top of what no capability already
/// refuses: reaching files by handle (`open_by_handle_at` walks past every mount), changing
/// mounts or namespaces, tracing or reading other processes, the kernel's keyrings, BPF and
/// performance counters, loading kernels or modules, io_uring and userfaultfd (the usual
/// doors of kernel exploits), and the clock, swap and reboot.
pub const REFUSED_SYSCALLS: [(&str, i64); 38] = [
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("acct", libc::SYS_acct),
];

/// The limits of every process of a build (rlimits, set inside the jail by `prlimit`), and of
/// its `/tmp`. At a limit the kernel refuses (an allocation, a fork, an open, a write) or, for
/// CPU time, kills; the build then fails with what the compiler printed.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Address space of one process: rustc on a big crate stays well below it.
    pub memory_bytes: u64,
    /// Processes and threads of the build together (the kernel counts both).
    pub processes: u64,
    /// Open files of one process.
    pub open_files: u64,
    /// The largest file a build may write (an artefact, an object file, a build script's output).
    pub file_bytes: u64,
    /// The size of the private `/tmp`.
    pub tmp_bytes: u64,
    /// CPU seconds of one process; the wall clock is `BUILD_TIME_LIMIT`, kept by the host.
    pub cpu_seconds: u64,
}

/// The limits of a build.
pub const LIMITS: Limits = Limits {
    memory_bytes: 8 << 30,
    processes: 512,
    open_files: 4096,
    file_bytes: 1 << 30,
    tmp_bytes: 1 << 30,
    cpu_seconds: 15 * 60,
};

/// The largest artefact [`take_artifact`] takes: a component bigger than this is not an actor.
pub const MAX_ARTIFACT_BYTES: u64 = 256 << 20;

/// The first bytes of a WebAssembly component (the magic, then layer 1, version `0x0d`); a core
/// module has version 1 and is not an actor.
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// What a build sees besides the system: each folder of the host at its place in the jail.
#[derive(Default)]
pub struct View {
    /// Read-only folders: `(host, jail)`.
    pub read_only: Vec<(PathBuf, PathBuf)>,
    /// The one writable folder, `(host, jail)`: the principal's target folder.
    pub writable: Option<(PathBuf, PathBuf)>,
    /// Host folders hidden under an empty folder (secrets inside a read-only folder).
    pub hidden: Vec<PathBuf>,
}

impl View {
    /// The toolchain, read-only at its fixed places: cargo's programs and download cache, and
    /// rustup's toolchains, as cargo and rustup find them (their variables, else under
    /// `$HOME`); those that exist.
    pub fn with_toolchain(mut self) -> View {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let under_home = |variable: &str, default: &str| {
            std::env::var_os(variable)
                .map(PathBuf::from)
                .or_else(|| Some(home.as_ref()?.join(default)))
                .filter(|dir| dir.is_absolute())
        };
        if let Some(cargo_home) = under_home("CARGO_HOME", ".cargo") {
            for dir in CARGO_HOME_DIRS {
                self.add_existing(cargo_home.join(dir), Path::new(JAIL_CARGO_HOME).join(dir));
            }
        }
        if let Some(rustup_home) = under_home("RUSTUP_HOME", ".rustup") {
            self.add_existing(rustup_home, PathBuf::from(JAIL_RUSTUP_HOME));
        }
        self
    }

    /// Each folder with bubblewrap's option that binds it: the read-only ones, then the writable.
    fn folders(&self) -> impl Iterator<Item = (&'static str, &PathBuf, &PathBuf)> {
        let read_only = self
            .read_only
            .iter()
            .map(|(host, jail)| ("--ro-bind", host, jail));
        let writable = self
            .writable
            .iter()
            .map(|(host, jail)| ("--bind", host, jail));
        read_only.chain(writable)
    }

    fn add_existing(&mut self, host: PathBuf, jail: PathBuf) {
        if host.is_dir() {
            self.read_only.push((host, jail));
        }
    }

    /// The environment of a command in the jail: where its toolchain is, nothing of the host's.
    /// `RUSTUP_TOOLCHAIN` is kept when the host has it (set when the host runs under `cargo`),
    /// so builds use the host's compiler; a crate's `rust-toolchain.toml` is never staged.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        let mut env = vec![
            (
                "PATH",
                OsString::from(format!("{JAIL_CARGO_HOME}/bin:/usr/bin:/bin")),
            ),
            ("HOME", OsString::from("/tmp")),
            ("CARGO_HOME", OsString::from(JAIL_CARGO_HOME)),
            ("RUSTUP_HOME", OsString::from(JAIL_RUSTUP_HOME)),
            ("CARGO_TARGET_DIR", OsString::from(JAIL_TARGET)),
        ];
        if let Some(toolchain) = std::env::var_os("RUSTUP_TOOLCHAIN") {
            env.push(("RUSTUP_TOOLCHAIN", toolchain));
        }
        env
    }
}

/// The programs that make the jail, found on the host's `PATH`.
struct Tools {
    bwrap: PathBuf,
    setpriv: PathBuf,
    prlimit: PathBuf,
}

/// A command to run in the jail, with the seccomp program it carries to bubblewrap.
pub struct Jailed {
    pub command: tokio::process::Command,
    /// Held until the command is spawned: the child inherits it as bubblewrap's `--seccomp`.
    _seccomp: OwnedFd,
}

/// Builds the command that runs `program` in the jail with `view`.
///
/// Two bubblewraps: the first, as the host's user, only lays out the folders the jail binds at
/// their neutral names (a host run as root can read a toolchain under `/root`, which uid 65534
/// cannot); on a host run as root, `setpriv` then becomes uid [`BUILD_UID`]; the second makes the
/// jail itself, from that layout alone, so nothing in it (its mounts, pid 1's command line, the
/// environment) names a folder of the host's world.
pub fn command(view: &View, program: &[&OsStr]) -> Result<Jailed, String> {
    let tools = tools()?;
    let seccomp = seccomp_fd()?;
    let as_root = euid() == 0;
    let mut args: Vec<OsString> = Vec::new();
    let mut arg = |a: &dyn AsRef<OsStr>| args.push(a.as_ref().to_os_string());

    // The layout, as the host's user: its /proc lets the jail's bubblewrap map its ids.
    for a in [
        "--die-with-parent",
        "--bind",
        "/proc",
        "/proc",
        "--dev",
        "/dev",
    ] {
        arg(&a);
    }
    for a in ["--tmpfs", "/tmp", "--perms", "0755", "--dir", "/sausage"] {
        arg(&a);
    }
    system(&mut arg);
    // Folders bubblewrap makes on the way to a mount are its user's alone; the jail's user must
    // pass through them.
    let mut made = vec![PathBuf::from("/"), PathBuf::from("/sausage")];
    for (how, host, jail) in view.folders() {
        for parent in jail
            .ancestors()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if !made.iter().any(|m| m == parent) {
                made.push(parent.to_path_buf());
                for a in ["--perms", "0755", "--dir"] {
                    arg(&a);
                }
                arg(&parent);
            }
        }
        arg(&how);
        arg(host);
        arg(jail);
    }
    for hidden in &view.hidden {
        arg(&"--tmpfs");
        arg(hidden);
    }
    arg(&"--");
    if as_root {
        arg(&tools.setpriv);
        for a in ["--reuid=65534", "--regid=65534", "--clear-groups"] {
            arg(&a);
        }
        for a in ["--inh-caps=-all", "--bounding-set=-all", "--"] {
            arg(&a);
        }
    }

    // The jail, from the layout's own paths.
    arg(&tools.bwrap);
    for a in [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "build",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
    ] {
        arg(&a);
    }
    arg(&LIMITS.tmp_bytes.to_string());
    arg(&"--tmpfs");
    arg(&"/tmp");
    system(&mut arg);
    for (how, _, jail) in view.folders() {
        arg(&how);
        arg(jail);
        arg(jail);
    }
    arg(&"--remount-ro");
    arg(&"/");
    arg(&"--seccomp");
    arg(&seccomp.as_raw_fd().to_string());
    if view
        .read_only
        .iter()
        .any(|(_, jail)| jail == Path::new(JAIL_CRATE))
    {
        arg(&"--chdir");
        arg(&JAIL_CRATE);
    }
    arg(&"--");
    arg(&tools.prlimit);
    for (name, value) in [
        ("--as", LIMITS.memory_bytes),
        ("--nproc", LIMITS.processes),
        ("--nofile", LIMITS.open_files),
        ("--fsize", LIMITS.file_bytes),
        ("--cpu", LIMITS.cpu_seconds),
        ("--core", 0),
    ] {
        arg(&format!("{name}={value}"));
    }
    arg(&"--");
    for a in program {
        arg(a);
    }

    let mut command = tokio::process::Command::new(&tools.bwrap);
    command
        .args(args)
        .env_clear()
        .envs(view.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let fd = seccomp.as_raw_fd();
    // SAFETY: between fork and exec only `fcntl`, which is async-signal-safe, runs; it lets the
    // child (and through it the jail's bubblewrap) inherit the seccomp program's descriptor,
    // which is close-on-exec everywhere else.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(Jailed {
        command,
        _seccomp: seccomp,
    })
}

/// The effective uid of the host.
fn euid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Adds the system's folders and `/etc`'s few entries, read-only, to a bubblewrap's arguments.
fn system(arg: &mut impl FnMut(&dyn AsRef<OsStr>)) {
    for dir in SYSTEM_DIRS.iter().map(Path::new) {
        match std::fs::read_link(dir) {
            Ok(link) => {
                arg(&"--symlink");
                arg(&link);
                arg(&dir);
            }
            Err(_) if dir.is_dir() => {
                arg(&"--ro-bind");
                arg(&dir);
                arg(&dir);
            }
            Err(_) => {}
        }
    }
    for a in ["--perms", "0755", "--dir", "/etc"] {
        arg(&a);
    }
    for entry in ETC_ENTRIES.iter().filter(|p| Path::new(p).exists()) {
        arg(&"--ro-bind");
        arg(entry);
        arg(entry);
    }
}

/// Finds bubblewrap, `setpriv` and `prlimit` on the host's `PATH`. Each must lie in a system
/// folder, which the layout shows.
fn tools() -> Result<Tools, String> {
    let find = |name: &str, package: &str| -> Result<PathBuf, String> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|file| file.is_file())
            .ok_or_else(|| {
                format!(
                    "`{name}` is not installed, and builds never run outside their jail; install \
                     it (Debian: `apt-get install {package}`)"
                )
            })?;
        let real = std::fs::canonicalize(&found).unwrap_or(found);
        if SYSTEM_DIRS.iter().any(|dir| real.starts_with(dir)) {
            Ok(real)
        } else {
            Err(format!(
                "`{name}` ({}) lies outside the system's folders the jail shows ({}); install \
                 it from the system's packages (Debian: `apt-get install {package}`)",
                real.display(),
                SYSTEM_DIRS.join(", ")
            ))
        }
    };
    Ok(Tools {
        bwrap: find("bwrap", "bubblewrap")?,
        setpriv: find("setpriv", "util-linux")?,
        prlimit: find("prlimit", "util-linux")?,
    })
}

/// The seccomp program of the jail, compiled by `seccompiler` for this machine's architecture:
/// every call allowed but [`REFUSED_SYSCALLS`], which fail with `EPERM`.
pub fn seccomp_program() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for this machine's architecture: {e}"))?;
    let rules = REFUSED_SYSCALLS
        .iter()
        .map(|&(_, number)| (number, Vec::new()))
        .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("the jail's seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e| format!("the jail's seccomp filter: {e}"))
}

/// The seccomp program in an anonymous file, as bubblewrap's `--seccomp` reads it: the filter's
/// instructions as the kernel lays them out, nothing else.
fn seccomp_fd() -> Result<OwnedFd, String> {
    let program = seccomp_program()?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in &program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    let name = CString::new("sausage-seccomp").expect("no NUL in the name");
    // SAFETY: `name` is a valid C string; the result is checked before it is owned.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(format!(
            "cannot hold the jail's seccomp filter: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `raw` is a descriptor memfd_create just opened, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)
        .and_then(|()| file.rewind())
        .map_err(|e| format!("cannot hold the jail's seccomp filter: {e}"))?;
    Ok(file.into())
}

/// Checks that this machine makes the jail whole, by running one: it must report uid 65534, no
/// capability, `no_new_privs` and a seccomp filter. Where it cannot (no user namespaces, no
/// seccomp, no bubblewrap), the error says what is missing and how to allow it: builds never
/// fall back to a weaker sandbox.
pub async fn check() -> Result<(), String> {
    let cat = [OsStr::new("cat"), OsStr::new("/proc/self/status")];
    let jailed = command(&View::default(), &cat).map_err(cannot)?;
    let mut command = jailed.command;
    let output = command
        .output()
        .await
        .map_err(|e| cannot(format!("cannot run bubblewrap: {e}")))?;
    let status = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        return Err(cannot(diagnose(said.trim(), &read_sysctl)));
    }
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    let uid = field("Uid");
    let wanted = [
        (
            "CapEff",
            field("CapEff") == "0000000000000000",
            "no capabilities",
        ),
        ("NoNewPrivs", field("NoNewPrivs") == "1", "no_new_privs"),
        ("Seccomp", field("Seccomp") == "2", "a seccomp filter"),
        (
            "Uid",
            uid.split_whitespace().all(|id| id == "65534") && !uid.is_empty(),
            "uid 65534",
        ),
    ];
    match wanted.iter().find(|(_, ok, _)| !ok) {
        None => Ok(()),
        Some((name, _, what)) => Err(cannot(format!(
            "a command in the jail did not run with {what} ({name}: {}); the kernel or \
             bubblewrap does not make the jail whole",
            field(name)
        ))),
    }
}

fn cannot(why: String) -> String {
    format!(
        "cannot build: this machine cannot make the build jail: {why}; builds never run without it"
    )
}

/// Says what keeps bubblewrap from making the jail, from what it printed and the kernel's
/// settings (`read(name)` reads `/proc/sys/<name>`), and how to allow it.
pub fn diagnose(said: &str, read: &dyn Fn(&str) -> Option<String>) -> String {
    let setting = |name: &str| read(name).map(|v| v.trim().to_string());
    if setting("user/max_user_namespaces").as_deref() == Some("0") {
        return format!(
            "user namespaces are off (user.max_user_namespaces is 0); allow them with `sysctl -w \
             user.max_user_namespaces=15000` (bubblewrap said: {said})"
        );
    }
    if said.contains("max_") || said.contains("ENOSPC") {
        let max = setting("user/max_user_namespaces").unwrap_or_else(|| "unknown".into());
        return format!(
            "no more user namespaces can be made here (user.max_user_namespaces is {max} in this \
             namespace, or namespaces nest too deep); allow them with `sysctl -w \
             user.max_user_namespaces=15000` where the host runs (bubblewrap said: {said})"
        );
    }
    if setting("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return format!(
            "user namespaces are off for unprivileged users \
             (kernel.unprivileged_userns_clone is 0); allow them with `sysctl -w \
             kernel.unprivileged_userns_clone=1` (bubblewrap said: {said})"
        );
    }
    if setting("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return format!(
            "AppArmor keeps unprivileged programs from making user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns is 1); allow bubblewrap with an \
             AppArmor profile, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` \
             (bubblewrap said: {said})"
        );
    }
    if said.contains("seccomp") {
        return format!(
            "the kernel refused the seccomp filter; it needs CONFIG_SECCOMP_FILTER, and in a \
             container a seccomp profile that allows seccomp(2) (bubblewrap said: {said})"
        );
    }
    if said.contains("namespace")
        || said.contains("uid map")
        || said.contains("Operation not permitted")
    {
        return format!(
            "the kernel refused a namespace; in a container, run it with user namespaces \
             allowed (for Docker `--security-opt seccomp=unconfined --security-opt \
             apparmor=unconfined`, or a runtime such as sysbox) (bubblewrap said: {said})"
        );
    }
    format!("bubblewrap failed: {said}")
}

/// Reads `/proc/sys/<name>`.
fn read_sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc/sys").join(name)).ok()
}

/// Makes the principal's target folder the build's own: on a host run as root the build runs as
/// uid [`BUILD_UID`], which must own it and what earlier builds left in it. Links are changed,
/// never followed.
pub fn own_target(target: &Path) -> std::io::Result<()> {
    if euid() != 0 {
        return Ok(());
    }
    if std::fs::symlink_metadata(target)?.uid() == BUILD_UID {
        return Ok(());
    }
    fn walk(path: &Path) -> std::io::Result<()> {
        let meta = std::fs::symlink_metadata(path)?;
        std::os::unix::fs::lchown(path, Some(BUILD_UID), Some(BUILD_UID))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(path)? {
                walk(&entry?.path())?;
            }
        }
        Ok(())
    }
    walk(target)
}

/// Reads the artefact at `inside` the target folder `target` (a real path): opened without
/// following a link, taken only when it is a regular file whose real path lies inside `target`,
/// at most [`MAX_ARTIFACT_BYTES`], that begins as a WebAssembly component. Read from the one
/// descriptor it checked, so nothing can swap it in between (and no process of the build is
/// left to try: the jail ended).
pub fn take_artifact(target: &Path, inside: &Path) -> Result<Vec<u8>, String> {
    let path = target.join(inside);
    let shown = Path::new(JAIL_TARGET).join(inside);
    let refuse = |why: String| format!("the build's artefact {}: {why}", shown.display());
    let mut file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("is a symbolic link, not the file cargo built".into()),
            _ => refuse(format!("cannot be opened: {e}")),
        })?;
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| refuse(format!("cannot tell where it lies: {e}")))?;
    if !real.starts_with(target) {
        return Err(refuse(
            "lies outside the target folder (a link on its way)".into(),
        ));
    }
    if meta.len() > MAX_ARTIFACT_BYTES {
        return Err(refuse(format!(
            "is {} bytes, more than an actor may be ({MAX_ARTIFACT_BYTES})",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file)
        .take(MAX_ARTIFACT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if bytes.len() as u64 > MAX_ARTIFACT_BYTES {
        return Err(refuse(format!(
            "grew past what an actor may be ({MAX_ARTIFACT_BYTES} bytes)"
        )));
    }
    if !bytes.starts_with(&COMPONENT_HEADER) {
        return Err(refuse(
            "is not a WebAssembly component (it does not begin with a component's header)".into(),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_for_this_machine_and_names_each_call_once() {
        let program = seccomp_program().unwrap();
        assert!(program.len() > REFUSED_SYSCALLS.len());
        let mut numbers: Vec<i64> = REFUSED_SYSCALLS.iter().map(|(_, n)| *n).collect();
        numbers.sort();
        numbers.dedup();
        assert_eq!(numbers.len(), REFUSED_SYSCALLS.len());
    }

    #[test]
    fn a_missing_namespace_is_named_with_its_setting() {
        let off = |name: &str| (name == "user/max_user_namespaces").then(|| "0\n".to_string());
        let why = diagnose("bwrap: No permissions to create a new namespace", &off);
        assert!(why.contains("user.max_user_namespaces=15000"), "{why}");
        let apparmor = |name: &str| {
            (name == "kernel/apparmor_restrict_unprivileged_userns").then(|| "1".into())
        };
        let why = diagnose("bwrap: setting up uid map: Permission denied", &apparmor);
        assert!(why.contains("AppArmor"), "{why}");
        let why = diagnose(
            "bwrap: Creating new namespace failed: Operation not permitted",
            &|_| None,
        );
        assert!(why.contains("container"), "{why}");
        let nested = "bwrap: Creating new namespace failed: nesting depth or \
                      /proc/sys/user/max_*_namespaces exceeded (ENOSPC)";
        let why = diagnose(nested, &|_| Some("1".into()));
        assert!(why.contains("user.max_user_namespaces is 1"), "{why}");
        let why = diagnose("bwrap: seccomp: Invalid argument", &|_| None);
        assert!(why.contains("CONFIG_SECCOMP_FILTER"), "{why}");
    }

    #[test]
    fn an_artefact_is_taken_only_as_a_component_file_inside_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = std::fs::canonicalize(dir.path()).unwrap().join("target");
        std::fs::create_dir_all(target.join("out")).unwrap();
        let mut component = COMPONENT_HEADER.to_vec();
        component.extend_from_slice(b"rest");
        std::fs::write(target.join("out/a.wasm"), &component).unwrap();
        assert_eq!(
            take_artifact(&target, Path::new("out/a.wasm")).unwrap(),
            component
        );

        let secret = dir.path().join("secret");
        std::fs::write(&secret, &component).unwrap();
        std::os::unix::fs::symlink(&secret, target.join("out/link.wasm")).unwrap();
        let why = take_artifact(&target, Path::new("out/link.wasm")).unwrap_err();
        assert!(why.contains("symbolic link"), "{why}");

        std::os::unix::fs::symlink(dir.path(), target.join("up")).unwrap();
        let why = take_artifact(&target, Path::new("up/secret")).unwrap_err();
        assert!(why.contains("outside the target folder"), "{why}");

        std::fs::write(target.join("out/module.wasm"), b"\0asm\x01\0\0\0").unwrap();
        let why = take_artifact(&target, Path::new("out/module.wasm")).unwrap_err();
        assert!(why.contains("not a WebAssembly component"), "{why}");

        std::fs::create_dir(target.join("out/dir.wasm")).unwrap();
        let why = take_artifact(&target, Path::new("out/dir.wasm")).unwrap_err();
        assert!(why.contains("not a regular file"), "{why}");
        assert!(!why.contains(&target.display().to_string()), "{why}");
    }
}
