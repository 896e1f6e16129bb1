//! [`TrackerBuilder`]: the settings both kinds of tracker share (the kernel side: map
//! size, probe placement, link kind, syscall counting, stacks), checked before anything
//! starts, which build a [`Tracker`] or, for other processes, a [`ProcessTracker`].

use std::sync::Arc;

use memtrack_common::{DEFAULT_MAX_LIVE_BLOCKS, DEFAULT_PREALLOCATED_LIVE_BLOCKS};

use crate::{
    CommandSpec, ProcessTracker, Scope, Tracker,
    engine::{
        Engine, EngineSettings, Loading, ProbePlacement, StackSettings, UprobeLinks,
        live::sizing::MAX_LIVE_BLOCKS,
    },
    error::{Error, Result},
    follow::{Follower, Root, ld_hook},
    shared::Shared,
};

/// Configures a [`Tracker`] or a [`ProcessTracker`]. Start with [`Tracker::builder`].
#[derive(Clone, Debug)]
pub struct TrackerBuilder {
    max_live_blocks: u32,
    preallocated_live_blocks: u32,
    start_enabled: Option<bool>,
    placement: ProbePlacement,
    links: UprobeLinks,
    count_syscalls: bool,
    stacks: Option<u32>,
    stack_cache: bool,
    timeline: bool,
    rss: bool,
}

impl Default for TrackerBuilder {
    fn default() -> Self {
        TrackerBuilder {
            max_live_blocks: DEFAULT_MAX_LIVE_BLOCKS,
            preallocated_live_blocks: DEFAULT_PREALLOCATED_LIVE_BLOCKS,
            start_enabled: None,
            placement: ProbePlacement::default(),
            links: UprobeLinks::default(),
            count_syscalls: true,
            stacks: None,
            stack_cache: true,
            timeline: true,
            rss: true,
        }
    }
}

impl TrackerBuilder {
    /// How many blocks can be live at once in the kernel's live-block maps, shared by all
    /// tracked processes: 1 to [`MAX_LIVE_BLOCKS`] blocks (default
    /// [`DEFAULT_MAX_LIVE_BLOCKS`]). The first
    /// [`preallocated_live_blocks`](Self::preallocated_live_blocks) of them have
    /// preallocated entries; the others' entries are allocated as blocks go live, their
    /// hash buckets (16 bytes a block) reserved at load ([`live_map_bytes`](crate::live_map_bytes)
    /// says how much). More live blocks than this are counted in `lost_events`, never
    /// silent. A capacity out of range makes building the tracker fail with
    /// [`Error::MaxLiveBlocks`].
    pub fn max_live_blocks(mut self, blocks: u32) -> Self {
        self.max_live_blocks = blocks;
        self
    }

    /// How many of the [`max_live_blocks`](Self::max_live_blocks) have their kernel
    /// entries preallocated, in blocks (default
    /// [`DEFAULT_PREALLOCATED_LIVE_BLOCKS`]; at
    /// least 1; more than `max_live_blocks` counts as all of them). Preallocated entries
    /// are reserved and zeroed when they are made, 80 bytes per block and 16 per hash
    /// bucket (what that takes: BENCHMARKS.md), and are the cheapest per allocator call;
    /// the blocks live beyond them get entries the kernel allocates on demand, which
    /// cost more per allocation and release of such a block (BENCHMARKS.md), and no
    /// memory until used. A [`Tracker`] of the calling process reserves them all when it
    /// loads. A [`ProcessTracker`] reserves the first
    /// [`LIVE_BLOCKS_AT_LOAD`](crate::LIVE_BLOCKS_AT_LOAD) when it loads and the others
    /// on a thread of its own once its processes keep
    /// [`GROW_AT_LIVE_BLOCKS`](crate::GROW_AT_LIVE_BLOCKS) blocks live
    /// (blocks that go live before they are ready get entries allocated on demand,
    /// counted exactly all the same; [`ProcessTracker::later_live_blocks`] says what
    /// became of them): a short command pays for none of them. 0 makes building the
    /// tracker fail with [`Error::PreallocatedLiveBlocks`].
    pub fn preallocated_live_blocks(mut self, blocks: u32) -> Self {
        self.preallocated_live_blocks = blocks;
        self
    }

    /// For [`spawn`](Self::spawn) and [`attach_pid`](Self::attach_pid): whether counting
    /// is on from the start (default) or waits for [`ProcessTracker::start`]. A
    /// [`Tracker`] of the calling process always waits for [`Tracker::start`] (counting
    /// from its construction would count the caller's own setup): with this set,
    /// [`build`](Self::build) fails with [`Error::Usage`] rather than ignore it.
    pub fn start_enabled(mut self, enabled: bool) -> Self {
        self.start_enabled = Some(enabled);
        self
    }

    /// Where entry probes go (default: the cheapest exact site of each function).
    pub fn probe_placement(mut self, placement: ProbePlacement) -> Self {
        self.placement = placement;
        self
    }

    /// Which kind of kernel link attaches the uprobes (default: the cheapest to detach
    /// that the kernel has).
    pub fn uprobe_links(mut self, links: UprobeLinks) -> Self {
        self.links = links;
        self
    }

    /// Whether `mmap`, `munmap` and `brk` are counted (default: yes). Counting them
    /// puts a raw tracepoint on every syscall's exit, on the whole machine, for as long
    /// as the tracker exists: a little more per system call for every process
    /// (BENCHMARKS.md measures it). With `false` nothing is attached there and
    /// [`Stats::syscalls`](crate::Stats::syscalls) is `None`; the heap numbers are the
    /// same.
    pub fn count_syscalls(mut self, count: bool) -> Self {
        self.count_syscalls = count;
        self
    }

    /// Records the call stack of every counted allocation, unwound in the kernel from
    /// the objects' `.eh_frame`, at most `depth` frames (1 to
    /// [`stacks::MAX_DEPTH`](crate::stacks::MAX_DEPTH): another depth makes building
    /// the tracker fail with [`Error::StackDepth`]; a deeper stack is cut there and
    /// marked truncated; `memtrack run --stacks` uses the most), with per-stack
    /// counters read by
    /// [`Tracker::stacks`] and [`ProcessTracker::stacks`]. Off by default. With stacks
    /// on the tracker reserves about 16 MiB for unwind rows and 8.5 MiB for distinct
    /// stacks (each live block's stack id is kept in its live-block entry).
    pub fn stacks(mut self, depth: u32) -> Self {
        self.stacks = Some(depth);
        self
    }

    /// With [`stacks`](Self::stacks): whether an allocation whose stack still holds
    /// every word an earlier walk from the same registers read reuses that walk's stack
    /// instead of walking again (exact either way: docs/ARCHITECTURE.md, "Call stacks").
    /// On by default; off, every stack is walked, which only measuring the walk itself
    /// needs. [`Tracker::stack_walks`] counts both kinds.
    pub fn stack_cache(mut self, enabled: bool) -> Self {
        self.stack_cache = enabled;
        self
    }

    /// Whether each process's memory over time is kept (default: yes): its
    /// [`Timeline`](crate::record::timeline::Timeline), in
    /// [`TrackedProcess::timeline`](crate::TrackedProcess::timeline) and
    /// [`Tracker::timeline`]. Each allocation and release then reads the clock, and the
    /// bucket it falls in is updated (BENCHMARKS.md measures what that costs a
    /// malloc+free pair). Off, the verifier prunes it all.
    pub fn timeline(mut self, keep: bool) -> Self {
        self.timeline = keep;
        self
    }

    /// With [`timeline`](Self::timeline): whether it has the tracked processes' resident
    /// memory (default: yes), from the kernel's `kmem:rss_stat` tracepoint, attached for
    /// as long as the tracker exists. Its program runs at every change of any process's
    /// resident memory on the machine (a page faulted in or out, on any CPU), and
    /// returns at once for a process that is not tracked (BENCHMARKS.md measures what
    /// that costs the rest of the machine). Off, nothing is attached there and the
    /// buckets carry no RSS.
    pub fn rss(mut self, keep: bool) -> Self {
        self.rss = keep;
        self
    }

    /// The settings' range checks, and whether this process and kernel can track at
    /// all: what fails before anything is started.
    fn check(&self) -> Result<()> {
        if !(1..=MAX_LIVE_BLOCKS).contains(&self.max_live_blocks) {
            return Err(Error::MaxLiveBlocks {
                requested: self.max_live_blocks,
                max: MAX_LIVE_BLOCKS,
            });
        }
        if self.preallocated_live_blocks == 0 {
            return Err(Error::PreallocatedLiveBlocks {
                max: MAX_LIVE_BLOCKS,
            });
        }
        if let Some(depth) = self.stacks
            && !crate::stacks::is_depth(depth)
        {
            return Err(Error::StackDepth {
                requested: depth,
                max: crate::stacks::MAX_DEPTH,
            });
        }
        crate::privileges::check()?;
        crate::privileges::check_kernel()
    }

    /// What the engine is loaded with (checked by [`check`](Self::check)).
    fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            max_live_blocks: self.max_live_blocks,
            preallocated_live_blocks: self.preallocated_live_blocks,
            placement: self.placement,
            links: self.links,
            count_syscalls: self.count_syscalls,
            stacks: self.stacks.map(|depth| StackSettings {
                depth,
                cache: self.stack_cache,
            }),
            timeline: self.timeline,
            rss: self.rss,
        }
    }

    /// Loads the eBPF programs with these settings, on the calling thread or with
    /// threads of its own (`loading`). The caller has [`check`](Self::check)ed them.
    fn shared(&self, enabled: bool, loading: Loading<'_>) -> Result<Arc<Shared>> {
        let engine = Engine::load(self.engine_settings(), loading)?;
        Ok(Arc::new(Shared::new(engine, self.count_syscalls, enabled)))
    }

    /// A tracker of the calling process: all its threads ([`Scope::Process`], what
    /// [`Tracker::new`] builds), or only the thread that calls [`Tracker::start`]
    /// ([`Scope::Thread`]). Counting is off until [`Tracker::start`].
    pub fn build(self, scope: Scope) -> Result<Tracker> {
        if self.start_enabled.is_some() {
            return Err(Error::Usage(
                "start_enabled applies to spawn and attach_pid; a Tracker of the calling \
                 process counts from Tracker::start",
            ));
        }
        self.check()?;
        Tracker::attach_self(self.shared(false, Loading::Here)?, scope)
    }

    /// Starts `command` held stopped before its exec, probes it, and lets it run; every
    /// process it starts is followed and tracked with its own counters. Counting starts
    /// at the command's first instruction unless [`start_enabled(false)`](Self::start_enabled).
    pub fn spawn(self, command: impl Into<CommandSpec>) -> Result<ProcessTracker> {
        ld_hook::prefetch();
        self.check()?;
        let _ = std::thread::Builder::new()
            .name("memtrack-libc".into())
            .spawn(memtrack_targets::prefetch_expected_targets);
        // The command's fork and exec overlap the loading (the kernel holds it at its
        // exec stop until the probes are in place); a failed load kills it there.
        let starting = Follower::begin(Root::Spawn(command.into()))?;
        let on_hook = starting.hook_handoff();
        let enabled = self.start_enabled.unwrap_or(true);
        let shared = self.shared(enabled, Loading::Parallel { on_hook: &on_hook })?;
        crate::follow::hold::load_gate();
        ProcessTracker::follow(shared, starting)
    }

    /// Tracks a running process and every process it starts from now on. Calls made
    /// before the probes are attached are not counted (frees of those blocks show as
    /// `unmatched_frees`). Needs CAP_SYS_PTRACE over the process (root, or the same user
    /// with a permissive `kernel.yama.ptrace_scope`). If `pid` is a child of the calling
    /// process, the tracker reaps it when it exits: take its exit status from
    /// [`ProcessTracker::wait`], not from your own `wait`. The calling process itself is
    /// refused ([`Error::Usage`]): a process cannot trace itself; use [`Tracker::new`].
    pub fn attach_pid(self, pid: u32) -> Result<ProcessTracker> {
        if pid == std::process::id() {
            return Err(Error::Usage(
                "attach_pid cannot track the calling process; use Tracker::new",
            ));
        }
        ld_hook::prefetch();
        self.check()?;
        let enabled = self.start_enabled.unwrap_or(true);
        let shared = self.shared(enabled, Loading::Parallel { on_hook: &|_| {} })?;
        ProcessTracker::follow(shared, Follower::begin(Root::Attach(pid))?)
    }
}
