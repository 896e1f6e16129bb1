//! memtrack's eBPF programs. Built only for `bpfel-unknown-none` by scripts/build-ebpf.sh
//! (pinned nightly, `-Z build-std=core`, bpf-linker) into memtrack-core/ebpf/, where the
//! object ships; on the host this file compiles to an empty binary so that
//! workspace-wide commands keep working.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod account;
#[cfg(target_arch = "bpf")]
mod atomics;
#[cfg(target_arch = "bpf")]
mod maps;
#[cfg(target_arch = "bpf")]
mod syscalls;
#[cfg(target_arch = "bpf")]
mod uprobes;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(not(target_arch = "bpf"))]
fn main() {}
