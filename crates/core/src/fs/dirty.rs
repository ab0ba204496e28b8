//! The byte ranges a writer changed since its last commit, so that a sync copies only those
//! (`fs::commit`). It owns nothing on disk.
//! Invariant: every byte of the temporary outside these ranges equals the byte at the same offset
//! of the file the writer started from, read as zeros past that file's end.

use std::collections::BTreeMap;

/// Most separate ranges kept. Past it, they are merged into one range that covers them all, so a
/// guest's scattered writes cost the host bounded memory; the next sync then copies that whole
/// span (at worst the whole file, which is what a sync without ranges would cost).
pub(super) const DIRTY_RANGES_LIMIT: usize = 4096;

/// Disjoint, non-adjacent ranges `start..end`, keyed by start.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    ranges: BTreeMap<u64, u64>,
}

impl Dirty {
    /// Marks `start..end` as changed, merging it with the ranges it touches.
    pub(super) fn add(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // The range that starts at or before `start` may reach into the new one.
        if let Some((&before, &before_end)) = self.ranges.range(..=start).next_back()
            && before_end >= start
        {
            start = before;
            end = end.max(before_end);
        }
        // Every range that starts inside the new one is swallowed by it.
        let swallowed: Vec<(u64, u64)> = self
            .ranges
            .range(start..=end)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in swallowed {
            self.ranges.remove(&s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
        if self.ranges.len() > DIRTY_RANGES_LIMIT {
            let first = *self
                .ranges
                .keys()
                .next()
                .expect("more than the limit, so not empty");
            let last = self.ranges.values().max().copied().unwrap_or(first);
            self.ranges.clear();
            self.ranges.insert(first, last);
        }
    }

    /// A size change from `old` to `new`: the bytes between them are new (zeros when growing) or
    /// gone, and either way no longer those of the file the writer started from.
    pub(super) fn resize(&mut self, old: u64, new: u64) {
        self.add(old.min(new), old.max(new));
    }

    /// The ranges in order, cut at `len` (the temporary's size: nothing past it is copied).
    pub(super) fn ranges_below(&self, len: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .map(move |(&start, &end)| (start, end.min(len)))
            .filter(|(start, end)| start < end)
    }

    pub(super) fn clear(&mut self) {
        self.ranges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(dirty: &Dirty) -> Vec<(u64, u64)> {
        dirty.ranges_below(u64::MAX).collect()
    }

    #[test]
    fn ranges_merge_when_they_touch_and_stay_apart_otherwise() {
        let mut dirty = Dirty::default();
        dirty.add(10, 20);
        dirty.add(30, 40);
        dirty.add(20, 25);
        dirty.add(5, 5);
        assert_eq!(ranges(&dirty), [(10, 25), (30, 40)]);
        dirty.add(0, 35);
        assert_eq!(ranges(&dirty), [(0, 40)]);
        dirty.add(50, 60);
        dirty.add(12, 13);
        assert_eq!(ranges(&dirty), [(0, 40), (50, 60)]);
        assert_eq!(
            dirty.ranges_below(55).collect::<Vec<_>>(),
            [(0, 40), (50, 55)]
        );
        assert_eq!(dirty.ranges_below(45).collect::<Vec<_>>(), [(0, 40)]);
    }

    #[test]
    fn a_resize_marks_the_bytes_between_the_two_sizes() {
        let mut dirty = Dirty::default();
        dirty.resize(100, 40);
        dirty.resize(40, 60);
        assert_eq!(ranges(&dirty), [(40, 100)]);
    }

    #[test]
    fn past_the_limit_the_ranges_become_one() {
        let mut dirty = Dirty::default();
        for i in 0..=DIRTY_RANGES_LIMIT as u64 {
            dirty.add(i * 10, i * 10 + 1);
        }
        assert_eq!(ranges(&dirty), [(0, DIRTY_RANGES_LIMIT as u64 * 10 + 1)]);
    }
}
