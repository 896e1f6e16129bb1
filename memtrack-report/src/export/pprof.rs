//! pprof's `profile.proto`, gzipped: one profile for all the processes shown, each sample
//! one stack of one process (labels `pid`, `command`, `benchmark` for a region, and
//! `image`, numbered from 1, for a process that called `execve`).
//!
//! Sample values, in this order: `alloc_objects` (count) and `alloc_space` (bytes)
//! allocated, `inuse_objects` / `inuse_space` live at the end (Go's heap profile names,
//! which pprof's tools know), and `peak_objects` / `peak_space` live at the peak
//! (t-gmax). The default is `alloc_space`. The counts are exact, not sampled.
//!
//! Locations are return addresses (one per object and address, shared by processes),
//! given as the call site (return address - 1) in the object's ELF address space; each
//! mapping is one object (path and build id) from address 0. A location's lines are its
//! logical frames, innermost first, so inlined functions show as pprof expects.

use std::{collections::HashMap, io::Write as _, path::Path};

use flate2::{Compression, write::GzEncoder};
use memtrack_record::stacks::StackObject;
use prost::Message as _;

use crate::{
    Result,
    stack_profile::{Place, StackProfile},
};

/// The messages of pprof's `profile.proto` (package `perftools.profiles`) that memtrack
/// writes, with the field numbers of the published definition.
pub mod proto {
    /// A profile: samples, and the tables they refer to.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each sample value means.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// The objects code was mapped from.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// The code locations samples refer to.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// The functions locations refer to.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Every string; entry 0 is "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// When collection began, ns since the Unix epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long collection took, ns.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// Free-form comments (string table indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// The preferred sample type (string table index of its type).
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A value's type and unit (string table indices).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// e.g. "alloc_space".
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// e.g. "bytes".
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// Values of one stack.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Location ids, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Labels.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A sample label: a string or a number.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// The key (string table index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// A string value (string table index).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// A numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// The unit of `num` (string table index).
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// An object mapped into memory.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Its id (non-zero).
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// First address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// Address limit.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// File offset of the first address.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// Its path (string table index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// Its build id (string table index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Whether its locations have functions.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// ... file names.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// ... line numbers.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// ... inlined frames.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// A code location: one address, its inlined functions expanded.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Its id (non-zero).
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping (0: none).
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// The address.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Its lines, innermost (inlined) first, the function it is in last.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    /// A function and line of a location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// The function's id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// Line number (0: unknown).
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// Column number (0: unknown).
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Its id (non-zero).
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its name, demangled (string table index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Its name as the system knows it (string table index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Its source file (string table index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// Its first line (0: unknown).
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The sample types, in value order: (type, unit).
pub const SAMPLE_TYPES: [(&str, &str); 6] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
    ("peak_objects", "count"),
    ("peak_space", "bytes"),
];

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Strings::default();
        strings.get("");
        strings
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The id of `object`'s mapping, made (numbered from 1, in order) if it has none yet.
fn mapping_of(
    object: &StackObject,
    mappings: &mut Vec<proto::Mapping>,
    ids: &mut HashMap<StackObject, u64>,
    strings: &mut Strings,
) -> u64 {
    *ids.entry(object.clone()).or_insert_with(|| {
        let id = mappings.len() as u64 + 1;
        mappings.push(proto::Mapping {
            id,
            filename: strings.get(&object.path.to_string_lossy()),
            build_id: strings.get(object.build_id.as_deref().unwrap_or("")),
            ..Default::default()
        });
        id
    })
}

/// The profile's executable, as far as its stacks tell: the object most complete stacks
/// end in (their outermost frame is the program's entry point, `_start`, which the
/// executable holds, static or dynamic); `None` without a complete stack.
fn executable(profile: &StackProfile) -> Option<&StackObject> {
    let mut ends: HashMap<&StackObject, u64> = HashMap::new();
    for stack in &profile.stacks {
        if let Some(Place::Object { object, .. }) = stack.frames.last().map(|f| &f.place) {
            *ends.entry(object).or_default() += 1;
        }
    }
    ends.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(object, _)| object)
}

/// The profile of `profiles` (not yet encoded).
pub fn build(profiles: &[StackProfile]) -> proto::Profile {
    let mut strings = Strings::new();
    let sample_type = SAMPLE_TYPES
        .iter()
        .map(|(t, u)| proto::ValueType {
            r#type: strings.get(t),
            unit: strings.get(u),
        })
        .collect();
    let mut mappings: Vec<proto::Mapping> = Vec::new();
    let mut mapping_ids = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    // Anonymous addresses mean something only in their own process.
    let mut location_ids: HashMap<(Option<u32>, &Place), u64> = HashMap::new();
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut samples = Vec::new();
    // pprof takes the first mapping for the program's: the executables come first.
    for object in profiles.iter().filter_map(executable) {
        mapping_of(object, &mut mappings, &mut mapping_ids, &mut strings);
    }
    let (pid_key, command_key, benchmark_key) = (
        strings.get("pid"),
        strings.get("command"),
        strings.get("benchmark"),
    );
    // Named only in a profile with an image of a process that exec'd.
    let image_key = profiles
        .iter()
        .any(|p| p.images > 1)
        .then(|| strings.get("image"));
    for profile in profiles {
        let mut labels = vec![
            proto::Label {
                key: pid_key,
                num: i64::from(profile.pid),
                ..Default::default()
            },
            proto::Label {
                key: command_key,
                str: strings.get(&profile.command.join(" ")),
                ..Default::default()
            },
        ];
        if let Some(uri) = &profile.benchmark {
            labels.push(proto::Label {
                key: benchmark_key,
                str: strings.get(uri),
                ..Default::default()
            });
        }
        if let Some(key) = image_key.filter(|_| profile.images > 1) {
            labels.push(proto::Label {
                key,
                num: profile.image as i64,
                ..Default::default()
            });
        }
        for stack in &profile.stacks {
            let mut location_id = Vec::new();
            for frame in &stack.frames {
                let owner = matches!(frame.place, Place::Anonymous { .. }).then_some(profile.pid);
                if let Some(&id) = location_ids.get(&(owner, &frame.place)) {
                    location_id.push(id);
                    continue;
                }
                let mapping_id = match &frame.place {
                    Place::Object { object, .. } => {
                        let id = mapping_of(object, &mut mappings, &mut mapping_ids, &mut strings);
                        let mapping = &mut mappings[id as usize - 1];
                        let address = frame.shown_address().unwrap_or(0);
                        mapping.memory_limit = mapping.memory_limit.max(address + 1);
                        if frame.symbolized {
                            mapping.has_functions = true;
                            let lines = frame.logical.iter().any(|l| l.location.is_some());
                            mapping.has_filenames |= lines;
                            mapping.has_line_numbers |= lines;
                            mapping.has_inline_frames |= frame.logical.len() > 1;
                        }
                        id
                    }
                    _ => 0,
                };
                let line = frame
                    .logical
                    .iter()
                    .map(|logical| {
                        let file = logical
                            .location
                            .as_ref()
                            .map(|l| l.path.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        let key = (logical.function.clone(), file);
                        let next = functions.len() as u64 + 1;
                        let function_id =
                            *function_ids.entry(key).or_insert_with_key(|(name, file)| {
                                let name = strings.get(name);
                                functions.push(proto::Function {
                                    id: next,
                                    name,
                                    system_name: name,
                                    filename: strings.get(file),
                                    start_line: 0,
                                });
                                next
                            });
                        let location = logical.location.as_ref();
                        proto::Line {
                            function_id,
                            line: location.and_then(|l| l.line).map_or(0, i64::from),
                            column: location.and_then(|l| l.column).map_or(0, i64::from),
                        }
                    })
                    .collect();
                let id = locations.len() as u64 + 1;
                locations.push(proto::Location {
                    id,
                    mapping_id,
                    address: frame.shown_address().unwrap_or(0),
                    line,
                });
                location_ids.insert((owner, &frame.place), id);
                location_id.push(id);
            }
            let c = &stack.counts;
            samples.push(proto::Sample {
                location_id,
                value: [
                    c.alloc_blocks,
                    c.alloc_bytes,
                    c.live_blocks,
                    c.live_bytes,
                    c.at_peak_blocks,
                    c.at_peak_bytes,
                ]
                .map(signed)
                .to_vec(),
                label: labels.clone(),
            });
        }
    }
    let time_nanos = profiles
        .iter()
        .map(|p| signed(p.started_unix_ms.saturating_mul(1_000_000)))
        .min()
        .unwrap_or(0);
    let duration_nanos = profiles
        .iter()
        .map(|p| signed(p.end_ns.saturating_sub(p.start_ns)))
        .max()
        .unwrap_or(0);
    let comment = vec![strings.get(
        "memtrack: every allocation counted exactly (not sampled); locations are call sites \
         in each object's ELF address space",
    )];
    let default_sample_type = strings.get("alloc_space");
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos,
        duration_nanos,
        comment,
        default_sample_type,
    }
}

/// The gzipped encoding of a profile (what `.pb.gz` files hold).
pub fn encode_gzip(profile: &proto::Profile) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec())
        .expect("writing to memory does not fail");
    gz.finish().expect("writing to memory does not fail")
}

/// Writes the gzipped profile of `profiles` to `path`.
pub fn write(profiles: &[StackProfile], path: &Path) -> Result<()> {
    super::write_file(path, &encode_gzip(&build(profiles)))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use memtrack_record::stacks::StackCounts;

    use super::*;
    use crate::{stack_profile::ShownFrame, stack_profile::ShownStack, symbolize::LogicalFrame};

    fn object(name: &str) -> StackObject {
        StackObject {
            path: PathBuf::from(name),
            build_id: None,
        }
    }

    fn frame(object_name: &str, address: u64) -> ShownFrame {
        ShownFrame {
            place: Place::Object {
                object: object(object_name),
                address,
                interrupted: false,
            },
            logical: vec![LogicalFrame {
                function: format!("f{address:x}"),
                location: None,
                inlined: false,
            }],
            symbolized: true,
        }
    }

    #[test]
    fn the_first_mapping_is_the_executable_the_stacks_start_in() {
        // The top stack's innermost frames are in a library, and one stack is cut:
        // the executable is where the complete stacks end (_start).
        let stack = |frames: Vec<ShownFrame>| ShownStack {
            id: Some(0),
            frames,
            counts: StackCounts {
                alloc_blocks: 1,
                alloc_bytes: 8,
                ..StackCounts::default()
            },
        };
        let mut cut = stack(vec![frame("/lib/libstdc++.so.6", 0x10)]);
        cut.frames.push(ShownFrame {
            place: Place::Marker("[truncated]"),
            logical: vec![],
            symbolized: false,
        });
        let profile = StackProfile {
            pid: 7,
            command: vec!["./tree".into()],
            image: 1,
            images: 1,
            benchmark: None,
            started_unix_ms: 0,
            start_ns: 0,
            end_ns: 1,
            peak_ns: None,
            peak_bytes_allocated: None,
            bytes_allocated: None,
            depth_limit: 64,
            stacks: vec![
                cut,
                stack(vec![
                    frame("/lib/libstdc++.so.6", 0x20),
                    frame("/lib/libc.so.6", 0x30),
                    frame("/work/tree", 0x40),
                ]),
                stack(vec![
                    frame("/lib/libc.so.6", 0x50),
                    frame("/work/tree", 0x60),
                ]),
            ],
            total: StackCounts::default(),
            counters: None,
            problems: vec![],
            regions: vec![],
            earlier_images: vec![],
        };
        let built = build(&[profile]);
        let names: Vec<&str> = built
            .mapping
            .iter()
            .map(|m| built.string_table[m.filename as usize].as_str())
            .collect();
        assert_eq!(
            names,
            ["/work/tree", "/lib/libstdc++.so.6", "/lib/libc.so.6"]
        );
        assert_eq!(built.mapping[0].id, 1);
    }
}
