//! The uprobe programs and their links: which programs are loaded, for which kind of
//! link (uprobe_multi where the kernel has it, else perf-event), verified side by side
//! or on the calling thread; where each function's probes go, with which cookie; and
//! what the results record of each probed function.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    path::Path,
};

use aya_obj::generated::{bpf_attach_type, bpf_prog_type};
use memtrack_common::program_names;
use memtrack_targets::ProbeTarget;
use serde::{Deserialize, Serialize};

use crate::{
    ProbeInfo,
    engine::{
        detach::Detachable,
        object::{Object, ProgramError},
    },
    error::{Error, Result},
};

/// The uprobe programs: the one entry program every probed function shares (it reads
/// the arguments by the cookie's argument kind), the one return program every
/// allocating function shares, and the loader hook (ld_hook.rs).
pub(crate) const UPROBE_PROGRAMS: [&str; 3] = [
    program_names::ENTRY,
    program_names::RETURN,
    program_names::LD_HOOK,
];

/// Where entry probes go inside each function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbePlacement {
    /// On the first instruction the kernel emulates instead of single-stepping, as long
    /// as no earlier instruction changes an argument register the probe reads (see
    /// `memtrack_targets::probe_site`); return probes share that breakpoint when the
    /// stack is still untouched there. Same counts, a fraction of the cost.
    #[default]
    Cheapest,
    /// At each function's first byte (the classic placement; for comparison).
    FunctionEntry,
}

/// Which kind of kernel link attaches the uprobes. Counts are the same either way; the
/// difference is the cost of detaching (see `uprobe_multi.rs` and BENCHMARKS.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UprobeLinks {
    /// uprobe_multi links (one per probed file, program and process) where the kernel
    /// has them (Linux 6.6+), else perf-event links. `MEMTRACK_UPROBE_LINKS=perf` in the
    /// environment makes it `PerfEvent`.
    #[default]
    Auto,
    /// One perf-event link per probe site, as on kernels before 6.6: detaching waits
    /// for a grace period per site, serialised in the kernel (BENCHMARKS.md).
    PerfEvent,
}

/// Which kind of link the uprobe programs were loaded for (a program loaded for
/// uprobe_multi links cannot make perf-event links, nor the other way round).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UprobeMode {
    /// uprobe_multi.rs links.
    Multi,
    /// perf_uprobe.rs links.
    Perf,
}

/// The loaded uprobe programs (the unwind program among them with stacks on), by name.
pub(crate) struct UprobePrograms {
    /// The kind of link they were loaded for.
    pub(crate) mode: UprobeMode,
    /// The programs' descriptors, by name.
    fds: std::collections::HashMap<&'static str, OwnedFd>,
}

impl UprobePrograms {
    /// Attaches the planned probes, scoped to `pid`, with links of this mode's kind.
    pub(crate) fn attach(
        &self,
        pid: u32,
        planned: &[(&ProbeTarget, Site)],
    ) -> Result<Vec<Detachable>> {
        match self.mode {
            UprobeMode::Multi => attach_multi(self, pid, planned),
            UprobeMode::Perf => attach_perf(self, pid, planned),
        }
    }

    /// The loader hook's program, borrowed.
    pub(crate) fn hook(&self) -> Result<HookProgram<BorrowedFd<'_>>> {
        Ok(HookProgram {
            fd: self.get(program_names::LD_HOOK)?,
            mode: self.mode,
        })
    }

    /// The loaded program `name`.
    pub(crate) fn get(&self, name: &'static str) -> Result<BorrowedFd<'_>> {
        self.fds
            .get(name)
            .map(|fd| fd.as_fd())
            .ok_or_else(|| missing_program(name))
    }
}

/// How [`Engine::load`](crate::engine::Engine::load) works: on the calling thread
/// alone, or with threads of its own.
pub(crate) enum Loading<'a> {
    /// On the calling thread alone: for a tracker of the calling process, which must not
    /// start threads that allocate in the process it measures. Each new thread may get
    /// a malloc arena of its own, and what it leaves there shows in the program's later
    /// calls (measured: a benchmark's thread, given such an arena, had glibc free two
    /// more chunks it had stashed in its cache at its exit, counted as unmatched frees).
    Here,
    /// The largest maps created and the programs verified on threads of their own, side
    /// by side; `on_hook` gets the loader hook's program the moment it is verified
    /// ([`HookProgram`]). For trackers of other processes.
    Parallel {
        on_hook: &'a (dyn Fn(HookProgram) + Sync),
    },
}

/// The loader hook's program (ld_hook.rs), as
/// [`Engine::load`](crate::engine::Engine::load) hands it out the moment it is
/// verified, before the other programs are: its link can be made while they are still
/// being verified.
pub(crate) struct HookProgram<F: AsFd = OwnedFd> {
    fd: F,
    mode: UprobeMode,
}

impl<F: AsFd> HookProgram<F> {
    /// Attaches the hook at `file_offset` of `object` (the loader's
    /// `_dl_debug_state`), scoped to `pid`, with the hook's `cookie`.
    pub(crate) fn attach(
        &self,
        object: &Path,
        file_offset: u64,
        cookie: u64,
        pid: u32,
    ) -> Result<Detachable> {
        let program = program_names::LD_HOOK;
        let fd = self.fd.as_fd();
        let gone_or = |source| attach_error(program, object, vec![file_offset], pid, source);
        Ok(match self.mode {
            UprobeMode::Multi => Box::new(
                crate::engine::uprobe_multi::attach(
                    fd,
                    object,
                    &[file_offset],
                    &[cookie],
                    pid,
                    false,
                )
                .map_err(gone_or)?,
            ),
            UprobeMode::Perf => Box::new(
                crate::engine::perf_uprobe::attach(fd, object, file_offset, pid, false, cookie)
                    .map_err(gone_or)?,
            ),
        })
    }
}

/// Where one function's probes go.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// Offset of the entry probe from the function's first byte, in bytes.
    pub(crate) entry_offset: u64,
    /// Offset of the return probe's breakpoint from the function's first byte.
    pub(crate) return_offset: u64,
    /// Bytes `rsp` moved before the entry probe's instruction (0 at the first byte).
    pub(crate) stack_adjust: u32,
    /// The entry probe's instruction (AT&T syntax; empty if unknown).
    pub(crate) instruction: String,
    /// Whether the kernel emulates it.
    pub(crate) emulated: bool,
}

/// The error of program `program`, which failed to load.
pub(crate) fn program_err<E: Into<ProgramError>>(program: &'static str) -> impl FnOnce(E) -> Error {
    move |source| Error::Program {
        program,
        source: source.into(),
    }
}

/// The error of program `name`, which is not loaded.
pub(crate) fn missing_program(name: &'static str) -> Error {
    Error::Program {
        program: name,
        source: ProgramError::NotLoaded,
    }
}

/// Loads the uprobe programs for uprobe_multi links where the kernel has them, else for
/// perf-event links; with `stacks`, also the unwind program, the same way (a tail call
/// needs the entry program's type and expected attach type), and puts it into the entry
/// program's program array. Stacks fail to load as a whole if it cannot be loaded.
pub(crate) fn load_uprobe_programs(
    object: &Object,
    links: UprobeLinks,
    stacks: bool,
    loading: Loading<'_>,
) -> Result<UprobePrograms> {
    let mut names: Vec<&'static str> = UPROBE_PROGRAMS.to_vec();
    if stacks {
        names.extend(crate::engine::unwind_chain::CHAIN.map(|(name, _)| name));
    }
    // Asked before any of the object's programs is loaded: the first program loaded
    // that uses UNWIND_PROGS fixes the array's expected attach type (uprobe_multi.rs).
    let mode = if links == UprobeLinks::Auto
        && !crate::engine::uprobe_multi::forced_off()
        && crate::engine::uprobe_multi::supported()
    {
        UprobeMode::Multi
    } else {
        UprobeMode::Perf
    };
    let attach_type = match mode {
        UprobeMode::Multi => Some(bpf_attach_type::BPF_TRACE_UPROBE_MULTI),
        UprobeMode::Perf => None,
    };
    let load = |name: &'static str| {
        object.load_program(name, bpf_prog_type::BPF_PROG_TYPE_KPROBE, attach_type)
    };
    let loaded: Vec<(&'static str, Result<OwnedFd, ProgramError>)> = match loading {
        Loading::Here => names.into_iter().map(|name| (name, load(name))).collect(),
        Loading::Parallel { on_hook } => {
            // Each program is verified on its own thread: the verifier's time is most of
            // the loading, and the programs do not depend on each other (with stacks,
            // the unwind program's 271k verified instructions then no longer wait for
            // the entry program's).
            let load = |name: &'static str| -> Result<OwnedFd, ProgramError> {
                let fd = load(name)?;
                if name == program_names::LD_HOOK {
                    on_hook(HookProgram {
                        fd: fd.try_clone()?,
                        mode,
                    });
                }
                Ok(fd)
            };
            std::thread::scope(|scope| {
                // The loader hook's program is verified here, after the others' threads
                // are started: on two CPUs a thread spawned after two busy ones waited
                // for one.
                let (here, elsewhere): (Vec<_>, Vec<_>) = names
                    .into_iter()
                    .partition(|&n| n == program_names::LD_HOOK);
                let threads: Vec<_> = elsewhere
                    .into_iter()
                    .map(|name| {
                        let thread = std::thread::Builder::new()
                            .name("memtrack-verify".into())
                            .spawn_scoped(scope, move || load(name));
                        (name, thread)
                    })
                    .collect();
                let mut loaded: Vec<_> = here.into_iter().map(|name| (name, load(name))).collect();
                loaded.extend(threads.into_iter().map(|(name, thread)| {
                    let result = match thread {
                        Ok(thread) => thread.join().unwrap_or(Err(ProgramError::ThreadPanicked)),
                        // No thread: load it here.
                        Err(_) => load(name),
                    };
                    (name, result)
                }));
                loaded
            })
        }
    };
    let mut fds = std::collections::HashMap::new();
    for (name, fd) in loaded {
        fds.insert(name, fd.map_err(program_err(name))?);
    }
    let programs = UprobePrograms { mode, fds };
    if stacks {
        for (name, slot) in crate::engine::unwind_chain::CHAIN {
            crate::engine::unwind_chain::install(object, name, slot, programs.get(name)?)?;
        }
    }
    Ok(programs)
}

/// The cookie every probe of `target` carries: which function, and how far the stack
/// pointer moved before the entry probe's instruction.
fn cookie_of(target: &ProbeTarget, site: &Site) -> u64 {
    memtrack_common::cookie::make(
        target.function as u32,
        target.function.kind(),
        site.stack_adjust,
    )
}

/// The sites of one uprobe_multi link: file offsets and their cookies.
type MultiSites = (Vec<u64>, Vec<u64>);

/// One uprobe_multi link per (object, program): every site of the plan that uses it.
fn attach_multi(
    programs: &UprobePrograms,
    pid: u32,
    planned: &[(&ProbeTarget, Site)],
) -> Result<Vec<Detachable>> {
    let mut groups: BTreeMap<(&Path, &'static str), MultiSites> = BTreeMap::new();
    for (target, site) in planned {
        let cookie = cookie_of(target, site);
        let entry = groups
            .entry((&target.object, program_names::ENTRY))
            .or_default();
        entry.0.push(target.file_offset + site.entry_offset);
        entry.1.push(cookie);
        if target.function.has_return_probe() {
            let ret = groups
                .entry((&target.object, program_names::RETURN))
                .or_default();
            ret.0.push(target.file_offset + site.return_offset);
            ret.1.push(cookie);
        }
    }
    let mut links: Vec<Detachable> = Vec::with_capacity(groups.len());
    for ((object, program), (offsets, cookies)) in groups {
        let link = crate::engine::uprobe_multi::attach(
            programs.get(program)?,
            object,
            &offsets,
            &cookies,
            pid,
            program == program_names::RETURN,
        )
        .map_err(|source| attach_error(program, object, offsets.clone(), pid, source))?;
        links.push(Box::new(link));
    }
    Ok(links)
}

/// Why attaching `program` at `offsets` of `path` in process `pid` failed: the process
/// is gone (the kernel says ESRCH), or the attach error itself.
pub(crate) fn attach_error(
    program: &'static str,
    path: &Path,
    offsets: Vec<u64>,
    pid: u32,
    source: std::io::Error,
) -> Error {
    if source.raw_os_error() == Some(libc::ESRCH) {
        return Error::ProcessGone { pid };
    }
    Error::Attach {
        program,
        path: path.to_path_buf(),
        offsets,
        pid,
        source,
    }
}

/// One perf-event link per site (kernels without uprobe_multi).
fn attach_perf(
    programs: &UprobePrograms,
    pid: u32,
    planned: &[(&ProbeTarget, Site)],
) -> Result<Vec<Detachable>> {
    let mut links: Vec<Detachable> = Vec::new();
    for (target, site) in planned {
        let cookie = cookie_of(target, site);
        let mut sites = vec![(program_names::ENTRY, site.entry_offset)];
        if target.function.has_return_probe() {
            sites.push((program_names::RETURN, site.return_offset));
        }
        for (program, offset) in sites {
            let offset = target.file_offset + offset;
            let link = crate::engine::perf_uprobe::attach(
                programs.get(program)?,
                &target.object,
                offset,
                pid,
                program == program_names::RETURN,
                cookie,
            )
            .map_err(|source| attach_error(program, &target.object, vec![offset], pid, source))?;
            links.push(Box::new(link));
        }
    }
    Ok(links)
}

/// What the results record of one probed function.
pub(crate) fn probe_info(target: &ProbeTarget, site: Site) -> ProbeInfo {
    let return_probe = target.function.has_return_probe();
    ProbeInfo {
        function: target.function.name().to_string(),
        aliases: target
            .aliases
            .iter()
            .map(|a| a.name().to_string())
            .collect(),
        object: target.object.clone(),
        symbol: target.symbol.clone(),
        file_offset: target.file_offset,
        entry_offset: site.entry_offset,
        entry_instruction: site.instruction,
        entry_emulated: site.emulated,
        return_probe,
        return_offset: if return_probe { site.return_offset } else { 0 },
    }
}
