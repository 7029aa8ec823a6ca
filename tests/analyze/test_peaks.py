"""A CPU's calibrated peaks: measured in CPU time, so that work elsewhere does not read as a slow
device, and on the clock of the threads that did the work."""

from __future__ import annotations

import threading

import numpy as np

from loadlab.analyze import peaks


def test_calibration_names_its_figures_and_the_cores_they_count() -> None:
    measured = peaks.calibrate(2)
    assert measured.flops > 0 and measured.bandwidth > 0
    assert "on the server's 2 cores" in measured.source and measured.ridge == measured.flops / measured.bandwidth


def test_a_busy_sibling_thread_does_not_halve_the_copy_bandwidth() -> None:
    # BLAS threads spin on after a matrix product: timed in the process's CPU time, the copy that
    # follows was charged for them too, and read half this host's bandwidth in some runs.
    quiet = peaks._measure.__wrapped__()[1]
    stop = threading.Event()

    def spin() -> None:  # CPU work in cache, the GIL released: a thread of this process, busy
        a = np.ones((64, 64), dtype=np.float32)
        while not stop.is_set():
            for _ in range(100):
                a @ a

    sibling = threading.Thread(target=spin)
    sibling.start()
    try:
        busy = peaks._measure.__wrapped__()[1]
    finally:
        stop.set()
        sibling.join()
    assert busy > 0.65 * quiet, (busy, quiet)
