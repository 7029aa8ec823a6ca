"""Images and audio in chat messages: what they cost in prompt tokens, and the text that stands for them.

The bundled model reads text only, so an image or an audio clip enters the prompt as placeholder
tokens, as many as a vision or audio encoder would hand a language model:

    image:  one token per 32 x 32 pixel patch, ceil(width / 32) x ceil(height / 32)  (PNG or JPEG)
    audio:  25 tokens per second of WAV, rounded up                                    (as Whisper-style encoders)

The placeholder text is derived from the content's hash, so the same image costs the same and is
a prefix-cache hit the second time, while two different images never share their tokens.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import struct
import wave
from typing import Any

from reference_server.api.errors import bad_request

PATCH_PIXELS = 32
AUDIO_TOKENS_PER_SECOND = 25


def part_text(part: dict[str, Any], where: str) -> str:
    """The placeholder text of an `image_url` or `input_audio` part; a 400 naming `where` when bad."""
    if part.get("type") == "image_url":
        data = _data_uri(part.get("image_url"), where)
        width, height = image_size(data, where)
        return _placeholder(data, math.ceil(width / PATCH_PIXELS) * math.ceil(height / PATCH_PIXELS))
    audio = part.get("input_audio")
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str) or audio.get("format", "wav") != "wav":
        raise bad_request(f"{where}: input_audio needs base64 'data' in format 'wav'", "messages")
    data = _base64(audio["data"], where)
    return _placeholder(data, math.ceil(wav_seconds(data, where) * AUDIO_TOKENS_PER_SECOND))


def image_size(data: bytes, where: str) -> tuple[int, int]:
    """(width, height) of a PNG or JPEG image, read from its header."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        if width and height:
            return width, height
    elif data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
        if size is not None:
            return size
    raise bad_request(f"{where}: the image is not a PNG or JPEG", "messages")


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return (width, height) if width and height else None
        i += 2 + length
    return None


def wav_seconds(data: bytes, where: str) -> float:
    """The length of a WAV clip in seconds."""
    try:
        with wave.open(io.BytesIO(data)) as clip:
            return clip.getnframes() / clip.getframerate()
    except (wave.Error, EOFError, ZeroDivisionError):
        raise bad_request(f"{where}: input_audio is not a WAV file", "messages") from None


def _data_uri(image_url: Any, where: str) -> bytes:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url.startswith("data:"):
        raise bad_request(f"{where}: image_url must be a data: URI (this server fetches nothing)", "messages")
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise bad_request(f"{where}: image_url must be base64 data", "messages")
    return _base64(payload, where)


def _base64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{where}: the media data is not valid base64", "messages") from None


def _placeholder(data: bytes, tokens: int) -> str:
    digest = hashlib.sha256(data).hexdigest()  # ASCII: one token per character
    return (digest * (tokens // len(digest) + 1))[:tokens]
