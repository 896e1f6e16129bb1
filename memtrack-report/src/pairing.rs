//! Which process or benchmark of one run is which of another: the pairs `memtrack
//! diff` compares ([`crate::diff`]), and what another view of two runs (an HTML diff)
//! can pair by.
//!
//! Pids differ from run to run, and so, between two checkouts, do paths. Within each
//! results directory (the same path relative to BASE and to NEW), the rules below are
//! tried in order; each pairs only what the ones before left unpaired, and a
//! [`MatchedBy`] says which paired it:
//!
//! 1. **benchmarks** by uri ([`MatchedBy::Uri`]), and the n-th region of a uri with
//!    the n-th, in whichever process it ran;
//! 2. **processes** by command line, a cargo hash left out of the program's file name
//!    ([`MatchedBy::Command`]);
//! 3. by command line once the checkout is moved ([`MatchedBy::MovedCheckout`]): the
//!    directories two programs with the same file name differ by
//!    ([`command::moved_root`], e.g. `/ci/base` and `/ci/new`), put in place of each
//!    other in every argument of BASE's command; the candidate roots are tried in order
//!    of how many program paths give them;
//! 4. by command line with [harness flags](command::HARNESS_FLAGS) left out (criterion's
//!    `--measurement-time`, ...), a checkout moved or not ([`MatchedBy::HarnessFlags`]);
//! 5. by place in the process tree ([`MatchedBy::ProcessTree`]): a process whose parent
//!    is paired (or which has no tracked parent) and whose program file name is that of
//!    exactly one unpaired child of the parent's pair, itself the only unpaired child
//!    with that name: the arguments differ in a way no rule above explains (a temporary
//!    file's name, a seed), and nothing else could be its pair. Repeated until it pairs
//!    no more (a child's pair can make its own children's unambiguous).
//!
//! In rules 2-4, processes with the same command line pair in the order they started
//! (the second with the second). What no rule pairs is listed in
//! [`Pairing::only_in_base`] and [`Pairing::only_in_new`].

use std::{collections::BTreeMap, fmt, path::Path};

use memtrack_record::{Stats, TrackedProcess, escape_control, timeline::Timeline};

use crate::{command, limits::DirResults};

/// How a pair was matched (see the module documentation for the rules, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchedBy {
    /// Benchmarks with the same uri.
    Uri,
    /// Processes with the same command line (a cargo hash in the program's name aside).
    Command,
    /// The same command line once the checkout directory `base_root` is read as
    /// `new_root`.
    MovedCheckout {
        /// The directory in BASE's paths (`/ci/base`).
        base_root: String,
        /// The one in NEW's (`/ci/new`).
        new_root: String,
    },
    /// The same command line without harness flags (and with the checkout moved, if
    /// `moved` says so).
    HarnessFlags {
        /// The checkout moved from BASE's root to NEW's, if it did.
        moved: Option<(String, String)>,
        /// The harness flags left out of BASE's command, as written.
        base_flags: Vec<String>,
        /// Those left out of NEW's.
        new_flags: Vec<String>,
    },
    /// The only process with its program's file name among the unpaired children of
    /// paired parents, or among the processes with no tracked parent.
    ProcessTree {
        /// The parent (as [`Entry::what`] names it in BASE), or None for a process
        /// with no tracked parent (the command memtrack ran).
        parent: Option<String>,
    },
}

impl MatchedBy {
    /// Whether the two sides are named alike (same uri, same command line): the
    /// default, which text output need not spell out pair by pair.
    pub fn is_exact(&self) -> bool {
        matches!(self, MatchedBy::Uri | MatchedBy::Command)
    }
}

impl fmt::Display for MatchedBy {
    /// `same uri`, `same command line`, `command line with the checkout moved (/a →
    /// /b)`, `command line without harness flags (BASE --measurement-time 5; NEW none)`,
    /// `place in the process tree (child of process make)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchedBy::Uri => f.write_str("same uri"),
            MatchedBy::Command => f.write_str("same command line"),
            MatchedBy::MovedCheckout {
                base_root,
                new_root,
            } => write!(
                f,
                "command line with the checkout moved ({base_root} → {new_root})"
            ),
            MatchedBy::HarnessFlags {
                moved,
                base_flags,
                new_flags,
            } => {
                let list = |flags: &[String]| {
                    if flags.is_empty() {
                        "none".to_owned()
                    } else {
                        flags.join(" ")
                    }
                };
                f.write_str("command line without harness flags (")?;
                if let Some((from, to)) = moved {
                    write!(f, "checkout moved {from} → {to}; ")?;
                }
                write!(f, "BASE {}; NEW {})", list(base_flags), list(new_flags))
            }
            MatchedBy::ProcessTree { parent: Some(p) } => {
                write!(f, "place in the process tree (child of {p})")
            }
            MatchedBy::ProcessTree { parent: None } => {
                f.write_str("place in the process tree (no tracked parent)")
            }
        }
    }
}

/// One process, or one benchmark region of a process, of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry<'a> {
    /// Its results directory, relative to the one given (empty: that one).
    pub dir: &'a Path,
    /// The process (the benchmark's, for a benchmark).
    pub process: &'a TrackedProcess,
    /// For a benchmark, its index in `process.benchmarks`.
    pub benchmark: Option<usize>,
    /// Its position among the entries of its directory with the same uri (benchmarks)
    /// or command line, cargo hash aside (processes), in the order they started: 1 for
    /// the first.
    pub nth: usize,
}

impl<'a> Entry<'a> {
    /// `benchmark URI` or `process COMMAND`, with ` #2` for the second of that uri or
    /// command line and ` in DIR` for a directory below the one given; control
    /// characters escaped ([`escape_control`]: a newline cannot break a table row).
    pub fn what(&self) -> String {
        let name = match self.benchmark {
            Some(i) => format!(
                "benchmark {}",
                escape_control(&self.process.benchmarks[i].uri)
            ),
            None => format!(
                "process {}",
                escape_control(&self.process.command.join(" "))
            ),
        };
        let nth = if self.nth == 1 {
            String::new()
        } else {
            format!(" #{}", self.nth)
        };
        let place = if self.dir.as_os_str().is_empty() {
            String::new()
        } else {
            format!(" in {}", self.dir.display())
        };
        format!("{name}{nth}{place}")
    }

    /// Its counters: the region's, or the whole process's.
    pub fn stats(&self) -> &'a Stats {
        match self.benchmark {
            Some(i) => &self.process.benchmarks[i].stats,
            None => &self.process.stats,
        }
    }

    /// A benchmark region that did not finish (its counters are partial).
    pub fn unfinished(&self) -> bool {
        self.benchmark
            .is_some_and(|i| self.process.benchmarks[i].unfinished)
    }

    /// Its memory over time, if recorded.
    pub fn timeline(&self) -> Option<&'a Timeline> {
        match self.benchmark {
            Some(i) => self.process.benchmarks[i].timeline.as_ref(),
            None => self.process.timeline.as_ref(),
        }
    }

    /// Whether it is a benchmark region (else a whole process).
    pub fn is_benchmark(&self) -> bool {
        self.benchmark.is_some()
    }
}

/// A process or benchmark of BASE and its counterpart in NEW.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair<'a> {
    /// BASE's.
    pub base: Entry<'a>,
    /// NEW's.
    pub new: Entry<'a>,
    /// The rule that paired them.
    pub matched_by: MatchedBy,
}

/// Two runs paired: benchmarks first, then processes, each in order of directory and
/// of BASE's name; then what stayed unpaired, in the same order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pairing<'a> {
    /// The pairs.
    pub pairs: Vec<Pair<'a>>,
    /// What only BASE has.
    pub only_in_base: Vec<Entry<'a>>,
    /// What only NEW has.
    pub only_in_new: Vec<Entry<'a>>,
}

/// The entries of one directory of one run: benchmarks, then processes, each in the
/// order the processes started.
fn entries<'a>(dir: &'a Path, processes: &'a [TrackedProcess]) -> (Vec<Entry<'a>>, Vec<Entry<'a>>) {
    let mut ordered: Vec<&TrackedProcess> = processes.iter().collect();
    ordered.sort_by_key(|p| (p.started_ns, p.pid));
    let mut seen: BTreeMap<(bool, String), usize> = BTreeMap::new();
    let mut nth = |benchmark: bool, name: String| {
        let n = seen.entry((benchmark, name)).or_insert(0);
        *n += 1;
        *n
    };
    let mut benchmarks = Vec::new();
    for p in &ordered {
        for (i, b) in p.benchmarks.iter().enumerate() {
            benchmarks.push(Entry {
                dir,
                process: p,
                benchmark: Some(i),
                nth: nth(true, b.uri.clone()),
            });
        }
    }
    let processes = ordered
        .iter()
        .map(|p| Entry {
            dir,
            process: p,
            benchmark: None,
            nth: nth(false, command::command_key(&p.command).join("\0")),
        })
        .collect();
    (benchmarks, processes)
}

/// One directory's entries of both runs, each marked when paired (the index of its
/// pair's entry on the other side).
struct Sides<'a> {
    base: Vec<Entry<'a>>,
    new: Vec<Entry<'a>>,
    base_pair: Vec<Option<usize>>,
    new_pair: Vec<Option<usize>>,
    found: Vec<(usize, usize, MatchedBy)>,
}

impl<'a> Sides<'a> {
    fn new(base: Vec<Entry<'a>>, new: Vec<Entry<'a>>) -> Self {
        let (b, n) = (base.len(), new.len());
        Sides {
            base,
            new,
            base_pair: vec![None; b],
            new_pair: vec![None; n],
            found: Vec::new(),
        }
    }

    fn link(&mut self, b: usize, n: usize, matched_by: MatchedBy) {
        self.base_pair[b] = Some(n);
        self.new_pair[n] = Some(b);
        self.found.push((b, n, matched_by));
    }

    /// Pairs the unpaired entries whose keys are equal (None: never), the n-th of a key
    /// on each side with the n-th; `how` says how, from both entries' indices.
    fn pair_by_key<K: Ord>(
        &mut self,
        base_key: impl Fn(&Entry<'a>) -> Option<K>,
        new_key: impl Fn(&Entry<'a>) -> Option<K>,
        how: impl Fn(&Entry<'a>, &Entry<'a>) -> MatchedBy,
    ) {
        let mut waiting: BTreeMap<K, std::collections::VecDeque<usize>> = BTreeMap::new();
        for (i, e) in self.new.iter().enumerate() {
            if self.new_pair[i].is_none()
                && let Some(k) = new_key(e)
            {
                waiting.entry(k).or_default().push_back(i);
            }
        }
        for b in 0..self.base.len() {
            if self.base_pair[b].is_some() {
                continue;
            }
            let Some(k) = base_key(&self.base[b]) else {
                continue;
            };
            if let Some(n) = waiting.get_mut(&k).and_then(|q| q.pop_front()) {
                let matched_by = how(&self.base[b], &self.new[n]);
                self.link(b, n, matched_by);
            }
        }
    }

    /// The checkout roots BASE's and NEW's unpaired programs differ by, most given
    /// first (ties in name order).
    fn moved_roots(&self) -> Vec<(String, String)> {
        let mut votes: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (b, base) in self.base.iter().enumerate() {
            if self.base_pair[b].is_some() {
                continue;
            }
            for (n, new) in self.new.iter().enumerate() {
                if self.new_pair[n].is_some() {
                    continue;
                }
                let (Some(bp), Some(np)) =
                    (base.process.command.first(), new.process.command.first())
                else {
                    continue;
                };
                if let Some(root) = command::moved_root(bp, np) {
                    *votes.entry(root).or_insert(0) += 1;
                }
            }
        }
        let mut roots: Vec<((String, String), usize)> = votes.into_iter().collect();
        roots.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        roots.into_iter().map(|(root, _)| root).collect()
    }

    /// The index, on the same side, of an entry's tracked parent (None: none tracked
    /// in its directory).
    fn parent(side: &[Entry<'a>], e: &Entry<'a>) -> Option<usize> {
        side.iter().position(|p| {
            p.process.pid == e.process.ppid && p.process.started_ns <= e.process.started_ns
        })
    }

    /// Rule 5 until it pairs no more.
    fn pair_by_tree(&mut self) {
        loop {
            // (parent on BASE's side or None, program name) -> unpaired entries.
            type Groups = BTreeMap<(Option<usize>, String), Vec<usize>>;
            let group =
                |side: &[Entry<'a>],
                 paired: &[Option<usize>],
                 parent_of: &dyn Fn(usize) -> Option<Option<usize>>| {
                    let mut groups = Groups::new();
                    for (i, e) in side.iter().enumerate() {
                        if paired[i].is_some() {
                            continue;
                        }
                        let Some(parent) = parent_of(i) else { continue };
                        let name = e.process.command.first().map(|p| command::program_name(p));
                        groups
                            .entry((parent, name.unwrap_or_default()))
                            .or_default()
                            .push(i);
                    }
                    groups
                };
            // BASE's parent as itself; NEW's as its pair on BASE's side. A parent
            // tracked but unpaired makes a child ineligible (Some(None) is "no parent").
            let base_groups = group(&self.base, &self.base_pair, &|i| match Self::parent(
                &self.base,
                &self.base[i],
            ) {
                None => Some(None),
                Some(p) => self.base_pair[p].map(|_| Some(p)),
            });
            let new_groups = group(&self.new, &self.new_pair, &|i| match Self::parent(
                &self.new,
                &self.new[i],
            ) {
                None => Some(None),
                Some(p) => self.new_pair[p].map(Some),
            });
            let mut found = Vec::new();
            for (key, base) in &base_groups {
                if let (Some(new), [b]) = (new_groups.get(key), base.as_slice())
                    && let [n] = new.as_slice()
                {
                    found.push((*b, *n, key.0));
                }
            }
            if found.is_empty() {
                return;
            }
            for (b, n, parent) in found {
                let parent = parent.map(|p| self.base[p].what());
                self.link(b, n, MatchedBy::ProcessTree { parent });
            }
        }
    }
}

/// Pairs the processes of two runs of one directory (rules 2-5).
fn pair_processes(sides: &mut Sides<'_>) {
    let key = |e: &Entry| Some(command::command_key(&e.process.command));
    sides.pair_by_key(key, key, |_, _| MatchedBy::Command);
    let roots = sides.moved_roots();
    for (from, to) in &roots {
        sides.pair_by_key(
            |e| {
                Some(command::command_key(&command::relocate_command(
                    &e.process.command,
                    from,
                    to,
                )))
            },
            key,
            |_, _| MatchedBy::MovedCheckout {
                base_root: from.clone(),
                new_root: to.clone(),
            },
        );
    }
    let stripped = |c: &[String]| command::command_key(&command::strip_harness_flags(c).0);
    let flags = |e: &Entry| command::strip_harness_flags(&e.process.command).1;
    let moves = std::iter::once(None).chain(roots.iter().map(Some));
    for moved in moves {
        sides.pair_by_key(
            |e| {
                Some(match moved {
                    Some((from, to)) => {
                        stripped(&command::relocate_command(&e.process.command, from, to))
                    }
                    None => stripped(&e.process.command),
                })
            },
            |e| Some(stripped(&e.process.command)),
            |b, n| MatchedBy::HarnessFlags {
                moved: moved.cloned(),
                base_flags: flags(b),
                new_flags: flags(n),
            },
        );
    }
    sides.pair_by_tree();
}

/// Pairs two runs (each: its directories' results) by the rules of the module
/// documentation.
pub fn pair<'a>(base: &[DirResults<'a>], new: &[DirResults<'a>]) -> Pairing<'a> {
    let by_dir = |dirs: &[DirResults<'a>]| -> BTreeMap<&'a Path, &'a [TrackedProcess]> {
        dirs.iter()
            .map(|&(dir, processes)| (dir, processes))
            .collect()
    };
    let (base, new) = (by_dir(base), by_dir(new));
    let mut dirs: Vec<&Path> = base.keys().chain(new.keys()).copied().collect();
    dirs.sort();
    dirs.dedup();
    // (directory, benchmark first, BASE's name, nth) orders the pairs.
    type Order = (std::path::PathBuf, bool, String, usize);
    let mut pairs: Vec<(Order, Pair)> = Vec::new();
    let mut only_base: Vec<(Order, Entry)> = Vec::new();
    let mut only_new: Vec<(Order, Entry)> = Vec::new();
    let order = |e: &Entry| -> Order {
        let name = match e.benchmark {
            Some(i) => e.process.benchmarks[i].uri.clone(),
            None => command::command_key(&e.process.command).join(" "),
        };
        (e.dir.to_path_buf(), !e.is_benchmark(), name, e.nth)
    };
    for dir in dirs {
        let (base_b, base_p) = entries(dir, base.get(dir).copied().unwrap_or(&[]));
        let (new_b, new_p) = entries(dir, new.get(dir).copied().unwrap_or(&[]));
        let mut benchmarks = Sides::new(base_b, new_b);
        let uri = |e: &Entry| Some((e.process.benchmarks[e.benchmark?].uri.clone(), e.nth));
        benchmarks.pair_by_key(uri, uri, |_, _| MatchedBy::Uri);
        let mut processes = Sides::new(base_p, new_p);
        pair_processes(&mut processes);
        for sides in [benchmarks, processes] {
            for (b, n, matched_by) in &sides.found {
                let (base, new) = (sides.base[*b], sides.new[*n]);
                pairs.push((
                    order(&base),
                    Pair {
                        base,
                        new,
                        matched_by: matched_by.clone(),
                    },
                ));
            }
            for (i, e) in sides.base.iter().enumerate() {
                if sides.base_pair[i].is_none() {
                    only_base.push((order(e), *e));
                }
            }
            for (i, e) in sides.new.iter().enumerate() {
                if sides.new_pair[i].is_none() {
                    only_new.push((order(e), *e));
                }
            }
        }
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    only_base.sort_by(|a, b| a.0.cmp(&b.0));
    only_new.sort_by(|a, b| a.0.cmp(&b.0));
    Pairing {
        pairs: pairs.into_iter().map(|(_, p)| p).collect(),
        only_in_base: only_base.into_iter().map(|(_, e)| e).collect(),
        only_in_new: only_new.into_iter().map(|(_, e)| e).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrack_record::BenchmarkStats;

    fn process(pid: u32, ppid: u32, started: u64, command: &str) -> TrackedProcess {
        let mut p = TrackedProcess::new(pid, ppid, command.split(' ').map(String::from).collect());
        p.started_ns = started;
        p
    }

    /// (BASE's what, NEW's what, how) of each pair.
    type Named = Vec<(String, String, MatchedBy)>;

    /// The pairs named, and the unpaired of each side.
    fn paired(
        base: &[TrackedProcess],
        new: &[TrackedProcess],
    ) -> (Named, Vec<String>, Vec<String>) {
        let p = pair(&[(Path::new(""), base)], &[(Path::new(""), new)]);
        (
            p.pairs
                .iter()
                .map(|p| (p.base.what(), p.new.what(), p.matched_by.clone()))
                .collect(),
            p.only_in_base.iter().map(Entry::what).collect(),
            p.only_in_new.iter().map(Entry::what).collect(),
        )
    }

    fn pairs(list: &[(&str, &str, MatchedBy)]) -> Named {
        list.iter()
            .map(|(a, b, m)| (a.to_string(), b.to_string(), m.clone()))
            .collect()
    }

    #[test]
    fn a_moved_checkout_pairs_programs_and_their_path_arguments() {
        let base = [
            process(
                10,
                1,
                1,
                "/ci/base/target/release/prog /ci/base/data/in.txt",
            ),
            process(11, 10, 2, "/ci/base/target/release/helper-0123456789abcdef"),
            // Another directory than the checkout stays as it is.
            process(12, 10, 3, "/usr/bin/gzip -k /tmp/x"),
        ];
        let new = [
            process(20, 1, 1, "/ci/new/target/release/prog /ci/new/data/in.txt"),
            process(21, 20, 2, "/ci/new/target/release/helper-fedcba9876543210"),
            process(22, 20, 3, "/usr/bin/gzip -k /tmp/x"),
        ];
        let moved = MatchedBy::MovedCheckout {
            base_root: "/ci/base".into(),
            new_root: "/ci/new".into(),
        };
        assert_eq!(
            paired(&base, &new),
            (
                pairs(&[
                    (
                        "process /ci/base/target/release/helper-0123456789abcdef",
                        "process /ci/new/target/release/helper-fedcba9876543210",
                        moved.clone()
                    ),
                    (
                        "process /ci/base/target/release/prog /ci/base/data/in.txt",
                        "process /ci/new/target/release/prog /ci/new/data/in.txt",
                        moved.clone()
                    ),
                    (
                        "process /usr/bin/gzip -k /tmp/x",
                        "process /usr/bin/gzip -k /tmp/x",
                        MatchedBy::Command
                    ),
                ]),
                vec![],
                vec![]
            )
        );
        assert_eq!(
            moved.to_string(),
            "command line with the checkout moved (/ci/base → /ci/new)"
        );
    }

    #[test]
    fn a_path_argument_outside_the_moved_checkout_must_still_be_equal() {
        let base = [process(10, 1, 1, "/ci/base/prog /data/a")];
        let new = [process(20, 1, 1, "/ci/new/prog /data/b")];
        // Rule 3 refuses (/data/a is not /data/b); rule 5 pairs them: the only `prog`
        // with no tracked parent on each side.
        assert_eq!(
            paired(&base, &new).0,
            pairs(&[(
                "process /ci/base/prog /data/a",
                "process /ci/new/prog /data/b",
                MatchedBy::ProcessTree { parent: None }
            )])
        );
    }

    #[test]
    fn harness_flags_do_not_keep_a_pair_apart() {
        let base = [
            process(
                10,
                1,
                1,
                "/w/a/target/release/deps/bench-0123456789abcdef --bench",
            ),
            process(11, 1, 2, "cargo metadata --format-version 1"),
        ];
        let new = [
            process(
                20,
                1,
                1,
                "/w/b/target/release/deps/bench-fedcba9876543210 --bench --measurement-time 1",
            ),
            process(21, 1, 2, "cargo metadata --format-version 1"),
        ];
        let how = MatchedBy::HarnessFlags {
            moved: Some(("/w/a".into(), "/w/b".into())),
            base_flags: vec!["--bench".into()],
            new_flags: vec!["--bench".into(), "--measurement-time 1".into()],
        };
        assert_eq!(
            how.to_string(),
            "command line without harness flags (checkout moved /w/a → /w/b; BASE --bench; \
             NEW --bench --measurement-time 1)"
        );
        let (got, only_base, only_new) = paired(&base, &new);
        assert_eq!(
            got,
            pairs(&[
                (
                    "process /w/a/target/release/deps/bench-0123456789abcdef --bench",
                    "process /w/b/target/release/deps/bench-fedcba9876543210 --bench \
                     --measurement-time 1",
                    how
                ),
                (
                    "process cargo metadata --format-version 1",
                    "process cargo metadata --format-version 1",
                    MatchedBy::Command
                ),
            ])
        );
        assert!(only_base.is_empty() && only_new.is_empty());
        // A filter is not a harness flag: `grow` and `shrink` run different benchmarks.
        let base = [
            process(10, 1, 1, "bench --bench grow"),
            process(11, 1, 2, "bench --bench shrink"),
        ];
        let new = [
            process(20, 1, 1, "bench --bench other"),
            process(21, 1, 2, "bench --bench shrink"),
            process(22, 1, 3, "bench --bench third"),
        ];
        let (got, only_base, only_new) = paired(&base, &new);
        assert_eq!(
            got,
            pairs(&[(
                "process bench --bench shrink",
                "process bench --bench shrink",
                MatchedBy::Command
            )])
        );
        // Nor does the tree: two `bench` without a tracked parent are left in NEW.
        assert_eq!(only_base, ["process bench --bench grow"]);
        assert_eq!(
            only_new,
            ["process bench --bench other", "process bench --bench third"]
        );
    }

    #[test]
    fn the_process_tree_pairs_what_is_unambiguous_only() {
        // make runs two `cc` with temporary files (unpaired by every command rule): one
        // `cc` under each paired parent is unambiguous, two are not.
        let base = [
            process(10, 1, 1, "make all"),
            process(11, 10, 2, "sh -c build"),
            process(12, 11, 3, "cc -o /tmp/ccAAAA.o"),
            process(13, 10, 4, "sh -c link"),
            process(14, 13, 5, "cc /tmp/ccBBBB.o"),
            process(15, 13, 6, "cc /tmp/ccCCCC.o"),
        ];
        let new = [
            process(20, 1, 1, "make all"),
            process(21, 20, 2, "sh -c build"),
            process(22, 21, 3, "cc -o /tmp/ccXXXX.o"),
            process(23, 20, 4, "sh -c link"),
            process(24, 23, 5, "cc /tmp/ccYYYY.o"),
            process(25, 23, 6, "cc /tmp/ccZZZZ.o"),
        ];
        let (got, only_base, only_new) = paired(&base, &new);
        let tree = |parent: &str| MatchedBy::ProcessTree {
            parent: Some(parent.into()),
        };
        assert_eq!(
            got,
            pairs(&[
                (
                    "process cc -o /tmp/ccAAAA.o",
                    "process cc -o /tmp/ccXXXX.o",
                    tree("process sh -c build")
                ),
                ("process make all", "process make all", MatchedBy::Command),
                (
                    "process sh -c build",
                    "process sh -c build",
                    MatchedBy::Command
                ),
                (
                    "process sh -c link",
                    "process sh -c link",
                    MatchedBy::Command
                ),
            ])
        );
        assert_eq!(
            only_base,
            ["process cc /tmp/ccBBBB.o", "process cc /tmp/ccCCCC.o"]
        );
        assert_eq!(
            only_new,
            ["process cc /tmp/ccYYYY.o", "process cc /tmp/ccZZZZ.o"]
        );
        // A child of an unpaired parent is not paired by the tree: its parent's place
        // is unknown. Different program names never pair.
        let base = [process(10, 1, 1, "x 1"), process(11, 10, 2, "y 1")];
        let new = [process(20, 1, 1, "z 2"), process(21, 20, 2, "y 2")];
        let (got, only_base, only_new) = paired(&base, &new);
        assert!(got.is_empty(), "{got:?}");
        assert_eq!((only_base.len(), only_new.len()), (2, 2));
    }

    #[test]
    fn benchmarks_pair_by_uri_and_position_in_any_process() {
        let mut a = process(10, 1, 1, "bench-0123456789abcdef");
        a.benchmarks = vec![
            BenchmarkStats::new("grow", Stats::default()),
            BenchmarkStats::new("grow", Stats::default()),
            BenchmarkStats::new("gone", Stats::default()),
        ];
        let mut b = process(20, 1, 1, "other");
        b.benchmarks = vec![
            BenchmarkStats::new("grow", Stats::default()),
            BenchmarkStats::new("fresh", Stats::default()),
        ];
        let c = process(21, 1, 2, "bench");
        let (got, only_base, only_new) = paired(&[a], &[b, c]);
        assert_eq!(
            got,
            pairs(&[
                ("benchmark grow", "benchmark grow", MatchedBy::Uri),
                (
                    "process bench-0123456789abcdef",
                    "process bench",
                    MatchedBy::Command
                ),
            ])
        );
        assert_eq!(only_base, ["benchmark gone", "benchmark grow #2"]);
        assert_eq!(only_new, ["benchmark fresh", "process other"]);
    }

    /// A newline in a uri or a command line is shown escaped, so a table row stays one
    /// row.
    #[test]
    fn names_are_shown_with_control_characters_escaped() {
        let mut a = process(10, 1, 1, "prog\targ");
        a.benchmarks = vec![BenchmarkStats::new("two\nlines", Stats::default())];
        let (got, _, _) = paired(std::slice::from_ref(&a), std::slice::from_ref(&a));
        let names: Vec<&str> = got.iter().map(|(b, _, _)| b.as_str()).collect();
        assert_eq!(names, ["benchmark two\\nlines", "process prog\\targ"]);
    }
}
