"""Offline token counting for tool arguments and results.

Pure module (no Flask, no database) so ingestion, replay and pages can all call it.

tiktoken normally downloads its BPE rank files on first use. Toolscope must never touch the
network at run time, so the rank files ship inside the package (``webapp/data/*.tiktoken.gz``,
provenance in ``webapp/data/README.md``) and are loaded here without ``tiktoken.get_encoding``:

* the gzip is decompressed and its sha256 checked against the hash tiktoken itself declares for
  that file in ``tiktoken_ext/openai_public.py`` (copied below; a test checks they still agree),
* the ``<base64 token> <rank>`` lines are parsed by hand (``tiktoken.load.load_tiktoken_bpe``
  would also copy the file into a cache directory under ``$TMPDIR``),
* ``tiktoken.Encoding`` is built with the same ``pat_str`` and special tokens as tiktoken's own.

Each encoding is loaded lazily, once per process, under a lock (thread-safe). Loading
o200k_base takes about 0.4 s and ~80 MB of memory (cl100k_base about half of that). Under
gunicorn only the token pass process (``webapp.token_process``) counts while agents write, so
the master and the web workers never load an encoding unless a replay or a chart must count a
text the pass has not counted yet.

Which encoding: OpenAI models use their own (o200k_base for gpt-4o/4.1/4.5/5 and the o-series,
cl100k_base for gpt-4/gpt-3.5) and the count is exact. Every other model (Claude, Gemini,
Llama, ...) gets o200k_base as an *estimate*; :attr:`TokenCount.exact` says which is which. If an
encoding cannot be loaded, counts fall back to :func:`heuristic_tokens` (characters / 4), labelled
``heuristic:chars/4`` so nobody mistakes them for tokenizer output.

Long texts: tiktoken's BPE is quadratic in the length of a single pre-tokenized piece (100 000
``"a"`` take ~3 s; 1 000 000 make the Rust core panic). Text longer than ``_CHUNK_CHARS`` is
therefore counted in chunks cut only where both split regexes are guaranteed to end a piece
anyway (a blank after a non-space, a non-letter after a letter, ...), so the total is exact.
Where no such place lies within ``_SEARCH_BACK`` characters (hundreds of letters, digits, spaces
or punctuation in a row, often one long piece), that chunk runs on to the next safe place and is
split by the same regex (the ``regex`` package, as tiktoken's own Python reference does) and
each piece merged by a heap in O(n log n) (:func:`_bpe_count`), exactly as tiktoken merges.
Measured on a loaded 2-core machine, old chunking -> this: a 1 MB JSON result 195 -> 203 ms
(307,010 tokens either way), ``"word " * 200_000`` 205 -> 121 ms (200,391 -> 200,001 tokens,
now tiktoken's count), 1 MB of digits 355 ms -> 1.6 s, 1 000 000 ``"a"`` 1.9 -> 10.5 s (each
exact now). Callers bound the size of what they accept rather than this module guessing.

The replay's counter (:func:`stored_counter`): tokenizing every result on every replay is too
slow for long conversations (about 100 µs per KB: seconds for 10,000 results). Ingestion already
counted each result, argument object and message, so the counter answers from those counts for
a text the replay sends unchanged, and tokenizes only texts the replay made (compacted or
truncated results, prefixes tried while truncating, the system prompt and tool definitions).
Those are remembered for the rest of the replay, and the last few thousand across requests as
well, so that changing an option on the preview page does not tokenize them again.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import heapq
import logging
import math
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "STORED_COUNTER",
    "EncodingUnavailable",
    "TokenCount",
    "count_tokens",
    "encoding_for_model",
    "estimate",
    "get_encoding",
    "heuristic_tokens",
    "stored_counter",
]

log = logging.getLogger(__name__)

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _EncodingSpec:
    name: str
    filename: str  # gzip of the original .tiktoken file, in webapp/data/
    sha256: str  # of the *decompressed* bytes: the hash tiktoken declares for the file
    pat_str: str
    special_tokens: dict[str, int]


# pat_str, special tokens and expected_hash are copied from tiktoken 0.12.0
# tiktoken_ext/openai_public.py (cl100k_base() and o200k_base()); tests/test_tokens.py checks
# that the installed tiktoken still declares exactly these.
ENCODINGS: dict[str, _EncodingSpec] = {
    spec.name: spec
    for spec in (
        _EncodingSpec(
            name="o200k_base",
            filename="o200k_base.tiktoken.gz",
            sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
            pat_str="|".join(
                [
                    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                    r"""\p{N}{1,3}""",
                    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                    r"""\s*[\r\n]+""",
                    r"""\s+(?!\S)""",
                    r"""\s+""",
                ]
            ),
            special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        ),
        _EncodingSpec(
            name="cl100k_base",
            filename="cl100k_base.tiktoken.gz",
            sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
            pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
            special_tokens={
                _ENDOFTEXT: 100257,
                _FIM_PREFIX: 100258,
                _FIM_MIDDLE: 100259,
                _FIM_SUFFIX: 100260,
                _ENDOFPROMPT: 100276,
            },
        ),
    )
}

DEFAULT_ENCODING = "o200k_base"
HEURISTIC_METHOD = "heuristic:chars/4"

# OpenAI model families newer than the installed tiktoken's table (e.g. "gpt-5.1", "o3-pro"
# are covered by tiktoken; "gpt-5.1-codex" or a future "o5" may not be). All use o200k_base.
_OPENAI_O200K_PREFIXES = (
    "gpt-5",
    "gpt-4.5",
    "gpt-4.1",
    "gpt-4o",
    "chatgpt-4o",
    "gpt-oss",
    "codex-",
    "o1",
    "o3",
    "o4",
)


class EncodingUnavailable(RuntimeError):
    """The shipped rank file is missing, corrupt, or tiktoken is not importable."""


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count and how it was obtained.

    ``method`` is ``"tiktoken:<encoding>"`` or ``"heuristic:chars/4"``. ``exact`` is true only
    when the encoding is the model's own tokenizer (an OpenAI model); for other models or no
    model the tiktoken count is an estimate of what that provider will bill.
    """

    tokens: int
    method: str
    exact: bool


# ---------------------------------------------------------------------------------------------
# Loading


_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}
_failed: dict[str, EncodingUnavailable] = {}


def _read_ranks(spec: _EncodingSpec) -> dict[bytes, int]:
    try:
        data_dir = resources.files(__package__ or "webapp").joinpath("data")
        raw = gzip.decompress(data_dir.joinpath(spec.filename).read_bytes())
    except (OSError, EOFError) as exc:  # missing file, truncated or not a gzip
        raise EncodingUnavailable(f"cannot read {spec.filename}: {exc}") from exc
    actual = hashlib.sha256(raw).hexdigest()
    if actual != spec.sha256:
        raise EncodingUnavailable(
            f"{spec.filename}: sha256 of the decompressed ranks is {actual}, "
            f"tiktoken expects {spec.sha256}"
        )
    # The format is "<base64 token> <rank>\n" per token, as tiktoken.load.load_tiktoken_bpe reads.
    fields = raw.split()
    if len(fields) % 2:
        raise EncodingUnavailable(f"{spec.filename}: odd number of fields")
    try:
        return dict(
            zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True)
        )
    except (binascii.Error, ValueError) as exc:  # unreachable once the hash matched
        raise EncodingUnavailable(f"{spec.filename}: {exc}") from exc


def _build(name: str) -> tiktoken.Encoding:
    spec = ENCODINGS.get(name)
    if spec is None:
        raise EncodingUnavailable(f"no shipped encoding named {name!r}")
    try:
        import tiktoken
    except ImportError as exc:
        raise EncodingUnavailable(f"tiktoken is not installed: {exc}") from exc
    enc = tiktoken.Encoding(
        name=spec.name,
        pat_str=spec.pat_str,
        mergeable_ranks=_read_ranks(spec),
        special_tokens=dict(spec.special_tokens),
    )
    # The Rust core keeps its own copy of the ranks; tiktoken holds on to the Python dict only
    # to pickle the Encoding, which Toolscope never does. Dropping it frees ~26 MB (o200k_base)
    # in each process that counts.
    enc._mergeable_ranks = {}
    return enc


def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The shipped encoding ``name``, loaded on first use (never from the network).

    Raises :class:`EncodingUnavailable` if it cannot be loaded; the failure is remembered, so a
    broken install costs one attempt per process, not one per call.
    """
    enc = _loaded.get(name)
    if enc is not None:
        return enc
    with _lock:
        enc = _loaded.get(name)
        if enc is not None:
            return enc
        if name in _failed:
            raise _failed[name]
        try:
            enc = _build(name)
        except EncodingUnavailable as exc:
            _failed[name] = exc
            log.error("token counts fall back to %s: %s", HEURISTIC_METHOD, exc)
            raise
        _loaded[name] = enc
        return enc


# ---------------------------------------------------------------------------------------------
# Choosing an encoding


def encoding_for_model(model: str | None) -> tuple[str, bool]:
    """``(encoding name, exact)`` for a model id such as ``"gpt-4o"`` or ``"openai/gpt-4.1"``.

    ``exact`` is true when the encoding is the model's own tokenizer; otherwise the name is
    :data:`DEFAULT_ENCODING`, used as an estimate (Claude, Gemini, open models, unknown, None).
    """
    if not model:
        return DEFAULT_ENCODING, False
    # "openai/gpt-4o", "azure/gpt-4o-mini", "openrouter/openai/gpt-4.1" -> last segment
    name = model.strip().lower().rsplit("/", 1)[-1]
    try:
        from tiktoken.model import encoding_name_for_model
    except ImportError:  # pragma: no cover - tiktoken is a hard dependency
        encoding_name_for_model = None
    if encoding_name_for_model is not None:
        try:
            known = encoding_name_for_model(name)
        except KeyError:
            pass
        else:
            # gpt-oss uses o200k_harmony: the same ranks plus chat-format special tokens,
            # which ordinary text never produces.
            known = "o200k_base" if known == "o200k_harmony" else known
            if known in ENCODINGS:
                return known, True
            # r50k/p50k (davinci-era models) are not shipped: estimate with the default.
            return DEFAULT_ENCODING, False
    if name.startswith(_OPENAI_O200K_PREFIXES):
        return "o200k_base", True
    return DEFAULT_ENCODING, False


# ---------------------------------------------------------------------------------------------
# Counting

_CHUNK_CHARS = 2048
_SEARCH_BACK = 256

# Both split regexes' whitespace, \s (Unicode White_Space) without "\r" and "\n", which o200k's
# punctuation piece can take after it. str.isspace() is wider (it includes "\x1c"-"\x1f").
_BLANKS = frozenset(" \t\x0b\x0c\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)


def _is_safe_cut(before: str, after: str) -> bool:
    """Whether both shipped split regexes always end a piece between ``before`` and ``after``.

    Derived from the two pat_str above (o200k_base and cl100k_base); tests/test_tokens.py checks
    it against tiktoken on random text. str.isspace() is a superset of the regex's \\s, which
    keeps every rule conservative.
    """
    if after in _BLANKS:
        # No piece holds a non-space followed by a blank: letter and digit pieces hold no
        # whitespace, a punctuation piece only a leading " " and trailing CR/LF, and the
        # whitespace pieces start at the first blank. No alternative looks back, so the text
        # from here on splits as it does in the whole, and the piece before ends here either way.
        return not before.isspace()
    if before == "\n":
        # No piece spans a newline followed by non-space, except o200k's punctuation piece
        # "?[^\s\p{L}\p{N}]+[\r\n/]*", which can take "\n/" with it.
        return not after.isspace() and after != "/"
    cat_before = unicodedata.category(before)[0]
    cat_after = unicodedata.category(after)[0]
    if cat_after == "N":
        # Digit pieces hold only digits (so "12|3" would regroup), and a space would join the
        # next piece as its prefix and change the whitespace split before it.
        return cat_before != "N" and not before.isspace()
    if cat_before == "N":
        return True
    if cat_before == "L":
        # A letter piece ends before anything but letters, marks and o200k's "'s"-style suffix.
        return cat_after not in ("L", "M") and after != "'" and not after.isspace()
    return False


def _chunks(
    text: str, size: int = _CHUNK_CHARS, search: int = _SEARCH_BACK
) -> tuple[list[str], bool]:
    """Split ``text`` into pieces that tokenize independently, cut only at safe places.

    Returns ``(chunks, short)``: a chunk is at most ``size`` characters when a safe place lies
    within ``search`` characters before that length; otherwise it runs on to the next safe place
    (a run of letters, spaces or punctuation with no place to cut: one long piece of the split
    regex, on which tiktoken's BPE is quadratic), and ``short`` is false.
    """
    if len(text) <= size:
        return [text], True
    chunks: list[str] = []
    short = True
    start = 0
    end = len(text)
    while end - start > size:
        target = start + size
        cut = target
        lowest = max(start + 1, target - search)
        while cut >= lowest and not _is_safe_cut(text[cut - 1], text[cut]):
            cut -= 1
        if cut < lowest:
            short = False
            cut = target + 1
            while cut < end and not _is_safe_cut(text[cut - 1], text[cut]):
                cut += 1
        chunks.append(text[start:cut])
        start = cut
    if start < end:
        chunks.append(text[start:])
    return chunks, short


@lru_cache(maxsize=len(ENCODINGS))
def _split_regex(name: str):  # regex: tiktoken's own dependency
    import regex

    return regex.compile(ENCODINGS[name].pat_str)


def _bpe_count(rank: Callable[[bytes], int | None], piece: bytes) -> int:
    """Tokens of one piece of the split regex, merged as tiktoken's ``byte_pair_encode`` does
    (the adjacent pair with the lowest rank first, the leftmost of equals) in O(n log n) with a
    heap, where tiktoken rescans the whole piece after each merge."""
    n = len(piece)
    if n < 2:
        return n
    if rank(piece) is not None:  # tiktoken takes a piece that is a token as it is
        return 1
    # Parts are byte ranges [i, nxt[i]); a heap entry proposes merging the part at i with the
    # one after it into [i, end), and is stale once either has changed. An entry is one int,
    # (rank, i, end) in mixed radix: ints compare faster than tuples.
    span = n + 1
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = [
        (r * span + i) * span + i + 2
        for i in range(n - 1)
        if (r := rank(piece[i : i + 2])) is not None
    ]
    heapq.heapify(heap)
    parts = n
    while heap:
        key, end = divmod(heapq.heappop(heap), span)
        i = key % span
        if not alive[i]:
            continue
        j = nxt[i]
        if j >= n or nxt[j] != end:
            continue
        alive[j] = False
        nxt[i] = end
        if end < n:
            prv[end] = i
        parts -= 1
        before = prv[i]
        if before >= 0 and (r := rank(piece[before:end])) is not None:
            heapq.heappush(heap, (r * span + before) * span + end)
        if end < n:
            after = nxt[end]
            if (r := rank(piece[i:after])) is not None:
                heapq.heappush(heap, (r * span + i) * span + after)
    return parts


def _count_by_pieces(enc: tiktoken.Encoding, text: str) -> int:
    """Exact count of a text that holds a long piece: the pieces as the split regex finds them,
    each merged by :func:`_bpe_count`."""
    special = frozenset(ENCODINGS[enc.name].special_tokens.values())
    single = (
        enc._core_bpe.encode_single_token
    )  # Encoding.encode_single_token, without its str check
    known: dict[bytes, int | None] = {}  # a long piece is mostly the same few pairs again

    def rank(token: bytes) -> int | None:
        try:
            return known[token]
        except KeyError:
            pass
        try:
            value = single(token)
        except KeyError:
            value = None
        if value in special:
            value = None
        known[token] = value
        return value

    return sum(
        _bpe_count(rank, match.group().encode("utf-8"))
        for match in _split_regex(enc.name).finditer(text)
    )


def _tiktoken_count(
    enc: tiktoken.Encoding, text: str, size: int = _CHUNK_CHARS, search: int = _SEARCH_BACK
) -> int:
    chunks, _short = _chunks(text, size, search)
    # encode_ordinary: "<|endoftext|>" inside a tool result is text, not a special token.
    return sum(
        len(enc.encode_ordinary(chunk)) if len(chunk) <= size else _count_by_pieces(enc, chunk)
        for chunk in chunks
    )


def heuristic_tokens(text: str) -> int:
    """Rough token count: one token per four characters, rounded up. An estimate only."""
    return math.ceil(len(text) / 4)


def estimate(text: str, model: str | None = None) -> TokenCount:
    """Count the tokens of ``text`` for ``model`` and say how (see :class:`TokenCount`)."""
    name, exact = encoding_for_model(model)
    if not text:
        return TokenCount(0, f"tiktoken:{name}", exact)
    try:
        enc = get_encoding(name)
    except EncodingUnavailable:
        return TokenCount(heuristic_tokens(text), HEURISTIC_METHOD, False)
    try:
        tokens = _tiktoken_count(enc, text)
    except BaseException as exc:
        # A Rust panic surfaces as pyo3_runtime.PanicException, a BaseException subclass. The
        # chunking above should make it unreachable; untrusted input must still not crash us.
        if type(exc).__name__ != "PanicException":
            raise
        log.warning("tiktoken panicked on a %d-character text; using %s", len(text), exc)
        return TokenCount(heuristic_tokens(text), HEURISTIC_METHOD, False)
    return TokenCount(tokens, f"tiktoken:{name}", exact)


def count_tokens(text: str, model: str | None = None) -> int:
    """Number of tokens in ``text`` for ``model`` (o200k_base estimate when not an OpenAI model)."""
    return estimate(text, model).tokens


# --- The replay's counter: stored counts first ------------------------------------------------

# The name the replay's export document gives this counter (options.token_counter).
STORED_COUNTER = "stored"

# Bounded, so a worker's memory stays flat: texts made by a replay are mostly compacted results
# (a few hundred bytes each) and truncated prefixes (about four characters per capped token).
_tokenize = lru_cache(maxsize=4096)(count_tokens)


def stored_counter(stored: dict[str, int], model: str | None) -> Callable[[str], int]:
    """``count(text)``: the stored count of ``text`` if there is one, else tiktoken's.

    ``stored`` is used as the memo and grows with every new text; pass a dict owned by one
    request (the history loader builds a fresh one each time).
    """
    lookup = stored.get

    def count(text: str) -> int:
        tokens = lookup(text)
        if tokens is None:
            tokens = stored[text] = _tokenize(text, model)
        return tokens

    return count
