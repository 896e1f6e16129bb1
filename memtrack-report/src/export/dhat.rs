//! valgrind DHAT's JSON format (file version 2), which `dh_view.html` opens as it opens
//! the files of `valgrind --tool=dhat` and of dhat-rs. One file per process: the format
//! has one command and one pid.
//!
//! The fields are valgrind's, in its order (its `dh_main.c` describes them):
//! `dhatFileVersion`, `mode`, `verb`, `bklt` (block lifetimes: yes), `bkacc` (block
//! accesses: no, memtrack does not see reads and writes), `tu`/`Mtu` (the time unit:
//! "bytes allocated" and "MB allocated", see below), `tuth` (the short-lived threshold,
//! in the time unit), `cmd`, `pid`, `te` (end), `tg` (t-gmax), then `pps`, one program
//! point per stack: `tb`/`tbk` total bytes and blocks, `tl` total lifetimes (left out
//! when the lifetimes were not recorded, so the viewer shows no number rather than a
//! wrong one), `mb`/`mbk` the stack's own
//! maximum, `gb`/`gbk` at t-gmax, `eb`/`ebk` at t-end, `fs` frame indices; and `ftbl`,
//! the frame table, `"[root]"` first.
//!
//! Time is memtrack's allocation clock, as valgrind's is the instructions executed: the
//! requested bytes the scope allocated (`ScopeStacks::bytes_allocated`), so `te` is the
//! scope's bytes allocated, `tg` those allocated when its live bytes peaked, and a
//! block's lifetime the bytes allocated while it was live. memtrack's own cost per call
//! does not stretch it, and a deterministic program gets the same lifetimes in every
//! run. Files written before stacks file version 2 have no lifetimes and no allocation
//! clock: theirs are written in µs since the scope's start, as dhat-rs writes, without
//! `tl`.
//!
//! Frames are written the way valgrind writes them: `0xADDR: function (file:line)`, the
//! address being the call site (return address - 1); `0xADDR: function (in OBJECT)`
//! without line information; `0xADDR: object+0xADDR (in PATH, build id ID)` without
//! symbols. Frame indices are given per (frame, logical frame), so two stacks
//! are never merged by the viewer even if they print the same (it requires every
//! program point's frames to be distinct).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    Result,
    stack_profile::{Place, ShownFrame, StackProfile},
    symbolize::LogicalFrame,
};

/// The short-lived threshold written as `tuth`, in bytes allocated: 0, a block released
/// before the process allocated anything else (what heaptrack calls a temporary
/// allocation). dh_view's "short-lived" sort shows the stacks whose average lifetime is
/// at most this.
pub const SHORT_LIVED_BYTES: u64 = 0;

/// The threshold written for files without the allocation clock, in µs (what dhat-rs
/// writes).
const SHORT_LIVED_US: u64 = 10;

#[derive(Serialize)]
#[allow(non_snake_case)]
struct DhatFile {
    dhatFileVersion: u32,
    mode: &'static str,
    verb: &'static str,
    bklt: bool,
    bkacc: bool,
    tu: &'static str,
    Mtu: &'static str,
    tuth: u64,
    cmd: String,
    pid: u32,
    te: u64,
    tg: u64,
    pps: Vec<ProgramPoint>,
    ftbl: Vec<String>,
}

#[derive(Serialize)]
struct ProgramPoint {
    tb: u64,
    tbk: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tl: Option<u64>,
    mb: u64,
    mbk: u64,
    gb: u64,
    gbk: u64,
    eb: u64,
    ebk: u64,
    fs: Vec<usize>,
}

fn micros(ns: u64) -> u64 {
    ns / 1000
}

/// How a logical frame is written in the frame table.
fn frame_string(frame: &ShownFrame, logical: &LogicalFrame) -> String {
    let Some(address) = frame.shown_address() else {
        return logical.function.clone(); // a marker
    };
    // Valgrind's style: 0x and upper-case digits (Rust's `#X` writes a lower-case 0x).
    let address = format!("{address:#X}");
    match (&frame.place, &logical.location) {
        (_, Some(location)) => format!("{address}: {} ({location})", logical.function),
        (Place::Object { object, .. }, None) if frame.symbolized => {
            format!(
                "{address}: {} (in {})",
                logical.function,
                object.path.display()
            )
        }
        (Place::Object { object, .. }, None) => format!(
            "{address}: {} (in {}, build id {})",
            logical.function,
            object.path.display(),
            object.build_id.as_deref().unwrap_or("none")
        ),
        _ => format!("{address}: {} (not in a file)", logical.function),
    }
}

/// The DHAT JSON of one profile.
pub fn render(profile: &StackProfile) -> String {
    let mut ftbl = vec!["[root]".to_string()];
    let mut index: HashMap<(&Place, usize), usize> = HashMap::new();
    let pps = profile
        .stacks
        .iter()
        .map(|stack| {
            let mut fs = Vec::new();
            for frame in &stack.frames {
                for (depth, logical) in frame.logical.iter().enumerate() {
                    let i = *index.entry((&frame.place, depth)).or_insert_with(|| {
                        ftbl.push(frame_string(frame, logical));
                        ftbl.len() - 1
                    });
                    fs.push(i);
                }
            }
            let c = &stack.counts;
            ProgramPoint {
                tb: c.alloc_bytes,
                tbk: c.alloc_blocks,
                tl: c.total_lifetime,
                mb: c.max_live_bytes,
                mbk: c.max_live_blocks,
                gb: c.at_peak_bytes,
                gbk: c.at_peak_blocks,
                eb: c.live_bytes,
                ebk: c.live_blocks,
                fs,
            }
        })
        .collect();
    // The allocation clock, or µs for files written before it was recorded.
    let (tu, mtu, tuth, te, tg) = match profile.bytes_allocated {
        Some(end) => (
            "bytes allocated",
            "MB allocated",
            SHORT_LIVED_BYTES,
            end,
            profile.peak_bytes_allocated.unwrap_or(0),
        ),
        None => {
            let since_start = |ns: u64| micros(ns.saturating_sub(profile.start_ns));
            (
                "µs",
                "s",
                SHORT_LIVED_US,
                since_start(profile.end_ns),
                profile.peak_ns.map_or(0, since_start),
            )
        }
    };
    let file = DhatFile {
        dhatFileVersion: 2,
        mode: "heap",
        verb: "Allocated",
        bklt: true,
        bkacc: false,
        tu,
        Mtu: mtu,
        tuth,
        cmd: profile.command.join(" "),
        pid: profile.pid,
        te,
        tg,
        pps,
        ftbl,
    };
    serde_json::to_string(&file).expect("DHAT files always serialise")
}

/// Where the DHAT file of `pid` goes: `path` itself when there is one profile, else
/// `path` with `.PID` before its extension (`dhat.json` -> `dhat.1234.json`).
pub fn path_for(path: &Path, pid: u32, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

/// Writes one DHAT file per profile (see [`path_for`]) and returns their paths.
pub fn write_all(profiles: &[StackProfile], path: &Path) -> Result<Vec<PathBuf>> {
    let several = profiles.len() > 1;
    profiles
        .iter()
        .map(|profile| {
            let target = path_for(path, profile.pid, several);
            super::write_file(&target, render(profile).as_bytes())?;
            Ok(target)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_processes_get_their_pid_in_the_name() {
        let path = Path::new("/tmp/out/dhat.json");
        assert_eq!(path_for(path, 7, false), path);
        assert_eq!(path_for(path, 7, true), Path::new("/tmp/out/dhat.7.json"));
        assert_eq!(
            path_for(Path::new("profile"), 7, true),
            Path::new("profile.7")
        );
    }
}
