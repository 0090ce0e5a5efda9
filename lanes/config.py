"""Everything a running lane needs, built once at start from its `Lane` row."""

from dataclasses import dataclass

from engine.models import smollm2_path

from .engine_client import EngineOptions, EngineSupervisor
from .sanitize import Sanitizer
from .template import ChatTemplate
from .tokenizer import LaneTokenizer, load_tokenizer


@dataclass
class LaneRuntime:
    """A lane's settings plus its tokenizer, template, sanitizer and engine supervisor."""

    name: str
    max_context: int
    slack: int
    fit_max_tokens: bool
    lane_key: str
    tokenizer: LaneTokenizer
    template: ChatTemplate
    sanitizer: Sanitizer
    engine: EngineSupervisor
    max_body_bytes: int = 64 << 20
    ping_seconds: float = 10.0  # Anthropic streams: a ping after this long without output

    @classmethod
    def build(cls, lane, lane_key: str, model_file: str = "", threads: int = 2) -> "LaneRuntime":
        model_path = lane.model_file or model_file or smollm2_path()
        tokenizer = load_tokenizer(model_path)
        options = EngineOptions(
            model_path=model_path, n_ctx=lane.max_context, slots=lane.slots, threads=threads,
            kv_type=lane.kv_cache_type, max_queue=lane.max_queue, extra=lane.engine_options,
        )
        return cls(
            name=lane.name,
            max_context=lane.max_context,
            slack=lane.slack,
            fit_max_tokens=lane.fit_max_tokens,
            lane_key=lane_key,
            tokenizer=tokenizer,
            template=ChatTemplate.load(lane.chat_template, model_path),
            sanitizer=Sanitizer(tokenizer.special_literals),
            engine=EngineSupervisor(options, name=lane.name),
        )
