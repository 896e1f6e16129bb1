//! Combining the stacks of benchmark regions into one [`ProcessStacks`]: each region's
//! stacks are read from the kernel at the region's end, with stack and object tables of
//! their own, and the process's stacks file holds every region (one shared table) and
//! their sum as the process's scope, as the process's result holds its regions and
//! their sum ([`Stats::merge`](crate::Stats::merge)). The stacks of the images a
//! process ran before its last `execve` join the same tables, each image a scope of its
//! own ([`ProcessStacks::push_earlier_image`]).

use std::{collections::HashMap, hash::Hash};

use crate::stacks::{
    Frame, ObjectId, ProcessStacks, RegionStacks, ScopeStacks, Stack, StackCounts, StackEntry,
    StackId, StackObject,
};

impl ProcessStacks {
    /// Adds the process scope of `other` (stacks read for the same process, e.g. at the
    /// end of one benchmark region, with their own tables) to this one: its stacks and
    /// objects join these tables (each distinct stack and object once), its counters
    /// are added to [`process`](ProcessStacks::process), and with `region` it is also
    /// listed as that region ([`regions`](ProcessStacks::regions)).
    ///
    /// The process scope then combines the regions as `Stats::merge` combines their
    /// counters: allocations, frees and blocks live at the end add up; the at-peak
    /// counters (and [`ScopeStacks::peak_ns`]) are those of the region with the highest
    /// peak, the latest of equal ones (as valgrind DHAT's t-gmax); each stack's `max_live_*` is its highest in any
    /// region (regions do not overlap in time, and a region's blocks are forgotten at
    /// its end). The regions' allocation clocks are laid end to end
    /// ([`ScopeStacks::bytes_allocated`] adds up, and the peak's
    /// [`ScopeStacks::peak_bytes_allocated`] is counted from the first region's start).
    /// Its `start_ns` and `end_ns` are left for the caller to set.
    pub fn add_scope(&mut self, region: Option<&str>, other: &ProcessStacks) {
        if self.depth_limit == 0 {
            self.depth_limit = other.depth_limit;
        }
        let scope = self.join_scope(other, &other.process);
        merge_scope(&mut self.process, &scope);
        if let Some(uri) = region {
            self.regions.push(RegionStacks {
                uri: uri.to_string(),
                counters: scope,
            });
        }
    }

    /// Lists `scope` (a scope of `from`, stacks read for the same process with their
    /// own tables) as the process's next earlier image
    /// ([`earlier_images`](ProcessStacks::earlier_images)): its stacks and objects join
    /// these tables, its counters are kept as they are (an image's counters are never
    /// added to another's: each image starts from zero at its exec).
    pub fn push_earlier_image(&mut self, from: &ProcessStacks, scope: &ScopeStacks) {
        if self.depth_limit == 0 {
            self.depth_limit = from.depth_limit;
        }
        let scope = self.join_scope(from, scope);
        self.earlier_images.push(scope);
    }

    /// Lists every earlier image of `from` (stacks read for the same process, with
    /// their own tables) after this one's, oldest first
    /// ([`push_earlier_image`](Self::push_earlier_image)).
    pub fn push_earlier_images_of(&mut self, from: &ProcessStacks) {
        for scope in &from.earlier_images {
            self.push_earlier_image(from, scope);
        }
    }

    /// `scope`, a scope of `from`, with its entries naming these tables' stacks (which
    /// `from`'s stacks and objects join).
    fn join_scope(&mut self, from: &ProcessStacks, scope: &ScopeStacks) -> ScopeStacks {
        let objects = self.join_objects(&from.objects);
        let stacks = self.join_stacks(&from.stacks, &objects);
        let mut scope = scope.clone();
        for entry in &mut scope.entries {
            entry.stack = stacks[entry.stack as usize];
        }
        scope
    }

    /// Adds `objects` to this table; returns each one's id here.
    fn join_objects(&mut self, objects: &[StackObject]) -> Vec<ObjectId> {
        join(&mut self.objects, objects.iter().cloned())
    }

    /// Adds `stacks` (their frames pointing at objects by `objects`' ids) to this
    /// table; returns each one's id here.
    fn join_stacks(&mut self, stacks: &[Stack], objects: &[ObjectId]) -> Vec<StackId> {
        let moved = stacks.iter().map(|stack| Stack {
            frames: stack
                .frames
                .iter()
                .map(|f| Frame {
                    object: f.object.map(|o| objects[o as usize]),
                    ..*f
                })
                .collect(),
            end: stack.end,
        });
        join(&mut self.stacks, moved)
    }
}

/// Adds each of `items` to `table` unless an equal one is there (each distinct item
/// once); returns each item's index in `table`.
fn join<T: Clone + Eq + Hash>(table: &mut Vec<T>, items: impl Iterator<Item = T>) -> Vec<u32> {
    let mut known: HashMap<T, u32> = table
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    items
        .map(|item| {
            *known.entry(item.clone()).or_insert_with(|| {
                table.push(item);
                (table.len() - 1) as u32
            })
        })
        .collect()
}

/// Adds `other` (a scope whose stack ids are already this table's) to `total`.
fn merge_scope(total: &mut ScopeStacks, other: &ScopeStacks) {
    // The at-peak counters follow the higher peak, or the later of equal ones, as
    // `Stats::merge` does.
    let peak_bytes = |s: &ScopeStacks| s.total().at_peak_bytes;
    let other_peak = peak_bytes(other);
    // The first scope added sets the peak even when nothing was live in it.
    let first = total.entries.is_empty() && total.lost.is_zero() && total.peak_ns.is_none();
    let total_peak = peak_bytes(total);
    let replace_peak =
        first || other_peak > total_peak || (other_peak == total_peak && other.peak_ns.is_some());
    // The scopes' allocation clocks run one after the other: `other`'s starts where
    // `total`'s stands (unknown once a side's is, as in files before version 2).
    let offset = match total.bytes_allocated {
        None if first => Some(0),
        clock => clock,
    };
    total.bytes_allocated = offset
        .zip(other.bytes_allocated)
        .map(|(a, b)| a.saturating_add(b));
    if replace_peak {
        total.peak_ns = other.peak_ns;
        total.peak_bytes_allocated = offset
            .zip(other.peak_bytes_allocated)
            .map(|(a, p)| a.saturating_add(p));
        for entry in &mut total.entries {
            clear_peak(&mut entry.counts);
        }
        clear_peak(&mut total.lost);
    }
    let mut index: HashMap<StackId, usize> = total
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.stack, i))
        .collect();
    for entry in &other.entries {
        let i = *index.entry(entry.stack).or_insert_with(|| {
            // Empty counters: adding to them keeps the lifetime as known as `entry`'s
            // (`StackCounts::add`).
            total.entries.push(StackEntry {
                stack: entry.stack,
                counts: StackCounts::default(),
            });
            total.entries.len() - 1
        });
        add_counts(&mut total.entries[i].counts, &entry.counts, replace_peak);
    }
    add_counts(&mut total.lost, &other.lost, replace_peak);
}

fn clear_peak(c: &mut StackCounts) {
    c.at_peak_blocks = 0;
    c.at_peak_bytes = 0;
}

/// Adds one region's counters of a stack to its process-wide ones: flows add, the
/// maxima take the higher, the at-peak counters come from `other` when its region holds
/// the new peak.
fn add_counts(total: &mut StackCounts, other: &StackCounts, take_peak: bool) {
    let (max_bytes, max_blocks) = if other.max_live_bytes > total.max_live_bytes {
        (other.max_live_bytes, other.max_live_blocks)
    } else {
        (total.max_live_bytes, total.max_live_blocks)
    };
    let (peak_blocks, peak_bytes) = if take_peak {
        (other.at_peak_blocks, other.at_peak_bytes)
    } else {
        (total.at_peak_blocks, total.at_peak_bytes)
    };
    total.add(other);
    total.max_live_bytes = max_bytes;
    total.max_live_blocks = max_blocks;
    total.at_peak_blocks = peak_blocks;
    total.at_peak_bytes = peak_bytes;
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::stacks::StackEnd;

    fn counts(alloc: u64, bytes: u64, live: u64, peak: u64, max: u64) -> StackCounts {
        StackCounts {
            alloc_blocks: alloc,
            alloc_bytes: bytes,
            freed_blocks: alloc - live,
            freed_bytes: bytes - live * (bytes / alloc),
            live_blocks: live,
            live_bytes: live * (bytes / alloc),
            at_peak_blocks: peak,
            at_peak_bytes: peak * (bytes / alloc),
            max_live_bytes: max * (bytes / alloc),
            max_live_blocks: max,
            total_lifetime: None,
        }
    }

    /// A region read on its own: objects and stacks numbered from 0 in its order.
    fn region(objects: &[&str], stacks: &[(u32, u64)], entries: Vec<StackCounts>) -> ProcessStacks {
        ProcessStacks {
            depth_limit: 16,
            objects: objects
                .iter()
                .map(|p| StackObject {
                    path: PathBuf::from(p),
                    build_id: None,
                })
                .collect(),
            stacks: stacks
                .iter()
                .map(|&(object, address)| Stack {
                    frames: vec![Frame::returning_to(Some(object), address)],
                    end: StackEnd::Complete,
                })
                .collect(),
            process: ScopeStacks {
                peak_ns: Some(7),
                // Each region's peak comes after its first 50 bytes allocated.
                peak_bytes_allocated: Some(50),
                bytes_allocated: Some(entries.iter().map(|c| c.alloc_bytes).sum()),
                entries: entries
                    .into_iter()
                    .enumerate()
                    .map(|(i, counts)| StackEntry {
                        stack: i as StackId,
                        counts,
                    })
                    .collect(),
                ..ScopeStacks::default()
            },
            regions: vec![],
            earlier_images: vec![],
        }
    }

    #[test]
    fn regions_share_one_table_and_add_up_in_the_process_scope() {
        let mut all = ProcessStacks::default();
        // Region a: stacks (libc, 0x10) and (exe, 0x20); peak 3 blocks of 100 B.
        all.add_scope(
            Some("a"),
            &region(
                &["/libc", "/exe"],
                &[(0, 0x10), (1, 0x20)],
                vec![counts(2, 200, 0, 2, 2), counts(1, 100, 1, 1, 1)],
            ),
        );
        // Region b, read with its own tables: (exe, 0x20) is the same stack, (exe, 0x30)
        // is new; its peak is 2 blocks of 100 B, lower than a's.
        all.add_scope(
            Some("b"),
            &region(
                &["/exe"],
                &[(0, 0x20), (0, 0x30)],
                vec![counts(4, 400, 0, 1, 3), counts(1, 100, 0, 1, 1)],
            ),
        );
        assert_eq!(all.depth_limit, 16);
        assert_eq!(all.objects.len(), 2);
        assert_eq!(all.stacks.len(), 3);
        all.validate().unwrap();
        let exe_20 = all
            .stacks
            .iter()
            .position(|s| s.frames[0] == Frame::returning_to(Some(1), 0x20))
            .unwrap() as StackId;
        let exe_30 = all
            .stacks
            .iter()
            .position(|s| s.frames[0] == Frame::returning_to(Some(1), 0x30))
            .unwrap() as StackId;
        // Region b's entries now name the shared table's stacks.
        let b = all.region("b").unwrap();
        assert_eq!(b.entries[0].stack, exe_20);
        assert_eq!(b.entries[1].stack, exe_30);
        let of = |id| {
            all.process
                .entries
                .iter()
                .find(|e| e.stack == id)
                .unwrap()
                .counts
                .clone()
        };
        let shared = of(exe_20);
        assert_eq!((shared.alloc_blocks, shared.alloc_bytes), (5, 500));
        assert_eq!((shared.live_blocks, shared.live_bytes), (1, 100));
        // At peak: region a's (its peak, 300 B, is the higher), so b's 1 block is not.
        assert_eq!((shared.at_peak_blocks, shared.at_peak_bytes), (1, 100));
        assert_eq!(of(exe_30).at_peak_blocks, 0);
        // Maxima: the higher of the two regions', not their sum.
        assert_eq!((shared.max_live_blocks, shared.max_live_bytes), (3, 300));
        let total = all.process.total();
        assert_eq!((total.alloc_blocks, total.alloc_bytes), (8, 800));
        assert_eq!(total.at_peak_bytes, 300);
    }

    #[test]
    fn a_later_peak_replaces_the_at_peak_counters_when_it_is_as_high_or_higher() {
        let mut all = ProcessStacks::default();
        all.add_scope(
            Some("a"),
            &region(&["/exe"], &[(0, 0x10)], vec![counts(2, 200, 0, 2, 2)]),
        );
        let mut equal = region(&["/exe"], &[(0, 0x20)], vec![counts(2, 200, 0, 2, 2)]);
        equal.process.peak_ns = Some(9);
        all.add_scope(Some("b"), &equal);
        assert_eq!(all.process.peak_ns, Some(9), "the latest of equal peaks");
        assert_eq!(all.process.peak_bytes_allocated, Some(250));
        assert_eq!(all.process.entries[0].counts.at_peak_bytes, 0);
        assert_eq!(all.process.entries[1].counts.at_peak_bytes, 200);
        let lower = region(&["/exe"], &[(0, 0x10)], vec![counts(1, 100, 0, 1, 1)]);
        all.add_scope(Some("c"), &lower);
        assert_eq!(all.process.peak_ns, Some(9), "a lower peak changes nothing");
        assert_eq!(all.process.peak_bytes_allocated, Some(250));
        assert_eq!(all.process.bytes_allocated, Some(500));
        assert_eq!(all.process.entries[1].counts.at_peak_bytes, 200);
        let mut higher = region(&["/exe"], &[(0, 0x20)], vec![counts(3, 300, 0, 3, 3)]);
        higher.process.peak_ns = Some(11);
        all.add_scope(None, &higher);
        assert_eq!(all.process.peak_ns, Some(11));
        // The regions' allocation clocks end to end: 200 + 200 + 100 + 300 bytes, the
        // peak 50 bytes into the last one.
        assert_eq!(all.process.bytes_allocated, Some(800));
        assert_eq!(all.process.peak_bytes_allocated, Some(550));
        assert_eq!(all.process.entries[0].counts.at_peak_bytes, 0);
        assert_eq!(all.process.entries[1].counts.at_peak_bytes, 300);
        assert_eq!(all.process.total().at_peak_bytes, 300);
        // Without a region name the scope counts for the process only.
        assert_eq!(all.regions.len(), 3);
    }

    /// Each image's stacks read with their own tables join one table, each image a
    /// scope of its own with its counters as read; the last image stays the process
    /// scope.
    #[test]
    fn earlier_images_join_the_table_and_keep_their_own_counters() {
        let first = region(
            &["/bin/sh", "/libc"],
            &[(0, 0x10), (1, 0x20)],
            vec![counts(2, 200, 1, 2, 2), counts(1, 100, 0, 1, 1)],
        );
        let second = region(
            &["/libc", "/bin/tool"],
            &[(0, 0x20), (1, 0x30)],
            vec![counts(4, 400, 4, 4, 4), counts(1, 64, 1, 1, 1)],
        );
        let mut kept = ProcessStacks::default();
        kept.push_earlier_image(&first, &first.process);
        kept.push_earlier_image(&second, &second.process);
        let mut last = region(&["/bin/tool"], &[(0, 0x40)], vec![counts(3, 30, 3, 3, 3)]);
        last.push_earlier_images_of(&kept);
        last.validate().unwrap();
        assert_eq!(last.depth_limit, 16);
        assert_eq!(last.image_count(), 3);
        assert_eq!(last.objects.len(), 3, "{:?}", last.objects);
        // (/libc, 0x20) is one stack of the table, listed by both earlier images.
        assert_eq!(last.stacks.len(), 4);
        let image = |n| last.image(n).unwrap();
        let frames = |scope: &ScopeStacks| -> Vec<(String, u64, u64)> {
            scope
                .entries
                .iter()
                .map(|e| {
                    let f = last.stacks[e.stack as usize].frames[0];
                    let object = &last.objects[f.object.unwrap() as usize];
                    (
                        object.path.display().to_string(),
                        f.address,
                        e.counts.alloc_bytes,
                    )
                })
                .collect()
        };
        assert_eq!(
            frames(image(1)),
            [("/bin/sh".into(), 0x10, 200), ("/libc".into(), 0x20, 100)]
        );
        assert_eq!(
            frames(image(2)),
            [("/libc".into(), 0x20, 400), ("/bin/tool".into(), 0x30, 64)]
        );
        assert_eq!(frames(image(3)), [("/bin/tool".into(), 0x40, 30)]);
        assert_eq!(image(1).entries[1].stack, image(2).entries[0].stack);
        assert_eq!(image(1).total().live_bytes, 100);
        assert!(last.image(0).is_none() && last.image(4).is_none());
        // Blocks counted over every image.
        assert_eq!(last.incomplete().lost_blocks, 0);
    }
}
