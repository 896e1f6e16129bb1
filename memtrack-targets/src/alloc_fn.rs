//! The allocator-family functions memtrack knows how to probe.
//!
//! This module exists so that the symbol names, the numeric ids shared with
//! the eBPF side (`#[repr(u32)]`), and the System V argument registers of each
//! function are defined in exactly one place.

use iced_x86::Register;

/// The allocator-family functions memtrack knows.
///
/// The discriminants are stable: they are the ids the eBPF programs and the
/// user-space tracker exchange, so never renumber them.
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
    /// `void free(void *ptr)`
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
}

impl AllocFn {
    /// Every function, in discriminant order.
    pub const ALL: [AllocFn; 10] = [
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
    ];

    /// The C symbol name (without any ELF symbol version).
    pub fn symbol(self) -> &'static str {
        match self {
            AllocFn::Malloc => "malloc",
            AllocFn::Calloc => "calloc",
            AllocFn::Realloc => "realloc",
            AllocFn::Reallocarray => "reallocarray",
            AllocFn::Free => "free",
            AllocFn::AlignedAlloc => "aligned_alloc",
            AllocFn::PosixMemalign => "posix_memalign",
            AllocFn::Memalign => "memalign",
            AllocFn::Valloc => "valloc",
            AllocFn::Pvalloc => "pvalloc",
        }
    }

    /// Whether memtrack also needs a return probe: every function that hands
    /// out memory does (the result is only known on return); `free` does not.
    pub fn has_return_probe(self) -> bool {
        !matches!(self, AllocFn::Free)
    }

    /// The function with discriminant `value`, if there is one.
    pub fn from_u32(value: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(value).ok()?).copied()
    }

    /// The argument registers (System V x86_64 ABI: `rdi`, `rsi`, `rdx`, in
    /// order) whose values the entry probe reads.
    ///
    /// All arguments are read, including `realloc`'s and `free`'s pointer and
    /// `posix_memalign`'s `memptr`, which the return probe needs.
    pub fn argument_registers(self) -> &'static [Register] {
        const RDI: &[Register] = &[Register::RDI];
        const RDI_RSI: &[Register] = &[Register::RDI, Register::RSI];
        const RDI_RSI_RDX: &[Register] = &[Register::RDI, Register::RSI, Register::RDX];
        match self {
            AllocFn::Malloc | AllocFn::Free | AllocFn::Valloc | AllocFn::Pvalloc => RDI,
            AllocFn::Calloc | AllocFn::Realloc | AllocFn::AlignedAlloc | AllocFn::Memalign => {
                RDI_RSI
            }
            AllocFn::Reallocarray | AllocFn::PosixMemalign => RDI_RSI_RDX,
        }
    }

    /// The function whose C symbol name is `name` (no version suffix).
    pub fn from_symbol(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.symbol() == name)
    }
}

impl std::fmt::Display for AllocFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.symbol())
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
            assert_eq!(AllocFn::from_symbol(f.symbol()), Some(*f));
        }
        assert_eq!(AllocFn::from_u32(10), None);
        assert_eq!(AllocFn::from_u32(u32::MAX), None);
        assert_eq!(AllocFn::from_symbol("cfree"), None);
    }

    #[test]
    fn only_free_has_no_return_probe() {
        let without: Vec<_> = AllocFn::ALL
            .into_iter()
            .filter(|f| !f.has_return_probe())
            .collect();
        assert_eq!(without, vec![AllocFn::Free]);
    }

    #[test]
    fn argument_registers_follow_the_prototypes() {
        assert_eq!(AllocFn::Malloc.argument_registers(), &[Register::RDI]);
        assert_eq!(
            AllocFn::PosixMemalign.argument_registers(),
            &[Register::RDI, Register::RSI, Register::RDX]
        );
        assert_eq!(
            AllocFn::Realloc.argument_registers(),
            &[Register::RDI, Register::RSI]
        );
    }
}
