"""The lane's exact tokenizer: a `tokenizers` BPE built from the GGUF vocabulary and merges.

`encode` gives the same ids as llama.cpp's own tokenizer with special tokens parsed:
the prompt is split at whole special-token literals (each becomes its id), and the text
between them (long texts cut in chunks where the pre-tokenizer cuts anyway) is encoded
with special parsing off, all new pieces in one `encode_batch_fast`.
BPE never merges across a special token, so a piece's ids do not depend on its
neighbours: the ids of pieces already seen are remembered (`PieceCache`, keyed by a
hash of the piece's text), and a conversation that grows by one message re-encodes
only the new pieces, with exactly the ids a whole encoding gives.
`TokenDecoder` turns ids back into text incrementally without splitting a UTF-8 character.
"""

import codecs
import hashlib
import re
import threading
from array import array
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from .gguf_meta import read_metadata
from .sanitize import restore

CONTROL = 3  # GGUF token_type of control tokens (<|im_start|>, <|im_end|>, ...)
USER_DEFINED = 4
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON may carry them; no tokenizer takes them


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table, used by ByteLevel BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}


class LaneTokenizer:
    """Encode prompts and decode tokens exactly as the model's GGUF vocabulary says."""

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int], eos_id: int, bos_id: int | None,
                 cache_tokens: int = 4_000_000):
        self.pieces = PieceCache(cache_tokens)
        vocab = {tok: i for i, tok in enumerate(tokens)}
        bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], fuse_unk=False)
        self._plain = Tokenizer(bpe)
        self._plain.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
        self._plain.decoder = decoders.ByteLevel()
        self.vocab_size = len(tokens)
        self.eos_id, self.bos_id = eos_id, bos_id
        self.special_ids = {tok: i for i, (tok, t) in enumerate(zip(tokens, token_types)) if t in (CONTROL, USER_DEFINED)}
        self._special_split = re.compile(
            "(" + "|".join(re.escape(s) for s in sorted(self.special_ids, key=len, reverse=True)) + ")"
        )
        # Raw bytes of every token, for incremental decoding.
        self.token_bytes: list[bytes] = []
        for i, tok in enumerate(tokens):
            if i in self.special_ids.values():
                self.token_bytes.append(tok.encode())
            else:
                self.token_bytes.append(bytes(_BYTE_OF_CHAR.get(c, 0x3F) for c in tok))

    @classmethod
    def from_gguf(cls, path: str | Path) -> "LaneTokenizer":
        meta = read_metadata(path)
        if meta.get("tokenizer.ggml.model") != "gpt2":
            raise ValueError(f"{path}: only byte-level BPE (gpt2) vocabularies are supported")
        return cls(
            tokens=meta["tokenizer.ggml.tokens"],
            merges=meta["tokenizer.ggml.merges"],
            token_types=meta["tokenizer.ggml.token_type"],
            eos_id=meta.get("tokenizer.ggml.eos_token_id"),
            bos_id=meta.get("tokenizer.ggml.bos_token_id") if meta.get("tokenizer.ggml.add_bos_token") else None,
        )

    @property
    def special_literals(self) -> list[str]:
        return list(self.special_ids)

    def encode(self, prompt: str) -> list[int]:
        """Prompt text -> ids; whole special literals become their ids, neutralised ones plain text."""
        return self.encode_array(prompt).tolist()

    def encode_array(self, prompt: str) -> array:
        """`encode` as an array of int32 (what the count needs, without a list of 150K ints)."""
        pieces = self._special_split.split(prompt)
        # split() with one group alternates text, special, text, special, ..., text.
        chunks: list[str] = []
        layout: list[int] = []  # a special token's id (>= 0), or -1 - k for chunks[k]
        special = self.special_ids
        for i, piece in enumerate(pieces):
            if i % 2:
                layout.append(special[piece])
            else:
                for chunk in _split_long(piece):
                    layout.append(-1 - len(chunks))
                    chunks.append(chunk)
        keys = [_piece_key(c) for c in chunks]
        found = self.pieces.get_many(keys)
        todo: dict[bytes, int] = {}
        for k, key in enumerate(keys):
            if found[k] is None and key not in todo:
                todo[key] = k
        if todo:
            fresh = dict(zip(todo, self._encode_pieces([restore(chunks[k]) for k in todo.values()])))
            self.pieces.put_many(fresh)
            found = [f if f is not None else fresh[key] for key, f in zip(keys, found)]
        ids = array("i") if self.bos_id is None else array("i", [self.bos_id])
        for x in layout:
            if x >= 0:
                ids.append(x)
            else:
                ids.extend(found[-1 - x])
        return ids

    def _encode_pieces(self, texts: list[str]) -> list[array]:
        """Plain text pieces -> ids, in parallel (the GIL is released meanwhile); offsets are not computed."""
        try:
            encoded = self._plain.encode_batch_fast(texts, add_special_tokens=False)
        except TypeError:  # a lone surrogate (e.g. "\ud800" in JSON): encode it as U+FFFD
            texts = [_LONE_SURROGATE.sub("\ufffd", t) for t in texts]
            encoded = self._plain.encode_batch_fast(texts, add_special_tokens=False)
        return [array("i", e.ids) for e in encoded]

    def decode(self, ids: list[int]) -> str:
        """Ids -> text (whole sequence)."""
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8", errors="replace")


CHUNK_CHARS = 8192


def _split_long(text: str) -> list[str]:
    """`text` in chunks of about CHUNK_CHARS, cut only where the pre-tokenizer cuts anyway.

    A cut goes before a "\n" that follows a visible ASCII character: no pre-token of the
    GPT-2 pattern (nor the digit split) holds both a non-space character and the
    whitespace run after it, and none looks ahead past a non-space, so the chunks' ids
    are the ids of the whole. Chunks spread a long message over the cores and let a
    repeated long text hit the cache.
    """
    if len(text) <= CHUNK_CHARS:
        return [text] if text else []
    out, start = [], 0
    while len(text) - start > CHUNK_CHARS:
        p = text.find("\n", start + CHUNK_CHARS)
        while p > 0 and not "!" <= text[p - 1] <= "~":
            p = text.find("\n", p + 1)
        if p < 0:
            break
        out.append(text[start:p])
        start = p
    out.append(text[start:])
    return out


def _piece_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class PieceCache:
    """Ids of prompt pieces by a 128-bit hash of their text; least recently used out first.

    Bounded by the tokens it holds (each entry also costs ENTRY_COST for its bookkeeping);
    ids are kept as int32 arrays, so 4M tokens take about 16 MB. Thread-safe: the lane
    counts in worker threads.
    """

    ENTRY_COST = 32

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.tokens = 0
        self.hits = self.misses = 0
        self._entries: OrderedDict[bytes, array] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(self, keys: list[bytes | None]) -> list[array | None]:
        out = []
        with self._lock:
            entries = self._entries
            for key in keys:
                ids = entries.get(key) if key is not None else None
                if ids is not None:
                    entries.move_to_end(key)
                    self.hits += 1
                elif key is not None:
                    self.misses += 1
                out.append(ids)
        return out

    def put_many(self, items: dict[bytes, array]):
        with self._lock:
            for key, ids in items.items():
                cost = len(ids) + self.ENTRY_COST
                if cost > self.max_tokens:
                    continue
                old = self._entries.pop(key, None)
                if old is not None:
                    self.tokens -= len(old) + self.ENTRY_COST
                self._entries[key] = ids
                self.tokens += cost
            while self.tokens > self.max_tokens:
                _, ids = self._entries.popitem(last=False)
                self.tokens -= len(ids) + self.ENTRY_COST

    def clear(self):
        with self._lock:
            self._entries.clear()
            self.tokens = 0


class TokenDecoder:
    """Incremental detokenizer: feed ids, get the text that is complete so far."""

    def __init__(self, tokenizer: LaneTokenizer):
        self._bytes = tokenizer.token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: list[int]) -> str:
        return self._utf8.decode(b"".join(self._bytes[i] for i in ids))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> LaneTokenizer:
    """One tokenizer per model file per process."""
    return LaneTokenizer.from_gguf(path)
