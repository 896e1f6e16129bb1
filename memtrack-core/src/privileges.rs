//! Checks, before touching the kernel, that this process may load eBPF programs and
//! attach uprobes, so a user without privileges gets one clear message instead of an
//! `EPERM` from deep inside the loader.

use crate::error::{Capabilities, Error, KernelLacks, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process (`CapEff` of /proc/self/status).
fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// The capabilities this process lacks for loading and attaching, given its effective
/// set: none when it has CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON.
pub(crate) fn missing_for_ebpf(caps: u64) -> Option<Capabilities> {
    if has(caps, CAP_SYS_ADMIN) {
        return None;
    }
    let missing = Capabilities {
        bpf: !has(caps, CAP_BPF),
        perfmon: !has(caps, CAP_PERFMON),
    };
    (missing.bpf || missing.perfmon).then_some(missing)
}

/// The user who started this process through `sudo` (`SUDO_UID`, `SUDO_GID`), when it
/// runs as root: the user memtrack runs commands as and hands result files to. `None`
/// when not root, when either variable is missing or not a number, or for uid or gid
/// `u32::MAX` (-1, which the kernel reads as "unchanged").
pub fn sudo_invoker() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let uid: u32 = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid: u32 = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    (uid != u32::MAX && gid != u32::MAX).then_some((uid, gid))
}

/// Whether this process can load memtrack's eBPF programs and attach uprobes: it runs
/// as root, or has CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON. (When the status
/// file is unreadable, assumes it can and lets the kernel decide.)
pub fn can_track() -> bool {
    effective_capabilities().is_none_or(|caps| missing_for_ebpf(caps).is_none())
}

/// Fails with [`Error::MissingCapabilities`] unless this process can load and attach.
pub(crate) fn check() -> Result<()> {
    // If the status file is unreadable, let the kernel be the judge.
    let Some(caps) = effective_capabilities() else {
        return Ok(());
    };
    match missing_for_ebpf(caps) {
        None => Ok(()),
        Some(missing) => Err(Error::MissingCapabilities { missing }),
    }
}

/// Fails with [`Error::Unsupported`] when the kernel lacks
/// what memtrack needs.
pub(crate) fn check_kernel() -> Result<()> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(Error::Unsupported(KernelLacks::Btf));
    }
    if !std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        return Err(Error::Unsupported(KernelLacks::Uprobes));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_needs_nothing() {
        assert_eq!(missing_for_ebpf(1 << CAP_SYS_ADMIN), None);
        assert_eq!(missing_for_ebpf((1 << CAP_BPF) | (1 << CAP_PERFMON)), None);
    }

    #[test]
    fn names_what_is_missing() {
        let names = |caps| missing_for_ebpf(caps).map(|m| m.to_string());
        assert_eq!(names(0).as_deref(), Some("CAP_BPF and CAP_PERFMON"));
        assert_eq!(names(1 << CAP_BPF).as_deref(), Some("CAP_PERFMON"));
        assert_eq!(names(1 << CAP_PERFMON).as_deref(), Some("CAP_BPF"));
    }

    #[test]
    fn the_message_names_only_what_is_missing() {
        let one = Error::MissingCapabilities {
            missing: missing_for_ebpf(1 << CAP_PERFMON).unwrap(),
        }
        .to_string();
        assert!(one.starts_with("memtrack needs CAP_BPF to load"), "{one}");
        assert!(!one.contains("CAP_PERFMON"), "{one}");
        // Neither a tracker of this process nor `memtrack run` (which traces only its
        // own children) needs CAP_SYS_PTRACE: the recipe grants the two.
        assert!(
            one.ends_with("setcap cap_bpf,cap_perfmon+ep <binary>"),
            "{one}"
        );
    }
}
