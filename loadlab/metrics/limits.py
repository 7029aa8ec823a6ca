"""The client self-check's thresholds, all of them: one definition for the live warning, the
summary's verdict, its cause (loadlab.analyze.clientcause) and the analyzer's `client` terms.

Kept free of imports so load-generator processes can read them without pandas. Timing error grows
fast once a gevent process passes ~60-70% of a core, long before Locust's own 90% warning.
"""

# Strain: above these the client is under strain (a warning, not a verdict).
CLIENT_CPU_P90_MAX = 0.6  # cores, p90 of one load-generator process's CPU use
LOOP_LAG_P99_MAX = 0.010  # s, p99 of the client's event-loop lag samples

# Effects: below or above these the load generator, not the server, may be what was measured.
START_DELAY_P99_MAX = 0.010  # s, open loop: p99 of send − scheduled time
MIN_RATE_RATIO = 0.9  # open loop: achieved request rate / requested rate
MIN_CONCURRENCY_RATIO = 0.8  # closed loop: achieved concurrency (Little's law) / users
MAX_FAILED_SHARE_FOR_LOAD_CHECK = 0.1  # above it, a failing endpoint explains low load
MIN_REQUESTS_FOR_LOAD_CHECK = 20  # fewer finished requests: ramp and tail dominate, don't judge
# Strain this large leaves the client's timings untrusted: with any shortfall of the load, the step
# is client-limited (1500 users from one process: lag p99 182 ms, 89 % of them in flight). Judgement.
SEVERE_LOOP_LAG = 0.1  # s, event-loop lag p99
ANY_SHORTFALL = 0.95  # achieved / target below this is a shortfall (healthy closed-loop steps: 0.98-1.0)

# Where a client-limited step stops being a measurement of the server at the load it delivered
# (ClientCheck.untrusted; docs/metrics.md). Tokens are timed by the kernel, so a late event loop
# sends fewer requests but does not mistime what it sent: the server's verdict stands beside the
# shortfall until one of these lines is crossed.
# Less than half the load: a sweep doubles its load per step, so such a step delivered less than
# the step before it was asked for, and its label says nothing about what the server saw (judgement).
JUDGE_MIN_DELIVERED = 0.5
# More than half of the gaps between tokens merged into late reads: the token times that remain
# are a minority of the stream's, biased to the long gaps a late read does not merge (judgement).
MAX_BUNCHED_TO_JUDGE = 0.5

# A limited step's cause: starved rather than its own work.
HOST_BUSY_MIN = 0.85  # share of the host's cores busy at which it starves a process (judgement)
RUN_WAIT_MIN = 0.3  # share of wall time runnable but kept off a CPU: starved (judgement)
