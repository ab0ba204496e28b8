//! Idle instances give their memory back, as an Erlang process does when it hibernates.
//!
//! An instance that has not been polled for a whole [`HIBERNATE_AFTER`] is packed by the
//! sweep thread: each page of its linear memory and fiber stack that is all zeros, or equal to
//! its program's memory as instantiation left it (the data segments), is dropped; the others
//! are compressed (LZ4) into one buffer; then every page goes back to the kernel. The next poll
//! unpacks them before the guest can run. An idle `echo` keeps about 4 KB of its 52 KB.
//!
//! Invariant: a guest's memory and stack are touched only while its run future is polled (the
//! fiber is suspended otherwise, and nothing else holds a pointer into them), so packing between
//! polls is invisible to the guest. Every poll, and the future's drop (which resumes the fiber
//! to unwind it), unpacks first; a region whose mapping is gone is never touched.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

/// An instance not polled for this long (and at most twice as long) is packed. Waking one costs
/// the world's thread a fault per page it gets back (about 100 µs for `echo` on a virtual
/// machine whose faults take 5 µs), so an actor that hears something every few seconds stays
/// awake rather than paying that at every message.
pub const HIBERNATE_AFTER: Duration = Duration::from_secs(10);

/// An instance with more than this resident is not packed: unpacking it (on the world's
/// thread, at its next message) would hold every other actor for over a millisecond.
pub const MAX_PACKED_RESIDENT: usize = 4 << 20;

/// More instances made than this since the last sweep (100 a second) means a world is starting
/// (or a burst of spawns): that sweep packs nothing. Packing takes the process's memory-map lock and flushes
/// other cores' address translations, which would slow the creation of every instance.
pub const CREATED_PER_SWEEP: usize = 1_000;

/// What a tracked mapping is: a linear memory is compared with its program's image (its
/// memory as instantiation left it); a stack has no image.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Memory,
    Stack,
}

/// A mapping that an instance's sleeper may pack: where it is now and how much of it counts.
/// Its owner (`memory::Memory` or `memory::Stack`) keeps it current and forgets it before the
/// mapping goes; both happen only while the instance is polled or once its future is gone.
pub struct Region {
    kind: Kind,
    base: AtomicUsize,
    len: AtomicUsize,
}

impl Region {
    /// Tracks `len` bytes at `base` for the instance being polled on this thread, if any (a
    /// mapping made outside an instance's poll is never packed).
    pub fn track(kind: Kind, base: *mut u8, len: usize) -> Option<Arc<Region>> {
        POLLING.with(|polling| {
            let polling = polling.borrow();
            let sleeper = polling.as_ref()?;
            let region = Arc::new(Region {
                kind,
                base: AtomicUsize::new(base as usize),
                len: AtomicUsize::new(len),
            });
            sleeper.lock().regions.push(region.clone());
            Some(region)
        })
    }

    /// The mapping moved or grew (always while its instance is polled).
    pub fn set(&self, base: *mut u8, len: usize) {
        self.base.store(base as usize, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
    }

    /// The mapping is about to go: it is never touched again.
    pub fn forget(&self) {
        self.base.store(0, Ordering::Relaxed);
    }

    /// The whole pages of the region, or `None` once it is forgotten.
    fn pages(&self) -> Option<(usize, usize)> {
        let base = self.base.load(Ordering::Relaxed);
        (base != 0).then(|| (base, self.len.load(Ordering::Relaxed) / page_size()))
    }
}

thread_local! {
    /// The sleeper of the instance being polled on this thread, so that the memories and stacks
    /// wasmtime makes for it (during instantiation and the first call) are tracked as its own.
    static POLLING: RefCell<Option<Arc<Sleeper>>> = const { RefCell::new(None) };
}

/// A program's linear memories as instantiation leaves them, taken from its first instance and
/// shared by every later one: the pages an unpack copies back instead of keeping.
#[derive(Default)]
pub struct Image {
    /// Per memory (in the order the instance made them), its non-zero pages, by page number.
    memories: Vec<Vec<(usize, Box<[u8]>)>>,
}

impl Image {
    fn page(&self, memory: usize, page: usize) -> Option<&[u8]> {
        let pages = self.memories.get(memory)?;
        let at = pages.binary_search_by_key(&page, |(n, _)| *n).ok()?;
        Some(&pages[at].1)
    }
}

const AWAKE: u8 = 0;
const POLLED: u8 = 1;
const PACKED: u8 = 2;
const GONE: u8 = 3;

/// The hibernation of one instance. `state` says who may touch its regions: the poller while
/// `POLLED`, the sweep while it holds `packing` and the state is `AWAKE` or `PACKED`.
pub struct Sleeper {
    state: AtomicU8,
    /// Set by every poll, cleared by every sweep: a sweep that finds it clear packs.
    polled: AtomicBool,
    /// How many times the instance has been polled: the epoch callback tells a slice that began
    /// in this poll from a deadline left by an earlier one.
    polls: AtomicU64,
    /// Set by [`waiting_for_input`] during a poll, cleared as each poll begins.
    waits_for_input: AtomicBool,
    /// Pack the instance as soon as a poll leaves it waiting for input, once (see
    /// [`Sleepers::new_sleeper`]).
    pack_at_first_wait: AtomicBool,
    packing: Mutex<Packing>,
    totals: Arc<Totals>,
    zaps: Arc<Zaps>,
}

#[derive(Default)]
struct Packing {
    regions: Vec<Arc<Region>>,
    image: Option<Arc<OnceLock<Image>>>,
    packed: Option<Packed>,
}

/// What a packed instance keeps: where each page goes back from.
struct Packed {
    /// (region, page) copied back from the image.
    from_image: Vec<(u32, u32)>,
    /// (region, page) in the order of `compressed`.
    kept: Vec<(u32, u32)>,
    compressed: Vec<u8>,
    /// Resident bytes before packing, for [`Totals`].
    resident: usize,
}

impl Packed {
    fn kept_bytes(&self) -> usize {
        self.compressed.capacity() + (self.from_image.capacity() + self.kept.capacity()) * 8
    }
}

/// What is packed now, in every instance of a runtime.
#[derive(Default)]
pub struct Totals {
    instances: AtomicUsize,
    resident: AtomicUsize,
    kept: AtomicUsize,
}

/// A reading of [`Totals`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hibernated {
    /// Instances packed now.
    pub instances: usize,
    /// The bytes their pages took before packing.
    pub resident_bytes: usize,
    /// The bytes they keep while packed.
    pub kept_bytes: usize,
}

impl Totals {
    pub fn read(&self) -> Hibernated {
        Hibernated {
            instances: self.instances.load(Ordering::Relaxed),
            resident_bytes: self.resident.load(Ordering::Relaxed),
            kept_bytes: self.kept.load(Ordering::Relaxed),
        }
    }

    fn add(&self, packed: &Packed) {
        self.instances.fetch_add(1, Ordering::Relaxed);
        self.resident.fetch_add(packed.resident, Ordering::Relaxed);
        self.kept.fetch_add(packed.kept_bytes(), Ordering::Relaxed);
    }

    fn remove(&self, packed: &Packed) {
        self.instances.fetch_sub(1, Ordering::Relaxed);
        self.resident.fetch_sub(packed.resident, Ordering::Relaxed);
        self.kept.fetch_sub(packed.kept_bytes(), Ordering::Relaxed);
    }
}

impl Sleeper {
    /// How many times the instance's future has been polled so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Packing> {
        // A panic while packing leaves the regions as they were or packed, both of which an
        // unpack handles.
        self.packing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the instance's memories, as instantiation left them, as `image` unless an
    /// earlier instance of the same program did, and compares with it from now on. Called
    /// while polled, before the guest's own code runs.
    pub fn remember_image(&self, image: &Arc<OnceLock<Image>>) {
        let mut packing = self.lock();
        image.get_or_init(|| {
            let memories = packing
                .regions
                .iter()
                .filter(|r| r.kind == Kind::Memory)
                .filter_map(|r| r.pages())
                .map(|(base, pages)| {
                    resident(base, pages)
                        .into_iter()
                        .filter_map(|page| {
                            let bytes = page_bytes(base, page);
                            (!is_zero(bytes)).then(|| (page, Box::from(bytes)))
                        })
                        .collect()
                })
                .collect();
            Image { memories }
        });
        packing.image = Some(image.clone());
    }

    /// Packs the instance if no poll runs and none ran since the last sweep.
    fn sweep(&self) {
        if self.polled.swap(false, Ordering::Relaxed) {
            return;
        }
        let Ok(mut packing) = self.packing.try_lock() else {
            return;
        };
        if self
            .state
            .compare_exchange(AWAKE, PACKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        match packing.pack(None) {
            Some(packed) => {
                self.totals.add(&packed);
                packing.packed = Some(packed);
            }
            None => self.state.store(AWAKE, Ordering::Release),
        }
    }

    /// Packs the instance now, from the thread that polls it, just after a poll.
    fn pack_now(&self) {
        let mut packing = self.lock();
        if self
            .state
            .compare_exchange(AWAKE, PACKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // Its pages go back with those of the instances packed next to it: one system call,
        // and one flush of the other cores' address translations, for a batch of them.
        match packing.pack(Some(&self.zaps)) {
            Some(packed) => {
                self.totals.add(&packed);
                packing.packed = Some(packed);
            }
            None => self.state.store(AWAKE, Ordering::Release),
        }
    }

    /// Makes the regions whole again, if they are packed, and takes the state to `to`.
    fn wake(&self, to: u8) {
        match self
            .state
            .compare_exchange(AWAKE, to, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => {}
            Err(PACKED) => {
                // Its pages may wait to be given back with a batch: that happens first, or it
                // would take them from the woken instance.
                self.zaps.flush();
                // The sweep holds the lock for as long as it packs: once we have it, the
                // regions are packed and nobody else touches them.
                let mut packing = self.lock();
                if let Some(packed) = packing.packed.take() {
                    packing.unpack(&packed);
                    self.totals.remove(&packed);
                }
                self.state.store(to, Ordering::Release);
            }
            // Its last poll panicked; it is being dropped, whole.
            Err(POLLED) if to == GONE => self.state.store(GONE, Ordering::Release),
            Err(state) => unreachable!("bug: an instance is woken in state {state}"),
        }
    }
}

impl Packing {
    /// Which of the instance's memories region `index` is (the image is kept by that number).
    fn memory_ordinal(&self, index: usize) -> usize {
        self.regions[..index]
            .iter()
            .filter(|r| r.kind == Kind::Memory)
            .count()
    }

    /// Drops every resident page of every region, keeping what unpacking needs; `None` (and
    /// nothing touched) past [`MAX_PACKED_RESIDENT`]. The pages go back to the kernel now, or
    /// with the next batch of `zaps`.
    fn pack(&mut self, zaps: Option<&Zaps>) -> Option<Packed> {
        let image = self.image.as_ref().and_then(|i| i.get());
        let live: Vec<(usize, usize, usize, Vec<usize>)> = self
            .regions
            .iter()
            .enumerate()
            .filter_map(|(index, region)| {
                let (base, pages) = region.pages()?;
                Some((index, base, pages, resident(base, pages)))
            })
            .collect();
        let resident_pages: usize = live.iter().map(|(.., r)| r.len()).sum();
        if resident_pages * page_size() > MAX_PACKED_RESIDENT {
            return None;
        }
        let mut packed = Packed {
            from_image: Vec::new(),
            kept: Vec::new(),
            compressed: Vec::new(),
            resident: resident_pages * page_size(),
        };
        let mut raw = Vec::new();
        for (index, base, pages, resident) in live {
            let region = &self.regions[index];
            let memory = self.memory_ordinal(index);
            for page in resident {
                let bytes = page_bytes(base, page);
                let spot = (index as u32, page as u32);
                if is_zero(bytes) {
                    continue;
                }
                let in_image = (region.kind == Kind::Memory)
                    .then(|| image.and_then(|i| i.page(memory, page)))
                    .flatten();
                if in_image == Some(bytes) {
                    packed.from_image.push(spot);
                } else {
                    raw.extend_from_slice(bytes);
                    packed.kept.push(spot);
                }
            }
            let range = (base, pages * page_size());
            match zaps {
                Some(zaps) => zaps.add(range),
                // SAFETY: as in `Zaps::flush`: the region's live mapping, untouched until
                // `unpack`.
                None => unsafe { zap(range) },
            }
        }
        packed.compressed = lz4_flex::block::compress(&raw);
        packed.compressed.shrink_to_fit();
        packed.from_image.shrink_to_fit();
        packed.kept.shrink_to_fit();
        Some(packed)
    }

    /// Puts back every page `pack` dropped (zero pages come back as zeros by themselves).
    fn unpack(&mut self, packed: &Packed) {
        let image = self.image.as_ref().and_then(|i| i.get());
        for &(region, page) in &packed.from_image {
            let (region, page) = (region as usize, page as usize);
            let Some((base, _)) = self.regions[region].pages() else {
                continue;
            };
            let bytes = image
                .and_then(|i| i.page(self.memory_ordinal(region), page))
                .expect("bug: a page packed as the image's is not in it");
            page_bytes_mut(base, page).copy_from_slice(bytes);
        }
        SCRATCH.with_borrow_mut(|raw| {
            raw.resize(packed.kept.len() * page_size(), 0);
            lz4_flex::block::decompress_into(&packed.compressed, raw)
                .expect("bug: the host's own compressed pages do not decompress");
            for (&(region, page), bytes) in packed.kept.iter().zip(raw.chunks(page_size())) {
                if let Some((base, _)) = self.regions[region as usize].pages() {
                    page_bytes_mut(base, page as usize).copy_from_slice(bytes);
                }
            }
            if raw.capacity() > SCRATCH_KEPT {
                *raw = Vec::new();
            }
        });
    }
}

/// The ranges given back to the kernel in one system call (`process_madvise`): 64 instances'
/// memories and stacks.
const ZAP_BATCH: usize = 128;

/// Pages of packed instances still to be given back to the kernel, in batches: each
/// `madvise` of its own makes the kernel flush the address translations of every other core
/// running a thread of the host, which is an interrupt and a wait on each (about 20 µs a call
/// on this project's 2-core virtual machine, beside 6 µs a range in a batch).
///
/// Invariant: a range waits here only while its instance is packed, and is given back before
/// the instance is woken (or dropped, which wakes it first): every wake flushes.
#[derive(Default)]
struct Zaps {
    pending: Mutex<Vec<(usize, usize)>>,
}

impl Zaps {
    fn add(&self, range: (usize, usize)) {
        let mut pending = self.lock();
        pending.push(range);
        if pending.len() >= ZAP_BATCH {
            Self::give_back(&mut pending);
        }
    }

    /// Gives back every page waiting, before returning (the lock is held while the kernel
    /// takes them, so a wake that flushes finds them gone).
    fn flush(&self) {
        Self::give_back(&mut self.lock());
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(usize, usize)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn give_back(pending: &mut Vec<(usize, usize)>) {
        if pending.is_empty() {
            return;
        }
        let ranges: Vec<libc::iovec> = (pending.iter())
            .map(|&(base, len)| libc::iovec {
                iov_base: base as *mut _,
                iov_len: len,
            })
            .collect();
        let all: usize = pending.iter().map(|&(_, len)| len).sum();
        // SAFETY: each range is a packed instance's live mapping, which nothing reads or
        // writes until its unpack (which flushes first) puts back every page that was not zero.
        let done = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                own_pidfd(),
                ranges.as_ptr(),
                ranges.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if usize::try_from(done).ok() != Some(all) {
            // An older kernel (before 5.10, or before 6.13 for this advice on its own process)
            // or a partial batch: each range on its own (again, for the ones done: harmless,
            // their pages are zero and untouched).
            for &range in pending.iter() {
                // SAFETY: as above.
                unsafe { zap(range) };
            }
        }
        pending.clear();
    }
}

/// Gives the pages of `range` back to the kernel (they read as zeros after).
///
/// # Safety
/// `range` is a live mapping of a packed instance, which nothing touches until its unpack.
unsafe fn zap((base, len): (usize, usize)) {
    // SAFETY: the caller's.
    unsafe {
        libc::madvise(base as *mut _, len, libc::MADV_DONTNEED);
    }
}

/// This process's pidfd, for `process_madvise`; -1 where there is none (the call then fails,
/// and each range is given back on its own).
fn own_pidfd() -> libc::c_long {
    static PIDFD: OnceLock<libc::c_long> = OnceLock::new();
    // SAFETY: `pidfd_open` of this process, no flags; the descriptor lives as long as the
    // process.
    *PIDFD.get_or_init(|| unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) })
}

/// The most of [`SCRATCH`] kept between unpacks: enough for an ordinary small actor.
const SCRATCH_KEPT: usize = 256 << 10;

thread_local! {
    /// Where the world's thread decompresses the pages it unpacks, kept warm between unpacks
    /// (a new buffer's pages would each fault).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Every instance a runtime runs, for the sweep.
#[derive(Default)]
pub struct Sleepers {
    all: Mutex<Vec<Weak<Sleeper>>>,
    totals: Arc<Totals>,
    zaps: Arc<Zaps>,
    /// Instances made so far, and how many the last sweep saw.
    created: AtomicUsize,
    swept_created: AtomicUsize,
}

impl Sleepers {
    /// Starts the thread that sweeps every [`HIBERNATE_AFTER`], for as long as `sleepers` lives.
    pub fn start_sweeping(sleepers: &Arc<Sleepers>) -> std::io::Result<()> {
        let sweeper = Arc::downgrade(sleepers);
        std::thread::Builder::new()
            .name("sausage-hibernate".into())
            .spawn(move || {
                while let Some(sleepers) = sweeper.upgrade() {
                    sleepers.sweep();
                    drop(sleepers);
                    std::thread::sleep(HIBERNATE_AFTER);
                }
            })
            .map(drop)
    }

    /// A new instance's sleeper, swept from now on. With `pack_at_first_wait`, the instance
    /// is also packed as soon as it first waits for input ([`waiting_for_input`]), rather than
    /// after a sweep finds it idle: for the actors of a world starting many at once, whose
    /// pages would otherwise all be resident together until the sweeps after the start.
    pub fn new_sleeper(&self, pack_at_first_wait: bool) -> Arc<Sleeper> {
        let sleeper = Arc::new(Sleeper {
            state: AtomicU8::new(AWAKE),
            polled: AtomicBool::new(true),
            polls: AtomicU64::new(0),
            waits_for_input: AtomicBool::new(false),
            pack_at_first_wait: AtomicBool::new(pack_at_first_wait),
            packing: Mutex::default(),
            totals: self.totals.clone(),
            zaps: self.zaps.clone(),
        });
        self.all
            .lock()
            .expect("sleepers lock")
            .push(Arc::downgrade(&sleeper));
        self.created.fetch_add(1, Ordering::Relaxed);
        sleeper
    }

    /// Packs every instance not polled since the last sweep (unless more than
    /// [`CREATED_PER_SWEEP`] were made since); forgets the ones that ended.
    pub fn sweep(&self) {
        // What the last packs at a start left waiting goes back now at the latest.
        self.zaps.flush();
        let created = self.created.load(Ordering::Relaxed);
        if created - self.swept_created.swap(created, Ordering::Relaxed) > CREATED_PER_SWEEP {
            return;
        }
        let live: Vec<Arc<Sleeper>> = {
            let mut all = self.all.lock().expect("sleepers lock");
            all.retain(|s| s.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        for sleeper in live {
            sleeper.sweep();
        }
    }

    pub fn hibernated(&self) -> Hibernated {
        self.totals.read()
    }
}

/// A future whose instance may be packed between its polls: each poll unpacks first and makes
/// the instance's new mappings its own; dropping it unpacks for good.
pub struct Awake<F> {
    sleeper: Arc<Sleeper>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Awake<F> {
    pub fn new(sleeper: Arc<Sleeper>, inner: F) -> Awake<F> {
        Awake {
            sleeper,
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future> Future for Awake<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.sleeper.wake(POLLED);
        this.sleeper.polled.store(true, Ordering::Relaxed);
        this.sleeper.polls.fetch_add(1, Ordering::Relaxed);
        this.sleeper.waits_for_input.store(false, Ordering::Relaxed);
        let result = {
            let _polling = Polling::enter(&this.sleeper);
            this.inner.as_mut().poll(cx)
        };
        this.sleeper.state.store(AWAKE, Ordering::Release);
        if result.is_pending()
            && this.sleeper.waits_for_input.load(Ordering::Relaxed)
            && this
                .sleeper
                .pack_at_first_wait
                .swap(false, Ordering::Relaxed)
        {
            this.sleeper.pack_now();
        }
        result
    }
}

/// The instance being polled on this thread is about to wait for input (its stdin has nothing
/// to read): if the poll ends waiting, it may be packed at once.
pub fn waiting_for_input() {
    POLLING.with(|polling| {
        if let Some(sleeper) = polling.borrow().as_ref() {
            sleeper.waits_for_input.store(true, Ordering::Relaxed);
        }
    });
}

/// Makes a sleeper the one being polled on this thread until dropped (a panic included).
struct Polling {
    outer: Option<Arc<Sleeper>>,
}

impl Polling {
    fn enter(sleeper: &Arc<Sleeper>) -> Polling {
        let outer = POLLING.with(|p| p.replace(Some(sleeper.clone())));
        Polling { outer }
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        POLLING.with(|p| *p.borrow_mut() = self.outer.take());
    }
}

impl<F> Drop for Awake<F> {
    fn drop(&mut self) {
        // Dropping the inner future resumes a suspended fiber so that it unwinds: its stack
        // and memory must be whole first, and stay so.
        self.sleeper.wake(GONE);
    }
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize)
}

/// The pages of `base..base + pages` that are resident.
fn resident(base: usize, pages: usize) -> Vec<usize> {
    let mut flags = vec![0u8; pages];
    // SAFETY: the range is a live mapping of ours (see `Region`) and `flags` has a byte for
    // each of its pages.
    let done = unsafe { libc::mincore(base as *mut _, pages * page_size(), flags.as_mut_ptr()) };
    if done != 0 {
        // Cannot happen for a live mapping; counting every page resident is merely slower.
        return (0..pages).collect();
    }
    (0..pages).filter(|&p| flags[p] & 1 == 1).collect()
}

fn page_bytes<'a>(base: usize, page: usize) -> &'a [u8] {
    // SAFETY: the page lies inside a live region that nobody writes while it is packed or
    // snapshot (see `Region` and the module's invariant).
    unsafe { std::slice::from_raw_parts((base + page * page_size()) as *const u8, page_size()) }
}

#[allow(clippy::mut_from_ref)]
fn page_bytes_mut<'a>(base: usize, page: usize) -> &'a mut [u8] {
    // SAFETY: as `page_bytes`; the unpacker is the only one touching the region.
    unsafe { std::slice::from_raw_parts_mut((base + page * page_size()) as *mut u8, page_size()) }
}

fn is_zero(bytes: &[u8]) -> bool {
    // SAFETY: every bit pattern is a valid `u64`.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh anonymous mapping of `pages` pages, as `memory` makes them.
    fn mapping(pages: usize) -> usize {
        // SAFETY: a new private mapping nobody else knows of; the test unmaps it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        base as usize
    }

    fn unmap(base: usize, pages: usize) {
        // SAFETY: a mapping of `mapping`'s, whose regions were forgotten.
        unsafe { libc::munmap(base as *mut _, pages * page_size()) };
    }

    /// Bytes that do not compress, different for each seed.
    fn noise(seed: u64, bytes: &mut [u8]) {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for b in bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }

    fn contents(base: usize, pages: usize) -> Vec<u8> {
        (0..pages)
            .flat_map(|p| page_bytes(base, p).to_vec())
            .collect()
    }

    /// Tracks regions for `sleeper` as wasmtime's allocations during its poll would.
    fn track(sleeper: &Arc<Sleeper>, kind: Kind, base: usize, pages: usize) -> Arc<Region> {
        POLLING.with(|p| *p.borrow_mut() = Some(sleeper.clone()));
        let region = Region::track(kind, base as *mut u8, pages * page_size());
        POLLING.with(|p| *p.borrow_mut() = None);
        region.expect("tracked while polled")
    }

    /// Polls `future` once, as the world's thread would after a wake.
    fn poll_once<F: Future>(future: &mut Pin<Box<F>>) -> Poll<F::Output> {
        future
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn zaps_give_pages_back_by_the_batch_and_at_a_flush() {
        let pages = 3;
        let zaps = Zaps::default();
        let bases: Vec<usize> = (0..=ZAP_BATCH)
            .map(|n| {
                let base = mapping(pages);
                for page in 0..pages {
                    noise(n as u64, page_bytes_mut(base, page));
                }
                base
            })
            .collect();
        let resident_pages =
            |bases: &[usize]| -> usize { bases.iter().map(|&b| resident(b, pages).len()).sum() };
        for &base in &bases[..ZAP_BATCH - 1] {
            zaps.add((base, pages * page_size()));
        }
        assert_eq!(
            resident_pages(&bases),
            (ZAP_BATCH + 1) * pages,
            "none given back yet"
        );
        zaps.add((bases[ZAP_BATCH - 1], pages * page_size()));
        assert_eq!(
            resident_pages(&bases),
            pages,
            "a whole batch is given back at once"
        );
        zaps.add((bases[ZAP_BATCH], pages * page_size()));
        assert_eq!(resident_pages(&bases), pages);
        zaps.flush();
        assert_eq!(resident_pages(&bases), 0, "a flush gives back what waits");
        assert!(bases.iter().all(|&b| is_zero(&contents(b, pages))));
        for base in bases {
            unmap(base, pages);
        }
    }

    #[test]
    fn an_idle_instance_keeps_only_what_differs_from_its_image_and_gets_every_page_back() {
        let sleepers = Sleepers::default();
        let sleeper = sleepers.new_sleeper(false);
        let page = page_size();
        let (memory, stack) = (mapping(64), mapping(16));
        // What instantiation leaves: data segments in pages 0 to 7.
        for p in 0..8 {
            noise(p as u64, page_bytes_mut(memory, p));
        }
        let memory_region = track(&sleeper, Kind::Memory, memory, 64);
        let stack_region = track(&sleeper, Kind::Stack, stack, 16);
        let image = Arc::new(OnceLock::new());
        sleeper.remember_image(&image);
        // The guest runs: a changed byte in page 3, a little heap in page 40, a stack frame.
        page_bytes_mut(memory, 3)[100] ^= 0xff;
        page_bytes_mut(memory, 40)[..13].copy_from_slice(b"hello, world!");
        page_bytes_mut(memory, 41)[0] = 0; // touched, still zero
        noise(99, &mut page_bytes_mut(stack, 15)[page - 256..]);
        let before = (contents(memory, 64), contents(stack, 16));
        // Reading maps untouched pages to the zero page, which `mincore` counts too.
        let mapped = resident(memory, 64).len() + resident(stack, 16).len();

        // A new instance counts as just polled: the first sweep only notes that it is idle.
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 0);
        sleepers.sweep();
        let packed = sleepers.hibernated();
        assert_eq!(packed.instances, 1);
        assert_eq!(packed.resident_bytes, mapped * page, "{packed:?}");
        assert!(
            packed.kept_bytes < 2 * page,
            "only page 3 is noise: {packed:?}"
        );
        assert!(resident(memory, 64).is_empty() && resident(stack, 16).is_empty());

        // A poll unpacks before its future runs: the future sees every byte as it was.
        let mut awake = Box::pin(Awake::new(sleeper.clone(), async {
            (contents(memory, 64), contents(stack, 16))
        }));
        let Poll::Ready(seen) = poll_once(&mut awake) else {
            panic!("the future is ready at once");
        };
        assert!(seen == before, "a page came back changed");
        assert_eq!(sleepers.hibernated(), Hibernated::default());
        drop(awake);

        memory_region.forget();
        stack_region.forget();
        unmap(memory, 64);
        unmap(stack, 16);
    }

    #[test]
    fn a_polled_instance_is_never_packed_and_a_dropped_one_is_unpacked_for_good() {
        let sleepers = Arc::new(Sleepers::default());
        let sleeper = sleepers.new_sleeper(false);
        let memory = mapping(4);
        noise(7, page_bytes_mut(memory, 1));
        let region = track(&sleeper, Kind::Memory, memory, 4);
        let before = contents(memory, 4);

        // Sweeps during a poll (as the sweep thread's may be) pack nothing.
        let during = sleepers.clone();
        let mut awake = Box::pin(Awake::new(sleeper.clone(), async move {
            during.sweep();
            during.sweep();
            during.hibernated().instances
        }));
        assert_eq!(poll_once(&mut awake), Poll::Ready(0));
        drop(awake);
        // Dropped: the instance is gone, and no sweep touches its memory again.
        sleepers.sweep();
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 0);
        assert!(contents(memory, 4) == before);

        // Packed, then dropped without a poll (a killed instance): unpacked first.
        let sleeper = sleepers.new_sleeper(false);
        let region_two = track(&sleeper, Kind::Memory, memory, 4);
        let awake = Awake::new(sleeper.clone(), std::future::pending::<()>());
        sleepers.sweep();
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 1);
        drop(awake);
        assert_eq!(sleepers.hibernated().instances, 0);
        assert!(contents(memory, 4) == before);

        // A forgotten region (its mapping about to go) is never touched.
        let sleeper = sleepers.new_sleeper(false);
        let region_three = track(&sleeper, Kind::Memory, memory, 4);
        region_three.forget();
        sleepers.sweep();
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 1);
        assert!(resident(memory, 4).contains(&1) && contents(memory, 4) == before);

        for r in [region, region_two] {
            r.forget();
        }
        drop(sleeper);
        unmap(memory, 4);
    }

    #[test]
    fn an_instance_with_more_resident_than_the_limit_stays_awake() {
        let sleepers = Sleepers::default();
        let sleeper = sleepers.new_sleeper(false);
        let pages = MAX_PACKED_RESIDENT / page_size() + 1;
        let memory = mapping(pages);
        for p in 0..pages {
            page_bytes_mut(memory, p)[0] = 1;
        }
        let region = track(&sleeper, Kind::Memory, memory, pages);
        sleepers.sweep();
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 0);
        assert_eq!(resident(memory, pages).len(), pages);
        // Awake, it is polled as any other.
        let mut awake = Box::pin(Awake::new(sleeper.clone(), async { 7 }));
        assert_eq!(poll_once(&mut awake), Poll::Ready(7));
        drop(awake);
        region.forget();
        unmap(memory, pages);
    }

    #[test]
    fn no_instance_is_packed_by_a_sweep_that_follows_a_burst_of_new_ones() {
        let sleepers = Sleepers::default();
        let memory = mapping(1);
        page_bytes_mut(memory, 0)[0] = 1;
        let all: Vec<Arc<Sleeper>> = (0..=CREATED_PER_SWEEP)
            .map(|_| sleepers.new_sleeper(false))
            .collect();
        let region = track(&all[0], Kind::Memory, memory, 1);
        all[0].polled.store(false, Ordering::Relaxed);
        sleepers.sweep();
        assert_eq!(sleepers.hibernated().instances, 0, "a world is starting");
        sleepers.sweep();
        assert_eq!(
            sleepers.hibernated().instances,
            1,
            "the idle one, once the burst is over"
        );
        let awake = Awake::new(all[0].clone(), async {});
        drop(awake);
        assert_eq!(page_bytes(memory, 0)[0], 1);
        region.forget();
        unmap(memory, 1);
    }
}
