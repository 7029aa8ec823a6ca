"""`loadlab mock`: a programmable OpenAI-compatible endpoint with exact timing and injected faults."""

from __future__ import annotations

import typer

from loadlab.mock.config import API_KEY_ENV, MockConfig, parse_codes


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command("mock")(mock)


def mock(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8100, min=1, max=65535, help="Port to listen on."),
    model: str = typer.Option("mock", help="The one model it serves (others get 404)."),
    ttft: float = typer.Option(0.05, help="Seconds from request to first token."),
    itl: float = typer.Option(0.02, help="Seconds between tokens."),
    output_len: int = typer.Option(128, help="Tokens per answer when the request sets no max_tokens."),
    jitter: float = typer.Option(0.0, help="Scale each delay by 1 + U(-jitter, +jitter)."),
    error_rate: float = typer.Option(0.0, help="Fraction of requests answered with an HTTP error."),
    error_codes: str = typer.Option("500,429", help="Statuses those errors use, drawn at random."),
    disconnect_rate: float = typer.Option(0.0, help="Fraction whose connection closes mid-stream."),
    malformed_rate: float = typer.Option(0.0, help="Fraction with an invalid JSON event mid-stream."),
    stall_rate: float = typer.Option(0.0, help="Fraction that stop sending mid-stream for --stall-seconds."),
    stall_seconds: float = typer.Option(30.0, help="How long a stall lasts."),
    not_sse_rate: float = typer.Option(0.0, help="Fraction of stream requests answered with plain JSON."),
    api_key: str = typer.Option(
        "", envvar=API_KEY_ENV, show_envvar=True, help="Require 'Authorization: Bearer KEY' (401 otherwise)."
    ),
    seed: int = typer.Option(0, help="Seed of the fault and jitter draws."),
    max_model_len: int = typer.Option(32768, help="Context window: longer requests get 400."),
    kv_capacity_tokens: int = typer.Option(65536, help="Simulated KV cache size for kv_cache_usage_perc."),
    truth_limit: int = typer.Option(20000, help="Requests /truth remembers (the most recent)."),
) -> None:
    """Serve a mock OpenAI-compatible endpoint (chat, completions, models, health, metrics, truth)."""
    from loadlab.mock.app import serve  # aiohttp only when the command runs

    serve(
        MockConfig(
            host=host,
            port=port,
            model=model,
            ttft=ttft,
            itl=itl,
            output_len=output_len,
            jitter=jitter,
            error_rate=error_rate,
            error_codes=parse_codes(error_codes),
            disconnect_rate=disconnect_rate,
            malformed_rate=malformed_rate,
            stall_rate=stall_rate,
            stall_seconds=stall_seconds,
            not_sse_rate=not_sse_rate,
            api_key=api_key,
            seed=seed,
            max_model_len=max_model_len,
            kv_capacity_tokens=kv_capacity_tokens,
            truth_limit=truth_limit,
        )
    )
