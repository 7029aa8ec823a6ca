"""Open-file limit of a load-generator process: every stream in flight holds one socket.

Like Locust, `loadlab run` raises its soft RLIMIT_NOFILE toward the hard limit at start (worker
processes inherit it), and warns when the streams it is asked to keep open cannot fit.
"""

from __future__ import annotations

import resource

# Descriptors a process uses besides its streams: run folder, collectors, ZeroMQ, Python itself.
RESERVED_FDS = 64
# Ceiling when the hard limit is unlimited (the kernel refuses more than fs.nr_open anyway).
UNLIMITED_TARGET = 1 << 20


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit as far as the hard limit allows; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. above fs.nr_open: keep what we have
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def descriptor_warning(streams_per_process: int, limit: int) -> str:
    """A one-line warning when `streams_per_process` sockets plus the reserve exceed `limit`, else ""."""
    if limit == resource.RLIM_INFINITY or streams_per_process + RESERVED_FDS <= limit:
        return ""
    return (
        f"{streams_per_process} streams per process need about {streams_per_process + RESERVED_FDS} "
        f"open files but the limit is {limit} (the hard limit): requests beyond it will fail; "
        "raise `ulimit -Hn` or use --processes"
    )
