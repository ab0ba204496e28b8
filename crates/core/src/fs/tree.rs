//! Whole folder trees: recreated with hard links (a version's source beside its candidate, a
//! snapshot) or copied. Only committed files are taken: a writer's hidden temporary is nobody's
//! content yet.

use std::io;
use std::path::Path;

/// Recreates a folder tree whose files are hard links to the originals (copies where a link
/// cannot be made, such as across file systems). Symlinks and other kinds are left out.
/// Sharing files this way is safe because no file under `/data` or `/public` is ever changed in
/// place: every guest write commits by rename, and so does every host write.
pub fn link_tree(from: &Path, to: &Path) -> io::Result<()> {
    recreate_tree(from, to, &|from, to| {
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to)?;
        }
        Ok(())
    })
}

/// Copies a folder tree: folders and regular files (symlinks and others are left out).
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    recreate_tree(from, to, &|from, to| std::fs::copy(from, to).map(drop))
}

/// Recreates the folders of `from` under `to`, and each regular file with `file`; hidden
/// temporaries are left out.
fn recreate_tree(
    from: &Path,
    to: &Path,
    file: &dyn Fn(&Path, &Path) -> io::Result<()>,
) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        // A writer's uncommitted temporary is nobody's content yet (and a snapshot linking it
        // would keep its writer from reusing it).
        if super::is_temporary_name(&entry.file_name()) {
            continue;
        }
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            recreate_tree(&entry.path(), &target, file)?;
        } else if kind.is_file() {
            file(&entry.path(), &target)?;
        }
    }
    Ok(())
}
