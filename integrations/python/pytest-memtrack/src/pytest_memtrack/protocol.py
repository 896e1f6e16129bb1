"""The FIFO protocol between ``memtrack run`` and the programs it runs, in Python.

``memtrack run -- CMD`` gives CMD the path of a private directory in
``MEMTRACK_FIFO_DIR`` holding two FIFOs: the client writes commands into
``control.fifo`` and reads one reply per command from ``ack.fifo``. Each message is a
frame: a 4-byte little-endian body length, then a MessagePack body (at most 1 MiB).
Commands and replies are Rust enums serialized by name: a unit variant is its name as a
string (``"StartBenchmark"``), any other a one-entry map from its name to its value
(``{"SetVersion": 2}``, ``{"CurrentBenchmark": {"pid": 7, "uri": "a"}}``).

Like memtrack's own Rust client, every exchange holds an exclusive ``flock`` on the FIFO
directory (processes sharing the runner take turns), drops stale replies, and writes a
``Sync`` frame with a fresh nonce in front of its command in one ``write``; it then
skips every reply up to the matching ``Synced``, so a reply is never taken for another
exchange's (garbage written into the FIFO by anyone is answered by the runner, and those
answers are skipped). Every wait is bounded by a timeout, and a runner that went away is
an error, never a hang. A client inherited through ``fork()`` reopens the FIFOs in the
child.

Measuring: memtrack counts the process's allocations between the runner's handling of
``StartBenchmark`` and of ``StopWithCounters``. So the code that runs inside that window
(reading the reply to the start; writing the stop) must not call ``malloc``: the frames
are prepared before the window opens, replies are read in small pieces (CPython serves
objects of up to 512 bytes from its own pools, not from ``malloc``) and compared with the
bytes expected instead of being decoded.
"""

import errno
import fcntl
import os
import select
import stat
import struct
import time

import msgpack

PROTOCOL_VERSION = 2
"""The protocol version this client speaks (version 2: ``StopWithCounters``)."""

MAX_FRAME_LEN = 1024 * 1024
"""Largest frame body, in bytes, either side accepts."""

FIFO_DIR_ENV = "MEMTRACK_FIFO_DIR"
DEFAULT_TIMEOUT = 5.0
"""Seconds one exchange (lock, write, reply) may take."""

_COUNTER_FIELDS = (
    "region",
    "alloc_calls",
    "free_calls",
    "bytes_allocated",
    "bytes_freed",
    "live_blocks",
    "live_bytes",
    "peak_live_bytes",
    "failed_allocs",
    "unmatched_frees",
    "lost_events",
)


class MemtrackError(Exception):
    """Anything that went wrong talking to memtrack's runner."""


class Rejected(MemtrackError):
    """The runner answered a command with an error."""

    def __init__(self, command, message):
        super().__init__(f"memtrack's runner refused {command}: {message}")
        self.command = command
        self.message = message


class VersionMismatch(Rejected):
    """The runner does not speak this client's protocol version."""


class RunnerUnreachable(MemtrackError):
    """The runner is gone, never answered, or answered what cannot be read."""


class FrameTooLarge(MemtrackError, ValueError):
    """A command too large for one frame (over 1 MiB): not sent."""


class Counters:
    """What memtrack counted in one region (``Reply::Counters``): sizes are requested
    sizes in bytes, the rest counts. ``region`` is the region's id; ``live_bytes`` the
    bytes allocated in the region and still live at its end (its leaks);
    ``peak_live_bytes`` the most bytes live at once; ``lost_events`` 0 when exact."""

    __slots__ = _COUNTER_FIELDS

    def __init__(self, fields):
        for name in _COUNTER_FIELDS:
            setattr(self, name, int(fields.get(name, 0)))

    def as_dict(self):
        return {name: getattr(self, name) for name in _COUNTER_FIELDS}

    def __repr__(self):
        inner = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"Counters({inner})"


def encode_frame(message):
    """One frame: the body's length (u32, little-endian) and the MessagePack body."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME_LEN:
        raise FrameTooLarge(
            f"frame body of {len(body)} bytes exceeds the limit of {MAX_FRAME_LEN} bytes"
        )
    return struct.pack("<I", len(body)) + body


def _command_name(command):
    return command if isinstance(command, str) else next(iter(command))


def _nonce():
    return int.from_bytes(os.urandom(8), "little")


class Client:
    """A connection to the runner serving FIFO directory ``fifo_dir``.

    ``version`` is the protocol version :meth:`set_version` announces (this client's
    own by default; another only to test runners).
    """

    def __init__(self, fifo_dir, timeout=DEFAULT_TIMEOUT, version=PROTOCOL_VERSION):
        self.dir = os.fspath(fifo_dir)
        self.timeout = timeout
        self.version = version
        self._stop = None
        self._open()

    @classmethod
    def from_env(cls, **kwargs):
        """The client of the runner named by ``MEMTRACK_FIFO_DIR``, or None when it is
        unset or empty (not under ``memtrack run``)."""
        fifo_dir = os.environ.get(FIFO_DIR_ENV)
        if not fifo_dir:
            return None
        return cls(fifo_dir, **kwargs)

    # -- connection ---------------------------------------------------------------

    def _open(self):
        self._pid = os.getpid()
        control = os.path.join(self.dir, "control.fifo")
        ack = os.path.join(self.dir, "ack.fifo")
        try:
            self._lock_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            # The read end first: opening the write end without a reader fails (ENXIO),
            # which is how a missing runner shows.
            self._ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._control_fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ENXIO:
                raise RunnerUnreachable(f"no runner is serving {control}") from None
            raise RunnerUnreachable(f"cannot open memtrack's FIFOs in {self.dir}: {e}") from None
        for fd, path in ((self._control_fd, control), (self._ack_fd, ack)):
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise RunnerUnreachable(f"{path} is not a FIFO")
        self._poll_in = select.poll()
        self._poll_in.register(self._ack_fd, select.POLLIN)
        self._poll_out = select.poll()
        self._poll_out.register(self._control_fd, select.POLLOUT)

    def close(self):
        for fd in (self._control_fd, self._ack_fd, self._lock_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def _reopen_if_forked(self):
        if self._pid != os.getpid():
            # The descriptors, and the flock with them, are shared with the parent.
            self.close()
            self._open()

    # -- exchanges ------------------------------------------------------------------

    def prepare(self, command):
        """The bytes of one exchange of ``command`` (a ``Sync`` frame, then the command)
        and the ``Synced`` reply frame expected first, for :meth:`exchange_prepared`."""
        nonce = _nonce()
        data = encode_frame({"Sync": {"nonce": nonce}}) + encode_frame(command)
        return data, encode_frame({"Synced": {"nonce": nonce}}), nonce, _command_name(command)

    def send(self, command):
        """Sends ``command`` (a string or one-entry dict, as the runner decodes it) and
        returns the decoded reply (``"Ack"``, ``{"Err": {...}}``, ...)."""
        return self.exchange_prepared(self.prepare(command))

    def exchange_prepared(self, prepared, expect=None):
        """Runs a prepared exchange. With ``expect`` (the reply's frame bytes), a reply
        equal to it is returned as ``expect`` without decoding: nothing is allocated on
        that path but small objects from CPython's own pools."""
        data, synced, nonce, _name = prepared
        self._reopen_if_forked()
        deadline = time.monotonic() + self.timeout
        self._lock(deadline)
        try:
            self._drain()
            self._write(data, deadline)
            while True:
                frame = self._read_frame(deadline)
                if frame == synced:
                    break
                reply = self._decode(frame)
                if isinstance(reply, dict) and reply.get("Synced", {}).get("nonce") == nonce:
                    break
            frame = self._read_frame(deadline)
            if expect is not None and frame == expect:
                return expect
            return self._decode(frame)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _lock(self, deadline):
        pause = 0.0001
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerUnreachable(
                    f"timed out after {self.timeout} s waiting to lock {self.dir} (another "
                    "process is talking to the runner)"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.01)

    def _drain(self):
        """Drops replies left by an exchange that timed out (or answers to garbage)."""
        while self._poll_in.poll(0):
            try:
                chunk = os.read(self._ack_fd, 256)
            except BlockingIOError:
                return
            if not chunk:
                raise RunnerUnreachable("memtrack's runner closed the ack FIFO")

    def _write(self, data, deadline):
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._control_fd, view)
                view = view[written:]
            except BlockingIOError:
                self._wait(self._poll_out, deadline, "write a command")
            except BrokenPipeError:
                raise RunnerUnreachable("memtrack's runner closed the control FIFO") from None

    def _wait(self, poller, deadline, what):
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000 + 0.999))):
            if deadline - time.monotonic() <= 0:
                raise RunnerUnreachable(
                    f"timed out after {self.timeout} s waiting to {what} ({self.dir})"
                )

    def _read_exact(self, n, deadline):
        parts = b""
        while len(parts) < n:
            self._wait(self._poll_in, deadline, "receive the reply")
            try:
                # Small reads: a bytes object of up to 512 bytes comes from CPython's
                # pools, never from malloc.
                chunk = os.read(self._ack_fd, min(n - len(parts), 256))
            except BlockingIOError:
                continue
            if not chunk:
                raise RunnerUnreachable("memtrack's runner closed the ack FIFO")
            parts = chunk if not parts else parts + chunk
        return parts

    def _read_frame(self, deadline):
        header = self._read_exact(4, deadline)
        (length,) = struct.unpack("<I", header)
        if length > MAX_FRAME_LEN:
            raise RunnerUnreachable(
                f"a reply announces {length:,} bytes, more than the limit of {MAX_FRAME_LEN:,}"
            )
        return header + self._read_exact(length, deadline)

    @staticmethod
    def _decode(frame):
        try:
            return msgpack.unpackb(frame[4:], raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several kinds
            raise RunnerUnreachable(f"cannot decode a reply from memtrack's runner: {e}") from None

    # -- commands ---------------------------------------------------------------------

    def _expect_ack(self, command):
        reply = self.send(command)
        if reply != "Ack":
            raise self._error(command, reply)

    @staticmethod
    def _error(command, reply):
        name = _command_name(command)
        if isinstance(reply, dict) and "Err" in reply:
            message = reply["Err"].get("message", "")
            if name == "SetVersion":
                return VersionMismatch(name, message)
            return Rejected(name, message)
        return RunnerUnreachable(f"unexpected reply to {name}: {reply!r}")

    def set_version(self):
        """Announces :attr:`version`; :class:`VersionMismatch` names the versions the
        runner speaks if it does not speak this one."""
        self._expect_ack({"SetVersion": self.version})

    def set_integration(self, name, version):
        self._expect_ack({"SetIntegration": {"name": name, "version": version}})

    def current_benchmark(self, uri):
        """Names the benchmark this process runs from now on."""
        self._expect_ack({"CurrentBenchmark": {"pid": os.getpid(), "uri": uri}})

    def ping(self):
        self._expect_ack("Ping")

    def start_benchmark(self):
        """Starts a region; returns once the runner counts. Allocation-free from the
        runner's handling on: the start's and the stop's exchanges are prepared before
        the start is written (see the module's docs)."""
        start = self.prepare("StartBenchmark")
        self._stop = self.prepare("StopWithCounters")
        reply = self.exchange_prepared(start, expect=_ACK_FRAME)
        if reply is not _ACK_FRAME:
            self._stop = None
            raise self._error("StartBenchmark", reply)

    def stop_with_counters(self):
        """Stops the region and returns its :class:`Counters`. Until the runner has
        stopped counting it only writes the bytes :meth:`start_benchmark` prepared."""
        stop, self._stop = self._stop, None
        if stop is None:
            stop = self.prepare("StopWithCounters")
        reply = self.exchange_prepared(stop)
        if isinstance(reply, dict) and "Counters" in reply:
            return Counters(reply["Counters"])
        raise self._error("StopWithCounters", reply)

    def stop_benchmark(self):
        """Protocol version 1's stop, without counters."""
        self._expect_ack("StopBenchmark")

    def name_region(self, region, uri):
        """Renames this process's closed region ``region`` to ``uri``."""
        self._expect_ack({"NameRegion": {"pid": os.getpid(), "region": region, "uri": uri}})


_ACK_FRAME = encode_frame("Ack")
