//! Where instances keep their linear memories and fiber stacks: plain read-write anonymous
//! mappings, with neither reservations of address space nor guard pages.
//!
//! wasmtime's defaults reserve 4 GiB and two 32 MiB guards for every linear memory (47 bits of
//! address space run out near 30,000 instances) and put a guard page under every stack; each
//! guard is a mapping of its own, and the kernel allows a process `vm.max_map_count` (65,530)
//! of them. Without guards, neighbouring mappings merge into one, so a world of 100,000
//! instances takes a handful of mappings. Invariant: nothing here is ever made inaccessible;
//! the engine is configured for explicit bounds checks (no reservation, no guard), which are
//! what keeps a guest inside its memory.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use wasmtime::{LinearMemory, MemoryCreator, MemoryType, StackCreator, StackMemory};

use super::hibernate::{Kind, Region};

/// Address space mapped for a linear memory at once (or its size, when larger): growing within
/// it moves nothing. Untouched pages cost no memory, only address space (100,000 instances take
/// 6 TiB of the 128 TiB a process has). Past it, the mapping is moved by the kernel to one twice
/// as large (`mremap`), which moves page tables, not bytes.
pub const MEMORY_MAPPED: usize = 64 << 20;

/// Makes the memories and stacks of every instance of the engine.
pub struct Mapper;

/// A mapping of `len` bytes, read-write, zero-filled, owned by whoever holds it.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Mapping` is plain memory owned by its holder; nothing in it is tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: shared references give out only the address, never access to the bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> std::io::Result<Mapping> {
        let len = page_rounded(len);
        // SAFETY: a new anonymous mapping at an address the kernel picks touches no memory
        // that Rust knows of. NORESERVE: untouched pages are not counted against the machine's
        // commit limit (most of a mapping is never touched).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast()).expect("mmap does not return null on success");
        Ok(Mapping { base, len })
    }

    /// Grows the mapping to `len` bytes, keeping its contents; the kernel may move it.
    fn grow(&mut self, len: usize) -> std::io::Result<()> {
        let len = page_rounded(len);
        // SAFETY: `base..base + self.len` is this mapping, which nobody else holds; wasmtime
        // reads the new base (`as_ptr`) after every growth.
        let base = unsafe {
            libc::mremap(
                self.base.as_ptr().cast(),
                self.len,
                len,
                libc::MREMAP_MAYMOVE,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        self.base = NonNull::new(base.cast()).expect("mremap does not return null on success");
        self.len = len;
        Ok(())
    }

    fn range(&self) -> Range<usize> {
        let start = self.base.as_ptr() as usize;
        start..start + self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and its holder is going away with it. It cannot fail for
        // a range that `mmap` returned, and there is nobody to tell if it did.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn page_rounded(len: usize) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    len.max(1).div_ceil(page) * page
}

/// A linear memory: `len` bytes accessible to the guest at the start of a larger mapping.
struct Memory {
    mapping: Mapping,
    len: usize,
    /// Where its instance's sleeper may pack it, kept current on growth (`hibernate`).
    region: Option<Arc<Region>>,
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Some(region) = &self.region {
            region.forget();
        }
    }
}

// SAFETY: the memory is page-aligned and zero-filled, `as_ptr` is valid for `byte_capacity`
// bytes, and growth keeps the contents. There is no guard region: the engine is configured
// with neither reservation nor guard (`new_memory` refuses otherwise), so compiled code checks
// every access against `byte_size`.
unsafe impl LinearMemory for Memory {
    fn byte_size(&self) -> usize {
        self.len
    }

    fn byte_capacity(&self) -> usize {
        self.mapping.len
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if new_size > self.mapping.len {
            self.mapping
                .grow(new_size.max(self.mapping.len.saturating_mul(2)))?;
        }
        self.len = new_size;
        if let Some(region) = &self.region {
            region.set(self.mapping.base.as_ptr(), new_size);
        }
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.mapping.base.as_ptr()
    }
}

// SAFETY: see `LinearMemory for Memory`; a memory is owned by the instance that asked for it.
unsafe impl MemoryCreator for Mapper {
    fn new_memory(
        &self,
        _ty: MemoryType,
        minimum: usize,
        _maximum: Option<usize>,
        reserved: Option<usize>,
        guard: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        if guard > 0 || reserved.is_some_and(|r| r > 0) {
            return Err(format!(
                "bug: the engine asks for a {guard}-byte guard and {reserved:?} bytes reserved; \
                 memories here have neither"
            ));
        }
        let mapping = Mapping::new(minimum.max(MEMORY_MAPPED))
            .map_err(|e| format!("cannot map a linear memory of {minimum} bytes: {e}"))?;
        let region = Region::track(Kind::Memory, mapping.base.as_ptr(), minimum);
        Ok(Box::new(Memory {
            mapping,
            len: minimum,
            region,
        }))
    }
}

/// A fiber stack, without a guard page (see the module's doc). wasmtime checks the guest's
/// own use against `max_wasm_stack`; the host code that runs on the stack (WASI, routing) has
/// the rest, 1.5 MiB, and uses a small part of it. Should it ever reach the stack's last page,
/// the process stops when the stack is freed rather than going on over what it overwrote.
struct Stack(Mapping, Option<Arc<Region>>);

// SAFETY: the stack is page-aligned, zero-filled, `size` bytes long below `top`, and owned by
// the fiber that asked for it. It has no guard range (an empty one, at its bottom).
unsafe impl StackMemory for Stack {
    fn top(&self) -> *mut u8 {
        // SAFETY: one past the end of the mapping, which is where a stack starts.
        unsafe { self.0.base.as_ptr().add(self.0.len) }
    }

    fn range(&self) -> Range<usize> {
        self.0.range()
    }

    fn guard_range(&self) -> Range<*mut u8> {
        self.0.base.as_ptr()..self.0.base.as_ptr()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(region) = &self.1 {
            region.forget();
        }
        let mut resident = 0u8;
        // SAFETY: the first page of this mapping; `resident` has room for its one byte.
        let checked = unsafe { libc::mincore(self.0.base.as_ptr().cast(), 1, &mut resident) };
        if checked == 0 && resident & 1 == 1 {
            tracing::error!(
                "bug: an instance's stack reached its last page; stopping, as the memory \
                 below it may be overwritten"
            );
            std::process::abort();
        }
    }
}

// SAFETY: see `StackMemory for Stack`.
unsafe impl StackCreator for Mapper {
    fn new_stack(&self, size: usize, _zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        // A new mapping is zero-filled, so `zeroed` holds either way.
        let mapping = Mapping::new(size)?;
        let region = Region::track(Kind::Stack, mapping.base.as_ptr(), mapping.len);
        Ok(Box::new(Stack(mapping, region)))
    }
}
