//! TEMPORARY stand-in until the commit-on-close filesystem lands from the `fs` branch.
use crate::fs::Mount;
use wasmtime::component::{Linker, ResourceTable};

pub struct FsState {
    pub mounts: Vec<Mount>,
}
impl FsState {
    pub fn new(mounts: Vec<Mount>) -> Self {
        FsState { mounts }
    }
    pub fn commit_open_files(&mut self) {}
}
pub struct FsView<'a> {
    pub table: &'a mut ResourceTable,
    pub state: &'a mut FsState,
}
pub fn add_to_linker<T: Send + 'static>(
    _linker: &mut Linker<T>,
    _get: fn(&mut T) -> FsView<'_>,
) -> wasmtime::Result<()> {
    Ok(())
}
