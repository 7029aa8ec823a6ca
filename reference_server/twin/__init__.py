"""The GPU twin: the real engine with a timing model in place of the model executor.

`--twin GPU:MODEL[:tpN]` keeps the API, scheduler, block manager, preemption, metrics and tokenizer,
and replaces the model's forward pass with a roofline of the step's work (reference_server.accounting)
on a published GPU (hardware.py). See docs/twin.md.
"""
