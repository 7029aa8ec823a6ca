"""ByteTokenizer: bytes are ids 0..255, specials follow, and the HF export encodes identically."""

import pytest
from hypothesis import given, settings, strategies as st

from reference_server.tokenizer import ByteTokenizer

tok = ByteTokenizer()
SAMPLES = [
    "hello world",
    "  two  spaces\tand\ttabs\n",
    "héllo 日本語 🎉",
    "",
    "<|im_start|>user\nhi<|im_end|>",
    "a<|eos|>b",
]


@given(st.text())
@settings(max_examples=200, deadline=None)
def test_round_trip_of_any_text(text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_bytes_are_ids_and_specials_follow() -> None:
    assert tok.encode("Az") == [65, 122]
    assert tok.encode("é") == list("é".encode())
    assert tok.encode("<|eos|>") == [tok.eos_token_id]
    assert {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id} <= set(range(256, tok.vocab_size))
    assert tok.decode([104, tok.eos_token_id, 105]) == "hi"


def test_chat_template_accepts_strings_parts_and_names() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "name": "ann",
            "content": [
                {"type": "text", "text": "hi "},
                {"type": "image_url", "image_url": {}},
                {"type": "text", "text": "there"},
            ],
        },
    ]
    text = tok.apply_chat_template(messages)
    assert text == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user ann\nhi there<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(text).count(tok.special_ids["<|im_start|>"]) == 3


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tok.save_pretrained(tmp_path_factory.mktemp("tok"))
    assert {p.name for p in folder.iterdir()} >= {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


@pytest.mark.parametrize("text", SAMPLES)
def test_hugging_face_export_encodes_the_same_ids(hf_tokenizer, text: str) -> None:
    assert hf_tokenizer.encode(text) == tok.encode(text)
    assert hf_tokenizer.decode(tok.encode(text)) == text
    assert hf_tokenizer.eos_token_id == tok.eos_token_id


def test_hugging_face_chat_template_matches(hf_tokenizer) -> None:
    messages = [
        {"role": "user", "content": "hi", "name": "bob"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ]
    assert hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    ) == tok.apply_chat_template(messages)
