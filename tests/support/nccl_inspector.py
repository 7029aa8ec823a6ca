"""Lines as NVIDIA's NCCL Inspector plugin writes them (used by the collector's tests and
bench/collector_cost.py)."""

import json

DUMP_US = 1_796_000_000_000_000


def inspector_line(
    rank: int,
    seq: int,
    exec_us: int,
    coll: str = "AllReduce",
    comm: str = "0x7f8c496ae9f661",
    kernel_stop_us: int | None = None,
) -> str:
    """One record as the Inspector plugin writes it: a JSON object on one line."""
    perf = {
        "coll": coll,
        "coll_sn": seq,
        "coll_msg_size_bytes": 16384,
        "coll_exec_time_us": exec_us,
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": 0.04,
        "coll_busbw_gbs": 0.04,
    }
    if kernel_stop_us is not None:  # NCCL_INSPECTOR_DUMP_VERBOSE=1
        perf["event_trace_sn"] = {"coll_start_sn": 1, "coll_stop_sn": 2, "kernel_events": []}
        perf["event_trace_ts"] = {
            "coll_start_ts": kernel_stop_us - 900,
            "coll_stop_ts": kernel_stop_us - 850,
            "kernel_events": [
                {
                    "channel_id": 0,
                    "kernel_start_ts": kernel_stop_us - exec_us,
                    "kernel_stop_ts": kernel_stop_us,
                    "kernel_record_ts": kernel_stop_us,
                }
            ],
        }
    return (
        json.dumps(
            {
                "header": {"id": comm, "rank": rank, "n_ranks": 2, "nnodes": 1},
                "metadata": {
                    "inspector_output_format_version": "v4.0",
                    "git_rev": "",
                    "rec_mechanism": "nccl_profiler_interface",
                    "dump_timestamp_us": DUMP_US + seq * 1000,
                    "hostname": "node0",
                    "pid": 4100 + rank,
                },
                "coll_perf": perf,
            },
            separators=(",", ":"),
        )
        + "\n"
    )
