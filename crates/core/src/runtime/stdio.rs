//! A guest's stdin, stdout and stderr, adapted from two small host traits to WASI streams.
//!
//! The broker implements [`GuestInput`] and [`GuestOutput`] without naming a wasmtime type; this
//! module is the only place that turns them into `wasi:io` streams. Every stream a guest opens
//! on the same stdio handle shares one state, as WASI requires.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::async_trait;
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{InputStream, OutputStream, StreamError, StreamResult};

pub type BoxFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a guest reads on stdin.
pub trait GuestInput: Send + Sync + 'static {
    /// Takes up to `max` bytes: `Some(empty)` when nothing is ready yet, `None` at end of input.
    fn read(&self, max: usize) -> Option<Bytes>;
    /// Resolves when `read` would return bytes or end of input.
    fn readable(&self) -> BoxFuture<'_>;
    /// Whether `read` would return bytes or end of input now (`false` when unsure): a guest
    /// reading what already waits then skips `readable`'s future.
    fn ready_now(&self) -> bool {
        false
    }
    /// Called on the blocking pool just before the guest changes its files by `change`: should
    /// the host die before [`GuestInput::settle`], what the guest read so far counts as
    /// handled exactly when `change` happened (DESIGN §20). A `durable` change (a guest's
    /// fsync) survives a power loss, so that record must too, before the change is made.
    fn before_change(&self, change: &crate::fs::Change, durable: bool) {
        let _ = (change, durable);
    }
    /// The guest changed its files (or waits, or ended): what it read so far counts as handled
    /// from now on, and is not given again after a kill of the host.
    fn settle(&self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// Where a guest's stdout or stderr goes.
pub trait GuestOutput: Send + 'static {
    /// How many bytes the guest may write now; 0 applies back-pressure until `writable`.
    fn capacity(&mut self) -> usize;
    /// Takes bytes the guest wrote, never more than the last `capacity`.
    fn write(&mut self, bytes: &[u8]);
    /// Resolves once `capacity` may be non-zero again.
    fn writable(&mut self) -> BoxFuture<'_>;
    /// Resolves once everything written so far is accepted where it goes: the guest is about to
    /// change its files, and "send, then record that it was sent" must not lose the send
    /// (DESIGN §20, output before commit).
    fn settled(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// Stdin for `WasiCtxBuilder::stdin`.
#[derive(Clone)]
pub struct Stdin(pub Arc<dyn GuestInput>);

impl IsTerminal for Stdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for Stdin {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        // The p2 stream below is what WASI 0.2 guests use; p3 guests are not supported.
        Box::new(tokio::io::empty())
    }

    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(self.clone())
    }
}

#[async_trait]
impl InputStream for Stdin {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        self.0.read(size).ok_or(StreamError::Closed)
    }
}

#[async_trait]
impl Pollable for Stdin {
    async fn ready(&mut self) {
        if !self.0.ready_now() {
            super::hibernate::waiting_for_input();
            self.0.readable().await
        }
    }
}

/// Stdout or stderr for `WasiCtxBuilder::stdout`/`stderr`.
#[derive(Clone)]
pub struct Stdout(pub Arc<tokio::sync::Mutex<dyn GuestOutput>>);

impl Stdout {
    pub fn new(output: impl GuestOutput) -> Stdout {
        Stdout(Arc::new(tokio::sync::Mutex::new(output)))
    }

    /// Waits until everything the guest wrote is accepted ([`GuestOutput::settled`]).
    pub async fn settled(&self) {
        self.0.lock().await.settled().await;
    }

    fn locked(&self) -> StreamResult<tokio::sync::MutexGuard<'_, dyn GuestOutput>> {
        // Only `ready` holds the lock across an await, and a guest cannot call a stream method
        // while it waits in `ready`, so the lock is free whenever a method runs.
        self.0
            .try_lock()
            .map_err(|_| StreamError::trap("stdio stream used while it was waiting"))
    }
}

impl IsTerminal for Stdout {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Stdout {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // The p2 stream below is what WASI 0.2 guests use; p3 guests are not supported.
        Box::new(tokio::io::sink())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[async_trait]
impl OutputStream for Stdout {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut out = self.locked()?;
        if bytes.len() > out.capacity() {
            return Err(StreamError::trap("write exceeded the permitted capacity"));
        }
        out.write(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(self.locked()?.capacity())
    }
}

#[async_trait]
impl Pollable for Stdout {
    async fn ready(&mut self) {
        let mut out = self.0.lock().await;
        if out.capacity() == 0 {
            out.writable().await;
        }
    }
}
