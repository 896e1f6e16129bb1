//! Loads memtrack's eBPF object and attaches it: one [`Engine`] owns the programs, the
//! maps and every link, and is the only code that talks to the kernel's BPF side. The
//! object is loaded by bpf_object.rs (aya-obj and `bpf()` calls, not aya's
//! `EbpfLoader`, which parses the kernel's BTF first); the maps are read and written
//! through aya's typed maps; the links are made by uprobe_multi.rs or perf_uprobe.rs.
//! Map reading and writing for the tracker lives here too, so the user/kernel contract
//! (map names, key and value types from `memtrack-common`) is kept in one file. Beside
//! it: uprobe_programs.rs loads the uprobe programs and makes their links,
//! live_sizing.rs splits the live-block capacity between the maps, process_slots.rs
//! hands out the processes' slots.

use std::{
    collections::BTreeMap,
    os::fd::AsFd,
    path::{Path, PathBuf},
};

use aya::maps::{Array, HashMap, MapData};
use aya_obj::generated::bpf_prog_type;
use memtrack_common::{
    LiveBlock, LiveKey, PidStats, ProcessSlot, TrackState, global, map_names, program_names,
};
use memtrack_targets::ProbeTarget;

use crate::{
    bpf_object::{self, LoadError, Object},
    detach::Detachable,
    ebpf_map::{map_err, map_from_fd, no_such_map, take_map},
    error::{Error, Result},
    live_growth::{LaterLiveBlocks, LiveMore},
    live_sizing::{LiveSplit, check_cgroup_room, live_map_bytes_of},
    live_slots::LiveSlots,
    process_slots::{OwnedSlot, Slots},
    uprobe_programs::{
        Loading, ProbeInfo, ProbePlacement, Site, UprobeLinks, UprobePrograms,
        load_uprobe_programs, probe_info, program_err,
    },
};

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

/// The compiled eBPF object, shipped in the crate (scripts/build-ebpf.sh builds it from the
/// memtrack-ebpf crate; build.rs refuses a stale one).
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("CARGO_MANIFEST_DIR"), "/ebpf/memtrack-ebpf.o"));

/// The syscall counter (mmap/munmap/brk; see memtrack-ebpf's syscalls.rs) and the
/// raw tracepoint it runs on.
const SYSCALL_PROGRAM: (&str, &str) = (program_names::SYS_EXIT, program_names::SYS_EXIT_TRACEPOINT);

/// Probes attached for one process.
#[derive(Default)]
struct ProcessLinks {
    /// Owned links (uprobe_multi link fds, or perf-event links): dropping one detaches
    /// it.
    links: Vec<Detachable>,
    probes: Vec<ProbeInfo>,
    /// Probes attached before their object was seen mapped ([`Engine::attach_expected`]):
    /// they move to `probes` (and are reported) once it is.
    expected: Vec<ProbeInfo>,
    /// Loader hook sites attached: (object, file offset).
    ld_hooks: Vec<(PathBuf, u64)>,
}

/// The loaded eBPF object, its maps, and the links attached per process.
pub(crate) struct Engine {
    /// The object: the maps not taken out below (the program array among them, which
    /// must stay open: the kernel empties a program array when its last user-space
    /// descriptor closes) and the code the programs were loaded from.
    #[cfg_attr(not(test), allow(dead_code))] // held for what it keeps open
    object: Object,
    tracked: Array<MapData, ProcessSlot>,
    slot_map: HashMap<MapData, u32, u32>,
    stats: Array<MapData, PidStats>,
    /// The live blocks, the first ones (`LIVE`, preallocated at load)...
    live: HashMap<MapData, LiveKey, LiveBlock>,
    /// ... the next ones (the map in `LIVE_MORE`, preallocated later) once made...
    live_more: LiveMore,
    /// ... and the rest (`LIVE_ON_DEMAND`; see memtrack-ebpf's maps.rs).
    live_on_demand: HashMap<MapData, LiveKey, LiveBlock>,
    /// Entries this side deleted from the overflow maps (`live_more`'s and
    /// `live_on_demand`), as last written to `global::LIVE_OVERFLOW_PURGED`.
    overflow_purged: u64,
    /// Those of them from `live_on_demand`, as last written to
    /// `global::LIVE_ON_DEMAND_PURGED`.
    on_demand_purged: u64,
    /// The live slots in front of the live maps (memtrack-ebpf's live_slots.rs).
    live_slots: LiveSlots,
    /// Units of the capacity beyond `LIVE`'s this side gave back (overflow entries it
    /// deleted, slots it emptied), as last written to `global::LIVE_BEYOND_PURGED`.
    beyond_purged: u64,
    global: Array<MapData, u64>,
    /// Which slot of `tracked`/`stats` each process owns.
    slots: Slots,
    /// Thread id -> the signal the loader hook stopped it with.
    ld_hook_stops: HashMap<MapData, u32, u32>,
    /// tgid -> loader hook hits that did not stop the thread.
    ld_hook_misses: HashMap<MapData, u32, u64>,
    processes: BTreeMap<u32, ProcessLinks>,
    /// The syscall counter's link, owned like the uprobe links (None: not counted).
    syscall_link: Option<Detachable>,
    programs: UprobePrograms,
    placement: ProbePlacement,
    /// Chosen sites by (object, function file offset): decoding is done once per
    /// object, not once per process.
    sites: std::collections::HashMap<(PathBuf, u64), Site>,
    /// Stack tables and counters (None: stacks off).
    stacks: Option<crate::kernel_stacks::KernelStacks>,
}

/// What a tracker with stacks on unwinds: at most `depth` frames per stack, with the
/// in-kernel cache of walks on or off (`memtrack_common::stack_cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackSettings {
    /// Frames per stack at most (1 to `stacks::MAX_DEPTH`).
    pub(crate) depth: u32,
    /// Whether an allocation may reuse a remembered walk's stack.
    pub(crate) cache: bool,
}

impl Engine {
    /// Loads and verifies every program, and attaches the (globally filtered) syscall
    /// counters. Privileges and kernel support are checked by the caller first
    /// (`TrackerBuilder::check`, before a command is forked).
    /// `max_live_blocks` blocks can be live at once, the first `preallocated` (at most
    /// `max_live_blocks`) in preallocated entries.
    pub(crate) fn load(
        max_live_blocks: u32,
        preallocated: u32,
        placement: ProbePlacement,
        links: UprobeLinks,
        count_syscalls: bool,
        stacks: Option<StackSettings>,
        loading: Loading<'_>,
    ) -> Result<Self> {
        let depth = stacks.map_or(0, |s| s.depth).to_ne_bytes();
        let stack_cache = u32::from(stacks.is_some_and(|s| s.cache)).to_ne_bytes();
        // A tracker of other processes reserves part of the preallocated entries later
        // (live_growth.rs, on a thread of its own); one of the calling process starts
        // no threads (`Loading::Here`), and reserves them all now.
        let split = LiveSplit::new(
            max_live_blocks,
            preallocated,
            matches!(loading, Loading::Parallel { .. }),
        );
        let has_on_demand = u32::from(split.overflow > 0).to_ne_bytes();
        let has_more = u32::from(split.later > 0).to_ne_bytes();
        let overflow = u64::from(split.overflow).to_ne_bytes();
        let mut globals: Vec<(&str, &[u8])> = vec![
            (memtrack_common::LIVE_ON_DEMAND_GLOBAL, &has_on_demand),
            (memtrack_common::LIVE_MORE_GLOBAL, &has_more),
            (memtrack_common::LIVE_OVERFLOW_CAPACITY_GLOBAL, &overflow),
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
                (map_names::UNWIND_ROWS, crate::kernel_stacks::MAX_ROWS),
                (map_names::STACK_IDS, crate::kernel_stacks::MAX_STACKS),
                (
                    map_names::STACK_COUNTS,
                    crate::kernel_stacks::MAX_STACK_COUNTS,
                ),
                (
                    map_names::STACK_CACHE,
                    memtrack_common::stack_cache::STACK_CACHE_SLOTS,
                ),
            ]);
        }
        check_cgroup_room(split, max_live_blocks, stacks.is_some())?;
        // The programs need no CO-RE relocations (a test checks), so the kernel's BTF
        // is neither read nor parsed (bpf_object.rs says why not aya's EbpfLoader).
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
            e => e.into(),
        })?;
        let programs = load_uprobe_programs(&object, links, stacks.is_some(), loading)?;

        let mut syscall_link: Option<Detachable> = None;
        if count_syscalls {
            let (name, tracepoint) = SYSCALL_PROGRAM;
            let program = object
                .load_program(name, bpf_prog_type::BPF_PROG_TYPE_RAW_TRACEPOINT, None)
                .map_err(program_err(name))?;
            // The link holds the program: its descriptor can go.
            let link = bpf_object::attach_raw_tracepoint(program.as_fd(), tracepoint)
                .map_err(program_err(name))?;
            syscall_link = Some(Box::new(link));
        }

        let tracked = take_map(&mut object, map_names::TRACKED)?;
        let slot_map = take_map(&mut object, map_names::SLOTS)?;
        let stats = take_map(&mut object, map_names::STATS)?;
        let live = take_map(&mut object, map_names::LIVE)?;
        // The growth thread reads GLOBAL through a handle of its own.
        let global_for_growth = match split.later {
            0 => None,
            _ => second_handle(&object, map_names::GLOBAL)?,
        };
        let live_more = LiveMore::new(
            take_map(&mut object, map_names::LIVE_MORE)?,
            global_for_growth,
            split.later,
        );
        let live_on_demand = take_map(&mut object, map_names::LIVE_ON_DEMAND)?;
        let live_slots = object
            .map_fd(map_names::LIVE_SLOTS)
            .ok_or_else(|| no_such_map(map_names::LIVE_SLOTS))
            .and_then(|fd| {
                LiveSlots::map(fd)
                    .map_err(|e| map_err(map_names::LIVE_SLOTS)(aya::maps::MapError::IoError(e)))
            })?;
        let global = take_map(&mut object, map_names::GLOBAL)?;
        let ld_hook_stops = take_map(&mut object, map_names::LD_HOOK_STOPS)?;
        let ld_hook_misses = take_map(&mut object, map_names::LD_HOOK_MISSES)?;
        let stacks = match stacks {
            Some(s) => Some(crate::kernel_stacks::KernelStacks::new(
                &mut object,
                s.depth,
            )?),
            None => None,
        };
        Ok(Engine {
            stacks,
            object,
            tracked,
            slot_map,
            stats,
            live,
            live_more,
            live_on_demand,
            overflow_purged: 0,
            on_demand_purged: 0,
            live_slots,
            beyond_purged: 0,
            global,
            slots: Slots::new(),
            ld_hook_stops,
            ld_hook_misses,
            processes: BTreeMap::new(),
            syscall_link,
            programs,
            placement,
            sites: std::collections::HashMap::new(),
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
                objects: objects_scanned
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            other => Error::Targets(other),
        })?;
        let added = self.attach_targets(pid, &found.targets)?;
        if let Some(stacks) = &mut self.stacks {
            stacks.refresh(pid)?;
        }
        Ok(added)
    }

    /// The stacks of `pid` (None: stacks are off).
    pub(crate) fn stacks(&self, pid: u32) -> Option<crate::stacks::ProcessStacks> {
        let stats = self.read_stats(pid).ok();
        self.stacks.as_ref().map(|s| s.read(pid, stats.as_ref()))
    }

    /// How the stacks so far were found, all processes (None: stacks are off).
    pub(crate) fn stack_walks(&self) -> Option<crate::stacks::StackWalks> {
        self.stacks.as_ref().map(|s| s.walks())
    }

    /// Attaches probes for `targets`, scoped to `pid`.
    pub(crate) fn attach_targets(
        &mut self,
        pid: u32,
        targets: &[ProbeTarget],
    ) -> Result<Vec<ProbeInfo>> {
        if pid == 0 {
            return Err(Error::ProcessGone { pid });
        }
        let mut planned: Vec<(&ProbeTarget, Site)> = Vec::new();
        let mut confirmed: Vec<ProbeInfo> = Vec::new();
        for target in targets {
            let process = self.processes.get_mut(&pid);
            if process.as_ref().is_some_and(|p| {
                p.probes
                    .iter()
                    .any(|i| i.object == target.object && i.file_offset == target.file_offset)
            }) {
                continue;
            }
            // Attached already on a guess (attach_expected): now seen mapped.
            if let Some(process) = process
                && let Some(i) = process.expected.iter().position(|i| {
                    i.file_offset == target.file_offset && same_file(&i.object, &target.object)
                })
            {
                let mut info = process.expected.swap_remove(i);
                info.object = target.object.clone();
                confirmed.push(info);
                continue;
            }
            planned.push((target, self.site(target)));
        }
        let links = self.programs.attach(pid, &planned)?;
        let added: Vec<ProbeInfo> = confirmed
            .into_iter()
            .chain(
                planned
                    .into_iter()
                    .map(|(target, site)| probe_info(target, site)),
            )
            .collect();
        let process = self.processes.entry(pid).or_default();
        process.links.extend(links);
        process.probes.extend(added.iter().cloned());
        Ok(added)
    }

    /// Attaches probes for `targets`, scoped to `pid`, before the process maps their
    /// objects (`memtrack_targets::expected_targets`: the guess that a process at its
    /// exec stop will load the C library memtrack runs with). They are not reported
    /// until [`attach_targets`](Self::attach_targets) finds them mapped; one never
    /// mapped never fires. Returns how many were attached.
    pub(crate) fn attach_expected(&mut self, pid: u32, targets: &[ProbeTarget]) -> Result<usize> {
        if pid == 0 {
            return Err(Error::ProcessGone { pid });
        }
        let mut planned: Vec<(&ProbeTarget, Site)> = Vec::new();
        for target in targets {
            let known = self.processes.get(&pid).is_some_and(|p| {
                p.probes.iter().chain(&p.expected).any(|i| {
                    i.file_offset == target.file_offset && same_file(&i.object, &target.object)
                })
            });
            if !known {
                planned.push((target, self.site(target)));
            }
        }
        if planned.is_empty() {
            return Ok(0);
        }
        let links = self.programs.attach(pid, &planned)?;
        let count = planned.len();
        let process = self.processes.entry(pid).or_default();
        process.links.extend(links);
        process.expected.extend(
            planned
                .into_iter()
                .map(|(target, site)| probe_info(target, site)),
        );
        Ok(count)
    }

    /// Attaches the loader hook (ld_hook.rs) at `file_offset` of `object`, scoped to
    /// `pid`, with `cookie`. False when that site is hooked for `pid` already: a probe
    /// scoped to a process stays with it across `execve`, so a new image with the same
    /// loader keeps its hook.
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
        let site = (object.to_path_buf(), file_offset);
        if self
            .processes
            .get(&pid)
            .is_some_and(|p| p.ld_hooks.contains(&site))
        {
            return Ok(false);
        }
        let link = self
            .programs
            .hook()?
            .attach(object, file_offset, cookie, pid)?;
        self.adopt_ld_hook(pid, object, file_offset, link);
        Ok(true)
    }

    /// Records a loader hook attached with
    /// [`HookProgram::attach`](crate::uprobe_programs::HookProgram::attach) before this
    /// engine was handed over (follow.rs: the hook's registration overlaps the other programs'
    /// verification); it is closed with the process's other links.
    pub(crate) fn adopt_ld_hook(
        &mut self,
        pid: u32,
        object: &Path,
        file_offset: u64,
        link: Detachable,
    ) {
        // Misses are counted into an existing entry (BPF_NOEXIST: keep one the hook made).
        let _ = self.ld_hook_misses.insert(pid, 0, 1);
        let process = self.processes.entry(pid).or_default();
        process.links.push(link);
        process.ld_hooks.push((object.to_path_buf(), file_offset));
    }

    /// The signal the loader hook sent thread `tid` to stop it, if it did and the
    /// follower has not seen that stop yet.
    pub(crate) fn ld_hook_stop(&self, tid: u32) -> Option<u32> {
        self.ld_hook_stops.get(&tid, 0).ok()
    }

    /// Forgets the loader hook's stop of thread `tid` (seen, or the thread is gone).
    pub(crate) fn clear_ld_hook_stop(&mut self, tid: u32) {
        let _ = self.ld_hook_stops.remove(&tid);
    }

    /// Where the probes of `target` go, by the configured placement (cached).
    fn site(&mut self, target: &ProbeTarget) -> Site {
        let key = (target.object.clone(), target.file_offset);
        if let Some(site) = self.sites.get(&key) {
            return site.clone();
        }
        let site = match self.placement {
            ProbePlacement::FunctionEntry => None,
            ProbePlacement::Cheapest => memtrack_targets::entry_site(&target.object, target).ok(),
        };
        let site = match site {
            Some(s) => Site {
                entry_offset: s.offset_in_function,
                // A return probe reads the return address at rsp: it can share the
                // entry breakpoint only while nothing has been pushed yet.
                return_offset: if s.stack_adjust == 0 {
                    s.offset_in_function
                } else {
                    0
                },
                stack_adjust: s.stack_adjust as u32,
                instruction: s.instruction,
                emulated: s.emulated,
            },
            // Unreadable code, or the classic placement: the first byte.
            None => Site {
                entry_offset: 0,
                return_offset: 0,
                stack_adjust: 0,
                instruction: String::new(),
                emulated: false,
            },
        };
        self.sites.insert(key, site.clone());
        site
    }

    /// The probes attached for `pid`.
    pub(crate) fn probes_of(&self, pid: u32) -> Vec<ProbeInfo> {
        self.processes
            .get(&pid)
            .map(|p| p.probes.clone())
            .unwrap_or_default()
    }

    /// Detaches every probe of `pid` (its process exited, or tracking ends).
    pub(crate) fn detach_process(&mut self, pid: u32) {
        let Some(links) = self.processes.remove(&pid) else {
            return;
        };
        crate::detach::close_later(links.links);
    }

    /// The slot of `pid`, given one (with its counters zeroed, counting off) if it has
    /// none yet.
    fn slot(&mut self, pid: u32) -> Result<OwnedSlot> {
        if let Some(slot) = self.slots.owned.get(&pid) {
            return Ok(*slot);
        }
        let slot = self.slots.take(pid)?;
        let index = slot.index;
        // Counters first, then the owner, then the way to it: a thread that finds the
        // slot finds it zeroed and owned.
        let written = self
            .stats
            .set(index, PidStats::ZERO, 0)
            .map_err(map_err(map_names::STATS))
            .and_then(|()| {
                self.tracked
                    .set(index, slot.value, 0)
                    .map_err(map_err(map_names::TRACKED))
            })
            .and_then(|()| {
                self.slot_map
                    .insert(pid, index, 0)
                    .map_err(map_err(map_names::SLOTS))
            });
        if let Err(e) = written {
            let _ = self.tracked.set(index, ProcessSlot::default(), 0);
            self.slots.free.push(index);
            return Err(e);
        }
        self.slots.owned.insert(pid, slot);
        Ok(slot)
    }

    /// Writes the TRACKED entry of `slot` and remembers it.
    fn write_slot(&mut self, pid: u32, slot: OwnedSlot) -> Result<()> {
        self.tracked
            .set(slot.index, slot.value, 0)
            .map_err(map_err(map_names::TRACKED))?;
        self.slots.owned.insert(pid, slot);
        Ok(())
    }

    /// Sets whether (and which threads of) `pid` are counted. Allocates nothing for a
    /// process that has a slot (start and stop come here).
    pub(crate) fn set_state(&mut self, pid: u32, state: TrackState) -> Result<()> {
        let mut slot = self.slot(pid)?;
        slot.value.state = state;
        self.write_slot(pid, slot)
    }

    /// Stops probing `pid` in the kernel's eyes (it gives up its slot). Called once the
    /// process has exited: none of its calls can add a live block any more.
    pub(crate) fn forget(&mut self, pid: u32) {
        if self.stacks.is_some() {
            let stats = self.read_stats(pid).ok();
            if let Some(stacks) = &mut self.stacks {
                stacks.finish(pid, stats.as_ref());
            }
        }
        let may_have_blocks = self.may_have_live_blocks(pid, true);
        if let Some(slot) = self.slots.owned.remove(&pid) {
            // Owner first: a thread still running sees a free slot, not another's.
            let _ = self.tracked.set(slot.index, ProcessSlot::default(), 0);
            let _ = self.slot_map.remove(&pid);
            self.slots.free.push(slot.index);
        }
        let _ = self.ld_hook_misses.remove(&pid);
        if may_have_blocks {
            self.purge_live(pid, None);
        }
    }

    /// Whether the live-block maps may hold entries of `pid`, so that forgetting them
    /// needs a walk of the whole maps (every bucket: `LIVE`'s, 65,536 for a tracker of
    /// other processes, and the overflow maps' when they hold entries, 5-11 ms here for
    /// a million even when empty; a
    /// short process is forgotten at its start and at its end). No when its counters
    /// say no block is live, none was released (a release leaves its entry behind for
    /// a while, `LiveBlock::RELEASED`) and nothing was lost, and no call can add one
    /// meanwhile (its counting is off, or it is `gone`: it exited; a short process that
    /// never released a block, `/bin/true`, then costs no walk at its end).
    fn may_have_live_blocks(&self, pid: u32, gone: bool) -> bool {
        let Some(slot) = self.slots.owned.get(&pid) else {
            return false;
        };
        let counting = !gone && slot.value.state.enabled != 0;
        let Ok(stats) = self.stats.get(&slot.index, 0) else {
            return true;
        };
        counting || stats.live_blocks() != 0 || stats.free_calls != 0 || stats.lost_events != 0
    }

    /// Zeroes the counters of `pid` and forgets its live blocks (their later frees count
    /// as unmatched, like blocks allocated before tracking) and its threads' calls in
    /// progress and last releases (a new generation of its slot).
    pub(crate) fn reset_stats(&mut self, pid: u32) -> Result<()> {
        let may_have_blocks = self.may_have_live_blocks(pid, false);
        let mut slot = self.slot(pid)?;
        self.stats
            .set(slot.index, PidStats::ZERO, 0)
            .map_err(map_err(map_names::STATS))?;
        slot.value.generation = self.slots.next_generation();
        self.write_slot(pid, slot)?;
        if self.ld_hook_misses.get(&pid, 0).is_ok() {
            self.ld_hook_misses
                .insert(pid, 0, 0)
                .map_err(map_err(map_names::LD_HOOK_MISSES))?;
        }
        if may_have_blocks {
            // The blocks recorded since the new generation are kept in the slots (the
            // maps cannot tell them apart, and lose them: as before).
            self.purge_live(pid, Some(slot.value.generation));
        }
        if let Some(stacks) = &mut self.stacks {
            stacks.reset(pid);
        }
        Ok(())
    }

    /// Deletes every live-block entry of `pid`, from every map (the overflow maps only
    /// while they may hold entries), and empties its live slots but those of generation
    /// `keep` (see [`LiveSlots::purge`]).
    fn purge_live(&mut self, pid: u32, keep: Option<u32>) {
        fn of_pid(map: &HashMap<MapData, LiveKey, LiveBlock>, pid: u32) -> Vec<LiveKey> {
            map.keys()
                .filter_map(|k| k.ok())
                .filter(|k| k.tgid == pid)
                .collect()
        }
        fn purge(map: &mut HashMap<MapData, LiveKey, LiveBlock>, pid: u32) -> u64 {
            let mut deleted = 0;
            for key in of_pid(map, pid) {
                if map.remove(&key).is_ok() {
                    deleted += 1;
                }
            }
            deleted
        }
        purge(&mut self.live, pid);
        let slots = self.live_slots.purge(pid, keep);
        if !self.overflow_in_use() {
            self.give_back(slots);
            return;
        }
        let on_demand = purge(&mut self.live_on_demand, pid);
        let more = self
            .live_more
            .map
            .as_mut()
            .map_or(0, |more| purge(more, pid));
        // After the deletions, so that the programs' counts less these are never below
        // what the maps hold (memtrack-ebpf's live_maps.rs).
        count_purged(
            &mut self.global,
            &mut self.on_demand_purged,
            global::LIVE_ON_DEMAND_PURGED,
            on_demand,
        );
        count_purged(
            &mut self.global,
            &mut self.overflow_purged,
            global::LIVE_OVERFLOW_PURGED,
            on_demand + more,
        );
        self.give_back(slots + on_demand + more);
    }

    /// Gives `units` of the capacity beyond `LIVE`'s back to the programs (after the
    /// deletions that freed them: their count less these is never below what the slots
    /// and overflow maps hold).
    fn give_back(&mut self, units: u64) {
        count_purged(
            &mut self.global,
            &mut self.beyond_purged,
            global::LIVE_BEYOND_PURGED,
            units,
        );
    }

    /// The preallocated live-block entries reserved after load (live_growth.rs).
    pub(crate) fn live_more(&mut self) -> &mut LiveMore {
        &mut self.live_more
    }

    /// The live blocks of the tracked processes now, summed over at most
    /// [`MAX_PROCESSES_SUMMED`](crate::live_growth::MAX_PROCESSES_SUMMED) of them: the
    /// next ones after those the last call read, so that every process is read in turn
    /// when there are more (each read copies the process's 2 KB of counters).
    pub(crate) fn live_blocks_now(&mut self) -> u64 {
        let processes = self.slots.owned.len();
        if processes == 0 {
            return 0;
        }
        let read = processes.min(crate::live_growth::MAX_PROCESSES_SUMMED);
        let start = self.live_more.sum_cursor % processes;
        self.live_more.sum_cursor = start + read;
        self.slots
            .owned
            .values()
            .cycle()
            .skip(start)
            .take(read)
            .filter_map(|slot| self.stats.get(&slot.index, 0).ok())
            .map(|s| s.live_blocks())
            .sum()
    }

    /// What became of the preallocated live-block entries reserved after load.
    pub(crate) fn later_live_blocks(&self) -> LaterLiveBlocks {
        self.live_more.status()
    }

    /// Whether the overflow maps may hold entries: the programs counted entries that
    /// this side did not delete.
    fn overflow_in_use(&self) -> bool {
        match self.global.get(&global::LIVE_OVERFLOW_COUNT, 0) {
            Ok(count) => count.wrapping_sub(self.overflow_purged) != 0,
            Err(_) => true,
        }
    }

    /// The raw counters of `pid` (zero for a process without a slot); loader hook hits
    /// that did not stop the process (see ld_hook.rs) are among its lost events.
    pub(crate) fn read_stats(&self, pid: u32) -> Result<PidStats> {
        let mut stats = match self.slots.owned.get(&pid) {
            Some(slot) => self
                .stats
                .get(&slot.index, 0)
                .map_err(map_err(map_names::STATS))?,
            None => PidStats::ZERO,
        };
        stats.lost_events += self.ld_hook_misses(pid)?;
        Ok(stats)
    }

    /// Loader hook hits in `pid` that did not stop it.
    fn ld_hook_misses(&self, pid: u32) -> Result<u64> {
        match self.ld_hook_misses.get(&pid, 0) {
            Ok(misses) => Ok(misses),
            Err(aya::maps::MapError::KeyNotFound) => Ok(0),
            Err(source) => Err(map_err(map_names::LD_HOOK_MISSES)(source)),
        }
    }

    /// Events that could not be attributed to any tracked process (a tracked process
    /// with no counters, a thread whose state could not be created) or to a stack (a
    /// full stack counts map).
    /// `GLOBAL` also holds the last stack id handed out, which counts stacks, not
    /// losses: it is left out.
    pub(crate) fn unattributed_losses(&self) -> u64 {
        [
            global::MISSING_STATS,
            global::THREAD_STATE_FAILED,
            global::STACK_COUNTS_FULL,
        ]
        .iter()
        .filter_map(|i| self.global.get(i, 0).ok())
        .sum()
    }
}

impl Engine {
    /// Stops counting everywhere and takes every link out, for closing.
    fn take_all_links(&mut self) -> Vec<Detachable> {
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for pid in pids {
            if let Some(mut slot) = self.slots.owned.get(&pid).copied() {
                slot.value.state = TrackState::default();
                let _ = self.write_slot(pid, slot);
            }
        }
        std::mem::take(&mut self.processes)
            .into_values()
            .flat_map(|p| p.links)
            .chain(self.syscall_link.take())
            .collect()
    }

    /// Detaches every probe and waits until the kernel is done (see `detach`).
    pub(crate) fn detach_all_now(&mut self) {
        let links = self.take_all_links();
        crate::detach::close_now(links);
    }

    /// Detaches everything on the calling thread, starting no thread
    /// ([`crate::detach::close_here`]).
    pub(crate) fn detach_all_here(&mut self) {
        let links = self.take_all_links();
        crate::detach::close_here(links);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let links = self.take_all_links();
        crate::detach::close_later(links);
    }
}

/// Adds `n` to `purged`, this side's count of what it deleted or gave back, and writes
/// the new count into `GLOBAL` slot `slot` (the programs read it there), unless `n` is
/// 0.
fn count_purged(global: &mut Array<MapData, u64>, purged: &mut u64, slot: u32, n: u64) {
    if n != 0 {
        *purged += n;
        let _ = global.set(slot, *purged, 0);
    }
}

/// Whether two paths name one file: the same path, or the same device and inode (a
/// library reached by two paths, e.g. through a bind mount, has one set of uprobes:
/// probing it twice would count every call twice).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    a == b
        || matches!((std::fs::metadata(a), std::fs::metadata(b)),
            (Ok(x), Ok(y)) if x.dev() == y.dev() && x.ino() == y.ino())
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

    use super::{EBPF_OBJECT, SYSCALL_PROGRAM};
    use crate::uprobe_programs::UPROBE_PROGRAMS;

    fn parsed() -> aya_obj::Object {
        aya_obj::Object::parse(EBPF_OBJECT).expect("parsing the shipped ebpf/memtrack-ebpf.o")
    }

    /// The documented maximum is the kernel's: one block more is refused by the kernel
    /// itself (E2BIG, before it reserves any memory), and said in words. (The maximum
    /// itself was measured to load here, 11 GiB in 18 s: too much for a test.)
    #[test]
    fn the_kernel_makes_no_live_map_beyond_the_maximum() {
        if !crate::can_track() {
            assert!(
                std::env::var_os("MEMTRACK_REQUIRE_PRIVILEGED").is_none_or(|v| v != "1"),
                "the_kernel_makes_no_live_map_beyond_the_maximum needs root"
            );
            eprintln!("SKIPPED the_kernel_makes_no_live_map_beyond_the_maximum: needs root");
            return;
        }
        let blocks = crate::MAX_LIVE_BLOCKS + 1;
        // All preallocated: the preallocated map is the one that reaches the limit
        // (split, each map is below it).
        let loaded = super::Engine::load(
            blocks,
            blocks,
            super::ProbePlacement::default(),
            super::UprobeLinks::default(),
            false,
            None,
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
    fn stacks_put_the_unwind_program_into_its_slot_and_only_then() {
        let name = "stacks_put_the_unwind_program_into_its_slot_and_only_then";
        if !crate::can_track() {
            assert!(
                std::env::var_os("MEMTRACK_REQUIRE_PRIVILEGED").is_none_or(|v| v != "1"),
                "{name} needs root"
            );
            eprintln!("SKIPPED {name}: needs root");
            return;
        }
        for links in [super::UprobeLinks::Auto, super::UprobeLinks::PerfEvent] {
            let on = super::StackSettings {
                depth: 64,
                cache: true,
            };
            for stacks in [Some(on), None] {
                let case = format!("{links:?}, stacks {stacks:?}");
                let engine = super::Engine::load(
                    1024,
                    1024,
                    super::ProbePlacement::default(),
                    links,
                    false,
                    stacks,
                    super::Loading::Here,
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
                for (name, slot) in crate::unwind_chain::CHAIN {
                    let case = format!("{case}, {name}");
                    let installed = crate::unwind_chain::installed_id(&engine.object, slot)
                        .unwrap_or_else(|e| panic!("{case}: reading the slot: {e}"));
                    let loaded = engine.programs.get(name).is_ok();
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
                        engine.programs.mode,
                        crate::uprobe_programs::UprobeMode::Perf,
                        "{case}"
                    );
                } else if !crate::uprobe_multi::forced_off() {
                    assert_eq!(
                        engine.programs.mode,
                        crate::uprobe_programs::UprobeMode::Multi,
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
        for (name, _) in crate::unwind_chain::CHAIN {
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
