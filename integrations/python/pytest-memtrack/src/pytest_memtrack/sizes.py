"""Sizes as the markers take them ("24 MB") and as failures print them."""

import re

# Binary multiples, as pytest-memray reads its limits: "1 MB" is 1,048,576 bytes.
_UNITS = {"": 1, "B": 1}
for _power, _letter in enumerate("KMGTP", start=1):
    _UNITS[_letter + "B"] = 1024**_power
    _UNITS[_letter + "IB"] = 1024**_power

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text):
    """The number of bytes in ``text``: a number and an optional unit, B, KB, MB, GB, TB
    or PB (binary multiples: 1 KB = 1024 B; KiB, MiB, ... too), e.g. "24 MB", "512KB",
    "100". An int is taken as bytes. Raises ValueError for anything else."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative: {text}")
        return text
    if not isinstance(text, str):
        raise ValueError(f"not a size: {text!r} (write it as '24 MB')")
    match = _SIZE.match(text)
    unit = match and match.group(2).upper()
    if not match or unit not in _UNITS:
        raise ValueError(
            f"not a size: {text!r} (a number and B, KB, MB, GB, TB or PB, e.g. '24 MB')"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(n):
    """``n`` bytes for people: "30.5 MiB (31,981,568 B)", or "512 B" below 1 KiB."""
    if n < 1024:
        return f"{n:,} B"
    value, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit} ({n:,} B)"
