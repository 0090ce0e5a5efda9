"""A thin wrapper over llama-cpp-python's low-level C API: one model, one context, batches, samplers.

Nothing here knows about requests or slots; `scheduler.py` builds on these pieces.
The high-level `llama_cpp.Llama` class is deliberately not used: it owns one sequence
and its own sampling loop, and we need many sequences sharing each decode step.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

import llama_cpp

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
FLASH_ATTN = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
              "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}
SPLIT_MODES = {"none": llama_cpp.LLAMA_SPLIT_MODE_NONE, "layer": llama_cpp.LLAMA_SPLIT_MODE_LAYER,
               "row": llama_cpp.LLAMA_SPLIT_MODE_ROW}

# The MoE expert weights of a block, as llama.cpp's own `--cpu-moe` / `--n-cpu-moe` name them
# (common.h LLM_FFN_EXPS_REGEX; gate_up is the fused form some models use).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def moe_cpu_patterns(n_cpu_moe: int | None, cpu_moe: bool = False) -> list[str]:
    """Tensor-name regexes that keep MoE experts in RAM: all blocks' (cpu_moe) or blocks 0..n-1's.

    The same patterns as llama.cpp's `--cpu-moe` / `--n-cpu-moe N`; the escaped dot after the
    block number keeps `blk.1` from matching `blk.10`.
    """
    if cpu_moe:
        return [FFN_EXPS_REGEX]
    return [rf"blk\.{i}{FFN_EXPS_REGEX}" for i in range(n_cpu_moe or 0)]


# ggml log levels (ggml.h): NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5.
_LOG_WARN = 3
_LOG_CONT = 5


class LlamaError(RuntimeError):
    """A llama.cpp call failed."""


@dataclass
class LoadOptions:
    """How to load the model and size its context; n_ctx is per sequence (slot)."""

    model_path: str
    n_ctx: int = 8192
    n_threads: int = 2
    n_batch: int = 512
    n_seq_max: int = 1
    kv_type: str = "f16"
    use_mmap: bool = True
    # mlock: pin the weights in RAM (no swapping or page-out of a mapped file).
    use_mlock: bool = False
    # Offload: layers in VRAM (-1 all), which GPU holds the non-split parts, how to split.
    n_gpu_layers: int = 0
    main_gpu: int = 0
    split_mode: str = "layer"
    # KV cache and its attention ops on the GPU with their layers (llama.cpp's default).
    offload_kqv: bool = True
    # (regex, buffer type name) pairs, first match wins: tensors whose name matches are placed
    # in that buffer type ("CPU", "CUDA0", ... as `buffer_types()` lists them) whatever
    # n_gpu_layers says. MoE offload (--cpu-moe / --n-cpu-moe) is built from these.
    tensor_overrides: tuple[tuple[str, str], ...] = ()
    # One KV stream per sequence: each slot gets its own n_ctx cells and attention only
    # reads its own cells, which is cheaper than one shared buffer when prompts differ.
    kv_unified: bool = False
    # Measured here (SmolLM2, 2 threads, 3K tokens cached): flash attention ("auto" turns it
    # on for CPU) prefills ~25% faster but decodes ~25% slower at long context than "off".
    flash_attn: str = "auto"
    verbose: bool = False


_backend_ready = False
_ggml = None  # libggml, for the device/buffer-type calls llama-cpp-python does not wrap
_log_callback = None  # kept referenced: llama.cpp holds the raw pointer forever


def _quiet_logs(verbose: bool) -> None:
    """Route llama.cpp logging to stderr, keeping only warnings and errors unless verbose."""
    global _log_callback
    state = {"last_kept": True}

    def callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        # CONT lines continue the previous message; keep them only if it was kept.
        keep = verbose or (state["last_kept"] if level == _LOG_CONT else level >= _LOG_WARN)
        if level != _LOG_CONT:
            state["last_kept"] = keep
        if keep and text:
            sys.stderr.write(text.decode("utf-8", "replace"))

    _log_callback = llama_cpp.llama_log_callback(callback)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def backend_init(verbose: bool = False) -> None:
    """Initialise the llama.cpp backend once per process."""
    global _backend_ready
    if not _backend_ready:
        _quiet_logs(verbose)
        llama_cpp.llama_backend_init()
        _backend_ready = True


def _ggml_lib():
    """libggml with the few device functions we call typed (ggml-backend.h)."""
    global _ggml
    if _ggml is None:
        from llama_cpp import _ggml as ggml_module  # llama-cpp-python's own handle on libggml

        lib = ggml_module.libggml
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_count.argtypes = []
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
        lib.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_buft_name.restype = ctypes.c_char_p
        lib.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
        _ggml = lib
    return _ggml


def buffer_types() -> dict[str, int]:
    """The buffer types tensors can be placed in, by name: {"CPU": ptr} here, plus "CUDA0"... on a GPU build."""
    lib = _ggml_lib()
    out: dict[str, int] = {}
    for i in range(lib.ggml_backend_dev_count()):
        buft = lib.ggml_backend_dev_buffer_type(lib.ggml_backend_dev_get(i))
        if buft:
            out.setdefault(lib.ggml_backend_buft_name(buft).decode(), buft)
    return out


class _TensorBuftOverride(ctypes.Structure):
    """struct llama_model_tensor_buft_override (llama.h); llama-cpp-python declares the field as void*."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def _override_array(overrides: tuple[tuple[str, str], ...]):
    """A NULL-terminated C array for llama_model_params.tensor_buft_overrides (None when empty)."""
    if not overrides:
        return None
    known = buffer_types()
    if len(overrides) >= llama_cpp.llama_max_tensor_buft_overrides():
        raise ValueError(f"too many tensor overrides ({len(overrides)})")
    arr = (_TensorBuftOverride * (len(overrides) + 1))()
    for i, (pattern, name) in enumerate(overrides):
        if name not in known:
            raise ValueError(f"unknown buffer type {name!r} for tensor override {pattern!r}; "
                             f"this build has {sorted(known)}")
        arr[i].pattern = pattern.encode()
        arr[i].buft = known[name]
    arr[len(overrides)].pattern = None  # the terminator
    arr[len(overrides)].buft = None
    return arr


class Model:
    """One loaded model with one context holding `n_seq_max` sequences of `n_ctx` tokens each."""

    def __init__(self, options: LoadOptions):
        if options.kv_type not in KV_TYPES:
            raise ValueError(f"kv type must be one of {sorted(KV_TYPES)}, not {options.kv_type!r}")
        if options.flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}, not {options.flash_attn!r}")
        if options.kv_type != "f16" and options.flash_attn == "off":
            raise ValueError("a quantized KV cache needs flash attention (flash_attn 'auto' or 'on')")
        if options.split_mode not in SPLIT_MODES:
            raise ValueError(f"split mode must be one of {sorted(SPLIT_MODES)}, not {options.split_mode!r}")
        if not os.path.isfile(options.model_path):
            raise FileNotFoundError(options.model_path)
        backend_init(options.verbose)
        self.options = options
        self.model = None
        self.ctx = None

        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = options.n_gpu_layers
        mparams.main_gpu = options.main_gpu
        mparams.split_mode = SPLIT_MODES[options.split_mode]
        mparams.load_mode = {
            (True, False): llama_cpp.LLAMA_LOAD_MODE_MMAP, (False, False): llama_cpp.LLAMA_LOAD_MODE_NONE,
            (True, True): llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK, (False, True): llama_cpp.LLAMA_LOAD_MODE_MLOCK,
        }[(bool(options.use_mmap), bool(options.use_mlock))]
        # Kept on self: the C side reads the patterns while loading.
        self._overrides = _override_array(tuple(options.tensor_overrides))
        if self._overrides is not None:
            mparams.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)
        self.model = llama_cpp.llama_model_load_from_file(options.model_path.encode(), mparams)
        if not self.model:
            raise LlamaError(f"could not load model {options.model_path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)

        n_seq = max(1, options.n_seq_max)
        # A step holds one decode token per sequence plus prefill, so the batch must fit them all.
        n_batch = max(options.n_batch, n_seq)
        cparams = llama_cpp.llama_context_default_params()
        # Non-unified KV splits n_ctx evenly over the sequences, so ask for n_ctx per sequence.
        cparams.n_ctx = options.n_ctx if options.kv_unified else options.n_ctx * n_seq
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = options.n_threads
        cparams.n_threads_batch = options.n_threads
        cparams.type_k = KV_TYPES[options.kv_type]
        cparams.type_v = KV_TYPES[options.kv_type]
        cparams.kv_unified = options.kv_unified
        cparams.offload_kqv = options.offload_kqv
        cparams.no_perf = True
        cparams.flash_attn_type = FLASH_ATTN[options.flash_attn]
        if options.kv_type != "f16":
            # A quantized V cache needs flash attention; say so rather than rely on "auto".
            cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            self.close()
            raise LlamaError("could not create the llama.cpp context (out of memory?)")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_seq = llama_cpp.llama_n_seq_max(self.ctx)
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)
        # With a unified cache all sequences share the cells, so one sequence may use them all;
        # we still cap each at the asked n_ctx so a slot's window does not depend on the others.
        self.n_ctx = min(options.n_ctx, llama_cpp.llama_n_ctx_seq(self.ctx))

    @property
    def description(self) -> str:
        """The model's own short description, e.g. 'llama 135M Q4_1'."""
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_desc(self.model, buf, len(buf))
        return buf.value[: max(n, 0)].decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation (eos, eot, <|im_end|> and the like)."""
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """The model's own tokenization of text (for tests and benchmarks; the lane tokenizes)."""
        data = text.encode()
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise LlamaError(f"tokenize needs {-n} tokens, had room for {cap}")
        return list(buf[:n])

    def decode(self, batch: "Batch") -> None:
        """Run one batch through the model; raises LlamaError when llama.cpp refuses it."""
        rc = llama_cpp.llama_decode(self.ctx, batch.raw)
        if rc != 0:
            reason = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}.get(rc, "fatal error")
            raise LlamaError(f"llama_decode returned {rc} ({reason})")

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        """Drop the sequence's cached tokens at positions [p0, p1) (-1: open end)."""
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Share src's cached tokens at [p0, p1) with dst."""
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_keep(self, seq: int) -> None:
        """Drop every cached token not belonging to seq."""
        llama_cpp.llama_memory_seq_keep(self.memory, seq)

    def seq_pos_max(self, seq: int) -> int:
        """The largest cached position of seq, or -1 when it holds nothing."""
        return llama_cpp.llama_memory_seq_pos_max(self.memory, seq)

    def close(self) -> None:
        """Free the context and the model (safe to call twice)."""
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None


class Batch:
    """A reusable llama_batch of up to `capacity` tokens, one sequence id each."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.raw = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        """Empty the batch for the next step."""
        self.n = 0
        self.raw.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token; returns its index, which is where its logits are read back."""
        i = self.n
        if i >= self.capacity:
            raise LlamaError(f"batch full ({self.capacity} tokens)")
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = 1 if logits else 0
        self.n = i + 1
        raw.n_tokens = self.n
        return i

    def add_many(self, tokens: list[int], start_pos: int, seq: int, logits_last: bool) -> int | None:
        """Append a run of one sequence's tokens at consecutive positions; returns the last index if it has logits."""
        last = None
        end = len(tokens) - 1
        for k, token in enumerate(tokens):
            idx = self.add(token, start_pos + k, seq, logits_last and k == end)
            if logits_last and k == end:
                last = idx
        return last

    def free(self) -> None:
        """Release the batch's arrays (safe to call twice)."""
        if self.raw is not None:
            llama_cpp.llama_batch_free(self.raw)
            self.raw = None


@dataclass
class SamplingParams:
    """Per-request sampling; temperature <= 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None


class Sampler:
    """A llama.cpp sampler chain for one request; sample() also accepts the token into the chain."""

    def __init__(self, params: SamplingParams):
        self.chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = lambda s: llama_cpp.llama_sampler_chain_add(self.chain, s)  # noqa: E731
        if params.temperature <= 0:
            add(llama_cpp.llama_sampler_init_greedy())
            return
        # The usual order: cut the candidates (top-k, then top-p), then flatten/sharpen, then draw.
        if params.top_k and params.top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(int(params.top_k)))
        if params.top_p is not None and 0 < params.top_p < 1:
            add(llama_cpp.llama_sampler_init_top_p(float(params.top_p), 1))
        add(llama_cpp.llama_sampler_init_temp(float(params.temperature)))
        seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else int(params.seed) & 0xFFFFFFFF
        add(llama_cpp.llama_sampler_init_dist(seed))

    def sample(self, model: Model, idx: int) -> int:
        """Pick the next token from the logits at batch index idx of the last decode."""
        return llama_cpp.llama_sampler_sample(self.chain, model.ctx, idx)

    def free(self) -> None:
        """Release the chain and the samplers in it (safe to call twice)."""
        if self.chain:
            llama_cpp.llama_sampler_free(self.chain)
            self.chain = None
