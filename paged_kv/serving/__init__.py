"""The serving layer (chapter 06): a Llama-style model on the paged cache, a scheduler and an
engine that batches requests continuously. It asks the cache layer for blocks and the
attention layer for kernels; nothing below imports it.
"""

from paged_kv.serving.engine import Completion, Engine, EngineStats, StepRecord, Tokenizer
from paged_kv.serving.hf import from_hf
from paged_kv.serving.model import (
    ForwardBatch,
    ModelConfig,
    SeqChunk,
    TinyLM,
    greedy_dense,
)
from paged_kv.serving.pretrained import load_tiny_lm
from paged_kv.serving.scheduler import (
    Preemption,
    Request,
    RequestStatus,
    SamplingParams,
    ScheduledChunk,
    Scheduler,
    StepPlan,
)
from paged_kv.serving.tokenizer import ByteTokenizer

__all__ = [
    "ByteTokenizer",
    "Completion",
    "Engine",
    "EngineStats",
    "ForwardBatch",
    "ModelConfig",
    "Preemption",
    "Request",
    "RequestStatus",
    "SamplingParams",
    "ScheduledChunk",
    "Scheduler",
    "SeqChunk",
    "StepPlan",
    "StepRecord",
    "TinyLM",
    "Tokenizer",
    "from_hf",
    "greedy_dense",
    "load_tiny_lm",
]
