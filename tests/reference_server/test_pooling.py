"""/v1/embeddings and /v1/rerank of the reference server, from its real model over real HTTP."""

from __future__ import annotations

import base64
import math
import struct

import pytest

from reference_server.shapes import PRESETS
from tests.support.reference_server import MODEL, start_server

HIDDEN = PRESETS["tiny"].hidden_size  # the test server's preset (tests/support/reference_server.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with start_server(tmp_path_factory.mktemp("pooling") / "server.log") as s:
        yield s


def embed(server, inputs):
    response = server.post("/v1/embeddings", {"model": MODEL, "input": inputs})
    assert response.status_code == 200, response.text
    return response.json()


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_an_embedding_has_the_models_hidden_size_and_unit_length(server):
    body = embed(server, "hello world")
    assert body["object"] == "list" and body["model"] == MODEL
    (item,) = body["data"]
    assert item["object"] == "embedding" and item["index"] == 0
    assert len(item["embedding"]) == HIDDEN
    assert norm(item["embedding"]) == pytest.approx(1.0, abs=1e-4)
    assert body["usage"] == {"prompt_tokens": len(b"hello world"), "total_tokens": len(b"hello world")}


def test_equal_texts_embed_equal_and_different_texts_differ(server):
    a1, b, a2 = (d["embedding"] for d in embed(server, ["the cat sat", "a dog ran far", "the cat sat"])["data"])
    alone = embed(server, "the cat sat")["data"][0]["embedding"]
    assert a1 == pytest.approx(a2, abs=1e-5) and a1 == pytest.approx(alone, abs=1e-4)  # batching changes nothing
    assert max(abs(x - y) for x, y in zip(a1, b, strict=True)) > 1e-3


def test_token_id_inputs_are_embedded_like_their_text(server):
    by_text = embed(server, "abc")["data"][0]["embedding"]
    by_ids = embed(server, [[97, 98, 99]])["data"][0]["embedding"]
    assert by_ids == pytest.approx(by_text, abs=1e-5)


def test_base64_embeddings_are_the_float_vectors_as_little_endian_float32_bytes(server):
    # The openai SDK asks for base64 unless told otherwise, as vLLM and OpenAI serve it.
    floats = embed(server, ["the cat sat", "a dog"])["data"]
    response = server.post(
        "/v1/embeddings", {"model": MODEL, "input": ["the cat sat", "a dog"], "encoding_format": "base64"}
    )
    assert response.status_code == 200, response.text
    encoded = response.json()["data"]
    for plain, packed in zip(floats, encoded, strict=True):
        raw = base64.b64decode(packed["embedding"], validate=True)
        assert len(raw) == 4 * HIDDEN
        assert list(struct.unpack(f"<{HIDDEN}f", raw)) == pytest.approx(plain["embedding"], abs=1e-6)


def test_rerank_puts_the_document_equal_to_the_query_first_with_score_one(server):
    documents = ["zebras graze on the plain", "how to bake bread at home", "the quick brown fox", "xyz 123"]
    response = server.post("/v1/rerank", {"model": MODEL, "query": "the quick brown fox", "documents": documents})
    assert response.status_code == 200, response.text
    body = response.json()
    results = body["results"]
    assert results[0]["index"] == 2 and results[0]["document"] == {"text": documents[2]}
    assert results[0]["relevance_score"] == pytest.approx(1.0, abs=1e-4)
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in results) == [0, 1, 2, 3]
    assert all(-1.0001 <= s <= 1.0001 for s in scores)
    tokens = len("the quick brown fox") + sum(len(d) for d in documents)
    assert body["usage"]["total_tokens"] == tokens


def test_rerank_top_n_keeps_the_best(server):
    body = {"query": "abc", "documents": ["abc", "def", "ghi"], "top_n": 1}
    results = server.post("/rerank", body).json()["results"]
    assert [r["index"] for r in results] == [0]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/embeddings", {}, "input"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ""}, "input"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ("/v1/rerank", {"documents": ["a"]}, "query"),
        ("/v1/rerank", {"query": "q", "documents": []}, "documents"),
        ("/v1/rerank", {"query": "q", "documents": ["a", 3]}, "documents"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ],
)
def test_bad_pooling_requests_are_400s_naming_the_field(server, path, body, param):
    response = server.post(path, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_an_input_beyond_the_context_is_a_400_and_the_server_serves_on(server):
    response = server.post("/v1/embeddings", {"input": "a" * 1000})
    assert response.status_code == 400 and "context" in response.json()["error"]["message"]
    assert len(embed(server, "still here")["data"][0]["embedding"]) == HIDDEN


def test_pooling_counts_prompt_tokens_and_leaves_no_kv_blocks_taken(server):
    before = server.metric("vllm:prompt_tokens_total")
    embed(server, ["12345", "678"])
    assert server.metric("vllm:prompt_tokens_total") == before + 8
    assert server.pool_is_whole()
