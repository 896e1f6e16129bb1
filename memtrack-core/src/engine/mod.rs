//! The eBPF engine: memtrack's programs and maps in the kernel, and every link that
//! attaches them. [`Engine::load`] loads the shipped object (object.rs: aya-obj and
//! `bpf()` calls, not aya's `EbpfLoader`, which parses the kernel's BTF first) with one
//! [`EngineSettings`]; the engine is then the sum of parts that each own their maps:
//!
//! - [`Counters`] (counters.rs): which slot of `TRACKED`/`STATS` each process owns,
//!   whether it is counted now, its raw counters;
//! - [`LiveBlocks`] (live/): the live-block maps and slots, emptied of a process when it
//!   is forgotten or reset; the later preallocated entries (live/growth.rs);
//! - [`Links`] (links.rs): the programs (programs.rs) and each process's links, at the
//!   sites the probe placement picks;
//! - [`HookMaps`] (hook_maps.rs): the loader hook's stops and misses;
//! - [`Global`] (global.rs): the tracker-wide counters;
//! - `KernelStacks` (kernel_stacks.rs), with stacks on: unwind rows, mappings, stacks.
//!
//! This module composes them: what a process's start, reset and end do to each part.
//! The user/kernel contract (map names, key and value types) is memtrack-common's.

mod counters;
pub(crate) mod detach;
mod global;
mod hook_maps;
pub(crate) mod kernel_stacks;
mod links;
pub(crate) mod live;
mod maps;
mod memory_cgroup;
mod object;
mod perf_uprobe;
pub(crate) mod programs;
mod slots;
mod timeline;
mod tracepoint;
mod unwind_chain;
pub(crate) mod uprobe_multi;

use std::{os::fd::AsFd, path::Path};

use aya_obj::generated::bpf_prog_type;
use memtrack_common::{PidStats, TrackState, map_names, program_names};
use memtrack_targets::ProbeTarget;

pub use self::object::LoadError;
pub use self::object::ProgramError;
pub(crate) use self::programs::{HookProgram, Loading};
pub use self::programs::{ProbePlacement, UprobeLinks};
use self::{
    counters::Counters,
    detach::Detachable,
    global::Global,
    hook_maps::HookMaps,
    kernel_stacks::KernelStacks,
    links::{Inherited, Links},
    live::{
        LiveBlocks,
        growth::{LaterLiveBlocks, LiveMore},
        sizing::{LiveSplit, check_cgroup_room, live_map_bytes_of},
    },
    maps::{map_err, map_from_fd},
    object::Object,
    programs::{load_uprobe_programs, program_err},
    timeline::{TimelineSettings, Timelines},
};
use crate::{
    ProbeInfo,
    error::{Error, Result},
    record::timeline::Timeline,
    stacks::{ProcessStacks, StackWalks},
};

/// The compiled eBPF object, shipped in the crate (scripts/build-ebpf.sh builds it from the
/// memtrack-ebpf crate; build.rs refuses a stale one).
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("CARGO_MANIFEST_DIR"), "/ebpf/memtrack-ebpf.o"));

/// The syscall counter (mmap/munmap/brk; see memtrack-ebpf's syscalls.rs) and the
/// raw tracepoint it runs on.
const SYSCALL_PROGRAM: (&str, &str) = (program_names::SYS_EXIT, program_names::SYS_EXIT_TRACEPOINT);

/// What a tracker with stacks on unwinds: at most `depth` frames per stack, with the
/// in-kernel cache of walks on or off (`memtrack_common::stack_cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackSettings {
    /// Frames per stack at most (1 to `stacks::MAX_DEPTH`).
    pub(crate) depth: u32,
    /// Whether an allocation may reuse a remembered walk's stack.
    pub(crate) cache: bool,
}

/// Everything an engine is loaded with (the kernel side of `TrackerBuilder`'s
/// settings, checked there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EngineSettings {
    /// Blocks that can be live at once in the live-block maps.
    pub(crate) max_live_blocks: u32,
    /// How many of them have preallocated entries (at most `max_live_blocks` count).
    pub(crate) preallocated_live_blocks: u32,
    /// Where entry probes go.
    pub(crate) placement: ProbePlacement,
    /// Which kind of link attaches the uprobes.
    pub(crate) links: UprobeLinks,
    /// Whether mmap/munmap/brk are counted (the syscall tracepoint attached).
    pub(crate) count_syscalls: bool,
    /// Stacks, if they are recorded.
    pub(crate) stacks: Option<StackSettings>,
    /// Whether each process's timeline is kept.
    pub(crate) timeline: bool,
    /// With `timeline`: whether it has the resident memory (the `rss_stat` tracepoint
    /// attached).
    pub(crate) rss: bool,
}

/// The loaded eBPF object, its maps, and the links attached per process.
pub(crate) struct Engine {
    /// The object: the maps not taken out by the parts below (the program array among
    /// them, which must stay open: the kernel empties a program array when its last
    /// user-space descriptor closes) and the code the programs were loaded from.
    #[cfg_attr(not(test), allow(dead_code))] // held for what it keeps open
    object: Object,
    counters: Counters,
    live: LiveBlocks,
    global: Global,
    hooks: HookMaps,
    links: Links,
    /// Stack tables and counters (None: stacks off).
    stacks: Option<KernelStacks>,
    /// The timelines' maps and finished buckets (None: timelines off).
    timelines: Option<Timelines>,
}

impl Engine {
    /// Loads and verifies every program, and attaches the (globally filtered) syscall
    /// counter, with `settings` (checked by the caller, `TrackerBuilder::check`, before
    /// a command is forked); `loading` says on which threads.
    pub(crate) fn load(settings: EngineSettings, loading: Loading<'_>) -> Result<Self> {
        let EngineSettings {
            max_live_blocks,
            preallocated_live_blocks,
            placement,
            links,
            count_syscalls,
            stacks,
            timeline,
            rss,
        } = settings;
        let rss = timeline && rss;
        let timeline_on = u32::from(timeline).to_ne_bytes();
        let depth = stacks.map_or(0, |s| s.depth).to_ne_bytes();
        let stack_cache = u32::from(stacks.is_some_and(|s| s.cache)).to_ne_bytes();
        // A tracker of other processes reserves part of the preallocated entries later
        // (live/growth.rs, on a thread of its own); one of the calling process starts
        // no threads (`Loading::Here`), and reserves them all now.
        let split = LiveSplit::new(
            max_live_blocks,
            preallocated_live_blocks,
            matches!(loading, Loading::Parallel { .. }),
        );
        let has_on_demand = u32::from(split.overflow > 0).to_ne_bytes();
        let has_more = u32::from(split.later > 0).to_ne_bytes();
        let overflow = u64::from(split.overflow).to_ne_bytes();
        let mut globals: Vec<(&str, &[u8])> = vec![
            (memtrack_common::LIVE_ON_DEMAND_GLOBAL, &has_on_demand),
            (memtrack_common::LIVE_MORE_GLOBAL, &has_more),
            (memtrack_common::LIVE_OVERFLOW_CAPACITY_GLOBAL, &overflow),
            (memtrack_common::TIMELINE_GLOBAL, &timeline_on),
        ];
        let mut max_entries = vec![
            (map_names::LIVE, split.at_load),
            (map_names::LIVE_ON_DEMAND, split.on_demand_entries()),
        ];
        if stacks.is_some() {
            globals.push((memtrack_common::stacks::DEPTH_GLOBAL, &depth));
            globals.push((memtrack_common::stack_cache::CACHE_GLOBAL, &stack_cache));
            // With stacks off these maps keep the object's single entry: nothing is
            // reserved for them.
            max_entries.extend([
                (map_names::UNWIND_ROWS, kernel_stacks::MAX_ROWS),
                (map_names::STACK_IDS, kernel_stacks::MAX_STACKS),
                (map_names::STACK_COUNTS, kernel_stacks::MAX_STACK_COUNTS),
                (
                    map_names::STACK_CACHE,
                    memtrack_common::stack_cache::STACK_CACHE_SLOTS,
                ),
            ]);
        }
        check_cgroup_room(split, max_live_blocks, stacks.is_some())?;
        // The programs need no CO-RE relocations (a test checks), so the kernel's BTF
        // is neither read nor parsed (object.rs says why not aya's EbpfLoader).
        let mut object = Object::load(
            EBPF_OBJECT,
            &globals,
            &max_entries,
            matches!(loading, Loading::Parallel { .. }),
        )
        .map_err(|e| match e {
            LoadError::CreateMap { name, source, .. }
                if name == map_names::LIVE || name == map_names::LIVE_ON_DEMAND =>
            {
                Error::LiveMap {
                    blocks: max_live_blocks,
                    preallocated: split.preallocated(),
                    kernel_bytes: live_map_bytes_of(split).at_load,
                    source,
                }
            }
            e => Error::Load(e),
        })?;
        let programs = load_uprobe_programs(&object, links, stacks.is_some(), loading)?;
        let mut kernel_links = Vec::new();
        if count_syscalls {
            kernel_links.push(attach_syscall_counter(&object)?);
        }
        let rss = rss
            && match rss_tracepoint_id() {
                Some(id) => {
                    kernel_links.push(attach_rss_tracepoint(&object, id)?);
                    true
                }
                None => false,
            };
        // The growth thread reads GLOBAL through a handle of its own.
        let global_for_growth = match split.later {
            0 => None,
            _ => second_handle(&object, map_names::GLOBAL)?,
        };
        let more = LiveMore::new(
            maps::take_map(&mut object, map_names::LIVE_MORE)?,
            global_for_growth,
            split.later,
        );
        let live = LiveBlocks::take(&mut object, more)?;
        let stacks = match stacks {
            Some(s) => Some(KernelStacks::new(&mut object, s.depth)?),
            None => None,
        };
        let timelines = match timeline {
            true => Some(Timelines::take(
                &mut object,
                TimelineSettings {
                    mapped: count_syscalls,
                    rss,
                },
            )?),
            false => None,
        };
        Ok(Engine {
            counters: Counters::take(&mut object)?,
            live,
            global: Global::take(&mut object)?,
            hooks: HookMaps::take(&mut object)?,
            links: Links::new(programs, placement, kernel_links),
            stacks,
            timelines,
            object,
        })
    }

    /// Finds the allocator functions mapped into `pid` and attaches probes scoped to it
    /// (only that process's calls trap). Already-attached sites are skipped, so this can
    /// be called again after an `exec` or a `dlopen`. Returns the probes added.
    pub(crate) fn attach_process(&mut self, pid: u32) -> Result<Vec<ProbeInfo>> {
        let found = memtrack_targets::process_targets(pid).map_err(|e| match e {
            memtrack_targets::Error::ProcessGone { pid } => Error::ProcessGone { pid },
            memtrack_targets::Error::NoAllocator {
                pid,
                objects_scanned,
            } => Error::NoAllocator {
                pid,
                objects: objects_scanned,
            },
            other => Error::Targets(other),
        })?;
        let added = self.links.attach_targets(pid, &found.targets)?;
        if let Some(stacks) = &mut self.stacks {
            stacks.refresh(pid)?;
        }
        Ok(added)
    }

    /// Gives `child`, just forked from `parent`, its parent's allocator probes (and, with
    /// stacks, its mappings) without reading its maps: see [`Links::inherit`]. Returns
    /// the probes reported and the loader hook sites to hook, or None when the parent
    /// has none (the caller then probes the child as any process).
    pub(crate) fn inherit_probes(&mut self, child: u32, parent: u32) -> Result<Option<Inherited>> {
        let Some(inherited) = self.links.inherit(child, parent)? else {
            return Ok(None);
        };
        if let Some(stacks) = &mut self.stacks {
            stacks.inherit(child, parent)?;
        }
        Ok(Some(inherited))
    }

    /// Attaches probes for `targets` before `pid` maps their objects (see
    /// [`Links::attach_expected`]). Returns how many were attached.
    pub(crate) fn attach_expected(&mut self, pid: u32, targets: &[ProbeTarget]) -> Result<usize> {
        self.links.attach_expected(pid, targets)
    }

    /// The stacks of `pid` (None: stacks are off).
    pub(crate) fn stacks(&self, pid: u32) -> Option<ProcessStacks> {
        let stats = self.read_stats(pid).ok();
        self.stacks.as_ref().map(|s| s.read(pid, stats.as_ref()))
    }

    /// `pid` just exec'd (stopped at the exec event, its counters not reset yet): keeps
    /// the stacks of the image it left, read with that image's raw counters `stats`, as
    /// its next earlier image (`KernelStacks::close_image`), and gives the kernel the
    /// new image's mappings at once, so that no frame is ever resolved through the old
    /// image's. Nothing without stacks.
    pub(crate) fn close_image_stacks(
        &mut self,
        pid: u32,
        stats: &PidStats,
        process_start_ns: u64,
    ) -> Result<()> {
        let Some(stacks) = &mut self.stacks else {
            return Ok(());
        };
        stacks.close_image(pid, stats, process_start_ns);
        stacks.refresh(pid)
    }

    /// How the stacks so far were found, all processes (None: stacks are off).
    pub(crate) fn stack_walks(&self) -> Option<StackWalks> {
        self.stacks.as_ref().map(|s| s.walks())
    }

    /// Attaches the loader hook (follow/ld_hook.rs) at `file_offset` of `object`,
    /// scoped to `pid`, with `cookie`. False when that site is hooked for `pid` already:
    /// a probe scoped to a process stays with it across `execve`, so a new image with
    /// the same loader keeps its hook.
    pub(crate) fn attach_ld_hook(
        &mut self,
        pid: u32,
        object: &Path,
        file_offset: u64,
        cookie: u64,
    ) -> Result<bool> {
        if pid == 0 {
            return Err(Error::ProcessGone { pid });
        }
        if self.links.has_ld_hook(pid, object, file_offset) {
            return Ok(false);
        }
        let link = self
            .links
            .programs
            .hook()?
            .attach(object, file_offset, cookie, pid)?;
        self.adopt_ld_hook(pid, object, file_offset, link);
        Ok(true)
    }

    /// Records a loader hook attached with [`HookProgram::attach`] before this engine
    /// was handed over (follow/mod.rs: the hook's registration overlaps the other
    /// programs' verification); it is closed with the process's other links.
    pub(crate) fn adopt_ld_hook(
        &mut self,
        pid: u32,
        object: &Path,
        file_offset: u64,
        link: Detachable,
    ) {
        self.hooks.hooked(pid);
        self.links.add_ld_hook(pid, object, file_offset, link);
    }

    /// The signal the loader hook sent thread `tid` to stop it, if it did and the
    /// follower has not seen that stop yet.
    pub(crate) fn ld_hook_stop(&self, tid: u32) -> Option<u32> {
        self.hooks.stop(tid)
    }

    /// Forgets the loader hook's stop of thread `tid` (seen, or the thread is gone).
    pub(crate) fn clear_ld_hook_stop(&mut self, tid: u32) {
        self.hooks.clear_stop(tid);
    }

    /// The probes attached for `pid`.
    pub(crate) fn probes_of(&self, pid: u32) -> Vec<ProbeInfo> {
        self.links.probes_of(pid)
    }

    /// Detaches every probe of `pid` (its process exited, or tracking ends).
    pub(crate) fn detach_process(&mut self, pid: u32) {
        self.links.detach_process(pid);
    }

    /// Sets whether (and which threads of) `pid` are counted. Allocates nothing for a
    /// process that has a slot (start and stop come here).
    pub(crate) fn set_state(&mut self, pid: u32, state: TrackState) -> Result<()> {
        self.counters.set_state(pid, state)
    }

    /// Stops probing `pid` in the kernel's eyes (it gives up its slot). Called once the
    /// process has exited: none of its calls can add a live block any more. Its stacks
    /// are read first and kept.
    pub(crate) fn forget(&mut self, pid: u32) {
        if self.stacks.is_some() {
            let stats = self.read_stats(pid).ok();
            if let Some(stacks) = &mut self.stacks {
                stacks.finish(pid, stats.as_ref());
            }
        }
        let may_have_blocks = self.counters.may_have_live_blocks(pid, true);
        if let (Some(timelines), Some(slot)) = (&mut self.timelines, self.counters.slot_of(pid)) {
            timelines.forget(pid, slot.index);
        }
        self.counters.release(pid);
        self.hooks.forget(pid);
        if may_have_blocks {
            self.live.purge(&mut self.global, pid, None);
        }
    }

    /// When the current scope of `pid` began (its timeline's origin: its slot was taken
    /// or its counters last reset), `CLOCK_MONOTONIC` ns; None when it has no slot.
    pub(crate) fn scope_origin_ns(&self, pid: u32) -> Option<u64> {
        self.counters.slot_of(pid).map(|slot| slot.value.origin_ns)
    }

    /// Zeroes the counters of `pid` and forgets its live blocks (their later frees count
    /// as unmatched, like blocks allocated before tracking) and its threads' calls in
    /// progress and last releases (a new generation of its slot).
    pub(crate) fn reset_stats(&mut self, pid: u32) -> Result<()> {
        let may_have_blocks = self.counters.may_have_live_blocks(pid, false);
        let generation = self.counters.reset(pid)?;
        if let Some(timelines) = &mut self.timelines {
            timelines.reset(pid, generation);
        }
        self.hooks.reset(pid)?;
        if may_have_blocks {
            // The blocks recorded since the new generation are kept in the slots (the
            // maps cannot tell them apart, and lose them: as before).
            self.live.purge(&mut self.global, pid, Some(generation));
        }
        if let Some(stacks) = &mut self.stacks {
            stacks.reset(pid);
        }
        Ok(())
    }

    /// The timeline of `pid`'s current scope (since its start, or its counters' last
    /// reset) up to now, its times ns since `process_start_ns` (`CLOCK_MONOTONIC`); None
    /// when timelines are off or `pid` has no slot.
    pub(crate) fn timeline(&mut self, pid: u32, process_start_ns: u64) -> Option<Result<Timeline>> {
        let slot = self.counters.slot_of(pid)?;
        let stats = match self.read_stats(pid) {
            Ok(stats) => stats,
            Err(e) => return Some(Err(e)),
        };
        let timelines = self.timelines.as_mut()?;
        Some(timelines.read(pid, slot, &stats, process_start_ns))
    }

    /// Sets `pid`'s resident memory now from `/proc` (a process or image first seen),
    /// where the timeline has it.
    pub(crate) fn seed_rss(&mut self, pid: u32) {
        if let (Some(timelines), Some(slot)) = (&mut self.timelines, self.counters.slot_of(pid)) {
            timelines.seed_rss(pid, slot.index);
        }
    }

    /// Files the finished timeline buckets the kernel handed over so far (the ring
    /// buffer holds a few thousand: a tracker of long-running processes drains it now
    /// and then).
    pub(crate) fn drain_timelines(&mut self) {
        if let Some(timelines) = &mut self.timelines {
            timelines.drain();
        }
    }

    /// The preallocated live-block entries reserved after load (live/growth.rs).
    pub(crate) fn live_more(&mut self) -> &mut LiveMore {
        &mut self.live.more
    }

    /// The live blocks of the tracked processes now, summed over at most
    /// [`MAX_PROCESSES_SUMMED`](live::growth::MAX_PROCESSES_SUMMED) of them: the next
    /// ones after those the last call read, so that every process is read in turn when
    /// there are more (each read copies the process's 2 KB of counters).
    pub(crate) fn live_blocks_now(&mut self) -> u64 {
        let processes = self.counters.processes();
        if processes == 0 {
            return 0;
        }
        let read = processes.min(live::growth::MAX_PROCESSES_SUMMED);
        let start = self.live.more.sum_cursor % processes;
        self.live.more.sum_cursor = start + read;
        self.counters.live_blocks_of(start, read)
    }

    /// What became of the preallocated live-block entries reserved after load.
    pub(crate) fn later_live_blocks(&self) -> LaterLiveBlocks {
        self.live.more.status()
    }

    /// The raw counters of `pid` (zero for a process without a slot); loader hook hits
    /// that did not stop the process (see follow/ld_hook.rs) are among its lost events.
    pub(crate) fn read_stats(&self, pid: u32) -> Result<PidStats> {
        let mut stats = self.counters.read(pid)?;
        stats.lost_events += self.hooks.misses(pid)?;
        Ok(stats)
    }

    /// Events that could not be attributed to any tracked process or to a stack (see
    /// [`Global::unattributed_losses`]).
    pub(crate) fn unattributed_losses(&self) -> u64 {
        self.global.unattributed_losses()
    }

    /// Stops counting everywhere and takes every link out, for closing.
    fn take_all_links(&mut self) -> Vec<Detachable> {
        self.counters.stop_all();
        self.links.take_all()
    }

    /// Detaches every probe and waits until the kernel is done (see `detach`).
    pub(crate) fn detach_all_now(&mut self) {
        let links = self.take_all_links();
        detach::close_now(links);
    }

    /// Detaches everything on the calling thread, starting no thread
    /// ([`detach::close_here`]).
    pub(crate) fn detach_all_here(&mut self) {
        let links = self.take_all_links();
        detach::close_here(links);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let links = self.take_all_links();
        detach::close_later(links);
    }
}

/// Loads the syscall counter and attaches it to its raw tracepoint; the link holds the
/// program.
fn attach_syscall_counter(object: &Object) -> Result<Detachable> {
    let (name, tracepoint) = SYSCALL_PROGRAM;
    let program = object
        .load_program(name, bpf_prog_type::BPF_PROG_TYPE_RAW_TRACEPOINT, None)
        .map_err(program_err(name))?;
    let link =
        object::attach_raw_tracepoint(program.as_fd(), tracepoint).map_err(program_err(name))?;
    Ok(Box::new(link))
}

/// The id of `kmem:rss_stat`, or None when tracefs cannot be read here (not mounted,
/// and mounting it needs CAP_SYS_ADMIN, which CAP_BPF and CAP_PERFMON do not give):
/// then the timelines keep no resident memory, said once on stderr, and the rest is
/// tracked as usual.
fn rss_tracepoint_id() -> Option<u64> {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let (system, event) = program_names::RSS_STAT_TRACEPOINT;
    match tracepoint::tracepoint_id(system, event) {
        Ok(id) => Some(id),
        Err(e) => {
            WARNED.call_once(|| {
                eprintln!(
                    "memtrack: the timeline keeps no resident memory (RSS): the id of                      tracepoint {system}:{event}: {e} (mounting tracefs needs                      CAP_SYS_ADMIN: mount it at /sys/kernel/tracing, or run as root)"
                )
            });
            None
        }
    }
}

/// Loads the resident-memory program and attaches it to tracepoint `id`
/// (`kmem:rss_stat`; it runs on every CPU: see tracepoint.rs).
fn attach_rss_tracepoint(object: &Object, id: u64) -> Result<Detachable> {
    let name = program_names::RSS_STAT;
    let program = object
        .load_program(name, bpf_prog_type::BPF_PROG_TYPE_TRACEPOINT, None)
        .map_err(program_err(name))?;
    let link = tracepoint::attach(program.as_fd(), id).map_err(program_err(name))?;
    Ok(Box::new(link))
}

/// A second handle of map `name` of `object` (which keeps the first), as a `T`.
fn second_handle<T>(object: &Object, name: &'static str) -> Result<Option<T>>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let Some(fd) = object.map_fd(name) else {
        return Ok(None);
    };
    let fd = fd
        .try_clone_to_owned()
        .map_err(|e| map_err(name)(aya::maps::MapError::IoError(e)))?;
    map_from_fd(fd).map(Some).map_err(map_err(name))
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use aya_obj::{
        ProgramSection,
        generated::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, bpf_map_type},
    };
    use memtrack_common::{
        LiveBlock, LiveKey, PidStats, ProcessSlot, ThreadState, map_names, program_names,
    };
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    use super::programs::UPROBE_PROGRAMS;
    use super::{EBPF_OBJECT, SYSCALL_PROGRAM};

    fn parsed() -> aya_obj::Object {
        aya_obj::Object::parse(EBPF_OBJECT).expect("parsing the shipped ebpf/memtrack-ebpf.o")
    }

    /// The documented maximum is the kernel's: one block more is refused by the kernel
    /// itself (E2BIG, before it reserves any memory), and said in words. (The maximum
    /// itself was measured to load here, 11 GiB in 18 s: too much for a test.)
    #[test]
    #[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
    fn the_kernel_makes_no_live_map_beyond_the_maximum() {
        let blocks = crate::MAX_LIVE_BLOCKS + 1;
        // All preallocated: the preallocated map is the one that reaches the limit
        // (split, each map is below it).
        let loaded = super::Engine::load(
            super::EngineSettings {
                max_live_blocks: blocks,
                preallocated_live_blocks: blocks,
                placement: super::ProbePlacement::default(),
                links: super::UprobeLinks::default(),
                count_syscalls: false,
                stacks: None,
                timeline: false,
                rss: false,
            },
            super::Loading::Here,
        );
        let Err(err) = loaded else {
            panic!("the kernel made a live map of {blocks} blocks");
        };
        let crate::Error::LiveMap { source, .. } = &err else {
            panic!("expected Error::LiveMap, got {err}");
        };
        assert_eq!(source.raw_os_error(), Some(libc::E2BIG), "{err}");
        assert!(
            err.to_string().starts_with(
                "creating the kernel maps for 134217729 live blocks (134217729 of them \
                 preallocated; about 14336 MiB of kernel memory reserved when memtrack \
                 starts, the other blocks' entries allocated as they go live) failed: "
            ),
            "{err}"
        );
    }

    /// With stacks on, the unwind and remembering programs are loaded and put into the
    /// entry program's program array, with either kind of link; with stacks off they are
    /// not loaded and the slots stay empty.
    #[test]
    #[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
    fn stacks_put_the_unwind_program_into_its_slot_and_only_then() {
        for links in [super::UprobeLinks::Auto, super::UprobeLinks::PerfEvent] {
            let on = super::StackSettings {
                depth: 64,
                cache: true,
            };
            for stacks in [Some(on), None] {
                let case = format!("{links:?}, stacks {stacks:?}");
                let engine = super::Engine::load(
                    super::EngineSettings {
                        max_live_blocks: 1024,
                        preallocated_live_blocks: 1024,
                        placement: super::ProbePlacement::default(),
                        links,
                        count_syscalls: false,
                        stacks,
                        timeline: true,
                        rss: false,
                    },
                    super::Loading::Here,
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
                for (name, slot) in super::unwind_chain::CHAIN {
                    let case = format!("{case}, {name}");
                    let installed = super::unwind_chain::installed_id(&engine.object, slot)
                        .unwrap_or_else(|e| panic!("{case}: reading the slot: {e}"));
                    let loaded = engine.links.programs.get(name).is_ok();
                    assert_eq!(loaded, stacks.is_some(), "{case}: loaded");
                    match installed {
                        None => assert!(stacks.is_none(), "{case}: empty slot"),
                        Some(id) => {
                            assert!(stacks.is_some(), "{case}: slot filled without stacks");
                            let program = aya::programs::loaded_programs()
                                .flatten()
                                .find(|p| p.id() == id)
                                .unwrap_or_else(|| panic!("{case}: no program {id}"));
                            assert_eq!(program.name_as_str(), Some(name), "{case}");
                        }
                    }
                }
                if links == super::UprobeLinks::PerfEvent {
                    assert_eq!(
                        engine.links.programs.mode,
                        super::programs::UprobeMode::Perf,
                        "{case}"
                    );
                } else if !super::uprobe_multi::forced_off() {
                    assert_eq!(
                        engine.links.programs.mode,
                        super::programs::UprobeMode::Multi,
                        "{case}: this kernel has uprobe_multi"
                    );
                }
            }
        }
    }

    /// bpf_object.rs neither reads nor applies the kernel's BTF (reading and parsing it
    /// is slow): that is only right while the programs have no CO-RE relocations.
    #[test]
    fn programs_need_no_core_relocations() {
        assert!(
            !parsed().has_btf_relocations(),
            "the eBPF programs now have CO-RE relocations: bpf_object::Object::load must \
             relocate them against the kernel's BTF (aya_obj::Object::relocate_btf)"
        );
    }

    /// Every map the loader takes out of the object (`Engine::load`) or that the
    /// programs share with it, with the map type, key and value it takes it as. A name changed on one side only,
    /// or a key or value type changed without the other side, fails here rather than in
    /// `Engine::load` as root.
    #[test]
    fn ebpf_object_has_the_maps_the_loader_takes() {
        let hash = bpf_map_type::BPF_MAP_TYPE_HASH as u32;
        let array = bpf_map_type::BPF_MAP_TYPE_ARRAY as u32;
        let prog_array = bpf_map_type::BPF_MAP_TYPE_PROG_ARRAY as u32;
        let task_storage = bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as u32;
        let array_of_maps = bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS as u32;
        let expected: [(&str, u32, usize, usize); 12] = [
            (
                map_names::TRACKED,
                array,
                size_of::<u32>(),
                size_of::<ProcessSlot>(),
            ),
            (map_names::SLOTS, hash, size_of::<u32>(), size_of::<u32>()),
            (
                map_names::STATS,
                array,
                size_of::<u32>(),
                size_of::<PidStats>(),
            ),
            (
                map_names::LIVE,
                hash,
                size_of::<LiveKey>(),
                size_of::<LiveBlock>(),
            ),
            // live_growth.rs puts a map's fd (u32) at a u32 slot.
            (
                map_names::LIVE_MORE,
                array_of_maps,
                size_of::<u32>(),
                size_of::<u32>(),
            ),
            (
                map_names::LIVE_ON_DEMAND,
                hash,
                size_of::<LiveKey>(),
                size_of::<LiveBlock>(),
            ),
            (
                map_names::LIVE_SLOTS,
                array,
                size_of::<u32>(),
                size_of::<memtrack_common::LiveSlot>(),
            ),
            (
                map_names::THREADS,
                task_storage,
                size_of::<i32>(),
                size_of::<ThreadState>(),
            ),
            (map_names::GLOBAL, array, size_of::<u32>(), size_of::<u64>()),
            (
                map_names::LD_HOOK_STOPS,
                hash,
                size_of::<u32>(),
                size_of::<u32>(),
            ),
            (
                map_names::LD_HOOK_MISSES,
                hash,
                size_of::<u32>(),
                size_of::<u64>(),
            ),
            // unwind_chain.rs writes a program's fd (u32) at a u32 slot.
            (
                map_names::UNWIND_PROGS,
                prog_array,
                size_of::<u32>(),
                size_of::<u32>(),
            ),
        ];
        let object = parsed();
        let mut names: Vec<&String> = object.maps.keys().collect();
        names.sort();
        for (name, map_type, key_size, value_size) in expected {
            let map = object.maps.get(name).unwrap_or_else(|| {
                panic!("the eBPF object has no map {name:?} (it has {names:?})")
            });
            assert_eq!(
                (map.map_type(), map.key_size(), map.value_size()),
                (map_type, key_size as u32, value_size as u32),
                "map {name:?}: (map type, key bytes, value bytes)"
            );
        }
        // The live blocks: the first ones preallocated, the next ones preallocated in
        // the map put in LIVE_MORE (made by live_growth.rs as its inner map is defined),
        // the rest allocated on demand.
        let no_prealloc = |name: &str| object.maps[name].map_flags() & BPF_F_NO_PREALLOC != 0;
        assert!(!no_prealloc(map_names::LIVE));
        assert!(no_prealloc(map_names::LIVE_ON_DEMAND));
        // The live slots are scanned through a mapping (live_slots.rs).
        assert_ne!(
            object.maps[map_names::LIVE_SLOTS].map_flags() & BPF_F_MMAPABLE,
            0,
            "LIVE_SLOTS is mappable"
        );
        let inner = object.maps[map_names::LIVE_MORE]
            .inner()
            .expect("LIVE_MORE defines its inner map");
        assert_eq!(
            (
                inner.map_type(),
                inner.key_size(),
                inner.value_size(),
                inner.map_flags()
            ),
            (
                hash,
                size_of::<LiveKey>() as u32,
                size_of::<LiveBlock>() as u32,
                0
            ),
            "LIVE_MORE's inner map: (type, key bytes, value bytes, flags)"
        );
    }

    /// Every program the loader loads and attaches, with the program type it loads it
    /// as (the uprobe_multi path loads the uprobes itself, as kprobe-type programs, so a
    /// wrong section would not be noticed by aya there), and the raw tracepoint the
    /// syscall program was written for.
    #[test]
    fn ebpf_object_has_the_programs_the_loader_attaches() {
        let object = parsed();
        let mut names: Vec<&String> = object.programs.keys().collect();
        names.sort();
        let section = |name: &str| {
            &object
                .programs
                .get(name)
                .unwrap_or_else(|| {
                    panic!("the eBPF object has no program {name:?} (it has {names:?})")
                })
                .section
        };
        assert_eq!(
            UPROBE_PROGRAMS,
            [
                program_names::ENTRY,
                program_names::RETURN,
                program_names::LD_HOOK
            ]
        );
        let hook = section(program_names::LD_HOOK);
        assert!(
            matches!(hook, ProgramSection::UProbe { sleepable: false }),
            "{}: {hook:?}, expected a uprobe",
            program_names::LD_HOOK
        );
        let entry = section(program_names::ENTRY);
        assert!(
            matches!(entry, ProgramSection::UProbe { sleepable: false }),
            "{}: {entry:?}, expected a uprobe",
            program_names::ENTRY
        );
        // Tail calls need the caller's program type: the chain's programs are uprobes
        // like the entry program, loaded the same way.
        for (name, _) in super::unwind_chain::CHAIN {
            let chained = section(name);
            assert!(
                matches!(chained, ProgramSection::UProbe { sleepable: false }),
                "{name}: {chained:?}, expected a uprobe like {}",
                program_names::ENTRY
            );
        }
        let ret = section(program_names::RETURN);
        assert!(
            matches!(ret, ProgramSection::URetProbe { sleepable: false }),
            "{}: {ret:?}, expected a uretprobe",
            program_names::RETURN
        );
        let (syscalls, tracepoint) = SYSCALL_PROGRAM;
        let raw = section(syscalls);
        assert!(
            matches!(raw, ProgramSection::RawTracePoint),
            "{syscalls}: {raw:?}, expected a raw tracepoint"
        );
        // aya-obj keeps no tracepoint name; the program's ELF section says it.
        let elf = object::File::parse(EBPF_OBJECT).expect("parsing the eBPF object as ELF");
        let symbol = elf
            .symbol_by_name(syscalls)
            .unwrap_or_else(|| panic!("no ELF symbol {syscalls:?}"));
        let section_index = symbol
            .section_index()
            .unwrap_or_else(|| panic!("ELF symbol {syscalls:?} is in no section"));
        let section_name = elf
            .section_by_index(section_index)
            .and_then(|s| s.name().map(str::to_owned))
            .unwrap_or_else(|e| panic!("section of {syscalls:?}: {e}"));
        assert_eq!(section_name, format!("raw_tp/{tracepoint}"));
    }

    /// The license the kernel is told: GPL-compatible (the programs call GPL-only
    /// helpers), and true to the crates' MIT OR Apache-2.0.
    #[test]
    fn ebpf_object_license_is_dual_mit_gpl() {
        let object = parsed();
        assert_eq!(object.license.as_c_str(), c"Dual MIT/GPL");
        for (name, program) in &object.programs {
            assert_eq!(program.license, object.license, "program {name}");
        }
    }
}
