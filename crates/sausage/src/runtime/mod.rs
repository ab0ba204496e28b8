pub mod wasi_fs;
