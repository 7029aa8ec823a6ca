"""Chat media: synthetic PNGs and WAVs that decode, distinct every time, or the images of a folder."""

import base64
import io
import struct
import wave
import zlib

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length
from loadlab.workload.media import adler32_combine


def decode_png(uri: str) -> tuple[int, int, bytes]:
    """(width, height, raw rows) of a PNG data URI; zlib checks the stream and its checksum."""
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    i, idat, size = 8, b"", (0, 0)
    while i < len(data):
        (length,) = struct.unpack(">I", data[i : i + 4])
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + length]
        assert struct.unpack(">I", data[i + 8 + length : i + 12 + length])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        i += 12 + length
    return size[0], size[1], zlib.decompress(idat)


def media_workload(**settings):
    return make_workload(WorkloadConfig(input_len=parse_length("16"), **settings), "chat")


def test_synthetic_images_decode_to_their_size_and_are_never_the_same():
    w = media_workload(images=[2], image_sizes=["64x32", "1024x1024"], seed=4)
    specs = [w.next_request() for _ in range(6)]
    rows = []
    for spec in specs:
        text, *images = spec.messages[-1]["content"]
        assert text["type"] == "text" and len(text["text"]) == 16 and len(images) == 2 == spec.images
        pixels = 0
        for part in images:
            width, height, raw = decode_png(part["image_url"]["url"])
            assert (width, height) in ((64, 32), (1024, 1024)) and len(raw) == height * (1 + 3 * width)
            pixels += width * height
            rows.append(raw[: 1 + 3 * width])
        assert spec.image_pixels == pixels
    assert len(set(rows)) == len(rows)  # every image distinct (its first row)
    assert {s.image_pixels for s in specs} > {64 * 32 * 2}  # sizes drawn per image


def test_a_count_is_drawn_per_request_and_zero_sends_plain_text():
    w = media_workload(images=[0, 3])
    counts = {w.next_request().images for _ in range(30)}
    assert counts == {0, 3}
    plain = next(s for s in (w.next_request() for _ in range(30)) if s.images == 0)
    assert plain.messages[-1]["content"] == [{"type": "text", "text": plain.messages[-1]["content"][0]["text"]}]


def test_audio_is_a_wav_of_the_drawn_length():
    spec = media_workload(audio_seconds=[0.5]).next_request()
    audio = spec.messages[-1]["content"][-1]
    assert audio["type"] == "input_audio" and audio["input_audio"]["format"] == "wav"
    with wave.open(io.BytesIO(base64.b64decode(audio["input_audio"]["data"]))) as clip:
        assert clip.getnframes() / clip.getframerate() == 0.5
    assert spec.audio_seconds == 0.5


def test_images_from_a_folder(tmp_path):
    source = media_workload(images=[1], image_sizes=["40x30"]).next_request()
    uri = source.messages[-1]["content"][1]["image_url"]["url"]
    (tmp_path / "a.png").write_bytes(base64.b64decode(uri.split(",", 1)[1]))
    jpeg = (
        b"\xff\xd8\xff\xe0" + struct.pack(">H", 4) + b"\x00\x00" + b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 20, 10, 1)
    )
    (tmp_path / "b.jpg").write_bytes(jpeg + bytes(3) + b"\xff\xd9")
    (tmp_path / "notes.txt").write_text("skipped")
    w = media_workload(images=[1], image_dir=str(tmp_path))
    seen = {w.next_request().image_pixels for _ in range(20)}
    assert seen == {40 * 30, 10 * 20}


def test_the_checksum_of_two_pieces_combines_without_reading_the_second():
    for first, second in ((b"", b""), (b"a", b"bc"), (bytes(range(256)) * 300, b"\x80" * 70000)):
        assert adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second)) == zlib.adler32(first + second)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"images": [1], "image_sizes": ["big"]}, "bad image size"),
        ({"images": [-1]}, "counts must be >= 0"),
        ({"audio_seconds": [0.0]}, "lengths must be > 0"),
        ({"images": [1], "image_dir": "/nonexistent"}, "image folder not found"),
    ],
)
def test_bad_media_settings_are_one_clear_error(settings, message):
    with pytest.raises(UserError, match=message):
        media_workload(**settings)


def test_media_needs_the_chat_api():
    with pytest.raises(UserError, match="--api chat"):
        make_workload(WorkloadConfig(images=[1]), "completions")
