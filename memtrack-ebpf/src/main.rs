//! memtrack's eBPF programs. Built only for `bpfel-unknown-none` by scripts/build-ebpf.sh
//! (pinned nightly, `-Z build-std=core`, bpf-linker) into memtrack-core/ebpf/, where the
//! object ships; on the host this file compiles to an empty binary so that
//! workspace-wide commands keep working.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod account;
#[cfg(target_arch = "bpf")]
mod atomics;
#[cfg(target_arch = "bpf")]
mod global_count;
#[cfg(target_arch = "bpf")]
mod ld_hook;
#[cfg(target_arch = "bpf")]
mod live_capacity;
#[cfg(target_arch = "bpf")]
mod live_maps;
#[cfg(target_arch = "bpf")]
mod live_slots;
#[cfg(target_arch = "bpf")]
mod maps;
#[cfg(target_arch = "bpf")]
mod rss;
#[cfg(target_arch = "bpf")]
mod stack_cache;
#[cfg(target_arch = "bpf")]
mod syscalls;
#[cfg(target_arch = "bpf")]
mod thread;
#[cfg(target_arch = "bpf")]
mod timeline;
#[cfg(target_arch = "bpf")]
mod unwind;
#[cfg(target_arch = "bpf")]
mod uprobes;
#[cfg(target_arch = "bpf")]
mod verified_once;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// The license the kernel is told (BPF_PROG_LOAD's `license`, read from this section by
/// aya and by memtrack-core's uprobe_multi.rs). The crates are MIT OR Apache-2.0; the
/// kernel knows no such string, but it counts "Dual MIT/GPL" as GPL-compatible, which
/// GPL-only helpers (`bpf_probe_read_kernel`, `bpf_probe_read_user`) require.
#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[cfg(not(target_arch = "bpf"))]
fn main() {}
