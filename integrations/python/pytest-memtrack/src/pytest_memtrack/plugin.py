"""The pytest plugin: under ``memtrack run -- python -m pytest``, each test's call is a
memtrack region (named after its node id), and the markers check its exact figures.

- ``@pytest.mark.limit_memory("24 MB")``: the test's peak heap (bytes live at once,
  allocated during the test) must not exceed the limit.
- ``@pytest.mark.limit_allocations(1000)``: at most that many blocks allocated.
- ``@pytest.mark.limit_leaks("1 MB")``: at most that many bytes allocated during the test
  and still live at its end.

Sizes are a number and B, KB, MB, GB, TB or PB, binary multiples as pytest-memray reads
them ("1 MB" = 1,048,576 bytes). The region covers the test function's call only, not its
fixtures' setup or teardown; memtrack counts every allocation call of the process
(Python objects above 512 bytes, C extensions, any library), not Python's small-object
pools, which take their memory from the system in arenas of their own.

Outside ``memtrack run`` the plugin says once that it is inactive, and the markers do
nothing.
"""

import json
import os

import pytest

from .protocol import Client, FrameTooLarge, MemtrackError, Rejected
from .sizes import format_size, parse_size

_VERSION = "0.1.0"
_STATE = pytest.StashKey["_State"]()

# marker -> (counter, what it limits, the kind of limit)
_LIMITS = {
    "limit_memory": ("peak_live_bytes", "peak memory", "size"),
    "limit_allocations": ("alloc_calls", "allocations", "count"),
    "limit_leaks": ("live_bytes", "leaked memory", "size"),
}

# How a failure says the figure: counter -> (text before the figure, text after it).
_SAYS = {
    "peak_live_bytes": ("the test's peak memory was ", ""),
    "alloc_calls": ("the test made ", " allocations"),
    "live_bytes": ("the test leaked ", " (allocated during it and still live at its end)"),
}


class _State:
    def __init__(self):
        self.client = None
        self.inactive = None
        self.figures = {}
        self.unmeasured = {}


def pytest_addoption(parser):
    group = parser.getgroup("memtrack", "exact heap figures under `memtrack run`")
    group.addoption(
        "--memtrack-json",
        metavar="PATH",
        default=None,
        help="write each measured test's memtrack counters to PATH (JSON: node id -> "
        "counters)",
    )


def pytest_configure(config):
    for name, (_, what, kind) in _LIMITS.items():
        arg = "size" if kind == "size" else "n"
        config.addinivalue_line(
            "markers",
            f"{name}({arg}): fail the test if its {what} under `memtrack run` exceeds "
            f"{arg} (pytest-memtrack; does nothing outside memtrack run)",
        )
    state = _State()
    config.stash[_STATE] = state
    if not os.environ.get("MEMTRACK_FIFO_DIR"):
        state.inactive = (
            "memtrack: pytest-memtrack is inactive: not under `memtrack run` (its "
            "limit_memory, limit_allocations and limit_leaks markers do nothing)"
        )
        return
    try:
        client = Client.from_env()
        client.set_version()
        client.set_integration("pytest-memtrack", _VERSION)
    except MemtrackError as e:
        raise pytest.UsageError(f"pytest-memtrack: under `memtrack run`, but: {e}") from None
    state.client = client


def pytest_report_header(config):
    state = config.stash[_STATE]
    if state.inactive:
        return state.inactive
    return (
        "memtrack: each test's call is a memtrack region (exact heap figures; "
        "limit_memory, limit_allocations, limit_leaks)"
    )


def _limits(item):
    """The limits of ``item``'s markers: (marker, counter, what, limit, as written)."""
    found = []
    for name, (counter, what, kind) in _LIMITS.items():
        for mark in item.iter_markers(name=name):
            if len(mark.args) != 1 or mark.kwargs:
                pytest.fail(f"{name} takes one argument, e.g. {name}('24 MB')", pytrace=False)
            written = mark.args[0]
            try:
                if kind == "size":
                    limit = parse_size(written)
                elif isinstance(written, int) and not isinstance(written, bool) and written >= 0:
                    limit = written
                else:
                    raise ValueError(f"not a count of allocations: {written!r}")
            except ValueError as e:
                pytest.fail(f"{name}({written!r}): {e}", pytrace=False)
            found.append((name, counter, what, limit, written))
    return found


def _show(kind_counter, n):
    return f"{n:,}" if kind_counter == "alloc_calls" else format_size(n)


def _check(limits, counters, uri):
    broken = []
    for name, counter, _what, limit, written in limits:
        value = getattr(counters, counter)
        if value > limit:
            shown = f"{written!r}" if isinstance(written, str) else f"{written:,}"
            before, after = _SAYS[counter]
            broken.append(
                f"{name}({shown}): {before}{_show(counter, value)}{after}, more than the "
                f"limit of {_show(counter, limit)}"
            )
    if broken:
        broken.append(
            f"(memtrack region {uri!r}; with `memtrack run --stacks`, `memtrack report "
            "--stacks DIR` shows where its memory was allocated)"
        )
        if counters.lost_events:
            broken.append(f"({counters.lost_events} events were not counted exactly)")
        pytest.fail("\n".join(broken), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    state = pyfuncitem.config.stash[_STATE]
    client = state.client
    if client is None:
        yield
        return
    limits = _limits(pyfuncitem)
    uri = pyfuncitem.nodeid
    try:
        client.current_benchmark(uri)
    except (Rejected, FrameTooLarge) as e:
        state.unmeasured[uri] = str(e)
        yield
        return
    original = pyfuncitem.obj
    measured = []

    def in_region(*args, **kwargs):
        client.start_benchmark()
        try:
            result = original(*args, **kwargs)
        finally:
            measured.append(client.stop_with_counters())
        _check(limits, measured[0], uri)
        return result

    pyfuncitem.obj = in_region
    try:
        yield
    finally:
        pyfuncitem.obj = original
        if measured:
            state.figures[uri] = measured[0]
            pyfuncitem.user_properties.append(("memtrack", measured[0].as_dict()))


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash[_STATE]
    if state.inactive:
        if config.getoption("verbose") < 0:
            terminalreporter.write_line(state.inactive)
        return
    terminalreporter.section("memtrack")
    terminalreporter.write_line(
        f"{len(state.figures)} tests measured (memtrack report DIR lists each as a "
        "benchmark region)"
    )
    top = sorted(state.figures.items(), key=lambda kv: -kv[1].peak_live_bytes)[:5]
    for uri, c in top:
        terminalreporter.write_line(
            f"  {uri}: peak {format_size(c.peak_live_bytes)}, {c.alloc_calls:,} "
            f"allocation{'' if c.alloc_calls == 1 else 's'}, {format_size(c.live_bytes)} leaked"
        )
    for uri, why in state.unmeasured.items():
        terminalreporter.write_line(f"  not measured: {uri}: {why}")


def pytest_unconfigure(config):
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    path = config.getoption("memtrack_json")
    if path and state.client is not None:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({uri: c.as_dict() for uri, c in state.figures.items()}, out, indent=1)
    if state.client is not None:
        state.client.close()

