//! A process's command line made comparable across runs and checkouts: what `memtrack
//! diff` pairs processes by ([`crate::pairing`]) and what the history exports name them
//! by ([`crate::history`]).
//!
//! Three things differ between two runs of the same program that a person would still
//! call the same process:
//!
//! - a **cargo hash** in the program's file name (`alloc-1a2b3c4d5e6f7a8b`: `-` and 16
//!   hex digits), new with every rebuild: [`program_key`] leaves it out;
//! - the **checkout** (or target directory) the program and its arguments' paths lie
//!   in: `base/target/release/prog` against `new/target/release/prog`. [`moved_root`]
//!   finds the directories two program paths differ by, [`relocate`] puts one in place
//!   of the other;
//! - **harness flags** that change how long or how verbosely a harness measures, not
//!   what it runs ([`HARNESS_FLAGS`]: criterion's `--measurement-time`, cargo's
//!   `--bench`, divan's `--sample-count`, libtest's `--test-threads`, ...):
//!   [`strip_harness_flags`] leaves them out.

/// A harness flag: its name and whether it takes a value as the next argument
/// (`--measurement-time 5`). Its `--name=value` form is always recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HarnessFlag {
    /// `--measurement-time`.
    pub name: &'static str,
    /// Whether a separate argument after it is its value.
    pub takes_value: bool,
}

const fn flag(name: &'static str, takes_value: bool) -> HarnessFlag {
    HarnessFlag { name, takes_value }
}

/// The flags of benchmark and test harnesses that change how a run measures or prints,
/// not which benchmarks or tests it runs (a filter, `--exact`, `--ignored` or `--list`
/// is kept: it changes what runs). From the harnesses' own `--help`: cargo passes
/// `--bench` to every bench target; criterion 0.5-0.7; divan 0.1; libtest.
pub const HARNESS_FLAGS: &[HarnessFlag] = &[
    // cargo bench
    flag("--bench", false),
    // criterion
    flag("--measurement-time", true),
    flag("--warm-up-time", true),
    flag("--sample-size", true),
    flag("--nresamples", true),
    flag("--noise-threshold", true),
    flag("--confidence-level", true),
    flag("--significance-level", true),
    flag("--save-baseline", true),
    flag("--baseline", true),
    flag("--baseline-lenient", true),
    flag("--discard-baseline", false),
    flag("--noplot", false),
    flag("--plotting-backend", true),
    flag("--output-format", true),
    flag("--quick", false),
    flag("--verbose", false),
    flag("--quiet", false),
    flag("--color", true),
    // divan
    flag("--sample-count", true),
    flag("--min-time", true),
    flag("--max-time", true),
    flag("--skip-ext-time", false),
    flag("--timer", true),
    flag("--bytes-format", true),
    // libtest
    flag("--test-threads", true),
    flag("--nocapture", false),
    flag("--show-output", false),
    flag("-q", false),
];

/// A program's path with a cargo hash left out of its file name:
/// `target/release/deps/alloc-1a2b3c4d5e6f7a8b` is `target/release/deps/alloc`.
pub fn program_key(program: &str) -> String {
    let (dir, name) = match program.rsplit_once('/') {
        Some((dir, name)) => (&program[..=dir.len()], name),
        None => ("", program),
    };
    match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            format!("{dir}{stem}")
        }
        _ => program.to_owned(),
    }
}

/// The file name of a program, its cargo hash left out: `alloc` for
/// `/ci/new/target/release/deps/alloc-1a2b3c4d5e6f7a8b`.
pub fn program_name(program: &str) -> String {
    let key = program_key(program);
    match key.rsplit_once('/') {
        Some((_, name)) => name.to_owned(),
        None => key,
    }
}

/// A command line with the cargo hash left out of its program ([`program_key`]).
pub fn command_key(command: &[String]) -> Vec<String> {
    let mut out = command.to_vec();
    if let Some(program) = out.first_mut() {
        *program = program_key(program);
    }
    out
}

/// The command's arguments (its program kept) without [`HARNESS_FLAGS`], and the flags
/// left out, as written (`--measurement-time 5` is one entry).
pub fn strip_harness_flags(command: &[String]) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::with_capacity(command.len());
    let mut dropped = Vec::new();
    let mut args = command.iter();
    if let Some(program) = args.next() {
        kept.push(program.clone());
    }
    while let Some(arg) = args.next() {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        match HARNESS_FLAGS.iter().find(|f| f.name == name) {
            Some(f) if f.takes_value && name == arg => match args.next() {
                Some(value) => dropped.push(format!("{arg} {value}")),
                None => dropped.push(arg.clone()),
            },
            Some(_) => dropped.push(arg.clone()),
            None => kept.push(arg.clone()),
        }
    }
    (kept, dropped)
}

/// The directories two programs' paths differ by, when their last components (the
/// file name, cargo hash left out, and whatever directories follow the roots) agree and
/// their leading ones differ: `("/ci/base", "/ci/new")` for `/ci/base/target/release/prog`
/// and `/ci/new/target/release/prog`. None for equal paths, different file names, or a
/// path with no directory.
pub fn moved_root(base_program: &str, new_program: &str) -> Option<(String, String)> {
    let (base, new) = (program_key(base_program), program_key(new_program));
    if base == new || base.starts_with('/') != new.starts_with('/') {
        return None;
    }
    let (b, n): (Vec<&str>, Vec<&str>) = (base.split('/').collect(), new.split('/').collect());
    let common = b
        .iter()
        .rev()
        .zip(n.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 || common == b.len() || common == n.len() {
        return None;
    }
    let root = |parts: &[&str]| parts.join("/");
    let (base_root, new_root) = (root(&b[..b.len() - common]), root(&n[..n.len() - common]));
    // `/a` split is ["", "a"]: a root of "" is `/` itself, which moves nothing.
    if base_root.is_empty() || new_root.is_empty() {
        return None;
    }
    Some((base_root, new_root))
}

/// `text` with every path that starts with directory `from` made to start with `to`
/// instead: `from` where it begins `text` or follows `=`, `:` or `,`, and is followed
/// by `/` or ends `text` (so `/ci/base` is not found in `/ci/baseline`).
pub fn relocate(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in text.match_indices(from) {
        if at < rest {
            continue;
        }
        let before_ok = at == 0 || matches!(text.as_bytes()[at - 1], b'=' | b':' | b',');
        let end = at + from.len();
        let after_ok = end == text.len() || text.as_bytes()[end] == b'/';
        if before_ok && after_ok {
            out.push_str(&text[rest..at]);
            out.push_str(to);
            rest = end;
        }
    }
    out.push_str(&text[rest..]);
    out
}

/// A command line with [`relocate`] applied to every argument, the program included.
pub fn relocate_command(command: &[String], from: &str, to: &str) -> Vec<String> {
    command.iter().map(|a| relocate(a, from, to)).collect()
}

/// A name for a process that stays the same from checkout to checkout, for history
/// (Bencher, github-action-benchmark): the program's file name (cargo hash left out)
/// and its arguments, harness flags left out and every path below `root` (the
/// checkout, e.g. the directory `memtrack report` runs in) made relative to it
/// (`./data/input`), joined with spaces.
pub fn stable_name(command: &[String], root: Option<&str>) -> String {
    let (kept, _) = strip_harness_flags(command);
    let mut parts = kept.into_iter();
    let mut out = parts.next().map(|p| program_name(&p)).unwrap_or_default();
    for arg in parts {
        let arg = match root {
            Some(root) if root.starts_with('/') && root.len() > 1 => {
                relocate(&arg, root.trim_end_matches('/'), ".")
            }
            _ => arg,
        };
        out.push(' ');
        out.push_str(&arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn cargo_hashes_are_left_out_of_program_names() {
        assert_eq!(
            program_key("target/release/deps/alloc-1a2b3c4d5e6f7a8b"),
            "target/release/deps/alloc"
        );
        assert_eq!(program_key("my-program"), "my-program");
        assert_eq!(program_key("alloc-1a2b3c4d5e6f7a8b"), "alloc");
        // 15 or 17 digits, or not hex: no hash.
        assert_eq!(program_key("a-1a2b3c4d5e6f7a8"), "a-1a2b3c4d5e6f7a8");
        assert_eq!(program_key("a-1a2b3c4d5e6f7a8bc"), "a-1a2b3c4d5e6f7a8bc");
        assert_eq!(program_key("a-1a2b3c4d5e6f7a8g"), "a-1a2b3c4d5e6f7a8g");
        assert_eq!(
            program_name("/ci/new/target/release/deps/alloc-1a2b3c4d5e6f7a8b"),
            "alloc"
        );
        assert_eq!(program_name("true"), "true");
    }

    #[test]
    fn harness_flags_are_left_out_with_their_values() {
        let (kept, dropped) = strip_harness_flags(&words(
            "bench --bench --measurement-time 5 grow --warm-up-time=1 --exact --noplot -q",
        ));
        assert_eq!(kept, words("bench grow --exact"));
        assert_eq!(
            dropped,
            [
                "--bench",
                "--measurement-time 5",
                "--warm-up-time=1",
                "--noplot",
                "-q"
            ]
        );
        // A value flag at the end, and the program itself never taken for a flag.
        let (kept, dropped) = strip_harness_flags(&words("--bench x --sample-size"));
        assert_eq!(
            (kept, dropped),
            (words("--bench x"), words("--sample-size"))
        );
    }

    #[test]
    fn the_moved_root_is_what_two_program_paths_differ_by() {
        let root = |a, b| moved_root(a, b);
        assert_eq!(
            root(
                "/ci/base/target/release/prog",
                "/ci/new/target/release/prog"
            ),
            Some(("/ci/base".into(), "/ci/new".into()))
        );
        assert_eq!(
            root(
                "/w/a/target/release/deps/alloc-1a2b3c4d5e6f7a8b",
                "/w/b/t/release/deps/alloc-fedcba9876543210"
            ),
            Some(("/w/a/target".into(), "/w/b/t".into()))
        );
        assert_eq!(
            root("base/prog", "new/prog"),
            Some(("base".into(), "new".into()))
        );
        assert_eq!(root("/ci/base/prog", "/ci/base/prog"), None);
        assert_eq!(root("/ci/base/prog", "/ci/new/other"), None);
        assert_eq!(root("prog", "new/prog"), None);
        assert_eq!(root("/prog", "/x/prog"), None);
        assert_eq!(root("/x/prog", "x/prog"), None);
    }

    #[test]
    fn relocation_replaces_whole_leading_directories_only() {
        let r = |t| relocate(t, "/ci/base", "/ci/new");
        assert_eq!(r("/ci/base/data/in"), "/ci/new/data/in");
        assert_eq!(r("/ci/base"), "/ci/new");
        assert_eq!(r("--input=/ci/base/x"), "--input=/ci/new/x");
        assert_eq!(
            r("PATH=/ci/base/bin:/ci/base/sbin"),
            "PATH=/ci/new/bin:/ci/new/sbin"
        );
        assert_eq!(r("/ci/baseline/x"), "/ci/baseline/x");
        assert_eq!(r("x/ci/base/y"), "x/ci/base/y");
        assert_eq!(relocate("anything", "", "/x"), "anything");
    }

    #[test]
    fn stable_names_survive_a_new_checkout() {
        let a = stable_name(
            &words("/ci/base/target/release/deps/alloc-1a2b3c4d5e6f7a8b --bench /ci/base/in.txt"),
            Some("/ci/base"),
        );
        let b = stable_name(
            &words("/ci/new/target/release/deps/alloc-fedcba9876543210 --bench /ci/new/in.txt"),
            Some("/ci/new/"),
        );
        assert_eq!(a, "alloc ./in.txt");
        assert_eq!(a, b);
        assert_eq!(stable_name(&words("/usr/bin/sh -c x"), None), "sh -c x");
        assert_eq!(stable_name(&words("sh /etc/x"), Some("/")), "sh /etc/x");
        assert_eq!(stable_name(&[], None), "");
    }
}
