"""The client self-check's thresholds: one definition for the live warning and the summary's verdict.

Kept free of imports so load-generator processes can read them without pandas. Timing error grows
fast once a gevent process passes ~60-70% of a core, long before Locust's own 90% warning.
"""

CLIENT_CPU_P90_MAX = 0.6  # cores, p90 of one load-generator process's CPU use
START_DELAY_P99_MAX = 0.010  # s, open loop: p99 of send − scheduled time
LOOP_LAG_P99_MAX = 0.010  # s, p99 of the client's event-loop lag samples
