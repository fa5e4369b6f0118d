"""The model architectures whose SGLang rules differ: hybrid (mamba / linear-attention) models, which of them can
use the mamba extra buffer, and the architecture a model path names.

One table, `HYBRID`: a tag found in a model path (lower case) → the architecture it names and whether SGLang
supports `extra_buffer` for it (0.5.23 `arg_groups/overrides.py::_MAMBA_EXTRA_BUFFER_ARCHS`; 0.5.9
`server_args.py::_handle_model_specific_adjustments`, shared/SGLANG.md section 5). Preflight, `regen launch` and
the simulator all read it, so a model regen calls hybrid is hybrid everywhere.
"""

from __future__ import annotations

from typing import NamedTuple


class Hybrid(NamedTuple):
    architecture: str
    extra_buffer: bool  # SGLang supports --mamba-*-strategy extra_buffer for it


# A tag found in the model path → the hybrid architecture it names. Order matters only between overlapping tags.
HYBRID: dict[str, Hybrid] = {
    "qwen3.5": Hybrid("Qwen3_5ForConditionalGeneration", True),
    "qwen3.6": Hybrid("Qwen3_5ForConditionalGeneration", True),
    "qwen3_5": Hybrid("Qwen3_5ForConditionalGeneration", True),
    "qwen3-next": Hybrid("Qwen3NextForCausalLM", True),
    "nemotron-h": Hybrid("NemotronHForCausalLM", False),
    "nemotronh": Hybrid("NemotronHForCausalLM", False),
    "nemotron-3": Hybrid("NemotronHForCausalLM", False),
    "falcon-h1": Hybrid("FalconH1ForCausalLM", False),
    "granite-4": Hybrid("GraniteMoeHybridForCausalLM", False),
}
# Architectures only, for a server that names its architecture rather than its path.
EXTRA_BUFFER_ARCHS = frozenset(
    {
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "Qwen3NextForCausalLM",
    }
)
HYBRID_ARCHS = EXTRA_BUFFER_ARCHS | {h.architecture for h in HYBRID.values()}
# Architectures SGLang auto-chooses (steps, topk, draft tokens) = (5, 4, 8) for; (3, 1, 4) for the rest.
_WIDE_SPEC_PREFIXES = ("Llama", "Grok")
_DRAFT_IS_MODEL_PREFIXES = ("DeepseekV3", "Glm4Moe", "MiMo")  # MTP archs: the draft model defaults to the model
_LONG_CONTEXT = 262144  # Qwen3.5 / Qwen3-Next; others 40960 (Qwen3)
_CONTEXT = 40960


def hybrid_of(model_path: str) -> Hybrid | None:
    """The hybrid architecture a model path names, by its name; None for a model without mamba state."""
    name = model_path.lower()
    return next((h for tag, h in HYBRID.items() if tag in name), None)


def looks_hybrid(model_path: str) -> bool:
    """Whether a model path names a hybrid (mamba / linear-attention) architecture, by its name."""
    return hybrid_of(model_path) is not None


def supports_extra_buffer(model_path: str) -> bool:
    found = hybrid_of(model_path)
    return found is not None and found.extra_buffer


def architecture_of(model_path: str) -> str:
    """The HF architecture a model path names (the simulator's pretend one): hybrids by the table, Qwen3.5 MoE by
    its `-aNb` suffix, Llama and Grok by name, anything else Qwen3."""
    found = hybrid_of(model_path)
    name = model_path.lower()
    if found is not None:
        if found.architecture == "Qwen3_5ForConditionalGeneration" and "-a" in name:
            return "Qwen3_5MoeForConditionalGeneration"
        return found.architecture
    if "llama" in name:
        return "LlamaForCausalLM"
    if "grok" in name:
        return "Grok1ForCausalLM"
    return "Qwen3ForCausalLM"


def is_hybrid(arch: str) -> bool:
    return arch in HYBRID_ARCHS


def default_context_length(arch: str) -> int:
    return _LONG_CONTEXT if arch in EXTRA_BUFFER_ARCHS else _CONTEXT


def auto_spec_params(arch: str) -> tuple[int, int, int]:
    """(speculative_num_steps, eagle_topk, num_draft_tokens) SGLang picks when they are unset
    (`_auto_choose_speculative_params`)."""
    return (5, 4, 8) if arch.startswith(_WIDE_SPEC_PREFIXES) else (3, 1, 4)


def draft_is_model(arch: str) -> bool:
    """Whether SGLang sets an unset --speculative-draft-model-path to the model path (MTP architectures)."""
    return arch.startswith(_DRAFT_IS_MODEL_PREFIXES)
