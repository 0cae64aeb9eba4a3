"""Study tools (chapters 00 and 03): the memory-waste study, trace replays against Belady's
optimum, the A0 oracle and the online limit, seeded workloads, operations as data, and KV
sizing of real models. They drive the cache layer and measure it; the library never imports them.
"""

from paged_kv.study.memory_waste import (
    PAPER_TOKEN_STATE_SHARE,
    PROFILES,
    SCHEMES,
    LengthProfile,
    Request,
    Scheme,
    WasteReport,
    memory_waste_study,
    next_pow2,
    reservation,
    simulate_memory_waste,
    synthetic_requests,
)
from paged_kv.study.online_limit import online_limit_hits
from paged_kv.study.operations import Add, Append, Free, Operation, decode_workload, replay
from paged_kv.study.oracle import oracle_hits
from paged_kv.study.sizing import KNOWN_MODELS, ModelShape
from paged_kv.study.token_chats import chat_sessions
from paged_kv.study.trace_replay import (
    CacheFrame,
    HitStats,
    PrefillStats,
    belady_hits,
    replay_requests,
    replay_trace,
    trace_frames,
)
from paged_kv.study.workloads import (
    RATED_WORKLOADS,
    WORKLOADS,
    RatedTrace,
    multi_turn_chat,
    prefixes_with_scans,
    shared_prefixes,
    shifting_popularity,
)

__all__ = [
    "KNOWN_MODELS",
    "PAPER_TOKEN_STATE_SHARE",
    "PROFILES",
    "RATED_WORKLOADS",
    "SCHEMES",
    "WORKLOADS",
    "Add",
    "Append",
    "CacheFrame",
    "Free",
    "HitStats",
    "LengthProfile",
    "ModelShape",
    "Operation",
    "PrefillStats",
    "RatedTrace",
    "Request",
    "Scheme",
    "WasteReport",
    "belady_hits",
    "chat_sessions",
    "decode_workload",
    "memory_waste_study",
    "multi_turn_chat",
    "next_pow2",
    "online_limit_hits",
    "oracle_hits",
    "prefixes_with_scans",
    "replay",
    "replay_requests",
    "replay_trace",
    "reservation",
    "shared_prefixes",
    "shifting_popularity",
    "simulate_memory_waste",
    "synthetic_requests",
    "trace_frames",
]
