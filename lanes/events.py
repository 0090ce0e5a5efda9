"""From engine token ids to the text a client may see: incremental, stop strings honoured."""

from .tokenizer import LaneTokenizer, TokenDecoder


class TextStream:
    """Feed token ids; get text deltas that are safe to send.

    Text that could still turn out to be the start of a stop string is held back until
    it is decided; once a stop string appears, everything from it on is dropped and
    `stopped` is set.
    """

    def __init__(self, tokenizer: LaneTokenizer, stop: list[str]):
        self._decoder = TokenDecoder(tokenizer)
        self._stop = [s for s in stop if s]
        self._pending = ""
        self.stopped = False
        self.text = ""

    def feed(self, ids: list[int]) -> str:
        if self.stopped:
            return ""
        return self._emit(self._pending + self._decoder.feed(ids), final=False)

    def flush(self) -> str:
        if self.stopped:
            return ""
        return self._emit(self._pending + self._decoder.flush(), final=True)

    def _emit(self, text: str, final: bool) -> str:
        cut = min((i for i in (text.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return self._take(text[:cut])
        hold = 0 if final else self._held_suffix(text)
        self._pending = text[len(text) - hold :] if hold else ""
        return self._take(text[: len(text) - hold])

    def _held_suffix(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of some stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best

    def _take(self, delta: str) -> str:
        self.text += delta
        return delta
