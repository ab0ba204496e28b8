//! Commit-on-close files for guests (DESIGN §2). Placeholder until the filesystem lands.
