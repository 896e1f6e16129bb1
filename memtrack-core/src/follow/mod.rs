//! Follows a process tree with ptrace so every process in it is probed from its first
//! instruction, without taxing unrelated processes.
//!
//! Why ptrace: uprobes scoped to one process (`perf_event_open` with a pid) fire only in
//! that process, which keeps unrelated programs at native speed, but they do not follow
//! `fork`, and inherited uprobe perf events made every `fork` fail here
//! (docs/ebpf-toolchain.md). With `PTRACE_O_TRACEFORK|VFORK|CLONE|EXEC` the kernel
//! stops each new process before it runs and each image right after `execve`; the
//! follower attaches that process's probes, then lets it go. ptrace stops happen only at
//! those events, never per allocation. The cost: a tracked process cannot also be run
//! under a debugger.
//!
//! After an `execve` the new image's libraries are not mapped yet (the dynamic loader
//! maps them in user space), and `dlopen` maps more later. The follower hooks the
//! loader (ld_hook.rs) so that each process stops after the loader mapped objects and
//! before their initializers run (at startup and in every `dlopen`): it then probes
//! whatever allocators are newly mapped and lets the process go on. So an allocator is
//! probed before its first call. Where no hook can be set (an unknown loader), it
//! steps the process syscall by syscall until an allocator is mapped instead.
//!
//! All ptrace requests come from one thread (the kernel ties tracees to the tracing
//! thread); it waits with `__WNOTHREAD` so it never reaps other threads' children. A
//! "sentinel" child blocked on a pipe lets another thread wake it for shutdown.

pub(crate) mod hold;
pub(crate) mod ld_hook;
pub(crate) mod registry;
pub(crate) mod spawn;

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, OwnedFd},
    sync::{Arc, mpsc},
    thread::JoinHandle,
};

use memtrack_common::TrackState;
use nix::{
    errno::Errno,
    sys::{
        ptrace::{self, Event, Options},
        signal::{Signal, kill},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::{ForkResult, Pid, fork, pipe2},
};

use self::{
    hold::{Hold, Holds},
    ld_hook::LdHooks,
    registry::{ProcessRecord, monotonic_ns},
    spawn::CommandSpec,
};
use crate::{
    AllocatorStatus, ImageStats,
    engine::HookProgram,
    error::{Error, FollowerEnd, Result, SpawnFailure},
    record::timeline::EventKind,
    shared::Shared,
};

/// Syscall-stops to wait, after an exec, for an allocator to be mapped before giving up
/// (a static binary without symbols, or a program with its own allocator).
const MAX_SYSCALL_STOPS_AFTER_EXEC: u32 = 4000;

/// What the follower starts from.
pub(crate) enum Root {
    /// Start this command, stopped before its exec.
    Spawn(CommandSpec),
    /// Seize this running process (and all its threads).
    Attach(u32),
}

/// The handle the tracker keeps: the thread, and the pipe whose closing wakes it.
pub(crate) struct Follower {
    thread: Option<JoinHandle<()>>,
    wake: Option<OwnedFd>,
}

impl Follower {
    /// Starts the follower thread on `root` before the tracker's programs are loaded,
    /// so that the kernel's work for the command (fork, exec) overlaps the loading: for
    /// a spawn, the thread forks the command, traces it and lets it run into its exec,
    /// where the kernel stops it before its first instruction; the thread then waits
    /// for [`Starting::finish`] to hand it the loaded engine. An attach waits for the
    /// engine before it seizes anything (the process is running: its probes must come
    /// right after).
    pub(crate) fn begin(root: Root) -> Result<Starting> {
        let (wake_read, wake_write) =
            pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::Os {
                what: "create the pipe that wakes the follower thread",
                source: e.into(),
            })?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let (engine_tx, engine_rx) = mpsc::channel::<Handoff>();
        let thread = std::thread::Builder::new()
            .name("memtrack-follow".into())
            .spawn(move || {
                let launched = match Launched::launch(&root, wake_read) {
                    Ok(launched) => launched,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut early = None;
                let shared = loop {
                    match engine_rx.recv() {
                        Ok(Handoff::Hook(program)) => {
                            early = launched
                                .spawned
                                .zip(launched.loader_site.as_ref())
                                .and_then(|(pid, site)| ld_hook::early(pid, site, &program));
                        }
                        Ok(Handoff::Engine(shared)) => break Some(shared),
                        Err(_) => break None,
                    }
                };
                // No engine: loading failed, the command must not run.
                let Some(shared) = shared else {
                    drop(early);
                    launched.abandon();
                    return;
                };
                let mut state = FollowState::new(shared, launched);
                if let Some(early) = early {
                    early.adopt(&mut state.shared.engine.lock());
                }
                match state.setup(root) {
                    Ok(pid) => {
                        let _ = ready_tx.send(Ok(pid));
                        state.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| Error::Os {
                what: "start the follower thread",
                source,
            })?;
        Ok(Starting {
            follower: Follower {
                thread: Some(thread),
                wake: Some(wake_write),
            },
            engine: engine_tx,
            ready: ready_rx,
        })
    }

    /// Wakes the follower and waits for it to end; tracees still alive are detached (the
    /// kernel detaches them when their tracing thread exits) and keep running.
    pub(crate) fn shutdown(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A follower begun before the engine was loaded ([`Follower::begin`]). Dropped without
/// [`finish`](Starting::finish) (the loading failed), it kills the command, which is
/// still stopped at its exec, and ends the thread.
pub(crate) struct Starting {
    // Dropped first (fields drop in order): the thread's wait for the engine ends
    // before the follower's drop joins the thread.
    engine: mpsc::Sender<Handoff>,
    ready: mpsc::Receiver<Result<u32>>,
    follower: Follower,
}

/// What the loading hands the follower thread of a [`Starting`].
enum Handoff {
    /// The loader hook's program, verified before the others: the thread hooks the
    /// spawned command's loader with it at once, so that the kernel's grace period for
    /// the first uprobe registration passes while the other programs are verified
    /// (`ld_hook::early`).
    Hook(HookProgram),
    /// The loaded engine.
    Engine(Arc<Shared>),
}

impl Starting {
    /// What [`Engine::load`](crate::engine::Engine) calls with the loader hook's
    /// program, the moment it is verified.
    pub(crate) fn hook_handoff(&self) -> impl Fn(HookProgram) + Sync + use<> {
        let engine = self.engine.clone();
        move |program| {
            let _ = engine.send(Handoff::Hook(program));
        }
    }

    /// Hands the follower the loaded engine; returns once the root is stopped, probed
    /// and running again (or failed to start), with the root's pid.
    pub(crate) fn finish(self, shared: Arc<Shared>) -> Result<(Follower, u32)> {
        let Starting {
            mut follower,
            engine,
            ready,
        } = self;
        // A send fails only when the thread ended already: its error is on `ready`.
        let _ = engine.send(Handoff::Engine(shared));
        match ready.recv() {
            Ok(Ok(pid)) => Ok((follower, pid)),
            Ok(Err(e)) => {
                follower.shutdown();
                Err(e)
            }
            Err(_) => {
                follower.shutdown();
                Err(Error::FollowerEnded {
                    reason: FollowerEnd::PanickedStarting,
                })
            }
        }
    }
}

/// What the follower thread did before it had the engine: the sentinel forked and, for
/// a spawn, the command forked, seized and stopped at its exec.
struct Launched {
    holds: Holds,
    tasks: HashMap<u32, Task>,
    sentinel: Pid,
    /// The spawned command's pid (at its exec stop).
    spawned: Option<u32>,
    /// Where its loader's hook goes (None: no loader memtrack can hook, or no command),
    /// found once for the registration that does nothing and the early hook.
    loader_site: Option<memtrack_targets::DebugStateSite>,
}

impl Launched {
    fn launch(root: &Root, wake: OwnedFd) -> Result<Launched> {
        let mut launched = Launched {
            holds: Holds::from_env(),
            tasks: HashMap::new(),
            sentinel: spawn_sentinel(wake)?,
            spawned: None,
            loader_site: None,
        };
        if let Root::Spawn(spec) = root {
            match launched.spawn(spec) {
                Ok(pid) => {
                    launched.spawned = Some(pid);
                    launched.loader_site = memtrack_targets::debug_state_site(pid).ok().flatten();
                    if let Some(site) = &launched.loader_site {
                        ld_hook::start_registering(pid, site);
                    }
                }
                Err(e) => {
                    launched.abandon();
                    return Err(e);
                }
            }
        }
        Ok(launched)
    }

    /// Forks the command, seizes it and lets it go on to its exec stop.
    fn spawn(&mut self, spec: &CommandSpec) -> Result<u32> {
        let mut child = spawn::fork_held(spec)?;
        let pid = child.pid;
        let command = spec.program.to_string_lossy().into_owned();
        self.holds.reached(Hold::Spawn, pid.as_raw() as u32);
        let raw = pid.as_raw() as u32;
        match self.seize_and_release(&mut child, &command) {
            Ok(()) => Ok(raw),
            Err(e) => {
                // Never leave it to run the command untracked after an error.
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD));
                self.tasks.remove(&raw);
                Err(e)
            }
        }
    }

    /// Seizes the held child, lets it go on, and waits for its exec (it is then
    /// stopped at the exec event).
    fn seize_and_release(&mut self, child: &mut spawn::HeldChild, command: &str) -> Result<()> {
        let pid = child.pid;
        let raw = pid.as_raw() as u32;
        if let Err(e) = ptrace::seize(pid, options()) {
            // A child that failed before waiting (chdir, setuid) has exited.
            if let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
                waitpid(pid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WNOTHREAD))
            {
                return Err(spawn_error(command.to_string(), child));
            }
            return Err(ptrace_err(pid, "PTRACE_SEIZE")(e));
        }
        self.tasks.insert(raw, Task { tgid: raw });
        self.holds.reached(Hold::Seized, raw);
        child.release();
        loop {
            match waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD)) {
                Ok(WaitStatus::PtraceEvent(_, _, e)) if e == Event::PTRACE_EVENT_EXEC as i32 => {
                    return Ok(());
                }
                Ok(WaitStatus::PtraceEvent(..)) | Ok(WaitStatus::PtraceSyscall(_)) => {
                    ptrace::cont(pid, None).map_err(ptrace_err(pid, "PTRACE_CONT"))?;
                }
                Ok(WaitStatus::Stopped(_, sig)) => {
                    ptrace::cont(pid, sig).map_err(ptrace_err(pid, "PTRACE_CONT"))?;
                }
                Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => {
                    self.tasks.remove(&raw);
                    return Err(spawn_error(command.to_string(), child));
                }
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                Err(e) => return Err(ptrace_err(pid, "waitpid")(e)),
            }
        }
    }

    /// Kills the command (stopped at its exec: it never ran an instruction of its own)
    /// and the sentinel, and reaps both.
    fn abandon(self) {
        for pid in self.spawned.into_iter().map(|p| Pid::from_raw(p as i32)) {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD));
        }
        let _ = kill(self.sentinel, Signal::SIGKILL);
        let _ = waitpid(self.sentinel, Some(WaitPidFlag::__WNOTHREAD));
    }
}

#[derive(Clone, Copy)]
struct Task {
    tgid: u32,
}

/// The follower thread's state: what it traces, and how far each process got.
struct FollowState {
    shared: Arc<Shared>,
    /// The stops at each process's dynamic loader.
    hooks: LdHooks,
    /// Where a test asked the follower to hold (MEMTRACK_TEST_HOLD).
    holds: Holds,
    /// Every traced thread, by tid.
    tasks: HashMap<u32, Task>,
    /// Processes between an exec and their allocator being mapped: syscall-stops left.
    exec_wait: HashMap<u32, u32>,
    root: u32,
    sentinel: Option<Pid>,
    /// Why [`run`](FollowState::run) ended, if not by the sentinel's exit (shutdown).
    failure: Option<FollowerEnd>,
}

fn options() -> Options {
    Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEEXEC
}

fn ptrace_err(pid: Pid, what: &'static str) -> impl FnOnce(Errno) -> Error {
    move |source| Error::Ptrace {
        pid: pid.as_raw() as u32,
        what,
        source,
    }
}

/// Forks a child that blocks reading `wake` and exits when its write end closes: its exit
/// wakes the follower's `waitpid`.
fn spawn_sentinel(wake: OwnedFd) -> Result<Pid> {
    let fd = wake.as_raw_fd();
    // SAFETY: the child only makes async-signal-safe calls.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => unsafe {
            // Hold nothing else open (eBPF map and perf event descriptors included).
            libc::dup2(fd, 0);
            libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32);
            let mut byte = 0u8;
            while libc::read(0, (&raw mut byte).cast(), 1) > 0 {}
            libc::_exit(0)
        },
        Ok(ForkResult::Parent { child }) => Ok(child),
        Err(e) => Err(Error::Os {
            what: "fork the follower's sentinel process",
            source: e.into(),
        }),
    }
}

/// Why a command could not be started, from its exec-error pipe.
fn spawn_error(command: String, child: &spawn::HeldChild) -> Error {
    let cause = spawn::exec_errno(&child.exec_error).map_or(SpawnFailure::ExitedBeforeExec, |e| {
        SpawnFailure::Exec(Errno::from_raw(e))
    });
    Error::Spawn { command, cause }
}

impl FollowState {
    fn new(shared: Arc<Shared>, launched: Launched) -> FollowState {
        FollowState {
            shared,
            hooks: LdHooks::default(),
            holds: launched.holds,
            tasks: launched.tasks,
            exec_wait: HashMap::new(),
            root: launched.spawned.unwrap_or(0),
            sentinel: Some(launched.sentinel),
            failure: None,
        }
    }

    fn setup(&mut self, root: Root) -> Result<u32> {
        match root {
            Root::Spawn(_) => self.setup_spawn(),
            Root::Attach(pid) => self.setup_attach(pid),
        }
    }

    /// The spawned command is at its exec stop: register and probe it.
    fn setup_spawn(&mut self) -> Result<u32> {
        let raw = self.root;
        let ppid = std::process::id();
        self.register_process(raw, ppid);
        self.after_exec(raw);
        Ok(raw)
    }

    fn setup_attach(&mut self, pid: u32) -> Result<u32> {
        let task_dir = format!("/proc/{pid}/task");
        let tids: Vec<u32> = std::fs::read_dir(&task_dir)
            .map_err(|_| Error::ProcessGone { pid })?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for tid in tids {
            let t = Pid::from_raw(tid as i32);
            match ptrace::seize(t, options()) {
                Ok(()) => {
                    self.tasks.insert(tid, Task { tgid: pid });
                }
                Err(Errno::ESRCH) => {}
                Err(e) => return Err(ptrace_err(t, "PTRACE_SEIZE")(e)),
            }
        }
        if self.tasks.is_empty() {
            return Err(Error::ProcessGone { pid });
        }
        self.root = pid;
        let ppid = registry::tgid_and_ppid(pid).map(|(_, p)| p).unwrap_or(0);
        self.register_process(pid, ppid);
        // A running process has its libraries mapped: probe it now (it keeps running
        // meanwhile; calls before the probes are in place are not counted), and catch
        // its future dlopens.
        self.attach_now(pid);
        self.install_hook(pid);
        Ok(pid)
    }

    /// Adds a process to the registry with zeroed counters and the current enable state.
    fn register_process(&mut self, pid: u32, ppid: u32) {
        let enabled = self.shared.enabled();
        let started_ns = {
            let mut engine = self.shared.engine.lock();
            let _ = engine.reset_stats(pid);
            let _ = engine.set_state(
                pid,
                TrackState {
                    enabled: enabled as u32,
                    tid: 0,
                },
            );
            engine.seed_rss(pid);
            engine.scope_origin_ns(pid)
        };
        let mut registry = self.shared.registry.lock();
        if let Some(parent) = registry.get_mut(&ppid) {
            parent.note(EventKind::Child { pid });
        }
        registry.insert(pid, ProcessRecord::new(pid, ppid, started_ns));
    }

    /// Attaches probes for whatever allocator `pid` has mapped; records the outcome.
    /// Returns true when an allocator was found.
    fn attach_now(&mut self, pid: u32) -> bool {
        let result = self.shared.engine.lock().attach_process(pid);
        let mut registry = self.shared.registry.lock();
        let Some(record) = registry.get_mut(&pid) else {
            return false;
        };
        match result {
            Ok(added) => {
                record.process.probes.extend(added);
                record.process.allocator = AllocatorStatus::Probed;
                true
            }
            Err(Error::NoAllocator { objects, .. }) => {
                record.process.allocator = AllocatorStatus::NotRecognised {
                    reason: format!(
                        "no known allocator function in: {}",
                        objects
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                false
            }
            Err(e) => {
                record.process.allocator = AllocatorStatus::NotRecognised {
                    reason: e.to_string(),
                };
                false
            }
        }
    }

    /// Gives `child`, just forked from `parent`, its parent's probes and loader hook
    /// (the same mappings, so the same sites: nothing is read again). False when the
    /// parent has none or attaching failed: then the caller probes the child afresh.
    fn inherit(&mut self, child: u32, parent: u32) -> bool {
        let mut engine = self.shared.engine.lock();
        let Ok(Some(inherited)) = engine.inherit_probes(child, parent) else {
            return false;
        };
        let probes = inherited.probes;
        let hooked = inherited
            .ld_hooks
            .iter()
            .all(|(object, offset)| self.hooks.install_at(&mut engine, child, object, *offset));
        drop(engine);
        if let Some(record) = self.shared.registry.lock().get_mut(&child) {
            record.process.probes.extend(probes);
            record.process.allocator = AllocatorStatus::Probed;
        }
        // A hook that could not be placed is looked for as in any process.
        hooked || self.install_hook(child)
    }

    /// A process exec'd: its counters, timeline and (with stacks) per-stack counters so
    /// far belong to the image it left (kept in the record, and by the engine's stacks
    /// as that record's next earlier image: one is kept exactly when the other is); the
    /// new image starts from zero.
    fn close_image(&mut self, pid: u32) {
        let Some(started) = self
            .shared
            .registry
            .lock()
            .get(&pid)
            .map(|r| r.process.started_ns)
        else {
            return;
        };
        let (stats, timeline) = {
            let mut engine = self.shared.engine.lock();
            let stats = engine.read_stats(pid).ok();
            let timeline = engine.timeline(pid, started).and_then(|t| t.ok());
            if let Some(stats) = &stats {
                // Read before the reset zeroes them, with the same counters as the
                // record's image (their totals are equal).
                let _ = engine.close_image_stacks(pid, stats, started);
            }
            let _ = engine.reset_stats(pid);
            (stats, timeline)
        };
        if let (Some(stats), Some(record)) = (stats, self.shared.registry.lock().get_mut(&pid)) {
            let mut image =
                ImageStats::new(record.process.command.clone(), self.shared.stats(&stats));
            image.timeline = timeline.map(|mut t| {
                for event in record.events.drain(..) {
                    t.add_event(event);
                }
                t
            });
            record.process.earlier_images.push(image);
        }
    }

    /// Hooks the dynamic loader of `pid` (ld_hook.rs); false if it has none memtrack
    /// can hook.
    fn install_hook(&mut self, pid: u32) -> bool {
        let mut engine = self.shared.engine.lock();
        self.hooks.install(&mut engine, pid)
    }

    /// A process just exec'd (it is stopped at the exec event): note its new command
    /// line, probe what is mapped already (a static executable's own allocator), and
    /// hook the loader so the libraries are probed once mapped.
    fn after_exec(&mut self, pid: u32) {
        self.holds.reached(Hold::Exec, pid);
        if let Some(record) = self.shared.registry.lock().get_mut(&pid) {
            record.process.command = registry::read_cmdline(pid);
            let command = record.process.command.clone();
            record.note(EventKind::Exec { command });
        }
        self.shared.engine.lock().seed_rss(pid);
        let p = Pid::from_raw(pid as i32);
        self.attach_now(pid);
        let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
        let has_interp = memtrack_targets::has_interpreter(&exe).unwrap_or(true);
        if has_interp {
            // Probed now, with the hook: one uprobe registration for the whole exec
            // (expected_targets says why). Reported once the loader maps it.
            let expected = memtrack_targets::expected_targets(pid);
            if !expected.is_empty() {
                let _ = self.shared.engine.lock().attach_expected(pid, &expected);
            }
        }
        if !has_interp || self.install_hook(pid) {
            let _ = ptrace::cont(p, None);
            return;
        }
        self.exec_wait.insert(pid, MAX_SYSCALL_STOPS_AFTER_EXEC);
        let _ = ptrace::syscall(p, None);
    }

    /// A signal-delivery-stop of a traced thread: stopped by its loader's hook, probe
    /// what was mapped and let it go on (without the hook's signal); else deliver the
    /// signal.
    fn on_signal_stop(&mut self, tid: u32, tgid: u32, signal: Signal) {
        let p = Pid::from_raw(tid as i32);
        let stop = {
            let mut engine = self.shared.engine.lock();
            self.hooks.stopped_at_hook(&mut engine, tid, signal)
        };
        let Some(stop) = stop else {
            let _ = ptrace::cont(p, signal);
            return;
        };
        self.holds.reached(Hold::Hook, tgid);
        let found = self.attach_now(tgid);
        if debug_follow() {
            eprintln!(
                "memtrack: loader hook in process {tgid} (thread {tid}, {signal:?}): \
                 allocator mapped: {found}"
            );
        }
        // Errors: the thread was killed meanwhile; its exit is reported next.
        let _ = ptrace::cont(p, stop.deliver);
    }

    /// A syscall-stop of a process waiting for its allocator to be mapped.
    fn on_syscall_stop(&mut self, tid: u32) {
        let p = Pid::from_raw(tid as i32);
        let Some(left) = self.exec_wait.get_mut(&tid) else {
            let _ = ptrace::cont(p, None);
            return;
        };
        *left = left.saturating_sub(1);
        let left = *left;
        // Only the exit of an mmap can map a new object.
        let mapped = ptrace::getregs(p)
            .map(|r| {
                r.orig_rax == libc::SYS_mmap as u64 && r.rax != (-(libc::ENOSYS as i64)) as u64
            })
            .unwrap_or(false);
        if (mapped && self.attach_now(tid)) || left == 0 {
            self.exec_wait.remove(&tid);
            let _ = ptrace::cont(p, None);
        } else {
            let _ = ptrace::syscall(p, None);
        }
    }

    /// A ptrace event stop (exec, fork/clone, group-stop) of a traced thread.
    fn on_ptrace_event(&mut self, tid: u32, tgid: u32, signal: Signal, event: i32) {
        let p = Pid::from_raw(tid as i32);
        if event == Event::PTRACE_EVENT_EXEC as i32 {
            if tgid != tid {
                // A non-leader thread exec'd: it took over the leader's pid.
                self.tasks.remove(&tid);
                let mut engine = self.shared.engine.lock();
                self.hooks.thread_gone(&mut engine, tid);
            }
            self.close_image(tgid);
            self.after_exec(tgid);
        } else if event == Event::PTRACE_EVENT_STOP as i32
            && matches!(
                signal,
                Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
            )
        {
            // Group-stop (job control): stay stopped until SIGCONT.
            // SAFETY: PTRACE_LISTEN takes no pointers.
            unsafe {
                libc::ptrace(libc::PTRACE_LISTEN, p.as_raw(), 0, 0);
            }
        } else if self.exec_wait.contains_key(&tgid) {
            let _ = ptrace::syscall(p, None);
        } else {
            let _ = ptrace::cont(p, None);
        }
    }

    /// A task we have not seen stopped: a new thread or process auto-attached at fork.
    fn on_new_task(&mut self, tid: u32) {
        let p = Pid::from_raw(tid as i32);
        let Some((tgid, ppid)) = registry::tgid_and_ppid(tid) else {
            let _ = ptrace::cont(p, None);
            return;
        };
        self.tasks.insert(tid, Task { tgid });
        if tgid == tid && !self.shared.registry.lock().contains_key(&tid) {
            // A new process: it has a copy of its parent's mappings, but not its probes
            // (they are scoped to the parent): probe it and hook its loader right away.
            self.holds.reached(Hold::Fork, tid);
            self.register_process(tid, ppid);
            if !self.inherit(tid, ppid) {
                self.attach_now(tid);
                self.install_hook(tid);
            }
        }
        let _ = ptrace::cont(p, None);
    }

    fn on_exit(&mut self, tid: u32, code: Option<i32>, signal: Option<i32>) {
        let Some(task) = self.tasks.remove(&tid) else {
            return;
        };
        self.hooks.thread_gone(&mut self.shared.engine.lock(), tid);
        if task.tgid != tid {
            return;
        }
        self.exec_wait.remove(&tid);
        let started = self
            .shared
            .registry
            .lock()
            .get(&tid)
            .map_or(0, |r| r.process.started_ns);
        let (final_stats, final_timeline) = {
            let mut engine = self.shared.engine.lock();
            let stats = engine.read_stats(tid).ok();
            let timeline = engine.timeline(tid, started).and_then(|t| t.ok());
            engine.detach_process(tid);
            engine.forget(tid);
            (stats, timeline)
        };
        if let Some(record) = self.shared.registry.lock().get_mut(&tid) {
            record.process.ended_ns = Some(monotonic_ns());
            record.process.exit_code = code;
            record.process.exit_signal = signal;
            record.final_stats = final_stats;
            record.final_timeline = final_timeline;
        }
        self.holds.reached(Hold::Exit, tid);
        self.shared.process_exited(tid);
        if tid == self.root {
            self.shared.root_exited(code, signal);
        }
    }

    /// Waits for the next stop or exit of any traced task and hands it to its handler,
    /// until the sentinel exits (shutdown) or waiting fails.
    fn run(&mut self) {
        let mut timing = debug_follow().then(StopTiming::default);
        loop {
            let status = waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD));
            let handling = timing
                .as_ref()
                .map(|_| (std::time::Instant::now(), stop_kind(&status, &self.tasks)));
            match status {
                Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))
                    if Some(pid) == self.sentinel =>
                {
                    self.sentinel = None;
                    break;
                }
                Ok(WaitStatus::Exited(pid, code)) => {
                    self.on_exit(pid.as_raw() as u32, Some(code), None);
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) => {
                    self.on_exit(pid.as_raw() as u32, None, Some(sig as i32));
                }
                Ok(WaitStatus::Stopped(pid, sig)) => {
                    let tid = pid.as_raw() as u32;
                    match self.tasks.get(&tid) {
                        None => self.on_new_task(tid),
                        Some(task) => self.on_signal_stop(tid, task.tgid, sig),
                    }
                }
                Ok(WaitStatus::PtraceEvent(pid, sig, event)) => {
                    let tid = pid.as_raw() as u32;
                    match self.tasks.get(&tid) {
                        None => self.on_new_task(tid),
                        Some(task) => self.on_ptrace_event(tid, task.tgid, sig, event),
                    }
                }
                Ok(WaitStatus::PtraceSyscall(pid)) => {
                    self.on_syscall_stop(pid.as_raw() as u32);
                }
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                Err(e) => {
                    self.failure = Some(FollowerEnd::Wait(e));
                    break;
                }
            }
            if let (Some(timing), Some((since, kind))) = (timing.as_mut(), handling) {
                timing.add(kind, since.elapsed());
            }
        }
        if let Some(timing) = timing {
            timing.print();
        }
    }

    fn reap_sentinel(&mut self) {
        if let Some(pid) = self.sentinel.take() {
            let _ = waitpid(pid, Some(WaitPidFlag::__WNOTHREAD));
        }
    }
}

impl Drop for FollowState {
    fn drop(&mut self) {
        // However the follower ends (shutdown, a failed setup or wait, a panic), tell a
        // waiter on the root that no exit will come, and end the stream of exits. (The
        // loader hooks need no undoing: they are uprobes, removed with their links.)
        let reason = match self.failure.take() {
            Some(reason) => reason,
            None if std::thread::panicking() => FollowerEnd::Panicked,
            None => FollowerEnd::Stopped,
        };
        self.shared.follower_ended(reason);
        // The write end is closed by now (shutdown) or will be when the tracker goes; if
        // the sentinel is still ours, wait for it so it does not linger as a zombie.
        self.reap_sentinel();
    }
}

/// MEMTRACK_DEBUG_FOLLOW=1 makes the follower say on stderr what it does (loader hook
/// hits, calls still in progress when a process exits) and, when it ends, how long it
/// spent handling each kind of stop: a debugging aid.
fn debug_follow() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("MEMTRACK_DEBUG_FOLLOW").is_some_and(|v| v == "1"))
}

/// The kind of stop `status` is, for [`StopTiming`].
fn stop_kind(status: &nix::Result<WaitStatus>, tasks: &HashMap<u32, Task>) -> &'static str {
    let known = |pid: &Pid| tasks.contains_key(&(pid.as_raw() as u32));
    match status {
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => "exit",
        Ok(WaitStatus::Stopped(pid, _) | WaitStatus::PtraceEvent(pid, _, _)) if !known(pid) => {
            "new task"
        }
        Ok(WaitStatus::Stopped(..)) => "signal (loader hook)",
        Ok(WaitStatus::PtraceEvent(_, _, e)) if *e == Event::PTRACE_EVENT_EXEC as i32 => "exec",
        Ok(WaitStatus::PtraceEvent(..)) => "fork/clone event",
        Ok(WaitStatus::PtraceSyscall(_)) => "syscall",
        _ => "other",
    }
}

/// Time spent in the follower's handlers, per kind of stop (MEMTRACK_DEBUG_FOLLOW=1).
#[derive(Default)]
struct StopTiming {
    /// Per kind: how many stops, and their total handling time.
    kinds: Vec<(&'static str, u32, std::time::Duration)>,
}

impl StopTiming {
    fn add(&mut self, kind: &'static str, took: std::time::Duration) {
        match self.kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, total)) => {
                *n += 1;
                *total += took;
            }
            None => self.kinds.push((kind, 1, took)),
        }
    }

    fn print(&self) {
        for (kind, n, total) in &self.kinds {
            eprintln!(
                "memtrack: follower: {n} {kind} stops, {:.3} ms handling ({:.1} us each)",
                total.as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e6 / f64::from(*n)
            );
        }
    }
}
