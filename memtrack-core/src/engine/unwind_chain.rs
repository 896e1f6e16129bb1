//! The unwinder's tail-call chain (stacks on): the entry program walks the first batch
//! of frames and tail-calls the unwind program (`program_names::UNWIND`) through the
//! `UNWIND_PROGS` program array, which walks the next batch and tail-calls itself (see
//! `memtrack_common::stacks::WalkState`); the program that ends a walk tail-calls the
//! remembering program (`program_names::REMEMBER`, the cache of walks). This module
//! puts both loaded programs into that array. The kernel allows a tail call only into a program of the caller's
//! type and expected attach type, so the loader loads it the way it loads the entry
//! program (for uprobe_multi links or for perf-event links).

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
};

use memtrack_common::{
    map_names, program_names,
    stacks::{REMEMBER_PROG_SLOT, UNWIND_PROG_SLOT},
};

use crate::{
    engine::object::{self, Object, ProgramError},
    error::{Error, Result},
};

/// The programs of the chain other than the entry program, each with its slot in
/// `UNWIND_PROGS`.
pub(crate) const CHAIN: [(&str, u32); 2] = [
    (program_names::UNWIND, UNWIND_PROG_SLOT),
    (program_names::REMEMBER, REMEMBER_PROG_SLOT),
];

/// Puts `program` (the loaded program `name` of [`CHAIN`]) into `object`'s
/// `UNWIND_PROGS` array at `slot`. The array stays in `object`: the kernel empties a
/// program array when user space closes its last descriptor of it.
pub(crate) fn install(
    object: &Object,
    name: &'static str,
    slot: u32,
    program: BorrowedFd<'_>,
) -> Result<()> {
    let fail = |source: io::Error| Error::Program {
        program: name,
        source: ProgramError::ProgramArray {
            array: map_names::UNWIND_PROGS,
            slot,
            source,
        },
    };
    let map_fd = object.map_fd(map_names::UNWIND_PROGS).ok_or_else(|| {
        fail(io::Error::new(
            io::ErrorKind::NotFound,
            "the eBPF object has no such map",
        ))
    })?;
    let key: u32 = slot;
    let value: u32 = program.as_raw_fd() as u32;
    object::update_elem(map_fd, (&raw const key).cast(), (&raw const value).cast()).map_err(fail)
}

/// The id of the program in `object`'s `UNWIND_PROGS` at `slot`, None when it is empty
/// (for tests: the kernel answers a lookup in a program array with the program's id).
#[cfg(test)]
pub(crate) fn installed_id(object: &Object, slot: u32) -> io::Result<Option<u32>> {
    let map = object
        .map_fd(map_names::UNWIND_PROGS)
        .ok_or_else(|| io::Error::other("no program array UNWIND_PROGS"))?;
    let key: u32 = slot;
    let mut value: u32 = 0;
    let mut attr = object::zeroed_attr();
    // SAFETY: writing plain integers into the map-element member of the union; the
    // kernel writes 4 bytes into `value`, which outlives the call.
    unsafe {
        let elem = &mut attr.__bindgen_anon_2;
        elem.map_fd = map.as_raw_fd() as u32;
        elem.key = &key as *const u32 as u64;
        elem.__bindgen_anon_1.value = &mut value as *mut u32 as u64;
    }
    match object::sys_bpf_raw(aya_obj::generated::bpf_cmd::BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
