"""pytest-memtrack: each test a region of ``memtrack run``, with exact heap figures.

The plugin (``pytest_memtrack.plugin``, registered through the ``pytest11`` entry point)
makes every test's call a memtrack benchmark region and offers the markers
``limit_memory``, ``limit_allocations`` and ``limit_leaks``. ``pytest_memtrack.protocol``
is the FIFO protocol client it speaks, usable on its own.
"""

from .protocol import (
    PROTOCOL_VERSION,
    Client,
    Counters,
    FrameTooLarge,
    MemtrackError,
    Rejected,
    RunnerUnreachable,
    VersionMismatch,
)
from .sizes import format_size, parse_size

__all__ = [
    "PROTOCOL_VERSION",
    "Client",
    "Counters",
    "FrameTooLarge",
    "MemtrackError",
    "Rejected",
    "RunnerUnreachable",
    "VersionMismatch",
    "format_size",
    "parse_size",
]
