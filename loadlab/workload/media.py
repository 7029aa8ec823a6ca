"""Images and audio for chat requests: `image_url` parts (synthetic PNGs of given sizes, or the
files of a folder) and `input_audio` parts (synthetic WAV of given lengths), as data URIs.

Every synthetic image and clip is distinct (its first row of pixels, or its first samples, carry a
random tag), so a server's multimodal or prefix cache cannot flatter it; building one costs well
under a millisecond even at 1024 x 1024, because only the tagged first row is compressed per
image: the rest of a size's pixel data is compressed once and reused (PNG's zlib stream allows
it after a full flush).
"""

from __future__ import annotations

import base64
import io
import random
import re
import struct
import wave
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.limits import DOCS, MAX_IMAGE_DIR_BYTES, MAX_IMAGE_FILE_BYTES, MAX_IMAGE_SIDE, MAX_REQUEST_BYTES
from loadlab.workload.spec import RequestSpec

_SIZE = re.compile(r"^(\d+)x(\d+)$")
_AUDIO_RATE = 16_000  # samples per second, 16-bit mono
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class Image:
    """An image ready to send: its data URI and size."""

    uri: str
    width: int
    height: int


def parse_size(text: str) -> tuple[int, int]:
    """ "WIDTHxHEIGHT" in pixels; UserError when it is not one."""
    match = _SIZE.match(text.strip())
    if not match or not all(0 < int(v) <= MAX_IMAGE_SIDE for v in match.groups()):
        raise UserError(
            f"bad image size (--image-size) {text!r}: expected WIDTHxHEIGHT in pixels, 1-{MAX_IMAGE_SIDE} a side "
            f"({DOCS}), e.g. 512x512"
        )
    return int(match.group(1)), int(match.group(2))


def check_media(cfg: WorkloadConfig) -> None:
    """UserError for media settings that cannot work (before anything is sent)."""
    if any(n < 0 for n in cfg.images):
        raise UserError("workload.images: counts must be >= 0")
    for size in cfg.image_sizes:
        parse_size(size)
    if any(not s > 0 for s in cfg.audio_seconds):
        raise UserError("workload.audio_seconds: lengths must be > 0")


class MediaSource:
    """Draws each request's media (seeded) and puts it into the request's last message."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        check_media(cfg)
        self.cfg = cfg
        self._sizes = [parse_size(s) for s in cfg.image_sizes]
        self._files = _folder_images(cfg.image_dir) if cfg.image_dir else []
        largest = max((len(image.uri) for image in self._files), default=0)
        if largest * max(cfg.images, default=0) > MAX_REQUEST_BYTES:
            raise UserError(
                f"--images {max(cfg.images)} of --image-dir's files (the largest {largest >> 20} MiB as base64) would "
                f"carry more than the bound of {MAX_REQUEST_BYTES >> 20} MiB per request ({DOCS})"
            )
        self._bodies: dict[tuple[int, int], tuple[bytes, int, int]] = {}

    @property
    def active(self) -> bool:
        """Whether requests carry any media."""
        return bool(any(self.cfg.images) or self.cfg.audio_seconds)

    def attach(self, spec: RequestSpec, rng: random.Random) -> None:
        """Add this request's images and audio after the text of its last message."""
        parts: list[dict[str, Any]] = [{"type": "text", "text": spec.messages[-1].get("content") or ""}]
        count = rng.choice(self.cfg.images) if self.cfg.images else 0
        for _ in range(count):
            image = self._image(rng)
            parts.append({"type": "image_url", "image_url": {"url": image.uri}})
            spec.images += 1
            spec.image_pixels += image.width * image.height
        if self.cfg.audio_seconds:
            seconds = rng.choice(self.cfg.audio_seconds)
            parts.append({"type": "input_audio", "input_audio": {"data": _wav(seconds, rng), "format": "wav"}})
            spec.audio_seconds += seconds
        spec.messages[-1] = {**spec.messages[-1], "content": parts}

    def _image(self, rng: random.Random) -> Image:
        if self._files:
            return rng.choice(self._files)
        width, height = rng.choice(self._sizes)
        if (width, height) not in self._bodies:
            self._bodies[width, height] = _png_body(width, height)
        first = b"\x00" + bytes(rng.getrandbits(8) for _ in range(min(3 * width, 48))).ljust(3 * width, b"\x80")
        png = _png(width, height, first, *self._bodies[width, height])
        return Image("data:image/png;base64," + base64.b64encode(png).decode(), width, height)


def _png_body(width: int, height: int) -> tuple[bytes, int, int]:
    """Rows 2..height of a grey image as raw deflate data that ends the stream, with their adler32
    checksum and length (to combine with the first row's)."""
    rows = (b"\x00" + b"\x80" * (3 * width)) * (height - 1)
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    return deflate.compress(rows) + deflate.flush(), zlib.adler32(rows), len(rows)


def adler32_combine(first: int, second: int, second_length: int) -> int:
    """The adler32 of two pieces of data from the checksums of each (zlib's adler32_combine,
    which Python's zlib does not offer): no pass over the second piece."""
    base = 65521
    rem = second_length % base
    sum1 = first & 0xFFFF
    sum2 = (rem * sum1) % base
    sum1 = (sum1 + (second & 0xFFFF) + base - 1) % base
    sum2 = (sum2 + ((first >> 16) & 0xFFFF) + ((second >> 16) & 0xFFFF) + base - rem) % base
    return sum1 | (sum2 << 16)


def _png(width: int, height: int, first: bytes, body: bytes, body_adler: int, body_length: int) -> bytes:
    head = zlib.compressobj(1, zlib.DEFLATED, -15)
    # A full flush ends the first row's deflate data on a byte boundary with nothing to refer back
    # to: the body compressed on its own continues the same stream.
    data = head.compress(first) + head.flush(zlib.Z_FULL_FLUSH)
    checksum = adler32_combine(zlib.adler32(first), body_adler, body_length)
    stream = b"\x78\x01" + data + body + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _wav(seconds: float, rng: random.Random) -> str:
    """A base64 WAV clip of `seconds` (16 kHz, 16-bit mono): quiet noise after a random tag."""
    frames = max(1, round(seconds * _AUDIO_RATE))
    tag = bytes(rng.getrandbits(8) for _ in range(32))
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(_AUDIO_RATE)
        clip.writeframes((tag + bytes(2 * frames))[: 2 * frames])
    return base64.b64encode(buffer.getvalue()).decode()


def _folder_images(folder: str) -> list[Image]:
    """The folder's PNG and JPEG files (by suffix), read whole: UserError, one line, for a folder or
    file that cannot be read (a symlink loop, no permission), is not an image, or is above the bounds."""
    path = Path(folder)
    try:
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
    except FileNotFoundError:
        raise UserError(f"image folder not found: {folder}") from None
    except OSError as e:
        raise UserError(f"cannot read --image-dir {folder}: {e.strerror or e}") from None
    images = []
    total = 0
    for file in files:
        data = _read_image(file)
        total += len(data)
        if total > MAX_IMAGE_DIR_BYTES:
            raise UserError(
                f"--image-dir {folder}: its images pass the bound of {MAX_IMAGE_DIR_BYTES >> 20} MiB in all "
                f"(every load-generator process holds them; {DOCS})"
            )
        size = _image_size(data)
        if size is None:
            raise UserError(f"{file}: not a PNG or JPEG image")
        kind = "png" if data.startswith(b"\x89PNG") else "jpeg"
        images.append(Image(f"data:image/{kind};base64," + base64.b64encode(data).decode(), *size))
    if not images:
        raise UserError(f"image folder {folder} holds no .png or .jpg file")
    return images


def _read_image(file: Path) -> bytes:
    """A file's bytes, at most MAX_IMAGE_FILE_BYTES (UserError, one line, when larger or unreadable)."""
    try:
        with file.open("rb") as f:
            data = f.read(MAX_IMAGE_FILE_BYTES + 1)
    except OSError as e:
        raise UserError(f"cannot read image {file}: {e.strerror or e}") from None
    if len(data) > MAX_IMAGE_FILE_BYTES:
        raise UserError(f"image {file} is larger than the bound of {MAX_IMAGE_FILE_BYTES >> 20} MiB ({DOCS})")
    return data


def _image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's or JPEG's header."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return (width, height) if width and height else None
    i = 2 if data.startswith(b"\xff\xd8") else len(data)
    while i + 9 < len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return (width, height) if width and height else None
        i += 2 + length
    return None
