"""A byte-level tokenizer: ids 0..255 are bytes, a few special tokens follow.

It can be exported as a Hugging Face tokenizer folder so that any client can count tokens exactly
as the server does (`AutoTokenizer.from_pretrained(dir)` loads it offline).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]

# The chat template, once in Python (apply_chat_template) and once in Jinja (for HF clients).
CHAT_TEMPLATE_JINJA = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}{% if m.get('name') %} {{ m['name'] }}{% endif %}{{ '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map that Hugging Face's ByteLevel pre-tokenizer uses."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars), strict=True))


class ByteTokenizer:
    """Bytes are tokens 0..255; specials (BOS, EOS, PAD, chat markers) are 256 and up."""

    def __init__(self) -> None:
        self.special_ids = {tok: 256 + i for i, tok in enumerate(SPECIAL_TOKENS)}
        self._special_names = {i: tok for tok, i in self.special_ids.items()}
        self.bos_token_id = self.special_ids["<|bos|>"]
        self.eos_token_id = self.special_ids["<|eos|>"]
        self.pad_token_id = self.special_ids["<|pad|>"]
        self.vocab_size = 256 + len(SPECIAL_TOKENS)
        # Special-token strings in text become their ids, as Hugging Face tokenizers do.
        self._special_re = re.compile("(" + "|".join(map(re.escape, SPECIAL_TOKENS)) + ")")

    def encode(self, text: str) -> list[int]:
        """Token ids of text: UTF-8 bytes, special-token strings mapped to their ids. No BOS added."""
        ids: list[int] = []
        for piece in self._special_re.split(text):
            if piece in self.special_ids:
                ids.append(self.special_ids[piece])
            elif piece:
                ids.extend(piece.encode("utf-8"))
        return ids

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token: its byte, or none for a special token."""
        return bytes((token,)) if token < 256 else b""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ids; invalid UTF-8 is replaced, specials dropped unless asked for."""
        out = bytearray()
        for i in ids:
            if i < 256:
                out.append(i)
            elif i in self._special_names and not skip_special_tokens:
                out.extend(self._special_names[i].encode())
        return out.decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """ChatML-like prompt text. Content may be a string or a list of {"type": "text"} parts."""
        parts = []
        for m in messages:
            content = m.get("content") or ""
            if not isinstance(content, str):
                content = "".join(p.get("text", "") for p in content if p.get("type") == "text")
            name = f" {m['name']}" if m.get("name") else ""
            parts.append(f"<|im_start|>{m['role']}{name}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json for Hugging Face."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        byte_chars = _bytes_to_unicode()
        added = [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for t, i in self.special_ids.items()
        ]
        tokenizer_json: dict[str, Any] = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            # Every byte becomes one character, no regex split: one character = one token.
            "pre_tokenizer": {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": False,
                "use_regex": False,
            },
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": {byte_chars[b]: b for b in range(256)},
                "merges": [],
            },
        }
        specials = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>"}
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1 << 30,
            "add_bos_token": False,
            "add_eos_token": False,
            "chat_template": CHAT_TEMPLATE_JINJA,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            **specials,
        }
        (d / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False))
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
        (d / "special_tokens_map.json").write_text(json.dumps(specials, indent=1))
        return d
