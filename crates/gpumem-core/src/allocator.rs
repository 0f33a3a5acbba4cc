//! PyTorch's CUDA caching allocator as memory sees it: which segments a sequence of
//! allocations and frees makes it reserve from the driver, without any memory.
//!
//! `torch.cuda.max_memory_allocated` counts the blocks tensors hold; the driver sees
//! the segments the allocator reserved (`max_memory_reserved`), which never shrink
//! until `empty_cache`. Segments stay cached after their tensors are freed, a block is
//! carved out of the best-fitting cached block, and a large free block split by a
//! small long-lived tensor can no longer serve a large request: the reserved peak can
//! stand well above the allocated one. The rules (c10/cuda/CUDACachingAllocator.cpp,
//! torch 2.11): every request is rounded up to 512 B (`kMinBlockSize`, `round_size`);
//! requests up to 1 MiB (`kSmallSize`) are served from the small pool, whose segments
//! are 2 MiB (`kSmallBuffer`); larger ones from the large pool, in a 20 MiB segment
//! (`kLargeBuffer`) below 10 MiB (`kMinLargeAlloc`), else a segment of the request
//! rounded up to 2 MiB (`kRoundLarge`, `get_allocation_size`); the free block chosen is
//! the smallest that fits, lowest address first (`get_free_block`, `BlockComparatorSize`);
//! it is split when what remains is at least 512 B (small pool) or more than 1 MiB
//! (large pool, `shouldSplit`); a freed block merges with free neighbours of its
//! segment (`try_merge_blocks`). With `expandable_segments:True` each pool is one
//! segment that maps more pages at its end — 2 MiB steps in the small pool, 20 MiB in
//! the large — when no cached block fits (`ExpandableSegment::map`), so freed space
//! anywhere is reused and reserved is the pool's mapped end.
//!
//! The same rules are the trace's (`agent/python/gpumem_trace.py`, class `Allocator`):
//! `agent/tests/allocator_parity.rs` drives both with the same requests and checks that
//! they reserve the same bytes after every one.

// Checked arithmetic only: sizes come from user workloads.
#![deny(clippy::arithmetic_side_effects)]

/// Every request is rounded up to a multiple of this (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;
/// The largest request the small pool serves (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// A small-pool segment (`kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Large requests below this share a 20 MiB segment (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// The segment of a large request below 10 MiB (`kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Larger segments are rounded up to this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The block the allocator hands out for a request of `n` bytes (`round_size`).
pub fn round_size(n: u64) -> u64 {
    n.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// A block of a segment.
#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    free: bool,
    segment: u64,
    small: bool,
}

/// A live allocation (its block's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Handle(u64);

/// The caching allocator's bookkeeping for one device and stream: segments, blocks,
/// and the allocated and reserved counters with their peaks.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    expandable: bool,
    allocated: u64,
    peak_allocated: u64,
    reserved: u64,
    peak_reserved: u64,
    next_address: u64,
    /// Free blocks per pool (index 1: small), sorted by (size, address).
    free: [Vec<(u64, u64)>; 2],
    /// Every block by address, sorted.
    blocks: Vec<(u64, Block)>,
    /// Each segment's end address (for an expandable segment, its mapped end), by
    /// segment address, sorted.
    segment_end: Vec<(u64, u64)>,
    /// Expandable segments: per pool, the segment's start and mapped end.
    expand_top: [Option<(u64, u64)>; 2],
}

/// A sorted vector used as a map or a set: a binary search per lookup, plain `Vec`
/// code in the page's wasm (the B-tree maps' code costs it kilobytes).
fn find<K: Ord + Copy, V>(v: &[(K, V)], k: K) -> Result<usize, usize> {
    v.binary_search_by(|(x, _)| x.cmp(&k))
}

fn put<K: Ord + Copy, V>(v: &mut Vec<(K, V)>, k: K, value: V) {
    match find(v, k) {
        Ok(i) => v[i].1 = value,
        Err(i) => v.insert(i, (k, value)),
    }
}

fn get<K: Ord + Copy, V: Copy>(v: &[(K, V)], k: K) -> Option<V> {
    find(v, k).ok().map(|i| v[i].1)
}

fn take<K: Ord + Copy, V>(v: &mut Vec<(K, V)>, k: K) {
    if let Ok(i) = find(v, k) {
        v.remove(i);
    }
}

fn set_insert(v: &mut Vec<(u64, u64)>, x: (u64, u64)) {
    if let Err(i) = v.binary_search(&x) {
        v.insert(i, x);
    }
}

fn set_remove(v: &mut Vec<(u64, u64)>, x: (u64, u64)) {
    if let Ok(i) = v.binary_search(&x) {
        v.remove(i);
    }
}

impl Allocator {
    /// The block ending at `end`, if it is free and of `segment`.
    fn free_tail(&self, segment: u64, end: u64) -> Option<(u64, u64)> {
        let i = match find(&self.blocks, end) {
            Ok(i) | Err(i) => i,
        };
        let (a, b) = self.blocks.get(i.checked_sub(1)?)?;
        (b.free && b.segment == segment && a.saturating_add(b.size) == end).then_some((*a, b.size))
    }

    /// An empty allocator; `expandable`: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    pub fn new(expandable: bool) -> Allocator {
        Allocator {
            expandable,
            ..Allocator::default()
        }
    }

    /// Bytes in live blocks (`memory_allocated`).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The highest `allocated` since the last reset (`max_memory_allocated`).
    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }

    /// Bytes in segments (`memory_reserved`).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The highest `reserved` since the last reset (`max_memory_reserved`).
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }

    /// Sets both peaks to the current levels (`reset_peak_memory_stats`).
    pub fn reset_peaks(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    fn segment_size(size: u64, small: bool) -> u64 {
        if small {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            LARGE_BUFFER
        } else {
            size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
        }
    }

    fn pool(small: bool) -> usize {
        usize::from(small)
    }

    fn take_free(&mut self, small: bool, size: u64) -> Option<(u64, u64)> {
        let free = &mut self.free[Self::pool(small)];
        let i = match free.binary_search(&(size, 0)) {
            Ok(i) | Err(i) => i,
        };
        (i < free.len()).then(|| free.remove(i))
    }

    fn new_segment(&mut self, small: bool, size: u64) -> (u64, u64) {
        if self.expandable {
            return self.grow(small, size);
        }
        let seg_size = Self::segment_size(size, small);
        let addr = self.next_address;
        self.next_address = self.next_address.saturating_add(seg_size);
        self.add_reserved(seg_size);
        put(&mut self.segment_end, addr, addr.saturating_add(seg_size));
        put(
            &mut self.blocks,
            addr,
            Block {
                size: seg_size,
                free: true,
                segment: addr,
                small,
            },
        );
        (seg_size, addr)
    }

    fn grow(&mut self, small: bool, size: u64) -> (u64, u64) {
        let step = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let (seg, end) = match self.expand_top[Self::pool(small)] {
            Some(top) => top,
            None => {
                let seg = self.next_address;
                // Each pool's range stands apart from the other's: never adjacent.
                self.next_address = self.next_address.saturating_add(1 << 50);
                put(&mut self.segment_end, seg, seg);
                (seg, seg)
            }
        };
        // The free block touching the mapped end, if any, grows with the mapping.
        let tail = self.free_tail(seg, end).map(|(a, size)| (size, a));
        if let Some(t) = tail {
            set_remove(&mut self.free[Self::pool(small)], t);
        }
        let (have, start) = tail.unwrap_or((0, end));
        let grow = size
            .saturating_sub(have)
            .div_ceil(step)
            .saturating_mul(step);
        self.add_reserved(grow);
        let new_end = end.saturating_add(grow);
        self.expand_top[Self::pool(small)] = Some((seg, new_end));
        put(&mut self.segment_end, seg, new_end);
        let size = have.saturating_add(grow);
        put(
            &mut self.blocks,
            start,
            Block {
                size,
                free: true,
                segment: seg,
                small,
            },
        );
        (size, start)
    }

    fn add_reserved(&mut self, bytes: u64) {
        self.reserved = self.reserved.saturating_add(bytes);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    /// Serves a request of `bytes` (rounded to the allocator's block here).
    pub fn malloc(&mut self, bytes: u64) -> Handle {
        let size = round_size(bytes);
        let small = size <= SMALL_SIZE;
        let (bsize, addr) = match self.take_free(small, size) {
            Some(b) => b,
            None => self.new_segment(small, size),
        };
        let rest = bsize.saturating_sub(size);
        let split = if small {
            rest >= MIN_BLOCK
        } else {
            rest > SMALL_SIZE
        };
        let segment = get(&self.blocks, addr).map_or(addr, |b| b.segment);
        if split {
            let at = addr.saturating_add(size);
            put(
                &mut self.blocks,
                at,
                Block {
                    size: rest,
                    free: true,
                    segment,
                    small,
                },
            );
            set_insert(&mut self.free[Self::pool(small)], (rest, at));
        }
        let held = if split { size } else { bsize };
        put(
            &mut self.blocks,
            addr,
            Block {
                size: held,
                free: false,
                segment,
                small,
            },
        );
        // The counters count the block, as `memory_allocated` does.
        self.allocated = self.allocated.saturating_add(held);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Handle(addr)
    }

    /// Frees a live block, merging it with free neighbours of its segment. A handle
    /// that is not live is ignored.
    pub fn free(&mut self, h: Handle) {
        let Some(Block {
            size,
            free: false,
            segment,
            small,
        }) = get(&self.blocks, h.0)
        else {
            return;
        };
        self.allocated = self.allocated.saturating_sub(size);
        let (mut addr, mut size) = (h.0, size);
        let end = get(&self.segment_end, segment).unwrap_or(0);
        let next = addr.saturating_add(size);
        if next < end
            && let Some(n) = get(&self.blocks, next)
            && n.free
            && n.segment == segment
        {
            set_remove(&mut self.free[Self::pool(small)], (n.size, next));
            take(&mut self.blocks, next);
            size = size.saturating_add(n.size);
        }
        if addr != segment
            && let Some((p, psize)) = self.free_tail(segment, addr)
        {
            set_remove(&mut self.free[Self::pool(small)], (psize, p));
            take(&mut self.blocks, addr);
            addr = p;
            size = size.saturating_add(psize);
        }
        put(
            &mut self.blocks,
            addr,
            Block {
                size,
                free: true,
                segment,
                small,
            },
        );
        set_insert(&mut self.free[Self::pool(small)], (size, addr));
    }

    /// Returns every wholly free segment to the driver (`torch.cuda.empty_cache`); with
    /// expandable segments, unmaps the free pages at each pool's end.
    pub fn empty_cache(&mut self) {
        if self.expandable {
            for small in [false, true] {
                let Some((seg, end)) = self.expand_top[Self::pool(small)] else {
                    continue;
                };
                if let Some((a, s)) = self.free_tail(seg, end) {
                    set_remove(&mut self.free[Self::pool(small)], (s, a));
                    take(&mut self.blocks, a);
                    self.reserved = self.reserved.saturating_sub(s);
                    self.expand_top[Self::pool(small)] = Some((seg, a));
                    put(&mut self.segment_end, seg, a);
                }
            }
            return;
        }
        let whole: Vec<(u64, u64, bool)> = self
            .blocks
            .iter()
            .filter(|(a, b)| {
                b.free
                    && *a == b.segment
                    && get(&self.segment_end, b.segment) == Some(a.saturating_add(b.size))
            })
            .map(|(a, b)| (*a, b.size, b.small))
            .collect();
        for (a, s, small) in whole {
            set_remove(&mut self.free[Self::pool(small)], (s, a));
            take(&mut self.blocks, a);
            take(&mut self.segment_end, a);
            self.reserved = self.reserved.saturating_sub(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn requests_round_to_blocks_and_segments() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        let mut a = Allocator::new(false);
        // A small request takes a 2 MiB small-pool segment.
        let s = a.malloc(100);
        assert_eq!((a.allocated(), a.reserved()), (512, 2 * MIB));
        // An 8 MiB request takes a 20 MiB segment, split; a second fits beside it,
        // a third does not (4 MiB left).
        let x = a.malloc(8 * MIB);
        let y = a.malloc(8 * MIB);
        assert_eq!(a.reserved(), 22 * MIB);
        let _z = a.malloc(8 * MIB);
        assert_eq!(a.reserved(), 42 * MIB);
        // 10 MiB and more: a segment of its own, rounded to 2 MiB, unless a cached
        // block fits (the third segment's 12 MiB rest serves 11 MiB).
        let fits = a.malloc(11 * MIB);
        assert_eq!(a.reserved(), 42 * MIB);
        let big = a.malloc(13 * MIB);
        assert_eq!(a.reserved(), 42 * MIB + 14 * MIB);
        // Freed blocks stay reserved and merge: the two 8 MiB blocks and the 4 MiB
        // rest are one 20 MiB block again, which a 20 MiB request reuses.
        a.free(x);
        a.free(y);
        let before = a.reserved();
        let _w = a.malloc(20 * MIB);
        assert_eq!(a.reserved(), before);
        a.free(big);
        a.free(s);
        assert_eq!(a.peak_reserved(), 56 * MIB);
        assert_eq!(a.allocated(), 8 * MIB + 12 * MIB + 20 * MIB);
        a.empty_cache();
        // Only the wholly free segments go back: the 14 MiB and the small one.
        assert_eq!(a.reserved(), 40 * MIB);
        a.free(fits);
    }

    #[test]
    fn a_long_lived_block_in_a_freed_segment_forces_a_new_one() {
        let mut a = Allocator::new(false);
        let t = a.malloc(100 * MIB);
        a.free(t);
        // A 30 MiB tensor lands in the cached 100 MiB block (best fit) and stays...
        let _keep = a.malloc(30 * MIB);
        // ...so the next 100 MiB request needs a new segment.
        let _t2 = a.malloc(100 * MIB);
        assert_eq!(a.reserved(), 200 * MIB);
        // With expandable segments the pool grows at its end by what is missing.
        let mut e = Allocator::new(true);
        let t = e.malloc(100 * MIB);
        e.free(t);
        let _keep = e.malloc(30 * MIB);
        let _t2 = e.malloc(100 * MIB);
        assert_eq!(e.reserved(), 140 * MIB);
    }
}
