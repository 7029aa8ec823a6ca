"""Turn OpenAI request bodies into validated token ids and SamplingParams.

Everything a client can get wrong is caught here and reported as a 400 naming the field, so the
engine only ever sees requests it can serve. Unknown fields are ignored, as OpenAI clients expect.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Protocol, overload

from reference_server.api.errors import APIError, bad_request
from reference_server.api.media import part_text
from reference_server.interface import SamplingParams

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the rest of the context
MAX_STOP_STRINGS = 64
_SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts
_GREEDY_BELOW = 1e-5  # smaller temperatures overflow the softmax: treat as greedy


class Tokenizer(Protocol):
    """The part of the engine's tokenizer the API uses."""

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def apply_chat_template(self, messages: list[dict]) -> str: ...


@dataclass(frozen=True)
class ServedModel:
    """What requests are validated against: the model's name, context window and vocabulary."""

    name: str
    max_model_len: int
    vocab_size: int
    tokenizer: Tokenizer


@dataclass
class GenerationRequest:
    """A validated /v1/completions or /v1/chat/completions request: one engine request per prompt."""

    chat: bool
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool  # stream_options.include_usage: a final choice-less usage chunk
    continuous_usage: bool  # stream_options.continuous_usage_stats: usage on every chunk
    tool: str = ""  # chat: answer with a call of this function (tool_choice required or named), "" = text


class _Fields:
    """Typed access to a JSON object's optional fields: a wrong type or range is a 400 naming the field."""

    def __init__(self, raw: Any, where: str = "the request body") -> None:
        if not isinstance(raw, dict):
            raise bad_request(f"{where} must be a JSON object")
        self.raw = raw

    def present(self, name: str) -> bool:
        return self.raw.get(name) is not None

    # A field with an int default is always an int; only a None default can come back as None.
    @overload
    def integer(self, name: str, default: int, lo: int | None = None, hi: int | None = None) -> int: ...
    @overload
    def integer(self, name: str, default: None, lo: int | None = None, hi: int | None = None) -> int | None: ...
    def integer(self, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
        value = self.raw.get(name)
        if value is None:
            return default
        # JSON has one number type: 16.0 means 16, but 16.5, true and "16" are mistakes.
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad_request(f"'{name}' must be an integer", name)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise bad_request(f"'{name}' must be {_range_text(lo, hi)}, got {value}", name)
        return value

    def number(self, name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
        value = self.raw.get(name)
        if value is None:
            return default
        # (an int is always finite; math.isfinite would overflow on a 400-digit one)
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not finite:
            raise bad_request(f"'{name}' must be a finite number", name)
        if value < lo or value > hi or (lo_open and value == lo):
            low = f"> {lo}" if lo_open else f">= {lo}"
            raise bad_request(f"'{name}' must be {low} and <= {hi}, got {value}", name)
        return float(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.raw.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad_request(f"'{name}' must be true or false", name)
        return value

    def string(self, name: str) -> str | None:
        value = self.raw.get(name)
        if value is not None and not isinstance(value, str):
            raise bad_request(f"'{name}' must be a string", name)
        return value


def _range_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f">= {lo}" if lo is not None else f"<= {hi}"


def check_model(fields: _Fields, model: ServedModel) -> None:
    """A named model must be the served one (404 otherwise); leaving it out means the served one."""
    name = fields.string("model")
    if name is not None and name != model.name:
        raise APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


def parse_completion(raw: Any, model: ServedModel) -> GenerationRequest:
    """Validate a /v1/completions body."""
    fields = _Fields(raw)
    check_model(fields, model)
    if "prompt" not in fields.raw:
        raise bad_request("'prompt' is required", "prompt")
    prompts = parse_prompt(fields.raw["prompt"], model)
    return _generation(fields, model, prompts, chat=False)


def parse_chat(raw: Any, model: ServedModel) -> GenerationRequest:
    """Validate a /v1/chat/completions body."""
    fields = _Fields(raw)
    check_model(fields, model)
    prompt = chat_prompt(fields.raw.get("messages"), model)
    request = _generation(fields, model, [prompt], chat=True)
    request.tool = _tool_to_call(fields.raw.get("tools"), fields.raw.get("tool_choice"))
    return request


def _tool_to_call(tools: Any, choice: Any) -> str:
    """The function the answer must call: with tool_choice "required", the first of `tools`; with
    {"type": "function", "function": {"name": N}}, N. "auto" and "none" answer in text (a model
    that chooses by itself is beyond a random-weight model)."""
    if tools is None and choice is None:
        return ""
    if not isinstance(tools, list) or not all(_function_name(t) for t in tools):
        raise bad_request("'tools' must be a list of {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools")
    names = [_function_name(t) for t in tools]
    if choice is None or choice in ("auto", "none"):
        return ""
    if choice == "required":
        if not names:
            raise bad_request("tool_choice 'required' needs at least one tool", "tool_choice")
        return names[0]
    name = _function_name(choice)
    if not name or name not in names:
        raise bad_request("'tool_choice' must be none, auto, required or a function named in 'tools'", "tool_choice")
    return name


def _function_name(tool: Any) -> str:
    if not (isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict)):
        return ""
    name = tool["function"].get("name")
    return name if isinstance(name, str) else ""


def parse_prompt(prompt: Any, model: ServedModel, param: str = "prompt") -> list[list[int]]:
    """Every prompt form clients send: str, [str] (a batch), [int] and [[int]] (a batch)."""
    if isinstance(prompt, str):
        prompts = [encode(prompt, model, param)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [encode(p, model, param) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        prompts = [parse_token_ids(p, model, param) for p in prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = [parse_token_ids(prompt, model, param)]
    else:
        raise bad_request(
            f"'{param}' must be a non-empty string, list of strings, list of token ids or list of lists of token ids",
            param,
        )
    if any(not p for p in prompts):
        raise bad_request(f"the {param} is empty", param)
    return prompts


@dataclass
class EmbeddingRequest:
    """A validated /v1/embeddings request: the inputs' token ids, and how to write the vectors
    ("float": JSON numbers; "base64": little-endian float32 bytes, base64, the openai SDK's default)."""

    inputs: list[list[int]]
    encoding: str = "float"


@dataclass
class RerankRequest:
    """A validated /v1/rerank request: the query's and the documents' token ids, and the documents' text."""

    query: list[int]
    documents: list[list[int]]
    texts: list[str]
    top_n: int  # results returned, best first


def parse_embeddings(raw: Any, model: ServedModel) -> EmbeddingRequest:
    """Validate a /v1/embeddings body (OpenAI's: `input` as a string, strings or token ids;
    `encoding_format` float, the default, or base64)."""
    fields = _Fields(raw)
    check_model(fields, model)
    if "input" not in fields.raw:
        raise bad_request("'input' is required", "input")
    encoding = fields.string("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise bad_request("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    return EmbeddingRequest(parse_prompt(fields.raw["input"], model, "input"), encoding)


def parse_rerank(raw: Any, model: ServedModel) -> RerankRequest:
    """Validate a /v1/rerank body (vLLM's, Cohere's and Jina's: `query`, `documents` as strings, `top_n`)."""
    fields = _Fields(raw)
    check_model(fields, model)
    query = fields.string("query")
    if not query:
        raise bad_request("'query' must be a non-empty string", "query")
    texts = fields.raw.get("documents")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise bad_request("'documents' must be a non-empty list of non-empty strings", "documents")
    top_n = fields.integer("top_n", len(texts), lo=1)
    return RerankRequest(
        encode(query, model, "query"), [encode(t, model, "documents") for t in texts], texts, min(top_n, len(texts))
    )


def encode(text: str, model: ServedModel, param: str) -> list[int]:
    """Token ids of text; JSON may carry lone surrogates ("\\ud800"), which are no text at all."""
    try:
        return model.tokenizer.encode(text)
    except UnicodeEncodeError:
        raise bad_request(f"'{param}' holds invalid Unicode (a lone surrogate)", param) from None


def parse_token_ids(ids: Any, model: ServedModel, param: str) -> list[int]:
    """A list of token ids, each inside the vocabulary."""
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise bad_request(f"'{param}' must be a list of integer token ids", param)
    if any(t < 0 or t >= model.vocab_size for t in ids):
        raise bad_request(f"token ids in '{param}' must be between 0 and {model.vocab_size - 1}", param)
    return ids


def chat_prompt(messages: Any, model: ServedModel) -> list[int]:
    """The token ids of chat messages rendered through the model's chat template."""
    return encode(model.tokenizer.apply_chat_template(parse_messages(messages)), model, "messages")


def parse_messages(messages: Any) -> list[dict[str, str]]:
    """Chat messages as {"role", "content": str, "name"?}: content may be a string or a list of text
    parts; an assistant's tool calls join its content as `<tool_call>{...}</tool_call>` text (so a
    tool session's context grows by them), and a "tool" message's content is the tool's result."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    parsed = []
    for i, message in enumerate(messages):
        fields = _Fields(message, f"messages[{i}]")
        role = fields.string("role")
        if not role:
            raise bad_request(f"messages[{i}] needs a 'role'", "messages")
        message = {"role": role, "content": _message_text(fields.raw.get("content"), i) + _tool_calls_text(fields, i)}
        if fields.string("name"):
            message["name"] = fields.raw["name"]
        parsed.append(message)
    return parsed


def _tool_calls_text(fields: _Fields, i: int) -> str:
    calls = fields.raw.get("tool_calls")
    if calls is None:
        return ""
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
        for c in calls
    ):
        raise bad_request(
            f"messages[{i}].tool_calls must be a list of {{\"function\": {{\"name\", \"arguments\"}}}}", "messages"
        )
    return "".join(f"<tool_call>{json.dumps(c['function'], ensure_ascii=False)}</tool_call>" for c in calls)


def _message_text(content: Any, i: int) -> str:
    if content is None:  # an assistant turn that only carried tool calls
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("image_url", "input_audio"):
                texts.append(part_text(part, f"messages[{i}].content[{j}]"))
                continue
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad_request(
                    f"messages[{i}].content: only text, image_url and input_audio parts are supported",
                    "messages",
                )
            texts.append(part["text"])
        return "".join(texts)  # as the exported Jinja chat template joins them
    raise bad_request(f"messages[{i}].content must be a string or a list of text parts", "messages")


def _generation(fields: _Fields, model: ServedModel, prompts: list[list[int]], chat: bool) -> GenerationRequest:
    n = fields.integer("n", 1, lo=1)
    if n != 1:
        raise bad_request("only n=1 is supported", "n")
    longest = max(len(p) for p in prompts)
    max_tokens = _max_tokens(fields, model, longest, chat)
    min_tokens = fields.integer("min_tokens", 0, lo=0)
    if min_tokens > max_tokens:
        raise bad_request(f"'min_tokens' ({min_tokens}) must not exceed 'max_tokens' ({max_tokens})", "min_tokens")
    temperature = fields.number("temperature", 1.0, 0.0, 1e6)
    top_k = fields.integer("top_k", 0, lo=-1)
    params = SamplingParams(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=fields.boolean("ignore_eos"),
        temperature=0.0 if temperature < _GREEDY_BELOW else temperature,
        top_p=fields.number("top_p", 1.0, 0.0, 1.0, lo_open=True),
        top_k=0 if top_k in (-1, 0) else min(top_k, model.vocab_size),  # -1 is vLLM's "off"
        min_p=fields.number("min_p", 0.0, 0.0, 1.0),
        seed=fields.integer("seed", None, *_SEED_RANGE),
        stop=_stop_strings(fields.raw.get("stop")),
    )
    stream = fields.boolean("stream")
    raw_options = fields.raw.get("stream_options")
    options = _Fields({} if raw_options is None else raw_options, "'stream_options'")
    continuous = options.boolean("continuous_usage_stats")
    return GenerationRequest(
        chat=chat,
        prompts=prompts,
        params=params,
        stream=stream,
        include_usage=options.boolean("include_usage") or continuous,
        continuous_usage=continuous,
    )


def _max_tokens(fields: _Fields, model: ServedModel, prompt_len: int, chat: bool) -> int:
    """max_completion_tokens (newer chat clients) or max_tokens; it must fit the context window."""
    name = "max_completion_tokens" if fields.present("max_completion_tokens") else "max_tokens"
    requested = fields.integer(name, None, lo=1)
    room = model.max_model_len - prompt_len
    if room <= 0:
        raise bad_request(
            f"This model's maximum context length is {model.max_model_len} tokens. However, "
            f"your prompt has {prompt_len} tokens. Please reduce the length of the prompt.",
            "messages" if chat else "prompt",
        )
    if requested is None:
        return min(COMPLETIONS_DEFAULT_MAX_TOKENS, room) if not chat else room
    if requested > room:
        raise bad_request(
            f"This model's maximum context length is {model.max_model_len} tokens. However, you "
            f"requested {prompt_len + requested} tokens ({prompt_len} in the prompt, {requested} "
            f"for the completion). Please reduce the length of the prompt or completion.",
            name,
        )
    return requested


def _stop_strings(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad_request("'stop' must be a string or a list of strings", "stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise bad_request(f"'stop' may hold at most {MAX_STOP_STRINGS} strings", "stop")
    return [s for s in stop if s]  # an empty stop string would match everywhere: it means nothing


def parse_tokenize(raw: Any, model: ServedModel) -> list[int]:
    """A /tokenize body: `prompt` (a string) or chat `messages`."""
    fields = _Fields(raw)
    check_model(fields, model)
    if fields.raw.get("messages") is not None:
        return chat_prompt(fields.raw["messages"], model)
    prompt = fields.string("prompt")
    if prompt is None:
        raise bad_request("'prompt' (a string) or 'messages' is required", "prompt")
    return encode(prompt, model, "prompt")


def parse_detokenize(raw: Any, model: ServedModel) -> list[int]:
    """A /detokenize body: `tokens`, a list of token ids."""
    fields = _Fields(raw)
    check_model(fields, model)
    return parse_token_ids(fields.raw.get("tokens"), model, "tokens")
