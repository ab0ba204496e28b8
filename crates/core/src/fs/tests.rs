//! Tests of the filesystem rules (DESIGN §2) through one helper, [`run`]: a tree in, a script of
//! operations, a tree out. Each script line checks its own result, so a failure names its line.
//!
//! Trees are lines `path/` (a folder), `path = content` (a file) or `path -> target` (a symlink),
//! relative to a world holding the mounts `/data` (`data/`, rw), `/public` (`public/`, rw) and
//! `/actor` (`actor/`, read-only). Temporaries are listed too, so a leftover shows.
//!
//! Script lines are `command args [=> expected]`, expected `ok` when left out. Paths are
//! `base:path`, where `base` is a mount (`/data`) or a descriptor opened by the script, and `path`
//! is given raw to the operation (as wasi-libc would after stripping the mount). Commands:
//! `open fd base:path flags` (letters `r`ead `w`rite `c`reate e`x`clusive `t`runcate
//! `d`irectory, or `-`), `write fd text` (at the fd's cursor), `pwrite fd offset text`,
//! `append fd text`, `read fd`, `size fd n`, `fstat fd`, `clone fd new-fd` (another handle, like
//! a stream), `close fd` (by the guest), `drop fd` (with the store: a trap), `sync fd`,
//! `commit-all`, `link /mount:path name` (a hard link at `name` in the world, as a snapshot makes),
//! `cat base:path`, `stat base:path`, `ls base:path`, `mkdir`, `rmdir`, `unlink`, `touch`
//! (one `base:path`) and `rename base:path base:path`. Descriptors still open at the end are
//! dropped as by a trap.

use super::*;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// A world on disk, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sausage-fs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_tree(root: &Path, tree: &str) {
    for line in tree.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some((path, content)) = line.split_once(" = ") {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        } else if let Some((path, target)) = line.split_once(" -> ") {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, path).unwrap();
        } else {
            std::fs::create_dir_all(root.join(line.trim_end_matches('/'))).unwrap();
        }
    }
}

/// The tree under `root` in the format of [`make_tree`], sorted, without the mount folders.
fn read_tree(root: &Path) -> String {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push(format!("{rel} -> {}", target.display()));
            } else if kind.is_dir() {
                if !["data", "public", "actor"].contains(&rel.as_str()) {
                    out.push(format!("{rel}/"));
                }
                walk(root, &path, out);
            } else {
                let content = std::fs::read_to_string(&path).unwrap();
                out.push(format!("{rel} = {content}"));
            }
        }
    }
    let mut lines = Vec::new();
    walk(root, root, &mut lines);
    lines.sort();
    lines.join("\n")
}

/// Hides the unique part of temporary names so trees compare: `.sausage-tmp-*`.
fn mask_temporaries(tree: &str) -> String {
    tree.lines()
        .map(|line| match line.find(TEMPORARY_PREFIX) {
            Some(at) => {
                let end = line[at..].find([' ', '/']).map_or(line.len(), |e| at + e);
                format!("{}{TEMPORARY_PREFIX}*{}", &line[..at], &line[end..])
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn kebab(code: ErrorCode) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn show_stat(stat: Stat) -> String {
    match stat.kind {
        Kind::File => format!("file {}", stat.size),
        Kind::Directory => "dir".to_string(),
        Kind::Symlink => "symlink".to_string(),
        Kind::Other => "other".to_string(),
    }
}

enum Handle {
    Dir(Dir),
    File { file: File, cursor: u64 },
}

struct Session {
    /// The world's folder, where `link` makes its hard links.
    root: PathBuf,
    handles: BTreeMap<String, Handle>,
    pending: Vec<PendingCommit>,
}

impl Session {
    fn dir(&self, base: &str) -> Dir {
        match self.handles.get(base) {
            Some(Handle::Dir(dir)) => dir.clone(),
            _ => panic!("no directory named {base}"),
        }
    }

    fn file(&mut self, fd: &str) -> (&File, &mut u64) {
        match self.handles.get_mut(fd) {
            Some(Handle::File { file, cursor }) => (file, cursor),
            _ => panic!("no file named {fd}"),
        }
    }

    /// Splits `base:path` into the directory and the raw path.
    fn at<'a>(&self, arg: &'a str) -> (Dir, &'a str) {
        let (base, path) = arg.split_once(':').expect("paths are base:path");
        (self.dir(base), path)
    }

    fn step(&mut self, command: &str, args: &[&str], rest: &str) -> FsResult<String> {
        let ok = |()| "ok".to_string();
        match command {
            "open" => {
                let (dir, path) = self.at(args[1]);
                let flags = args[2];
                let options = OpenOptions {
                    read: flags.contains('r'),
                    write: flags.contains('w'),
                    create: flags.contains('c'),
                    exclusive: flags.contains('x'),
                    truncate: flags.contains('t'),
                    directory: flags.contains('d'),
                };
                let handle = match dir.open(path, options)? {
                    Opened::Dir(dir) => Handle::Dir(dir),
                    Opened::File(file) => {
                        self.pending.extend(file.pending_commit());
                        Handle::File { file, cursor: 0 }
                    }
                };
                self.handles.insert(args[0].to_string(), handle);
                Ok("ok".into())
            }
            "write" => {
                let text = rest.split_once(' ').map_or("", |(_, text)| text);
                let (file, cursor) = self.file(args[0]);
                file.write_at(text.as_bytes(), *cursor)?;
                *cursor += text.len() as u64;
                Ok("ok".into())
            }
            "pwrite" => {
                let text = rest.splitn(3, ' ').nth(2).unwrap_or("");
                let offset = args[1].parse().unwrap();
                self.file(args[0])
                    .0
                    .write_at(text.as_bytes(), offset)
                    .map(ok)
            }
            "append" => {
                let text = rest.split_once(' ').map_or("", |(_, text)| text);
                self.file(args[0]).0.append(text.as_bytes()).map(ok)
            }
            "read" => {
                let bytes = self.file(args[0]).0.read_at(MAX_READ_LEN, 0)?;
                Ok(String::from_utf8(bytes).unwrap())
            }
            "size" => self
                .file(args[0])
                .0
                .set_size(args[1].parse().unwrap())
                .map(ok),
            "fstat" => self.file(args[0]).0.stat().map(show_stat),
            "clone" => {
                let file = self.file(args[0]).0.clone();
                let handle = Handle::File { file, cursor: 0 };
                self.handles.insert(args[1].to_string(), handle);
                Ok("ok".into())
            }
            "close" => {
                match self.handles.remove(args[0]) {
                    Some(Handle::File { file, .. }) => file.close(),
                    Some(Handle::Dir(_)) => {}
                    None => panic!("no handle named {}", args[0]),
                }
                Ok("ok".into())
            }
            "drop" => {
                self.handles.remove(args[0]).expect("a handle");
                Ok("ok".into())
            }
            "sync" => self.file(args[0]).0.sync().map(ok),
            "link" => {
                let (mount, path) = args[0].split_once(':').expect("paths are /mount:path");
                let from = self.root.join(&mount[1..]).join(path);
                std::fs::hard_link(from, self.root.join(args[1]))?;
                Ok("ok".into())
            }
            "commit-all" => {
                for pending in self.pending.drain(..) {
                    pending.commit().unwrap();
                }
                Ok("ok".into())
            }
            "cat" => {
                let (dir, path) = self.at(args[0]);
                let options = OpenOptions {
                    read: true,
                    ..OpenOptions::default()
                };
                match dir.open(path, options)? {
                    Opened::File(file) => {
                        let bytes = file.read_at(MAX_READ_LEN, 0)?;
                        file.close();
                        Ok(String::from_utf8(bytes).unwrap())
                    }
                    Opened::Dir(_) => Err(ErrorCode::IsDirectory),
                }
            }
            "stat" => {
                let (dir, path) = self.at(args[0]);
                dir.stat_at(path).map(show_stat)
            }
            "ls" => {
                let (dir, path) = self.at(args[0]);
                let Opened::Dir(listed) = dir.open(path, OpenOptions::default())? else {
                    return Err(ErrorCode::NotDirectory);
                };
                let mut names: Vec<String> = listed
                    .entries()?
                    .into_iter()
                    .map(|e| match e.kind {
                        Kind::Directory => format!("{}/", e.name),
                        Kind::Symlink => format!("{}@", e.name),
                        _ => e.name,
                    })
                    .collect();
                names.sort();
                Ok(names.join(" "))
            }
            "mkdir" => {
                let (dir, path) = self.at(args[0]);
                dir.create_dir(path).map(ok)
            }
            "rmdir" => {
                let (dir, path) = self.at(args[0]);
                dir.remove_dir(path).map(ok)
            }
            "unlink" => {
                let (dir, path) = self.at(args[0]);
                dir.unlink(path).map(ok)
            }
            "touch" => {
                let (dir, path) = self.at(args[0]);
                dir.set_times_at(path, SetTime::Now, SetTime::Now).map(ok)
            }
            "rename" => {
                let (from, old) = self.at(args[0]);
                let (to, new) = self.at(args[1]);
                from.rename(old, &to, new).map(ok)
            }
            other => panic!("unknown command {other}"),
        }
    }
}

/// Builds a world from `before`, runs `script` on it and returns the tree after it (with
/// temporaries masked as `.sausage-tmp-*`).
fn run(before: &str, script: &str) -> String {
    let scratch = Scratch::new();
    let root = &scratch.0;
    make_tree(root, "data/\npublic/\nactor/");
    make_tree(root, before);
    let mut session = Session {
        root: root.clone(),
        handles: BTreeMap::new(),
        pending: Vec::new(),
    };
    for (guest, writable) in [("/data", true), ("/public", true), ("/actor", false)] {
        let mount = Mount {
            guest: guest.to_string(),
            host: root.join(&guest[1..]),
            writable,
        };
        session
            .handles
            .insert(guest.to_string(), Handle::Dir(Dir::root(&mount)));
    }
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (action, expected) = match line.strip_suffix(" =>") {
            Some(action) => (action, ""),
            None => line.split_once(" => ").unwrap_or((line, "ok")),
        };
        let (command, rest) = action.split_once(' ').unwrap_or((action, ""));
        let args: Vec<&str> = rest.split(' ').collect();
        let got = session.step(command, &args, rest).unwrap_or_else(kebab);
        assert_eq!(got, expected, "script line: {line}");
    }
    drop(session);
    mask_temporaries(&read_tree(root))
}

#[test]
fn a_write_is_invisible_until_close_even_to_the_writers_other_descriptor() {
    let after = run(
        "data/a.txt = old",
        "
        open w /data:a.txt rwt
        write w new
        read w => new
        cat /data:a.txt => old
        open r /data:a.txt r
        read r => old
        fstat w => file 3
        stat /data:a.txt => file 3
        close w
        read r => old
        cat /data:a.txt => new
        ",
    );
    assert_eq!(after, "data/a.txt = new");
}

#[test]
fn a_new_file_appears_only_at_close() {
    let after = run(
        "",
        "
        open w /data:new.txt wc
        write w hello
        stat /data:new.txt => no-entry
        ls /data:. =>
        close w
        ls /data:. => new.txt
        ",
    );
    assert_eq!(after, "data/new.txt = hello");
}

#[test]
fn a_trap_discards_uncommitted_writes_and_leaves_no_temporary() {
    let after = run(
        "data/a.txt = old\ndata/sub/",
        "
        open w /data:a.txt wt
        write w broken
        open n /data:sub/new.txt wc
        write n never
        drop w
        cat /data:a.txt => old
        ",
    );
    // `n` is still open at the end of the script and dropped as by a trap.
    assert_eq!(after, "data/a.txt = old\ndata/sub/");
}

#[test]
fn truncate_starts_empty_and_append_or_edit_start_from_a_copy() {
    let after = run(
        "data/t.txt = 12345\ndata/e.txt = 12345\ndata/a.txt = 12345",
        "
        open t /data:t.txt wt
        read t => bad-descriptor
        close t
        open e /data:e.txt rw
        read e => 12345
        pwrite e 1 xy
        close e
        open a /data:a.txt w
        append a 678
        append a 9
        close a
        ",
    );
    assert_eq!(
        after,
        "data/a.txt = 123456789\ndata/e.txt = 1xy45\ndata/t.txt = "
    );
}

#[test]
fn of_two_writers_the_last_close_wins_whole() {
    let after = run(
        "data/a.txt = old",
        "
        open one /data:a.txt wt
        open two /data:a.txt wt
        write one first writer
        write two second
        close two
        cat /data:a.txt => second
        close one
        ",
    );
    assert_eq!(after, "data/a.txt = first writer");
}

#[test]
fn a_file_closed_by_the_guest_commits_when_its_last_handle_goes() {
    let after = run(
        "",
        "
        open w /data:streamed.txt wc
        clone w stream
        write w data
        close w
        stat /data:streamed.txt => no-entry
        close stream
        cat /data:streamed.txt => data
        open t /data:trapped.txt wc
        clone t stream2
        write t lost
        drop t
        drop stream2
        ",
    );
    assert_eq!(after, "data/streamed.txt = data");
}

#[test]
fn a_normal_exit_commits_open_files_and_later_writes_fail() {
    let after = run(
        "data/a.txt = old",
        "
        open w /data:a.txt wt
        write w new
        open n /public:n.txt wc
        write n fresh
        commit-all
        cat /data:a.txt => new
        write w more => bad-descriptor
        ",
    );
    assert_eq!(after, "data/a.txt = new\npublic/n.txt = fresh");
}

#[test]
fn directory_operations_take_effect_at_once() {
    let after = run(
        "data/a.txt = a\ndata/gone.txt = x\ndata/empty/",
        "
        mkdir /data:d
        stat /data:d => dir
        rename /data:a.txt /data:d/b.txt
        cat /data:d/b.txt => a
        stat /data:a.txt => no-entry
        unlink /data:gone.txt
        stat /data:gone.txt => no-entry
        rmdir /data:empty
        ls /data:. => d/
        open dd /data:d d
        mkdir dd:sub
        ls dd:. => b.txt sub/
        stat dd:.. => dir
        ",
    );
    assert_eq!(after, "data/d/\ndata/d/b.txt = a\ndata/d/sub/");
}

#[test]
fn a_writer_leaves_its_target_to_directory_operations() {
    let after = run(
        "data/a.txt = old",
        "
        open w /data:a.txt wt
        write w new
        unlink /data:a.txt
        stat /data:a.txt => no-entry
        close w
        cat /data:a.txt => new
        ",
    );
    assert_eq!(after, "data/a.txt = new");
}

#[test]
fn a_writer_follows_its_folder_when_the_folder_is_renamed() {
    // The temporary moves with its folder, so the commit lands in the folder's new place, as
    // a POSIX descriptor's writes would; a discard leaves no temporary behind either.
    let after = run(
        "data/d/a.txt = old\ndata/d/b.txt = old",
        "
        open w /data:d/a.txt wt
        write w new
        open t /data:d/b.txt w
        append t never
        rename /data:d /data:e
        close w
        cat /data:e/a.txt => new
        stat /data:d => no-entry
        drop t
        cat /data:e/b.txt => old
        ",
    );
    assert_eq!(after, "data/e/\ndata/e/a.txt = new\ndata/e/b.txt = old");
}

#[test]
fn temporary_names_are_invisible_to_guests() {
    let before = "data/.sausage-tmp-9-9 = junk\ndata/d/.sausage-tmp-1-1/";
    let after = run(
        before,
        "
        open w /data:a.txt wc
        ls /data:. => d/
        ls /data:d => 
        stat /data:.sausage-tmp-9-9 => no-entry
        open r /data:.sausage-tmp-9-9 r => no-entry
        open c /data:.sausage-tmp-9-9 wc => not-permitted
        open c /data:.sausage-tmp-new wc => not-permitted
        open c /data:d/.sausage-tmp-1-1/x wc => no-entry
        mkdir /data:.sausage-tmp-dir => not-permitted
        rename /data:.sausage-tmp-9-9 /data:b => no-entry
        rename /data:d /data:.sausage-tmp-d => not-permitted
        unlink /data:.sausage-tmp-9-9 => no-entry
        rmdir /data:d/.sausage-tmp-1-1 => no-entry
        touch /data:.sausage-tmp-9-9 => no-entry
        stat /data:d/.sausage-tmp-1-1/.. => no-entry
        ",
    );
    assert_eq!(
        after,
        "data/.sausage-tmp-* = junk\ndata/d/\ndata/d/.sausage-tmp-*/"
    );
}

#[test]
fn paths_cannot_leave_their_mount() {
    let after = run(
        "data/a.txt = a\ndata/sub/b.txt = b\npublic/p.txt = p",
        "
        cat /data:../public/p.txt => not-permitted
        cat /data:sub/../../public/p.txt => not-permitted
        cat /data:/etc/passwd => not-permitted
        cat /data://etc/passwd => not-permitted
        cat /data: => no-entry
        cat /data:sub//b.txt => b
        cat /data:./sub/./b.txt => b
        cat /data:sub/../a.txt => a
        open s /data:sub d
        cat s:../a.txt => a
        cat s:../../public/p.txt => not-permitted
        mkdir s:../../x => not-permitted
        rename /data:a.txt /data:../a.txt => not-permitted
        ",
    );
    assert_eq!(
        after,
        "data/a.txt = a\ndata/sub/\ndata/sub/b.txt = b\npublic/p.txt = p"
    );
}

#[test]
fn long_paths_and_nul_bytes_are_refused_before_any_work() {
    let long = "a/".repeat(MAX_GUEST_PATH_LEN);
    run("", &format!("stat /data:{long} => name-too-long"));
    let mount = Mount {
        guest: "/data".into(),
        host: std::env::temp_dir(),
        writable: true,
    };
    assert_eq!(Dir::root(&mount).stat_at("a\0b"), Err(ErrorCode::Invalid));
}

#[test]
fn symlinks_are_never_followed_nor_made_usable() {
    let before = "
        data/out -> /etc
        data/file -> ../public/p.txt
        data/dir -> ../public
        public/p.txt = p
    ";
    let after = run(
        before,
        "
        ls /data:. => dir@ file@ out@
        cat /data:out/passwd => not-permitted
        cat /data:file => not-permitted
        stat /data:file => not-permitted
        open w /data:file wt => not-permitted
        open w /data:dir/new.txt wc => not-permitted
        ls /data:dir => not-permitted
        mkdir /data:dir/x => not-permitted
        unlink /data:file => not-permitted
        rename /data:file /data:f2 => not-permitted
        rename /public:p.txt /public:../data/file => not-permitted
        touch /data:file => not-permitted
        ",
    );
    assert_eq!(
        after,
        "data/dir -> ../public\ndata/file -> ../public/p.txt\ndata/out -> /etc\npublic/p.txt = p"
    );
}

#[test]
fn a_read_only_mount_refuses_every_change() {
    let before = "actor/echo/status.json = {}\nactor/echo/public/";
    let after = run(
        before,
        "
        cat /actor:echo/status.json => {}
        ls /actor:echo => public/ status.json
        open w /actor:echo/status.json w => read-only
        open w /actor:echo/status.json t => read-only
        open w /actor:echo/new.txt wc => read-only
        open r /actor:echo/status.json r
        write r x => read-only
        size r 0 => read-only
        mkdir /actor:echo/d => read-only
        rmdir /actor:echo/public => read-only
        unlink /actor:echo/status.json => read-only
        rename /actor:echo/status.json /actor:echo/s.json => read-only
        touch /actor:echo/status.json => read-only
        open p /actor:echo/public d
        mkdir p:x => read-only
        ",
    );
    assert_eq!(
        after,
        "actor/echo/\nactor/echo/public/\nactor/echo/status.json = {}"
    );
}

#[test]
fn errors_name_what_went_wrong() {
    let before = "data/a.txt = a\ndata/full/x = x\ndata/empty/\npublic/p.txt = p";
    let after = run(
        before,
        "
        cat /data:missing => no-entry
        open w /data:missing/new.txt wc => no-entry
        mkdir /data:full => exist
        mkdir /data:. => exist
        open w /data:a.txt wcx => exist
        open d /data:a.txt d => not-directory
        stat /data:a.txt/ => not-directory
        mkdir /data:a.txt/x => not-directory
        open w /data:empty w => is-directory
        unlink /data:empty => is-directory
        rmdir /data:full => not-empty
        rmdir /data:a.txt => not-directory
        rmdir /data:. => busy
        rename /data:. /data:x => busy
        rename /data:a.txt /public:a.txt => cross-device
        open w /data:x dc => invalid
        open r /data:a.txt r
        write r x => bad-descriptor
        size r 0 => bad-descriptor
        open w /data:a.txt w
        read w => bad-descriptor
        ",
    );
    assert_eq!(
        after,
        "data/a.txt = a\ndata/empty/\ndata/full/\ndata/full/x = x\npublic/p.txt = p"
    );
}

#[test]
fn set_size_and_set_times_work_on_writers_and_directories() {
    let after = run(
        "data/a.txt = 12345\ndata/d/",
        "
        open w /data:a.txt rw
        size w 2
        read w => 12
        close w
        touch /data:a.txt
        touch /data:d
        ",
    );
    assert_eq!(after, "data/a.txt = 12\ndata/d/");
}

#[test]
fn clean_temporaries_removes_every_leftover_and_nothing_else() {
    let scratch = Scratch::new();
    make_tree(
        &scratch.0,
        "
        .sausage-tmp-1-1 = a
        data/keep.txt = k
        data/.sausage-tmp-1-2 = b
        data/deep/er/.sausage-tmp-7-0 = c
        data/deep/er/.sausage-tmp-link -> /etc/passwd
        build/.sausage-tmp-theirs = d
        ",
    );
    // This process's own temporaries may be in use: the clean-up runs while actors start.
    let own = format!(".sausage-tmp-{}-3", std::process::id());
    std::fs::write(scratch.0.join("data").join(&own), "mine").unwrap();
    let skip = [scratch.0.join("build")];
    assert_eq!(clean_temporaries(&scratch.0, &skip).unwrap(), 4);
    assert_eq!(
        read_tree(&scratch.0),
        format!(
            "build/\nbuild/.sausage-tmp-theirs = d\ndata/{own} = mine\ndata/deep/\ndata/deep/er/\n\
             data/keep.txt = k"
        )
    );
}

#[test]
fn write_atomically_replaces_whole_and_leaves_no_temporary() {
    let scratch = Scratch::new();
    let path = scratch.0.join("status.json");
    write_atomically(&path, b"{\"v\":1}").unwrap();
    write_atomically(&path, b"{\"v\":2}").unwrap();
    assert_eq!(read_tree(&scratch.0), "status.json = {\"v\":2}");
    assert!(is_temporary_name(OsStr::new(".sausage-tmp-1-2")));
    assert!(!is_temporary_name(OsStr::new("sausage-tmp-1-2")));
}

#[test]
fn rewrite_unsynced_keeps_the_inode_and_leaves_what_readers_opened_alone() {
    use std::os::unix::fs::MetadataExt;
    let scratch = Scratch::new();
    let path = scratch.0.join("status.json");
    let inode = |path: &Path| std::fs::metadata(path).unwrap().ino();
    // No file yet: created by a rename.
    rewrite_unsynced(&path, b"{\"state\":\"stopped\"}").unwrap();
    let first = inode(&path);
    // Nobody has it open: longer and shorter contents go in place, whole; a little shorter
    // leaves spaces after it (JSON allows them), much shorter cuts the file.
    rewrite_unsynced(&path, b"{\"state\":\"running\",\"restarts\":10}").unwrap();
    rewrite_unsynced(&path, b"{\"state\":\"running\"}").unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{{\"state\":\"running\"}}{}", " ".repeat(14))
    );
    let long = format!(
        "{{\"state\":\"broken\",\"last_exit\":\"{}\"}}",
        "x".repeat(100)
    );
    rewrite_unsynced(&path, long.as_bytes()).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), long);
    rewrite_unsynced(&path, b"{\"state\":\"running\"}").unwrap();
    assert_eq!(
        read_tree(&scratch.0),
        "status.json = {\"state\":\"running\"}"
    );
    assert_eq!(inode(&path), first);
    // A reader has it open: the new content comes by a rename, and the reader keeps the old.
    let mut reader = std::fs::File::open(&path).unwrap();
    rewrite_unsynced(&path, b"{\"state\":\"stopped\"}").unwrap();
    let mut seen = String::new();
    io::Read::read_to_string(&mut reader, &mut seen).unwrap();
    assert_eq!(seen, "{\"state\":\"running\"}");
    assert_eq!(
        read_tree(&scratch.0),
        "status.json = {\"state\":\"stopped\"}"
    );
    assert_ne!(inode(&path), first);
    // A file with another link (as a snapshot makes) is never written through.
    std::fs::hard_link(&path, scratch.0.join("linked")).unwrap();
    rewrite_unsynced(&path, b"{}").unwrap();
    assert_eq!(
        read_tree(&scratch.0),
        "linked = {\"state\":\"stopped\"}\nstatus.json = {}"
    );
}

#[test]
fn a_sync_commits_what_the_writer_holds_and_it_goes_on_writing() {
    let after = run(
        "data/a.txt = old",
        "
        open w /data:a.txt rw
        open r /data:a.txt r
        pwrite w 0 new
        cat /data:a.txt => old
        sync w
        cat /data:a.txt => new
        read r => old
        pwrite w 3 er
        read w => newer
        fstat w => file 5
        cat /data:a.txt => new
        close w
        cat /data:a.txt => newer
        read r => old
        ",
    );
    assert_eq!(after, "data/a.txt = newer");
}

#[test]
fn writes_after_a_sync_stay_invisible_until_the_next_sync_or_close() {
    let after = run(
        "data/log = a",
        "
        open w /data:log w
        clone w stream
        append w b
        sync w
        cat /data:log => ab
        append stream c
        cat /data:log => ab
        sync stream
        cat /data:log => abc
        append w d
        append w e
        cat /data:log => abc
        sync w
        cat /data:log => abcde
        append w f
        close stream
        cat /data:log => abcde
        close w
        cat /data:log => abcdef
        ",
    );
    assert_eq!(after, "data/log = abcdef");
}

#[test]
fn a_new_file_appears_at_its_first_sync() {
    let after = run(
        "",
        "
        open w /data:db wc
        write w one
        sync w
        stat /data:db => file 3
        write w two
        sync w
        cat /data:db => onetwo
        close w
        ",
    );
    assert_eq!(after, "data/db = onetwo");
}

#[test]
fn a_trap_after_a_sync_discards_only_what_came_after_it() {
    let after = run(
        "data/kept = before",
        "
        open w /data:db wc
        write w committed
        sync w
        pwrite w 0 COMMITTED and more
        open k /data:kept rw
        pwrite k 0 synced
        sync k
        size k 3
        drop w
        drop k
        cat /data:db => committed
        ",
    );
    assert_eq!(after, "data/db = committed\ndata/kept = synced");
}

#[test]
fn a_snapshot_or_a_reader_of_a_synced_file_never_sees_it_change() {
    let after = run(
        "data/db = v0----",
        "
        open w /data:db rw
        pwrite w 0 v1
        sync w
        link /data:db snap1
        pwrite w 0 v2
        sync w
        open r /data:db r
        pwrite w 0 v3
        sync w
        pwrite w 0 v4
        sync w
        read r => v2----
        link /data:db snap4
        pwrite w 0 v5
        sync w
        pwrite w 0 v6
        sync w
        close w
        read r => v2----
        ",
    );
    assert_eq!(after, "data/db = v6----\nsnap1 = v1----\nsnap4 = v4----");
}

#[test]
fn a_size_change_after_a_sync_commits_at_the_next() {
    let after = run(
        "data/f = 0123456789",
        "
        open w /data:f rw
        pwrite w 0 A
        sync w
        pwrite w 1 B
        sync w
        cat /data:f => AB23456789
        size w 4
        sync w
        cat /data:f => AB23
        pwrite w 4 456789
        sync w
        size w 3
        size w 8
        pwrite w 8 x
        sync w
        cat /data:f => AB2\0\0\0\0\0x
        pwrite w 0 C
        sync w
        cat /data:f => CB2\0\0\0\0\0x
        close w
        ",
    );
    // The bytes a shrink cut and a growth brought back are zeros, in both of the writer's files.
    assert_eq!(after, "data/f = CB2\0\0\0\0\0x");
}

/// Opens `path` under `mount` for reading and writing without truncating, as a database does.
fn open_rw(dir: &Dir, path: &str) -> File {
    let options = OpenOptions {
        create: true,
        read: true,
        write: true,
        ..OpenOptions::default()
    };
    match dir.open(path, options).unwrap() {
        Opened::File(file) => file,
        Opened::Dir(_) => panic!("{path} is a folder"),
    }
}

fn read_whole(dir: &Dir, path: &str) -> Vec<u8> {
    let options = OpenOptions {
        read: true,
        ..OpenOptions::default()
    };
    let Opened::File(file) = dir.open(path, options).unwrap() else {
        panic!("{path} is a folder");
    };
    file.read_at(MAX_READ_LEN, 0).unwrap()
}

#[test]
fn many_syncs_in_a_row_trade_two_files_and_leave_one_temporary() {
    let scratch = Scratch::new();
    let data = scratch.0.join("data");
    make_tree(&scratch.0, "data/db = 0");
    let dir = Dir::root(&Mount {
        guest: "/data".into(),
        host: data.clone(),
        writable: true,
    });
    let file = open_rw(&dir, "db");
    let mut inodes = Vec::new();
    let mut expected = b"0".to_vec();
    for i in 1..=50u8 {
        file.append(&[b'0' + i % 10]).unwrap();
        file.write_at(&[b'a' + i % 26], u64::from(i) / 2).unwrap();
        expected.push(b'0' + i % 10);
        expected[usize::from(i) / 2] = b'a' + i % 26;
        file.sync().unwrap();
        assert_eq!(read_whole(&dir, "db"), expected, "after sync {i}");
        inodes.push(dir.stat_at("db").unwrap().inode);
    }
    // Nobody else saw the writer's files, so it alternates between the two it has.
    inodes.sort_unstable();
    inodes.dedup();
    assert_eq!(inodes.len(), 2, "inodes committed: {inodes:?}");
    assert_eq!(
        mask_temporaries(&read_tree(&scratch.0)),
        format!(
            "data/.sausage-tmp-* = {}\ndata/db = {}",
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(&expected)
        )
    );
    file.close();
    assert_eq!(
        read_tree(&scratch.0),
        format!("data/db = {}", String::from_utf8_lossy(&expected))
    );
}

mod sync_model {
    //! Random writes, size changes, syncs, readers and snapshot links on one writer, against a
    //! model: what each sync commits, what each reader and link holds, what a trap leaves.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Write {
            offset: u64,
            len: usize,
            byte: u8,
        },
        Resize(u64),
        Sync,
        /// A reader opens the committed file; it must read the same bytes ever after.
        Reader,
        /// A hard link of the committed file, as a snapshot makes; it must never change.
        Link,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..300, 1usize..40, any::<u8>())
                .prop_map(|(offset, len, byte)| Op::Write { offset, len, byte }),
            1 => (0u64..320).prop_map(Op::Resize),
            3 => Just(Op::Sync),
            1 => Just(Op::Reader),
            1 => Just(Op::Link),
        ]
    }

    fn resize(bytes: &mut Vec<u8>, size: u64) {
        bytes.resize(size as usize, 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn every_sync_commits_the_writers_bytes_and_nothing_seen_changes(
            start in proptest::collection::vec(any::<u8>(), 0..200),
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let scratch = Scratch::new();
            let data = scratch.0.join("data");
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("db"), &start).unwrap();
            let dir = Dir::root(&Mount { guest: "/data".into(), host: data.clone(), writable: true });
            let file = open_rw(&dir, "db");
            let mut working = start.clone();
            let mut committed = start.clone();
            let mut readers = Vec::new();
            let mut links = Vec::new();
            for op in ops {
                match op {
                    Op::Write { offset, len, byte } => {
                        file.write_at(&vec![byte; len], offset).unwrap();
                        let end = offset as usize + len;
                        if working.len() < end {
                            working.resize(end, 0);
                        }
                        working[offset as usize..end].fill(byte);
                    }
                    Op::Resize(size) => {
                        file.set_size(size).unwrap();
                        resize(&mut working, size);
                    }
                    Op::Sync => {
                        file.sync().unwrap();
                        committed = working.clone();
                    }
                    Op::Reader => {
                        let Opened::File(reader) = dir.open("db", OpenOptions { read: true, ..OpenOptions::default() }).unwrap() else {
                            panic!("db is a file");
                        };
                        readers.push((reader, committed.clone()));
                    }
                    Op::Link => {
                        let link = scratch.0.join(format!("snap{}", links.len()));
                        std::fs::hard_link(data.join("db"), &link).unwrap();
                        links.push((link, committed.clone()));
                    }
                }
                prop_assert_eq!(&file.read_at(MAX_READ_LEN, 0).unwrap(), &working);
                prop_assert_eq!(&read_whole(&dir, "db"), &committed);
            }
            for (reader, bytes) in &readers {
                prop_assert_eq!(&reader.read_at(MAX_READ_LEN, 0).unwrap(), bytes);
            }
            // A trap: what came after the last sync is lost, nothing else.
            drop(file);
            prop_assert_eq!(&std::fs::read(data.join("db")).unwrap(), &committed);
            for (link, bytes) in &links {
                prop_assert_eq!(&std::fs::read(link).unwrap(), bytes);
            }
            prop_assert_eq!(std::fs::read_dir(&data).unwrap().count(), 1, "a temporary is left");
        }
    }
}
