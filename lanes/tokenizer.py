"""The lane's exact tokenizer: a `tokenizers` BPE built from the GGUF vocabulary and merges.

`encode` gives the same ids as llama.cpp's own tokenizer with special tokens parsed:
the prompt is split at whole special-token literals (each becomes its id), and the text
between them is encoded with special parsing off, all pieces in one `encode_batch`.
`TokenDecoder` turns ids back into text incrementally without splitting a UTF-8 character.
"""

import codecs
import re
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from .gguf_meta import read_metadata
from .sanitize import restore

CONTROL = 3  # GGUF token_type of control tokens (<|im_start|>, <|im_end|>, ...)
USER_DEFINED = 4


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

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int], eos_id: int, bos_id: int | None):
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
        pieces = self._special_split.split(prompt)
        # split() with one group alternates text, special, text, special, ..., text.
        texts = [restore(p) for p in pieces[0::2]]
        encoded = self._plain.encode_batch(texts, add_special_tokens=False) if any(texts) else []
        ids: list[int] = [] if self.bos_id is None else [self.bos_id]
        for i, piece in enumerate(pieces):
            if i % 2:
                ids.append(self.special_ids[piece])
            elif piece:
                ids.extend(encoded[i // 2].ids)
        return ids

    def decode(self, ids: list[int]) -> str:
        """Ids -> text (whole sequence)."""
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8", errors="replace")


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
