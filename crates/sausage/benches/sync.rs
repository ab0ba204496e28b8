//! What a guest's `fsync` costs (DESIGN §2: a sync commits, atomically and durably), measured
//! through the filesystem layer itself: `cargo bench --bench sync`.
//!
//! For each file size: a small change (100 bytes at a spread offset) then a sync, in a row, the
//! median of several; the first sync after the file is opened (the copy the open made is still
//! unsynced); a sync while a reader holds the previous commit (it cannot be reused, so the next
//! temporary is a full copy or a reflink); and a plain `fdatasync` after the same small change
//! on an ordinary file, changed in place, the floor of any durable write. Prints a markdown
//! table. Syncs go to the disk: the figures vary with it and with what else writes.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use sausage_core::fs::{Dir, File, Mount, OpenOptions, Opened};

/// Changes then syncs per figure; the median is printed.
const ROUNDS: usize = 15;
/// Fewer rounds where each one copies the whole file.
const FULL_COPY_ROUNDS: usize = 3;
/// Syncs before the small-change figure is measured.
const WARM_UP: usize = 3;
/// Bytes of one small change.
const CHANGE: usize = 100;

fn main() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sync-bench");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("a scratch folder in the target folder");
    let dir = Dir::root(&Mount {
        guest: "/data".into(),
        host: root.clone(),
        writable: true,
    });
    println!(
        "| file | small change + sync (median) | first sync after open | sync with a reader of the last commit | plain fdatasync of the change |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for megabytes in [1u64, 100] {
        let len = megabytes << 20;
        let name = format!("db-{megabytes}mb");
        let content: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let path = root.join(&name);
        std::fs::write(&path, &content).expect("the file to sync");
        let mut offsets = Offsets(megabytes);

        // The floor first, on the file as an ordinary one, durable before the first change.
        let plain = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("the file just written");
        plain.sync_all().expect("fsync");
        let floor = median(ROUNDS, || {
            plain
                .write_all_at(&[7; CHANGE], offsets.next(len))
                .expect("a write");
            let start = Instant::now();
            plain.sync_data().expect("fdatasync");
            start.elapsed()
        });
        drop(plain);

        let file = open_rw(&dir, &name);
        let first = timed(|| file.sync());
        // Until both of the writer's files have been committed once, a sync also writes out
        // what the open copied.
        for _ in 0..WARM_UP {
            change(&file, offsets.next(len));
            timed(|| file.sync());
        }
        let steady = median(ROUNDS, || {
            change(&file, offsets.next(len));
            timed(|| file.sync())
        });
        let with_reader = median(FULL_COPY_ROUNDS, || {
            let reader = open_read(&dir, &name);
            change(&file, offsets.next(len));
            let took = timed(|| file.sync());
            drop(reader);
            took
        });
        file.close();
        println!(
            "| {megabytes} MB | {} | {} | {} | {} |",
            show(steady),
            show(first),
            show(with_reader),
            show(floor)
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Opens `name` for reading and writing without truncating, as a database does.
fn open_rw(dir: &Dir, name: &str) -> File {
    let options = OpenOptions {
        read: true,
        write: true,
        ..OpenOptions::default()
    };
    match dir.open(name, options).expect("open for writing") {
        Opened::File(file) => file,
        Opened::Dir(_) => panic!("{name} is a folder"),
    }
}

fn open_read(dir: &Dir, name: &str) -> File {
    let options = OpenOptions {
        read: true,
        ..OpenOptions::default()
    };
    match dir.open(name, options).expect("open for reading") {
        Opened::File(file) => file,
        Opened::Dir(_) => panic!("{name} is a folder"),
    }
}

fn change(file: &File, offset: u64) {
    file.write_at(&[7; CHANGE], offset).expect("a small change");
}

fn timed(sync: impl FnOnce() -> sausage_core::fs::FsResult<()>) -> Duration {
    let start = Instant::now();
    sync().expect("a sync");
    start.elapsed()
}

fn median(rounds: usize, mut round: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..rounds).map(|_| round()).collect();
    times.sort_unstable();
    times[rounds / 2]
}

fn show(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Offsets of small changes spread over the file, the same on every run (no randomness crate).
struct Offsets(u64);

impl Offsets {
    fn next(&mut self, len: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 16) % (len - CHANGE as u64)
    }
}
