"""dhat.py - reading valgrind DHAT's summary lines (Total / At t-gmax /
At t-end) into expected.json's "dhat" fields (accounting.DHAT_FIELDS), per
process."""
import re

SUMMARY = re.compile(r"==(\d+)== (Total|At t-gmax|At t-end):\s+([\d,]+) bytes in ([\d,]+) blocks")
PREFIX = {"Total": "total", "At t-gmax": "gmax", "At t-end": "end"}


def summaries(stderr):
    """(pid of the first process, {pid: {total_bytes, total_blocks, gmax_bytes,
    gmax_blocks, end_bytes, end_blocks}} in the order DHAT printed them)."""
    per_pid = {}
    for m in SUMMARY.finditer(stderr):
        d = per_pid.setdefault(int(m.group(1)), {})
        key = PREFIX[m.group(2)]
        d[key + "_bytes"] = int(m.group(3).replace(",", ""))
        d[key + "_blocks"] = int(m.group(4).replace(",", ""))
    first = re.search(r"==(\d+)== Command:", stderr)
    return (int(first.group(1)) if first else None), per_pid
