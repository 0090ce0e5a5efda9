"""Wire format between a lane and its engine: one JSON object per line over a Unix socket.

The lane is the engine's only client. Token ids go in, token ids come out; the engine
knows nothing of text, chat templates or HTTP.

Lane -> engine
  {"op": "generate", "id": str, "prompt": [int], "max_tokens": int,
   "temperature": float, "top_p": float, "top_k": int, "seed": int | None,
   "stop_ids": [int]}                     # stop_ids: extra ids that end generation
                                          # (end-of-generation tokens always do)
                                          # optional "ignore_eos": bool (default false):
                                          # benchmarks only; end-of-generation tokens do
                                          # not stop (stop_ids still do)
                                          # optional "reasoning": a per-request thinking budget
                                          #   {"budget": int >= 0, "start_ids": [int], "end_ids": [int],
                                          #    "wrap_ids": [int] (non-empty), "thinking_at_start": bool}
                                          # The think block is open from the first token when
                                          # thinking_at_start (the prompt opened it), else once the
                                          # completion begins with start_ids; it closes when the
                                          # completion ends with end_ids. Sampled tokens while it is
                                          # open are counted (not the start_ids; the end_ids are).
                                          # When the count reaches budget with the block still open,
                                          # the engine emits wrap_ids in `tokens` right after that
                                          # token (they count in completion_tokens), decodes them as
                                          # forced tokens (the KV cache continues, nothing re-read),
                                          # treats the block as closed, and samples on (the answer).
                                          # budget 0: the wrap-up is the first output (with
                                          # thinking_at_start) or comes right after start_ids.
                                          # max_tokens and n_ctx bound the total and may cut the
                                          # wrap-up short. Absent or null: no budget, no counting.
  {"op": "cancel", "id": str}             # stop a request and free its slot
  {"op": "slots"}                         # ask for the slots' state

Engine -> lane
  {"op": "ready", "n_ctx": int, "n_slots": int, "model": str}   # once, after load
                                          # n_ctx is per slot: prompt + completion <= n_ctx
                                          # also "desc": str, "n_vocab": int (informative)
  {"op": "tokens", "id": str, "ids": [int]}                     # new tokens, in order
  {"op": "done", "id": str, "finish_reason": "stop" | "length" | "cancelled",
   "usage": {"prompt_tokens": int, "completion_tokens": int, "cached_tokens": int},
   "timings": {"queue_ms": float, "prefill_ms": float, "prefill_tokens": int,
               "decode_ms": float, "decode_tokens": int, "ttft_ms": float}}
                                          # the token that stopped generation (eog or a
                                          # stop_id) is neither sent nor counted:
                                          # completion_tokens == ids sent for the request
                                          # usage also has, only when the request carried
                                          # "reasoning": "reasoning_tokens": int (tokens inside
                                          # the think block: the counted ones plus the forced
                                          # wrap-up ids sent, all of them) and
                                          # "reasoning_budget_hit": bool (the wrap-up was forced)
  {"op": "error", "id": str | None, "message": str}             # request failed
                                          # (an error for an id ends that request: no done)
  {"op": "slots", "slots": [{"slot": int, "state": "idle" | "prefill" | "decode",
                             "cached_tokens": int, "request_id": str | None}]}
"""

import json

GENERATE = "generate"
CANCEL = "cancel"
SLOTS = "slots"
READY = "ready"
TOKENS = "tokens"
DONE = "done"
ERROR = "error"

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CANCELLED = "cancelled"


def encode(message: dict) -> bytes:
    """One message as one line of compact JSON."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict:
    """One line back into a message."""
    return json.loads(line)
