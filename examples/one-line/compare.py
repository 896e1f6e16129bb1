#!/usr/bin/env python3
"""Times the sample crate's divan and criterion suites in four setups and prints the
Markdown tables of BENCHMARKS.md ("Benchmarks under memtrack"):

- untracked: the suites built against stock divan and criterion (this crate with its
  one changed line reverted, in a copy outside the workspace);
- in-process: the suites as they are (memtrack-divan, memtrack-criterion), as root;
- `memtrack run`: the same, under the runner (memory only: nothing should be timed);
- stock under `memtrack run`: the untracked build under the runner, which is what a
  benchmark author got before (the runner's probes on every timed iteration).

Each round runs every setup once, in turn, so machine load spreads over all of them;
the figure per setup is the median over the rounds of the harness's own estimate
(divan's median, criterion's point estimate). Also prints memtrack's counts of each
benchmark in-process and under the runner, which must be identical.

Run as root from the repository's root (builds what it needs, in release mode):

    python3 examples/one-line/compare.py [ROUNDS]
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "examples/one-line"
STOCK_DIR = ROOT / "target/one-line-stock"
MEMTRACK = ROOT / "target/release/memtrack"
# The two lines the README's diff changes, as they were before.
STOCK_DEPS = """[dev-dependencies]
divan = "=0.1.21"
criterion = { version = "=0.8.2", default-features = false }
"""
CRITERION_ARGS = ["--bench", "--warm-up-time", "1", "--measurement-time", "2", "--noplot"]
DIVAN_ARGS = ["--bench"]
UNITS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def bench_binaries(manifest, target_dir=None):
    """Builds the crate's benches (release) and returns {name: path}."""
    env = dict(os.environ)
    if target_dir:
        env["CARGO_TARGET_DIR"] = str(target_dir)
    out = subprocess.run(
        ["cargo", "bench", "--no-run", "--message-format=json", "--manifest-path", str(manifest)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    found = {}
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            if "bench" in msg["target"]["kind"]:
                found[msg["target"]["name"]] = msg["executable"]
    return found


def stock_copy():
    """This crate with stock divan and criterion, outside the workspace."""
    copy = STOCK_DIR / "crate"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(CRATE / "src", copy / "src")
    shutil.copytree(CRATE / "benches", copy / "benches")
    manifest = (CRATE / "Cargo.toml").read_text()
    manifest = re.sub(r"\w+\.workspace = true\n", "", manifest)
    manifest = manifest.replace('publish = false\n', 'publish = false\nedition = "2024"\n')
    manifest = re.sub(r"\[dev-dependencies\]\n(.*\n)*?\n", STOCK_DEPS + "\n", manifest, count=1)
    (copy / "Cargo.toml").write_text(manifest + "\n[workspace]\n")
    return copy / "Cargo.toml"


def seconds(value, unit):
    return float(value) * UNITS[unit]


def divan_medians(stdout):
    """{bench: median ns} from divan's tree."""
    medians = {}
    for line in stdout.splitlines():
        m = re.match(r"^[├╰]─ (\S+)\s+(.*)$", line)
        if not m:
            continue
        cols = [c.split() for c in m.group(2).split("│")]
        if len(cols) >= 3 and len(cols[2]) == 2:
            medians[m.group(1)] = seconds(*cols[2])
    return medians


def criterion_estimates(stdout):
    """{bench: point estimate ns} from criterion's report."""
    found = {}
    for m in re.finditer(r"^(\S+)\s+time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", stdout, re.M):
        found[m.group(1)] = seconds(m.group(2), m.group(3))
    return found


def run(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def report(directory):
    """{benchmark uri: stats} of the result files in `directory`."""
    out = subprocess.run([str(MEMTRACK), "report", "--json", str(directory)],
                         check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    return {b["uri"]: b["stats"] for p in doc["processes"] for b in p["benchmarks"]}


def counts(stats):
    return (stats["alloc_calls"], stats["bytes_allocated"], stats["peak_live_bytes"],
            stats["live_bytes"])


def load():
    return open("/proc/loadavg").read().split()[0]


def fmt_ns(ns):
    if ns is None:
        return "not timed"
    for unit, scale in (("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    subprocess.run(["cargo", "build", "--release", "-p", "memtrack-cli"], check=True, cwd=ROOT)
    tracked = bench_binaries(CRATE / "Cargo.toml")
    stock = bench_binaries(stock_copy(), STOCK_DIR / "target")
    work = Path(tempfile.mkdtemp(prefix="one-line-compare-"))
    base = dict(os.environ)
    base.pop("MEMTRACK_FIFO_DIR", None)
    times = {}  # (suite, setup) -> {bench: [ns per round]}
    counted = {}  # (suite, mode) -> {uri: counts}
    loads = []
    for r in range(rounds):
        loads.append(load())
        for suite, args, parse in (("divan_suite", DIVAN_ARGS, divan_medians),
                                   ("criterion_suite", CRITERION_ARGS, criterion_estimates)):
            env = dict(base, CRITERION_HOME=str(work / f"criterion-{r}"),
                       MEMTRACK_OUTPUT_DIR=str(work / f"memtrack-{r}"))
            setups = {
                "untracked": [stock[suite]],
                "in-process": [tracked[suite]],
                "memtrack run": [str(MEMTRACK), "run", "-o", str(work / f"run-{suite}-{r}"),
                                 "--", tracked[suite]],
                "stock under memtrack run": [str(MEMTRACK), "run", "-o",
                                             str(work / f"stock-{suite}-{r}"), "--",
                                             stock[suite]],
            }
            for setup, cmd in setups.items():
                out = run(cmd + args, env)
                for bench, ns in parse(out.stdout).items():
                    times.setdefault((suite, setup), {}).setdefault(bench, []).append(ns)
                if setup == "memtrack run" and r == 0:
                    assert "memory only, timings skipped" in out.stderr, out.stderr
                    counted[(suite, "runner")] = {
                        u: counts(s) for u, s in report(work / f"run-{suite}-{r}").items()}
            if r == 0:
                results = work / f"memtrack-{r}" / ("divan/" + suite if suite.startswith("divan")
                                                    else "criterion")
                if suite.startswith("divan"):
                    found = report(results)
                else:
                    found = {}
                    for d in sorted(p.parent for p in results.rglob("*.MemtrackResult.msgpack")):
                        found.update(report(d))
                counted[(suite, "in-process")] = {u: counts(s) for u, s in found.items()}
    loads.append(load())

    print(f"{rounds} rounds; 1-minute load average before each round and after: "
          f"{', '.join(loads)}\n")
    for suite in ("divan_suite", "criterion_suite"):
        print(f"### {suite}\n")
        print("| benchmark | untracked (rounds' min-max) | in-process (min-max) | ratio "
              "| under `memtrack run` "
              "| stock under `memtrack run` | ratio | memtrack's counts (allocs, bytes, peak, "
              "live at end), in-process = runner |")
        print("|---|---|---|---|---|---|---|---|")
        base_times = times[(suite, "untracked")]
        for bench in sorted(base_times):
            med = {s: statistics.median(times[(suite, s)][bench])
                   if bench in times.get((suite, s), {}) else None
                   for s in ("untracked", "in-process", "memtrack run",
                             "stock under memtrack run")}
            uri = next((u for u in counted[(suite, "in-process")]
                        if u == bench or u.endswith("::" + bench)), None)
            ours = counted[(suite, "in-process")].get(uri)
            theirs = counted[(suite, "runner")].get(uri)
            same = "identical" if ours == theirs else f"DIFFER: {ours} vs {theirs}"
            spread = {s: f"{fmt_ns(min(times[(suite, s)][bench]))}-"
                         f"{fmt_ns(max(times[(suite, s)][bench]))}"
                      for s in ("untracked", "in-process")}
            print(f"| {bench} | {fmt_ns(med['untracked'])} ({spread['untracked']}) "
                  f"| {fmt_ns(med['in-process'])} ({spread['in-process']}) "
                  f"| {med['in-process'] / med['untracked']:.2f} | {fmt_ns(med['memtrack run'])} "
                  f"| {fmt_ns(med['stock under memtrack run'])} "
                  f"| {med['stock under memtrack run'] / med['untracked']:.0f} "
                  f"| {ours} ({same}) |")
        print()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
