//! Byte offsets of fields of the running kernel's structures, read from its BTF
//! (`/sys/kernel/btf/vmlinux`), for eBPF programs that read those fields without CO-RE
//! relocations (memtrack's loader hook reads `task_struct.blocked` and
//! `task_struct.ptrace`; see `memtrack_common::ld_hook`).
//!
//! Why a parser of its own: the BTF format (the kernel's
//! Documentation/bpf/btf.rst) is a stable ABI, and this needs one walk over its type
//! records; aya-obj 0.3 parses BTF but keeps struct members private, and the BTF crates
//! that expose them are LGPL-licensed. Only what finding a member needs is decoded: the
//! size of every record (to walk them), and struct and union members (to descend into
//! anonymous ones, as the kernel nests fields in unnamed structs and unions).

use std::path::Path;

use crate::Error;

/// Where the running kernel's BTF is.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;

/// BTF kinds (`BTF_KIND_*`).
mod kind {
    pub const INT: u32 = 1;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
    /// The highest kind this parser knows the record size of.
    pub const MAX: u32 = 19;
}

/// Nesting of anonymous structs and unions followed before giving up (the kernel's
/// structures nest a few levels).
const MAX_DEPTH: usize = 16;

/// A parsed BTF blob: where each type record starts, and the string section.
pub struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Byte offset in `types` of the record of type id `i + 1` (id 0 is void).
    starts: Vec<u32>,
}

/// One type record's fixed part.
#[derive(Clone, Copy)]
struct Record {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// The type id this one refers to (typedef, modifiers); a size for structs.
    size_or_type: u32,
    /// Offset in `types` of the kind-specific data after the fixed part.
    data: usize,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl<'a> Btf<'a> {
    /// Parses a little-endian BTF blob (what the kernel exports on x86_64). `what`
    /// names the blob in errors.
    pub fn parse(bytes: &'a [u8], what: &Path) -> Result<Self, Error> {
        let bad = |reason: String| Error::Btf {
            path: what.to_path_buf(),
            reason,
        };
        if bytes.len() < 24 {
            return Err(bad(format!(
                "{} bytes: shorter than a BTF header",
                bytes.len()
            )));
        }
        let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
        if magic != MAGIC {
            return Err(bad(format!(
                "magic {magic:#06x}, expected {MAGIC:#06x} (little-endian BTF)"
            )));
        }
        let field = |at| u32_at(bytes, at).unwrap_or(0) as usize;
        let (hdr_len, type_off, type_len, str_off, str_len) =
            (field(4), field(8), field(12), field(16), field(20));
        let section = |off: usize, len: usize, name: &str| {
            hdr_len
                .checked_add(off)
                .and_then(|start| Some((start, start.checked_add(len)?)))
                .and_then(|(start, end)| bytes.get(start..end))
                .ok_or_else(|| {
                    bad(format!(
                        "{name} section ({len} bytes at {off} after a {hdr_len}-byte header) \
                         runs past the end ({} bytes)",
                        bytes.len()
                    ))
                })
        };
        let types = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?;
        let mut btf = Btf {
            types,
            strings,
            starts: Vec::new(),
        };
        let mut at = 0usize;
        while at < types.len() {
            let record = btf
                .record_at(at)
                .ok_or_else(|| bad(format!("type record at byte {at} is truncated")))?;
            let size = record_data_size(&record).ok_or_else(|| {
                bad(format!(
                    "type record at byte {at} has kind {}, which this parser does not know",
                    record.kind
                ))
            })?;
            btf.starts.push(at as u32);
            at = record.data + size;
        }
        if at != types.len() {
            return Err(bad(format!(
                "the last type record runs past the type section ({} bytes)",
                types.len()
            )));
        }
        Ok(btf)
    }

    fn record_at(&self, at: usize) -> Option<Record> {
        let name_off = u32_at(self.types, at)?;
        let info = u32_at(self.types, at + 4)?;
        let size_or_type = u32_at(self.types, at + 8)?;
        Some(Record {
            name_off,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 != 0,
            size_or_type,
            data: at + 12,
        })
    }

    fn record(&self, id: u32) -> Option<Record> {
        let start = *self.starts.get((id as usize).checked_sub(1)?)?;
        self.record_at(start as usize)
    }

    fn name(&self, name_off: u32) -> &[u8] {
        let rest = self.strings.get(name_off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// The id of the struct named `name`, if the BTF has one.
    fn struct_id(&self, name: &str) -> Option<u32> {
        (1..=self.starts.len() as u32).find(|&id| {
            self.record(id).is_some_and(|r| {
                r.kind == kind::STRUCT && r.vlen > 0 && self.name(r.name_off) == name.as_bytes()
            })
        })
    }

    /// Follows typedefs and modifiers (const, volatile, ...) to the type they name.
    fn resolve(&self, mut id: u32) -> Option<Record> {
        for _ in 0..MAX_DEPTH {
            let record = self.record(id)?;
            match record.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = record.size_or_type
                }
                _ => return Some(record),
            }
        }
        None
    }

    /// The bit offset of member `member` in the struct or union `record`, looking into
    /// anonymous struct and union members too.
    fn member_bits(&self, record: Record, member: &str, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH || !matches!(record.kind, kind::STRUCT | kind::UNION) {
            return None;
        }
        for i in 0..record.vlen {
            let at = record.data + i * 12;
            let name_off = u32_at(self.types, at)?;
            let type_id = u32_at(self.types, at + 4)?;
            let raw = u32_at(self.types, at + 8)?;
            // With kind_flag, the low 24 bits are the offset and the high 8 bits a
            // bitfield's size.
            let bits = if record.kind_flag {
                raw & 0xff_ffff
            } else {
                raw
            } as u64;
            if name_off == 0 {
                if let Some(inner) = self
                    .resolve(type_id)
                    .and_then(|r| self.member_bits(r, member, depth + 1))
                {
                    return Some(bits + inner);
                }
            } else if self.name(name_off) == member.as_bytes() {
                return Some(bits);
            }
        }
        None
    }

    /// The byte offset of field `member` in `struct struct_name`; `None` when there is
    /// no such struct or field, or the field is a bitfield that does not start on a
    /// byte.
    pub fn member_offset(&self, struct_name: &str, member: &str) -> Option<u32> {
        let record = self.record(self.struct_id(struct_name)?)?;
        let bits = self.member_bits(record, member, 0)?;
        (bits % 8 == 0)
            .then(|| u32::try_from(bits / 8).ok())
            .flatten()
    }
}

/// Bytes of kind-specific data after a record's fixed 12 bytes; `None` for a kind this
/// parser does not know.
fn record_data_size(record: &Record) -> Option<usize> {
    let vlen = record.vlen;
    Some(match record.kind {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
        kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
        k if k <= kind::MAX => 0,
        _ => return None,
    })
}

/// The byte offsets of `task_struct.blocked` (the thread's blocked signals) and
/// `task_struct.ptrace` (non-zero while it is traced) in the running kernel.
pub fn task_signal_offsets() -> Result<(u32, u32), Error> {
    let path = Path::new(VMLINUX_BTF);
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // Linux 6.16+ maps its BTF into user space (private and read-only: it refuses a
    // shared mapping): no copy of its 5 MiB, where reading it took 10-35 ms here. Older
    // kernels refuse the mapping, and it is read instead.
    // SAFETY: the kernel's BTF never changes while the system runs, and the mapping is
    // read-only, so the slice it backs stays valid and unchanged while it lives.
    let mapped = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) };
    let read: Vec<u8>;
    let bytes: &[u8] = match &mapped {
        Ok(map) => map,
        Err(_) => {
            read = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            &read
        }
    };
    signal_offsets_in(bytes, path)
}

/// [`task_signal_offsets`] of the BTF blob `bytes` (`path` names it in errors).
fn signal_offsets_in(bytes: &[u8], path: &Path) -> Result<(u32, u32), Error> {
    let btf = Btf::parse(bytes, path)?;
    let offset = |member: &str| {
        btf.member_offset("task_struct", member)
            .ok_or_else(|| Error::Btf {
                path: path.to_path_buf(),
                reason: format!("no field task_struct.{member} at a byte offset"),
            })
    };
    Ok((offset("blocked")?, offset("ptrace")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob from type records (each its full bytes) and a string section.
    fn blob(types: &[Vec<u8>], strings: &[u8]) -> Vec<u8> {
        let types: Vec<u8> = types.concat();
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(strings);
        out
    }

    fn record(name_off: u32, kind: u32, vlen: u32, kind_flag: bool, size: u32) -> Vec<u8> {
        let info = (kind << 24) | vlen | if kind_flag { 1 << 31 } else { 0 };
        [name_off, info, size]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn member(name_off: u32, type_id: u32, offset: u32) -> Vec<u8> {
        [name_off, type_id, offset]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// Strings: 0 "", 1 "int", 5 "outer", 11 "a", 13 "b", 15 "inner", 21 "bits".
    const STRINGS: &[u8] = b"\0int\0outer\0a\0b\0inner\0bits\0";

    /// 1: int; 2: struct { int b; } (anonymous); 3: typedef of 2 named "inner";
    /// 4: struct outer { int a at 64 bits; anonymous (typedef 3) at 128 bits; }
    /// 5: an enum with two values (sizes the walk must skip); 6: struct with a
    /// bitfield at bit 3 (kind_flag).
    fn sample() -> Vec<u8> {
        let mut int = record(1, kind::INT, 0, false, 4);
        int.extend_from_slice(&0x20u32.to_le_bytes());
        let mut anon = record(0, kind::STRUCT, 1, false, 4);
        anon.extend(member(13, 1, 0));
        let typedef = record(15, kind::TYPEDEF, 0, false, 2);
        let mut outer = record(5, kind::STRUCT, 2, false, 24);
        outer.extend(member(11, 1, 64));
        outer.extend(member(0, 3, 128));
        let mut enumeration = record(0, kind::ENUM, 2, false, 4);
        enumeration.extend([0u8; 16]);
        let mut bits = record(21, kind::STRUCT, 1, true, 4);
        bits.extend(member(11, 1, (1 << 24) | 3));
        blob(&[int, anon, typedef, outer, enumeration, bits], STRINGS)
    }

    #[test]
    fn finds_members_also_inside_anonymous_members() {
        let bytes = sample();
        let btf = Btf::parse(&bytes, Path::new("sample")).unwrap();
        assert_eq!(btf.member_offset("outer", "a"), Some(8));
        assert_eq!(btf.member_offset("outer", "b"), Some(16));
        assert_eq!(btf.member_offset("outer", "c"), None);
        assert_eq!(btf.member_offset("nosuch", "a"), None);
        // A bitfield at bit 3 has no byte offset.
        assert_eq!(btf.member_offset("bits", "a"), None);
    }

    #[test]
    fn refuses_malformed_blobs_saying_why() {
        let mut bytes = sample();
        bytes[0] = 0;
        let err = Btf::parse(&bytes, Path::new("x"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("magic"), "{err}");

        let mut bytes = sample();
        bytes.truncate(bytes.len() - STRINGS.len() - 3);
        let err = Btf::parse(&bytes, Path::new("x"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("runs past the end"), "{err}");

        let bytes = blob(&[record(0, 31, 0, false, 0)], STRINGS);
        let err = Btf::parse(&bytes, Path::new("x"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("kind 31"), "{err}");

        let err = Btf::parse(&[0; 10], Path::new("x"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("shorter than a BTF header"), "{err}");
    }

    /// The running kernel's offsets: both exist, are distinct, and lie inside
    /// task_struct (a few KiB on x86_64).
    #[test]
    fn finds_the_task_signal_fields_of_this_kernel() {
        // memtrack needs BTF (memtrack-core refuses kernels without it).
        let (blocked, ptrace) = task_signal_offsets().unwrap();
        assert_ne!(blocked, ptrace);
        assert!(blocked < 16384 && ptrace < 16384, "{blocked} {ptrace}");
        assert_eq!(blocked % 8, 0, "sigset_t is 8-byte aligned");
        assert_eq!(ptrace % 4, 0, "an unsigned int is 4-byte aligned");
        // The same as from a copy read with read(2), the way for kernels that do not
        // map their BTF.
        let path = Path::new(VMLINUX_BTF);
        let copy = std::fs::read(path).unwrap();
        assert_eq!(signal_offsets_in(&copy, path).unwrap(), (blocked, ptrace));
    }
}
