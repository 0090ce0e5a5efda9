"""Read the key-value metadata of a GGUF file (vocabulary, merges, chat template), not its tensors."""

import struct
from pathlib import Path

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def scalar(self, fmt: str):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int):
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, n = self.scalar("<I"), self.scalar("<Q")
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                size = struct.calcsize(fmt)
                items = list(struct.unpack_from(f"<{n}{fmt[1]}", self.data, self.pos))
                self.pos += size * n
                return items
            return [self.value(item_type) for _ in range(n)]
        return self.scalar(_SCALARS[vtype])


def read_metadata(path: str | Path) -> dict:
    """All metadata keys of a GGUF file as Python values (arrays as lists)."""
    with open(path, "rb") as f:
        head = f.read(24)
        magic, version, _n_tensors, n_kv = struct.unpack("<4sIQQ", head)
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2+ file")
        # Metadata sits at the start; 64 MiB covers the largest vocabularies with room to spare.
        reader = _Reader(head + f.read(64 << 20))
    reader.pos = 24
    meta = {}
    for _ in range(n_kv):
        key = reader.string()
        meta[key] = reader.value(reader.scalar("<I"))
    return meta
