"""The protocol conformance steps through pytest_memtrack.protocol (the same steps as
integrations/memtrack-c/tests/c/protocol_driver.c; integrations/memtrack-c/tests/
protocol_conformance.rs runs both and the Rust client's against one scripted runner).
One line per step: "STEP CLASS | MESSAGE" or "STEP ok COUNTERS".
usage: protocol_driver.py [old|newer]"""

import os
import sys

from pytest_memtrack.protocol import (
    Client,
    FrameTooLarge,
    Rejected,
    RunnerUnreachable,
    VersionMismatch,
)

FIELDS = (
    "region alloc_calls free_calls bytes_allocated bytes_freed live_blocks live_bytes "
    "peak_live_bytes failed_allocs unmatched_frees lost_events"
).split()


def say(step, call):
    try:
        result = call()
    except VersionMismatch as e:
        line = f"{step} version | {e}"
    except Rejected as e:
        line = f"{step} rejected | {e}"
    except FrameTooLarge as e:
        line = f"{step} invalid | {e}"
    except RunnerUnreachable as e:
        line = f"{step} runner | {e}"
    else:
        if result is None:
            line = f"{step} ok"
        else:
            line = f"{step} ok " + " ".join(f"{k}={getattr(result, k)}" for k in FIELDS)
    print(line, flush=True)


def region(client):
    client.start_benchmark()
    return client.stop_with_counters()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "newer":
        client = Client.from_env(version=3)
        say("version", client.set_version)
        return
    client = Client.from_env()
    say("version", client.set_version)
    if mode == "old":
        return
    say("name", lambda: client.current_benchmark("conformance/a"))
    say("region", lambda: region(client))
    say("stop-without-start", client.stop_with_counters)
    client.start_benchmark()
    say("start-twice", client.start_benchmark)
    say("start-twice-stop", client.stop_with_counters)
    say("uri-newline", lambda: client.current_benchmark("bad\nuri"))
    say("uri-too-long", lambda: client.current_benchmark("u" * 4097))
    say("uri-1mib", lambda: client.current_benchmark("m" * (1 << 20)))
    control = os.open(os.path.join(os.environ["MEMTRACK_FIFO_DIR"], "control.fifo"), os.O_WRONLY)
    os.write(control, b"\xff\xff\xff\xffgarbage")
    os.close(control)
    say("garbage", lambda: client.current_benchmark("conformance/after-garbage"))
    say("region-after-garbage", lambda: region(client))
    say("name-region", lambda: client.name_region(2, "conformance/renamed"))
    say("name-missing-region", lambda: client.name_region(99, "x"))
    child = os.fork()
    if child == 0:
        code = 0
        try:
            client.current_benchmark("conformance/child")
            say("fork-child", lambda: region(client))
        except Exception as e:  # the child must exit whatever happens
            print(f"fork-child error | {e}", flush=True)
            code = 1
        os._exit(code)
    _, status = os.waitpid(child, 0)
    ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    print(f"fork {'ok' if ok else 'child-failed'}", flush=True)
    say("name-parent", lambda: client.current_benchmark("conformance/a"))
    say("region-after-fork", lambda: region(client))


main()
