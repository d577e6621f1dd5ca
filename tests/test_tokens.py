"""Offline token counting: shipped encodings, model mapping, chunking, fallbacks."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp import tokens
from webapp.replay.jsonfast import dumps


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget loaded encodings for the duration of one test, then restore them."""
    monkeypatch.setattr(tokens, "_loaded", {})
    monkeypatch.setattr(tokens, "_failed", {})
    yield


# Token ids cross-checked against the independent JS/WASM port (npm tiktoken 1.0.22, run in
# node) when the encodings were added; "tiktoken is great!" is also the example in OpenAI's
# cookbook "How to count tokens with tiktoken".
KNOWN = {
    "o200k_base": {
        "hello world": [24912, 2375],
        "tiktoken is great!": [83, 8251, 2488, 382, 2212, 0],
        "Hello, 世界! 12345 café naïve": [
            13225, 11, 185558, 0, 220, 7633, 2548, 30469, 153475, 737,
        ],
        '{"city":"Zürich","days":[1,2,3]}': [
            10848, 17500, 7534, 57, 1948, 703, 4294, 20270, 16853, 16, 11, 17, 11, 18, 28000,
        ],
        "  indented\n\tline\r\n//x": [220, 1383, 23537, 198, 57584, 370, 393, 87],
    },
    "cl100k_base": {
        "hello world": [15339, 1917],
        "tiktoken is great!": [83, 1609, 5963, 374, 2294, 0],
        "Hello, 世界! 12345 café naïve": [
            9906, 11, 220, 3574, 244, 98220, 0, 220, 4513, 1774, 53050, 95980, 588,
        ],
        '{"city":"Zürich","days":[1,2,3]}': [
            5018, 9103, 3332, 57, 5297, 718, 2247, 14097, 9075, 16, 11, 17, 11, 18, 14316,
        ],
        "  indented\n\tline\r\n//x": [220, 1280, 16243, 198, 28208, 319, 322, 87],
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_shipped_encoding_gives_known_token_ids(name: str) -> None:
    enc = tokens.get_encoding(name)
    assert enc.name == name
    for text, ids in KNOWN[name].items():
        assert enc.encode_ordinary(text) == ids, text
        assert enc.decode(ids) == text
    assert len(enc.encode("hello world")) == 2


@pytest.mark.parametrize("name", sorted(tokens.ENCODINGS))
def test_constants_match_what_tiktoken_declares(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our pat_str, special tokens and expected sha256 are tiktoken's own, for this version."""
    from tiktoken_ext import openai_public

    seen: dict[str, str | None] = {}

    def fake_loader(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["url"] = url
        seen["hash"] = expected_hash
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_loader)
    declared = openai_public.ENCODING_CONSTRUCTORS[name]()
    spec = tokens.ENCODINGS[name]
    assert seen["hash"] == spec.sha256
    assert seen["url"] is not None and seen["url"].endswith("/" + spec.filename.removesuffix(".gz"))
    assert declared["pat_str"] == spec.pat_str
    assert declared["special_tokens"] == spec.special_tokens


@pytest.mark.parametrize("name", sorted(tokens.ENCODINGS))
def test_shipped_file_hashes_to_tiktokens_expected_sha256(name: str) -> None:
    spec = tokens.ENCODINGS[name]
    from importlib import resources

    packed = resources.files("webapp").joinpath("data", spec.filename).read_bytes()
    assert hashlib.sha256(gzip.decompress(packed)).hexdigest() == spec.sha256


def test_counts_without_any_network(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("token counting tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    # tiktoken's own loader (download + cache) must not be involved at all.
    import tiktoken.load

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))

    assert tokens.estimate("hello world", "gpt-4o") == tokens.TokenCount(
        2, "tiktoken:o200k_base", True
    )
    assert tokens.estimate("hello world", "gpt-4") == tokens.TokenCount(
        2, "tiktoken:cl100k_base", True
    )
    assert tokens._failed == {}


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", ("o200k_base", True)),
        ("gpt-4o-mini-2024-07-18", ("o200k_base", True)),
        ("openai/gpt-4.1", ("o200k_base", True)),
        ("GPT-4.1-nano", ("o200k_base", True)),
        ("o1", ("o200k_base", True)),
        ("o3-mini", ("o200k_base", True)),
        ("o4-mini", ("o200k_base", True)),
        ("gpt-5", ("o200k_base", True)),
        ("gpt-5.1-codex", ("o200k_base", True)),
        ("gpt-oss-120b", ("o200k_base", True)),
        ("ft:gpt-4o-2024-08-06:acme::abc123", ("o200k_base", True)),
        ("gpt-4", ("cl100k_base", True)),
        ("gpt-4-turbo", ("cl100k_base", True)),
        ("azure/gpt-35-turbo", ("cl100k_base", True)),
        ("gpt-3.5-turbo-0125", ("cl100k_base", True)),
        # Not OpenAI, or no model: o200k_base as an estimate.
        ("claude-sonnet-4-20250514", ("o200k_base", False)),
        ("anthropic/claude-3-5-sonnet", ("o200k_base", False)),
        ("gemini-2.5-pro", ("o200k_base", False)),
        ("llama-3.1-70b", ("o200k_base", False)),
        ("text-davinci-003", ("o200k_base", False)),  # p50k_base: not shipped
        ("", ("o200k_base", False)),
        (None, ("o200k_base", False)),
    ],
)
def test_encoding_for_model(model: str | None, expected: tuple[str, bool]) -> None:
    assert tokens.encoding_for_model(model) == expected


def test_estimate_labels_method_and_exactness() -> None:
    assert tokens.estimate("hello world", "claude-3-5-sonnet") == tokens.TokenCount(
        2, "tiktoken:o200k_base", False
    )
    assert tokens.estimate("", "gpt-4") == tokens.TokenCount(0, "tiktoken:cl100k_base", True)
    assert tokens.count_tokens("tiktoken is great!") == 6
    assert tokens.count_tokens("tiktoken is great!", "gpt-4o") == 6


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    # A tool result may contain "<|endoftext|>"; it must neither raise nor count as 1 token.
    assert tokens.count_tokens("<|endoftext|>", "gpt-4o") > 1


def test_json_is_counted_compact_with_unicode_kept() -> None:
    args = {"city": "Zürich", "days": [1, 2, 3]}
    assert dumps(args) == '{"city":"Zürich","days":[1,2,3]}'
    assert tokens.count_tokens(dumps(args), "gpt-4o") == 15
    assert tokens.count_tokens(dumps(args), "gpt-4") == 15
    assert tokens.estimate(dumps(None)) == tokens.TokenCount(1, "tiktoken:o200k_base", False)


def test_the_compact_encoding_is_the_standard_one_and_refuses_nan_on_request() -> None:
    values = [{"b": 1.5, "a": [True, None, "é\u0000\n"]}, [], "text", 10**20, -0.0]
    for value in values:
        assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert dumps(float("nan")) == "NaN"
    with pytest.raises(ValueError):
        dumps({"x": float("inf")}, allow_nan=False)


def test_heuristic() -> None:
    assert tokens.heuristic_tokens("") == 0
    assert tokens.heuristic_tokens("abc") == 1
    assert tokens.heuristic_tokens("abcd") == 1
    assert tokens.heuristic_tokens("abcde") == 2


def test_corrupt_file_falls_back_to_heuristic_once(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = dataclasses.replace(tokens.ENCODINGS["o200k_base"], sha256="0" * 64)
    monkeypatch.setitem(tokens.ENCODINGS, "o200k_base", bad)
    builds = 0
    real_build = tokens._build

    def counting_build(name: str) -> object:
        nonlocal builds
        builds += 1
        return real_build(name)

    monkeypatch.setattr(tokens, "_build", counting_build)

    first = tokens.estimate("hello world, hello!", "gpt-4o")
    assert first == tokens.TokenCount(5, "heuristic:chars/4", False)
    assert "sha256" in caplog.text
    assert tokens.count_tokens("hello world, hello!") == 5
    assert builds == 1  # the failure is remembered, not retried per call
    with pytest.raises(tokens.EncodingUnavailable):
        tokens.get_encoding("o200k_base")
    # Other encodings are unaffected.
    assert tokens.estimate("hello world", "gpt-4").method == "tiktoken:cl100k_base"


def test_missing_file_falls_back_to_heuristic(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = dataclasses.replace(tokens.ENCODINGS["o200k_base"], filename="nope.tiktoken.gz")
    monkeypatch.setitem(tokens.ENCODINGS, "o200k_base", gone)
    assert tokens.estimate("abcdefgh").method == "heuristic:chars/4"
    with pytest.raises(tokens.EncodingUnavailable):
        tokens.get_encoding("no_such_encoding")


def test_concurrent_first_use_loads_once(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = 0
    real_build = tokens._build

    def counting_build(name: str) -> object:
        nonlocal builds
        builds += 1
        return real_build(name)

    monkeypatch.setattr(tokens, "_build", counting_build)
    start = threading.Barrier(8)
    results: list[int] = []

    def worker() -> None:
        start.wait()
        results.append(tokens.count_tokens("hello world", "gpt-4o"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [2] * 8
    assert builds == 1


def test_tokenizer_panic_falls_back_but_interrupts_propagate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class PanicException(BaseException):  # stands in for pyo3_runtime.PanicException
        pass

    def panics(enc: object, text: str) -> int:
        raise PanicException("boom")

    monkeypatch.setattr(tokens, "_tiktoken_count", panics)
    assert tokens.estimate("abcdefgh", "gpt-4o") == tokens.TokenCount(2, "heuristic:chars/4", False)

    def interrupted(enc: object, text: str) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(tokens, "_tiktoken_count", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tokens.estimate("abcdefgh", "gpt-4o")


# --- chunking of long texts --------------------------------------------------------------------

# Characters that exercise every branch of both split regexes: letters of both cases, digits,
# punctuation incl. "'" and "/", spaces, tabs, CR/LF, a combining mark, CJK, an emoji.
_TRICKY = "aAbsStT1234567890 '\"/.,:;{}[]-_\n\r\t\u0301é中文🙂"


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet=_TRICKY, max_size=300),
    size=st.integers(min_value=2, max_value=40),
    search=st.integers(min_value=1, max_value=40),
)
def test_safe_cuts_never_change_the_count(text: str, size: int, search: int) -> None:
    chunks, short = tokens._chunks(text, size=size, search=search)
    assert "".join(chunks) == text
    assert all(len(c) > 0 for c in chunks) or text == ""
    assert all(len(c) <= size for c in chunks) == short
    for name in tokens.ENCODINGS:
        enc = tokens.get_encoding(name)
        whole = enc.encode_ordinary(text)
        parts = [t for c in chunks for t in enc.encode_ordinary(c)]
        assert parts == whole, (name, chunks)
        # Chunks longer than ``size`` are counted piece by piece: the same total.
        assert tokens._tiktoken_count(enc, text, size, search) == len(whole), (name, chunks)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=_TRICKY, max_size=200)
    | st.lists(
        st.sampled_from(["a", " ", "é", "1", ".", "\n", "中", "\u0301", "'s", "ab", "\r\n"]),
        max_size=60,
    ).map(lambda units: "".join(u * 37 for u in units))
)
def test_counting_piece_by_piece_is_tiktokens_count(text: str) -> None:
    """The split regex (the regex package) and the heap merge of :func:`tokens._bpe_count` give
    tiktoken's count exactly, on runs long enough to be single long pieces too."""
    for name in tokens.ENCODINGS:
        enc = tokens.get_encoding(name)
        assert tokens._count_by_pieces(enc, text) == len(enc.encode_ordinary(text)), name


def test_long_ordinary_text_is_counted_exactly() -> None:
    line = 'The quick brown fox, id 12345, said "hello" to /api/v1/items?x=7.\n'
    text = line * 2000  # ~130 KB, many chunks
    enc = tokens.get_encoding("o200k_base")
    chunks, short = tokens._chunks(text)
    assert short and len(chunks) > 50
    assert tokens.count_tokens(text) == len(enc.encode_ordinary(text))
    compact = dumps([{"id": i, "name": f"item {i}", "ok": True} for i in range(3000)])
    assert tokens.count_tokens(compact) == len(enc.encode_ordinary(compact))


def test_words_and_spaces_are_cut_where_the_count_stays_exact() -> None:
    """Issue 23: ``"word " * 3000 + "tail"`` was cut blindly every 2,048 characters and
    counted 3,007 tokens; o200k counts 3,001. A space after a non-space is a safe cut."""
    text = "word " * 3000 + "tail"
    chunks, short = tokens._chunks(text)
    assert short and len(chunks) > 5
    for name in tokens.ENCODINGS:
        enc = tokens.get_encoding(name)
        assert tokens._tiktoken_count(enc, text) == len(enc.encode_ordinary(text))
    assert tokens.count_tokens(text, "gpt-4o") == 3001


def test_pathological_runs_are_counted_exactly_without_hanging_or_panicking() -> None:
    # 1 000 000 "a" makes tiktoken's Rust core panic and 100 000 take seconds if encoded whole:
    # a run with no safe cut is one long piece of the split regex, merged by _bpe_count.
    # "a" * 8 is one o200k token, so the exact answer is n / 8.
    n = 200_000
    _, short = tokens._chunks("a" * n)
    assert not short
    count = tokens.estimate("a" * n, "gpt-4o")
    assert count == tokens.TokenCount(n // 8, "tiktoken:o200k_base", True)
    enc = tokens.get_encoding("o200k_base")
    spaces = " " * 20_000 + "x" + "1" * 20_000
    assert tokens.count_tokens(spaces) == len(enc.encode_ordinary(spaces))
