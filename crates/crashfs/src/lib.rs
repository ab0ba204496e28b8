//! A file system for tests that records every change a program makes, in the order the kernel
//! hands them over, and replays the states a crash could leave behind (as ALICE and CrashMonkey
//! do for storage systems). `tree` is the files in memory, `mount` serves them over FUSE and
//! logs the changes, `states` turns a log into crash states. It is a dev-only crate: nothing of
//! the shipped binary depends on it.
//! Invariant: a state is only ever built by replaying logged operations onto the tree as it was
//! when recording began; nothing is made up.

pub mod mount;
pub mod states;
pub mod tree;

pub use mount::{Mount, Served};
pub use states::{Counts, CrashState, Durability, Kept, crash_states};
pub use tree::{Ino, Node, Op, Tree};
