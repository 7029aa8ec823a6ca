"""loadlab: load testing and bottleneck diagnosis for LLM serving endpoints."""

__version__ = "0.1.0"
