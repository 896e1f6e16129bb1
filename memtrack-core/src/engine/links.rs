//! The links that attach the loaded programs: each tracked process's uprobes on its
//! allocator functions (at the sites the probe placement picks, decoded once per object)
//! and on its loader's hook, and the syscall counter's raw tracepoint. Dropping a link
//! detaches it; detach.rs closes them off the caller's path.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
};

use memtrack_targets::ProbeTarget;

use super::{
    detach::{self, Detachable},
    programs::{ProbePlacement, Site, UprobePrograms, probe_info},
};
use crate::{
    ProbeInfo,
    error::{Error, Result},
};

/// Probes attached for one process.
#[derive(Default)]
struct ProcessLinks {
    /// Owned links (uprobe_multi link fds, or perf-event links): dropping one detaches
    /// it.
    links: Vec<Detachable>,
    probes: Vec<ProbeInfo>,
    /// Probes attached before their object was seen mapped ([`Links::attach_expected`]):
    /// they move to `probes` (and are reported) once it is.
    expected: Vec<ProbeInfo>,
    /// Loader hook sites attached: (object, file offset).
    ld_hooks: Vec<(PathBuf, u64)>,
    /// Every allocator site attached (reported or expected), so that a child forked
    /// with the same mappings gets the same probes without reading them again.
    targets: Vec<(ProbeTarget, Site)>,
}

/// What a forked child got from its parent in [`Links::inherit`].
pub(crate) struct Inherited {
    /// The allocator probes reported for the child (its parent's).
    pub(crate) probes: Vec<ProbeInfo>,
    /// The parent's loader hook sites (object, file offset) for the caller to hook.
    pub(crate) ld_hooks: Vec<(PathBuf, u64)>,
}

/// Every link of a tracker, by process, and the programs they attach.
pub(crate) struct Links {
    processes: BTreeMap<u32, ProcessLinks>,
    /// The tracker-wide links (the syscall counter's raw tracepoint, the RSS
    /// tracepoint), owned like the uprobe links.
    kernel: Vec<Detachable>,
    pub(crate) programs: UprobePrograms,
    placement: ProbePlacement,
    /// Chosen sites by (object, function file offset): decoding is done once per
    /// object, not once per process.
    sites: HashMap<(PathBuf, u64), Site>,
}

impl Links {
    /// No process attached yet; `kernel` are the tracker-wide links.
    pub(crate) fn new(
        programs: UprobePrograms,
        placement: ProbePlacement,
        kernel: Vec<Detachable>,
    ) -> Self {
        Links {
            processes: BTreeMap::new(),
            kernel,
            programs,
            placement,
            sites: HashMap::new(),
        }
    }

    /// Attaches probes for `targets`, scoped to `pid`. Already-attached sites are
    /// skipped; sites attached on a guess ([`attach_expected`](Self::attach_expected))
    /// are reported now. Returns the probes added.
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
        let attached: Vec<(ProbeTarget, Site)> = planned
            .iter()
            .map(|(target, site)| ((*target).clone(), site.clone()))
            .collect();
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
        process.targets.extend(attached);
        Ok(added)
    }

    /// Attaches, scoped to `child`, every allocator probe of `parent` (reported and
    /// expected alike): a process just forked has its parent's mappings, so it needs
    /// the same sites, found without reading its maps or its objects again. Returns the
    /// probes reported for it and the parent's loader hook sites (the caller hooks
    /// them, it has the cookie), or None when `parent` has no probes here.
    pub(crate) fn inherit(&mut self, child: u32, parent: u32) -> Result<Option<Inherited>> {
        if child == 0 {
            return Err(Error::ProcessGone { pid: child });
        }
        let Some(from) = self.processes.get(&parent) else {
            return Ok(None);
        };
        if from.targets.is_empty() || self.processes.contains_key(&child) {
            return Ok(None);
        }
        let targets = from.targets.clone();
        let (probes, expected) = (from.probes.clone(), from.expected.clone());
        let hooks = from.ld_hooks.clone();
        let planned: Vec<(&ProbeTarget, Site)> =
            targets.iter().map(|(t, site)| (t, site.clone())).collect();
        let links = self.programs.attach(child, &planned)?;
        let process = self.processes.entry(child).or_default();
        process.links.extend(links);
        process.probes = probes.clone();
        process.expected = expected;
        process.targets = targets;
        Ok(Some(Inherited {
            probes,
            ld_hooks: hooks,
        }))
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
        let attached: Vec<(ProbeTarget, Site)> = planned
            .iter()
            .map(|(target, site)| ((*target).clone(), site.clone()))
            .collect();
        let process = self.processes.entry(pid).or_default();
        process.links.extend(links);
        process.targets.extend(attached);
        process.expected.extend(
            planned
                .into_iter()
                .map(|(target, site)| probe_info(target, site)),
        );
        Ok(count)
    }

    /// Whether the loader hook site (`object`, `file_offset`) is attached in `pid`.
    pub(crate) fn has_ld_hook(&self, pid: u32, object: &Path, file_offset: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| {
            p.ld_hooks
                .iter()
                .any(|(o, off)| o == object && *off == file_offset)
        })
    }

    /// Keeps the loader hook's `link` at (`object`, `file_offset`) of `pid`, closed with
    /// the process's other links.
    pub(crate) fn add_ld_hook(
        &mut self,
        pid: u32,
        object: &Path,
        file_offset: u64,
        link: Detachable,
    ) {
        let process = self.processes.entry(pid).or_default();
        process.links.push(link);
        process.ld_hooks.push((object.to_path_buf(), file_offset));
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

    /// Detaches every probe of `pid` (its process exited, or tracking ends), off the
    /// caller's path.
    pub(crate) fn detach_process(&mut self, pid: u32) {
        if let Some(links) = self.processes.remove(&pid) {
            detach::close_later(links.links);
        }
    }

    /// Takes every link out, for closing.
    pub(crate) fn take_all(&mut self) -> Vec<Detachable> {
        std::mem::take(&mut self.processes)
            .into_values()
            .flat_map(|p| p.links)
            .chain(std::mem::take(&mut self.kernel))
            .collect()
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
