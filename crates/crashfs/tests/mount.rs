//! The recording file system on a real mount: a program's calls in, the log and its crash states
//! out (read back through the mount, by this process, which maps files of it too).

use std::io::Write;
use std::path::Path;

use sausage_crashfs::{Kept, Mount, Op, Tree, tree::ROOT};

#[test]
fn a_synced_replace_and_a_mapping_written_back_give_the_states_posix_allows() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join("mnt");
    std::fs::create_dir(&at).unwrap();
    let mut tree = Tree::empty();
    tree.apply(&Op::Create {
        parent: ROOT,
        name: "f".into(),
        ino: 2,
        dir: false,
    });
    tree.apply(&Op::Write {
        ino: 2,
        offset: 0,
        data: b"old".to_vec(),
    });
    let mut mount = Mount::new(&at, tree).unwrap();
    assert_eq!(std::fs::read_to_string(at.join("f")).unwrap(), "old");

    mount.record().unwrap();
    let mut temp = std::fs::File::create(at.join(".t")).unwrap();
    temp.write_all(b"new").unwrap();
    temp.sync_all().unwrap();
    std::fs::rename(at.join(".t"), at.join("f")).unwrap();
    std::fs::File::open(&at).unwrap().sync_all().unwrap();
    let mapped = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(at.join("m"))
        .unwrap();
    mapped.set_len(4096).unwrap();
    // SAFETY: only this test uses the file while it is mapped.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&mapped).unwrap() };
    map[..5].copy_from_slice(b"hello");
    drop(map);
    // create, write, fsync, rename, fsyncdir; create, size, and the page written back.
    assert_eq!(mount.stop().unwrap(), 8);

    let mut versions = Vec::new();
    let counts = loop {
        match mount.next_state().unwrap() {
            Ok(state) => {
                let f = std::fs::read_to_string(at.join("f")).unwrap();
                let m = std::fs::read(at.join("m")).ok();
                versions.push((state.point, state.kept, f, m));
            }
            Err(counts) => break counts,
        }
    };
    assert_eq!(counts.points, 9);
    // Once the folder is synced (op 5), no state has the old file.
    assert!(
        versions
            .iter()
            .all(|(point, _, f, _)| f == "new" || (f == "old" && *point < 5)),
        "{versions:?}"
    );
    assert!(
        versions
            .iter()
            .any(|(_, kept, f, _)| f == "old" && !kept.is_prefix())
    );
    let last = versions
        .iter()
        .find(|(point, kept, ..)| *point == 8 && *kept == Kept::Prefix);
    assert_eq!(&last.unwrap().3.as_ref().unwrap()[..5], b"hello");
    // The mapping's page lost: the file is there, of its size, all zeros.
    assert!(versions.iter().any(|(.., m)| {
        m.as_ref()
            .is_some_and(|m| m.len() == 4096 && m.iter().all(|b| *b == 0))
    }));
    assert!(!Path::new(&at).join(".t").exists());
}
