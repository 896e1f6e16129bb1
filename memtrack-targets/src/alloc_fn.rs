//! The allocator entry points memtrack knows how to probe: which symbol names belong to
//! which reported function, and how each takes its arguments.
//!
//! This module exists so that the symbol names, the counter slots shared with the eBPF
//! side (`#[repr(u32)]`, carried in each probe's cookie), each function's argument kind
//! ([`Kind`], defined in memtrack-common because the eBPF entry program reads it from
//! the cookie too) and the System V argument registers of each function are defined in
//! exactly one place. Adding an allocator API is a table entry here.

use iced_x86::Register;
pub use memtrack_common::Kind;

/// The argument registers (System V x86_64 ABI: `rdi`, `rsi`, `rdx`, in order) whose
/// values the entry probe reads for a function of `kind`. All arguments are read,
/// including `realloc`'s and `free`'s pointer and `posix_memalign`'s `memptr`.
fn argument_registers(kind: Kind) -> &'static [Register] {
    const RDI: &[Register] = &[Register::RDI];
    const RDI_RSI: &[Register] = &[Register::RDI, Register::RSI];
    const RDI_RSI_RDX: &[Register] = &[Register::RDI, Register::RSI, Register::RDX];
    match kind {
        Kind::SizeFirst | Kind::Free => RDI,
        Kind::SizeSecond | Kind::Calloc | Kind::Realloc => RDI_RSI,
        Kind::Reallocarray | Kind::PosixMemalign => RDI_RSI_RDX,
    }
}

/// The functions memtrack reports, one counter slot each.
///
/// The discriminants are stable: they are the counter slots the eBPF programs and the
/// user-space tracker exchange (at most `memtrack_common::NUM_FUNCS`), so never
/// renumber them. Several symbols can map to one function (all variants of
/// `operator new`; `sdallocx` and `dallocx`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AllocFn {
    /// `void *malloc(size_t size)`
    Malloc = 0,
    /// `void *calloc(size_t nmemb, size_t size)`
    Calloc = 1,
    /// `void *realloc(void *ptr, size_t size)`
    Realloc = 2,
    /// `void *reallocarray(void *ptr, size_t nmemb, size_t size)`
    Reallocarray = 3,
    /// `void free(void *ptr)` (and `cfree`)
    Free = 4,
    /// `void *aligned_alloc(size_t alignment, size_t size)`
    AlignedAlloc = 5,
    /// `int posix_memalign(void **memptr, size_t alignment, size_t size)`
    PosixMemalign = 6,
    /// `void *memalign(size_t alignment, size_t size)`
    Memalign = 7,
    /// `void *valloc(size_t size)`
    Valloc = 8,
    /// `void *pvalloc(size_t size)`
    Pvalloc = 9,
    /// C++ `operator new(size_t [, align_val_t] [, nothrow_t])`
    OperatorNew = 10,
    /// C++ `operator new[](size_t [, align_val_t] [, nothrow_t])`
    OperatorNewArray = 11,
    /// C++ `operator delete(void * [, size_t] [, align_val_t] [, nothrow_t])`
    OperatorDelete = 12,
    /// C++ `operator delete[](void * [, size_t] [, align_val_t] [, nothrow_t])`
    OperatorDeleteArray = 13,
    /// jemalloc `void *mallocx(size_t size, int flags)`
    Mallocx = 14,
    /// jemalloc `void *rallocx(void *ptr, size_t size, int flags)`
    Rallocx = 15,
    /// jemalloc `void dallocx(void *ptr, int flags)` and `sdallocx(ptr, size, flags)`
    Dallocx = 16,
    /// mimalloc `mi_malloc(size)` and its size-first relatives (`mi_zalloc`,
    /// `mi_malloc_aligned(size, alignment)`, `mi_new`, ...)
    MiMalloc = 17,
    /// mimalloc `mi_calloc(count, size)` (and `mi_calloc_aligned`, `mi_new_n`)
    MiCalloc = 18,
    /// mimalloc `mi_realloc(p, size)` (and `mi_realloc_aligned`, `mi_rezalloc`)
    MiRealloc = 19,
    /// mimalloc `mi_reallocn(p, count, size)` (and `mi_recalloc`)
    MiReallocn = 20,
    /// mimalloc `mi_free(p)` (and `mi_free_size`, `mi_free_aligned`, `mi_cfree`)
    MiFree = 21,
    /// mimalloc `mi_aligned_alloc(alignment, size)` and `mi_memalign`
    MiAlignedAlloc = 22,
    /// mimalloc `mi_posix_memalign(memptr, alignment, size)`
    MiPosixMemalign = 23,
}

/// Symbol name -> function, for every name memtrack probes (without prefixes; see
/// [`PREFIXES`]).
const SYMBOLS: &[(&str, AllocFn)] = &[
    ("malloc", AllocFn::Malloc),
    ("calloc", AllocFn::Calloc),
    ("realloc", AllocFn::Realloc),
    ("reallocarray", AllocFn::Reallocarray),
    ("free", AllocFn::Free),
    ("cfree", AllocFn::Free),
    ("aligned_alloc", AllocFn::AlignedAlloc),
    ("posix_memalign", AllocFn::PosixMemalign),
    ("memalign", AllocFn::Memalign),
    ("valloc", AllocFn::Valloc),
    ("pvalloc", AllocFn::Pvalloc),
    // Itanium C++ ABI manglings on LP64 (size_t is `m`).
    ("_Znwm", AllocFn::OperatorNew),
    ("_ZnwmRKSt9nothrow_t", AllocFn::OperatorNew),
    ("_ZnwmSt11align_val_t", AllocFn::OperatorNew),
    ("_ZnwmSt11align_val_tRKSt9nothrow_t", AllocFn::OperatorNew),
    ("_Znam", AllocFn::OperatorNewArray),
    ("_ZnamRKSt9nothrow_t", AllocFn::OperatorNewArray),
    ("_ZnamSt11align_val_t", AllocFn::OperatorNewArray),
    (
        "_ZnamSt11align_val_tRKSt9nothrow_t",
        AllocFn::OperatorNewArray,
    ),
    ("_ZdlPv", AllocFn::OperatorDelete),
    ("_ZdlPvm", AllocFn::OperatorDelete),
    ("_ZdlPvRKSt9nothrow_t", AllocFn::OperatorDelete),
    ("_ZdlPvSt11align_val_t", AllocFn::OperatorDelete),
    ("_ZdlPvmSt11align_val_t", AllocFn::OperatorDelete),
    (
        "_ZdlPvSt11align_val_tRKSt9nothrow_t",
        AllocFn::OperatorDelete,
    ),
    ("_ZdaPv", AllocFn::OperatorDeleteArray),
    ("_ZdaPvm", AllocFn::OperatorDeleteArray),
    ("_ZdaPvRKSt9nothrow_t", AllocFn::OperatorDeleteArray),
    ("_ZdaPvSt11align_val_t", AllocFn::OperatorDeleteArray),
    ("_ZdaPvmSt11align_val_t", AllocFn::OperatorDeleteArray),
    (
        "_ZdaPvSt11align_val_tRKSt9nothrow_t",
        AllocFn::OperatorDeleteArray,
    ),
    // jemalloc's non-standard API.
    ("mallocx", AllocFn::Mallocx),
    ("rallocx", AllocFn::Rallocx),
    ("dallocx", AllocFn::Dallocx),
    ("sdallocx", AllocFn::Dallocx),
    // mimalloc's API (the heap-explicit `mi_heap_*` variants are not probed).
    ("mi_malloc", AllocFn::MiMalloc),
    ("mi_zalloc", AllocFn::MiMalloc),
    ("mi_malloc_small", AllocFn::MiMalloc),
    ("mi_zalloc_small", AllocFn::MiMalloc),
    ("mi_malloc_aligned", AllocFn::MiMalloc),
    ("mi_zalloc_aligned", AllocFn::MiMalloc),
    ("mi_malloc_aligned_at", AllocFn::MiMalloc),
    ("mi_zalloc_aligned_at", AllocFn::MiMalloc),
    ("mi_new", AllocFn::MiMalloc),
    ("mi_new_aligned", AllocFn::MiMalloc),
    ("mi_new_nothrow", AllocFn::MiMalloc),
    ("mi_new_aligned_nothrow", AllocFn::MiMalloc),
    ("mi_valloc", AllocFn::MiMalloc),
    ("mi_pvalloc", AllocFn::MiMalloc),
    ("mi_calloc", AllocFn::MiCalloc),
    ("mi_calloc_aligned", AllocFn::MiCalloc),
    ("mi_calloc_aligned_at", AllocFn::MiCalloc),
    ("mi_mallocn", AllocFn::MiCalloc),
    ("mi_new_n", AllocFn::MiCalloc),
    ("mi_realloc", AllocFn::MiRealloc),
    ("mi_realloc_aligned", AllocFn::MiRealloc),
    ("mi_realloc_aligned_at", AllocFn::MiRealloc),
    ("mi_rezalloc", AllocFn::MiRealloc),
    ("mi_rezalloc_aligned", AllocFn::MiRealloc),
    ("mi_rezalloc_aligned_at", AllocFn::MiRealloc),
    ("mi_reallocn", AllocFn::MiReallocn),
    ("mi_recalloc", AllocFn::MiReallocn),
    ("mi_new_reallocn", AllocFn::MiReallocn),
    ("mi_free", AllocFn::MiFree),
    ("mi_cfree", AllocFn::MiFree),
    ("mi_free_size", AllocFn::MiFree),
    ("mi_free_aligned", AllocFn::MiFree),
    ("mi_free_size_aligned", AllocFn::MiFree),
    ("mi_aligned_alloc", AllocFn::MiAlignedAlloc),
    ("mi_memalign", AllocFn::MiAlignedAlloc),
    ("mi_posix_memalign", AllocFn::MiPosixMemalign),
    // tcmalloc's own names (most are aliases of its malloc/free overrides; those
    // share an address and are probed once).
    ("tc_malloc", AllocFn::Malloc),
    ("tc_malloc_skip_new_handler", AllocFn::Malloc),
    ("tc_calloc", AllocFn::Calloc),
    ("tc_realloc", AllocFn::Realloc),
    ("tc_free", AllocFn::Free),
    ("tc_free_sized", AllocFn::Free),
    ("tc_cfree", AllocFn::Free),
    ("tc_memalign", AllocFn::Memalign),
    ("tc_posix_memalign", AllocFn::PosixMemalign),
    ("tc_valloc", AllocFn::Valloc),
    ("tc_pvalloc", AllocFn::Pvalloc),
    ("tc_new", AllocFn::OperatorNew),
    ("tc_new_nothrow", AllocFn::OperatorNew),
    ("tc_new_aligned", AllocFn::OperatorNew),
    ("tc_new_aligned_nothrow", AllocFn::OperatorNew),
    ("tc_newarray", AllocFn::OperatorNewArray),
    ("tc_newarray_nothrow", AllocFn::OperatorNewArray),
    ("tc_newarray_aligned", AllocFn::OperatorNewArray),
    ("tc_newarray_aligned_nothrow", AllocFn::OperatorNewArray),
    ("tc_delete", AllocFn::OperatorDelete),
    ("tc_delete_nothrow", AllocFn::OperatorDelete),
    ("tc_delete_sized", AllocFn::OperatorDelete),
    ("tc_delete_aligned", AllocFn::OperatorDelete),
    ("tc_delete_sized_aligned", AllocFn::OperatorDelete),
    ("tc_delete_aligned_nothrow", AllocFn::OperatorDelete),
    ("tc_deletearray", AllocFn::OperatorDeleteArray),
    ("tc_deletearray_nothrow", AllocFn::OperatorDeleteArray),
    ("tc_deletearray_sized", AllocFn::OperatorDeleteArray),
    ("tc_deletearray_aligned", AllocFn::OperatorDeleteArray),
    ("tc_deletearray_sized_aligned", AllocFn::OperatorDeleteArray),
    (
        "tc_deletearray_aligned_nothrow",
        AllocFn::OperatorDeleteArray,
    ),
];

/// Prefixes under which statically linked jemalloc exports its API: `je_` (jemalloc
/// built with `--with-jemalloc-prefix=je_`) and `_rjem_` (the tikv-jemallocator crate).
/// Only the jemalloc API names are looked up under them.
pub const PREFIXES: &[&str] = &["_rjem_", "je_"];

/// The jemalloc API names that may appear under a [`PREFIXES`] prefix.
const JEMALLOC_NAMES: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "mallocx",
    "rallocx",
    "dallocx",
    "sdallocx",
];

impl AllocFn {
    /// Every function, in discriminant order.
    pub const ALL: [AllocFn; 24] = [
        AllocFn::Malloc,
        AllocFn::Calloc,
        AllocFn::Realloc,
        AllocFn::Reallocarray,
        AllocFn::Free,
        AllocFn::AlignedAlloc,
        AllocFn::PosixMemalign,
        AllocFn::Memalign,
        AllocFn::Valloc,
        AllocFn::Pvalloc,
        AllocFn::OperatorNew,
        AllocFn::OperatorNewArray,
        AllocFn::OperatorDelete,
        AllocFn::OperatorDeleteArray,
        AllocFn::Mallocx,
        AllocFn::Rallocx,
        AllocFn::Dallocx,
        AllocFn::MiMalloc,
        AllocFn::MiCalloc,
        AllocFn::MiRealloc,
        AllocFn::MiReallocn,
        AllocFn::MiFree,
        AllocFn::MiAlignedAlloc,
        AllocFn::MiPosixMemalign,
    ];

    /// The name the function is reported under (`operator new` for every variant of
    /// `operator new`).
    pub fn name(self) -> &'static str {
        memtrack_common::FUNCTION_NAMES[self as usize]
    }

    /// The C symbol of the function's primary name (for the standard C API this is the
    /// same as [`name`](Self::name)).
    pub fn symbol(self) -> &'static str {
        self.name()
    }

    /// How the function takes its arguments (carried to the eBPF side in the probe's
    /// cookie).
    pub fn kind(self) -> Kind {
        match self {
            AllocFn::Malloc
            | AllocFn::Valloc
            | AllocFn::Pvalloc
            | AllocFn::OperatorNew
            | AllocFn::OperatorNewArray
            | AllocFn::Mallocx
            | AllocFn::MiMalloc => Kind::SizeFirst,
            AllocFn::AlignedAlloc | AllocFn::Memalign | AllocFn::MiAlignedAlloc => Kind::SizeSecond,
            AllocFn::Calloc | AllocFn::MiCalloc => Kind::Calloc,
            AllocFn::Realloc | AllocFn::Rallocx | AllocFn::MiRealloc => Kind::Realloc,
            AllocFn::Reallocarray | AllocFn::MiReallocn => Kind::Reallocarray,
            AllocFn::PosixMemalign | AllocFn::MiPosixMemalign => Kind::PosixMemalign,
            AllocFn::Free
            | AllocFn::OperatorDelete
            | AllocFn::OperatorDeleteArray
            | AllocFn::Dallocx
            | AllocFn::MiFree => Kind::Free,
        }
    }

    /// Whether this is one of C++'s `operator new`/`new[]`/`delete`/`delete[]`.
    pub fn is_cxx_operator(self) -> bool {
        matches!(
            self,
            AllocFn::OperatorNew
                | AllocFn::OperatorNewArray
                | AllocFn::OperatorDelete
                | AllocFn::OperatorDeleteArray
        )
    }

    /// Whether memtrack also needs a return probe (see [`Kind::has_return_probe`]).
    pub fn has_return_probe(self) -> bool {
        self.kind().has_return_probe()
    }

    /// The function with discriminant `value`, if there is one.
    pub fn from_u32(value: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(value).ok()?).copied()
    }

    /// The argument registers (System V x86_64 ABI: `rdi`, `rsi`, `rdx`, in order)
    /// whose values the entry probe reads, by the function's [`Kind`]. All arguments are
    /// read, including `realloc`'s and `free`'s pointer and `posix_memalign`'s `memptr`.
    pub fn argument_registers(self) -> &'static [Register] {
        argument_registers(self.kind())
    }

    /// The function a symbol name (no version suffix) belongs to: one of the names in
    /// the table, or a jemalloc API name under one of [`PREFIXES`].
    pub fn from_symbol(name: &str) -> Option<Self> {
        if let Some(&(_, f)) = SYMBOLS.iter().find(|(s, _)| *s == name) {
            return Some(f);
        }
        let rest = PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
        if !JEMALLOC_NAMES.contains(&rest) {
            return None;
        }
        SYMBOLS.iter().find(|(s, _)| *s == rest).map(|&(_, f)| f)
    }

    /// Every symbol name of this function in the table (without prefixes).
    pub fn symbols(self) -> impl Iterator<Item = &'static str> {
        SYMBOLS
            .iter()
            .filter(move |(_, f)| *f == self)
            .map(|(s, _)| *s)
    }
}

impl std::fmt::Display for AllocFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_match_all_and_from_u32() {
        for (i, f) in AllocFn::ALL.iter().enumerate() {
            assert_eq!(*f as u32, i as u32);
            assert_eq!(AllocFn::from_u32(i as u32), Some(*f));
            assert!(f.symbols().count() >= 1, "{f} has no symbol");
        }
        assert_eq!(AllocFn::from_u32(AllocFn::ALL.len() as u32), None);
        assert_eq!(AllocFn::from_u32(u32::MAX), None);
        // The reported names, one per slot, are memtrack-common's.
        assert_eq!(AllocFn::ALL.len(), memtrack_common::FUNCTION_NAMES.len());
        assert_eq!(AllocFn::OperatorNewArray.name(), "operator new[]");
        assert_eq!(AllocFn::MiPosixMemalign.name(), "mi_posix_memalign");
    }

    #[test]
    fn symbols_map_to_functions() {
        assert_eq!(AllocFn::from_symbol("malloc"), Some(AllocFn::Malloc));
        assert_eq!(AllocFn::from_symbol("cfree"), Some(AllocFn::Free));
        assert_eq!(
            AllocFn::from_symbol("_ZdlPvm"),
            Some(AllocFn::OperatorDelete)
        );
        assert_eq!(
            AllocFn::from_symbol("_ZnamSt11align_val_t"),
            Some(AllocFn::OperatorNewArray)
        );
        assert_eq!(
            AllocFn::from_symbol("_rjem_sdallocx"),
            Some(AllocFn::Dallocx)
        );
        assert_eq!(AllocFn::from_symbol("je_malloc"), Some(AllocFn::Malloc));
        assert_eq!(
            AllocFn::from_symbol("mi_zalloc_aligned"),
            Some(AllocFn::MiMalloc)
        );
        assert_eq!(
            AllocFn::from_symbol("tc_deletearray"),
            Some(AllocFn::OperatorDeleteArray)
        );
        // Prefixes only apply to jemalloc's API names.
        assert_eq!(AllocFn::from_symbol("je__Znwm"), None);
        assert_eq!(AllocFn::from_symbol("_rjem_mi_malloc"), None);
        assert_eq!(AllocFn::from_symbol("__libc_malloc"), None);
        assert_eq!(AllocFn::from_symbol("malloc_usable_size"), None);
    }

    #[test]
    fn only_free_like_functions_have_no_return_probe() {
        let without: Vec<_> = AllocFn::ALL
            .into_iter()
            .filter(|f| !f.has_return_probe())
            .collect();
        assert_eq!(
            without,
            vec![
                AllocFn::Free,
                AllocFn::OperatorDelete,
                AllocFn::OperatorDeleteArray,
                AllocFn::Dallocx,
                AllocFn::MiFree
            ]
        );
    }

    #[test]
    fn every_function_fits_the_kernel_counter_slots() {
        assert!(AllocFn::ALL.len() <= memtrack_common::NUM_FUNCS);
        assert_eq!(AllocFn::Free as u32, memtrack_common::func::FREE);
    }

    #[test]
    fn argument_registers_follow_the_prototypes() {
        assert_eq!(AllocFn::Malloc.argument_registers(), &[Register::RDI]);
        assert_eq!(
            AllocFn::PosixMemalign.argument_registers(),
            &[Register::RDI, Register::RSI, Register::RDX]
        );
        assert_eq!(
            AllocFn::Rallocx.argument_registers(),
            &[Register::RDI, Register::RSI]
        );
        assert_eq!(
            AllocFn::OperatorDelete.argument_registers(),
            &[Register::RDI]
        );
    }
}
