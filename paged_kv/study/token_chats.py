"""Token-level chats for replays through a real prefix-caching manager (chapter 04).

Where `workloads` makes block-access traces, these are (prompt, answer) token lists: sessions
that resend their whole history at every turn, over a few shared system prompts.
"""

from __future__ import annotations

import numpy as np

from paged_kv.study.workloads import _zipf_choices
from paged_kv.validation import require_positive_int


def chat_sessions(
    num_sessions: int = 120,
    *,
    turns: int = 3,
    num_system_prompts: int = 4,
    system_tokens: int = 256,
    user_tokens: int = 40,
    answer_tokens: int = 80,
    alpha: float = 1.1,
    seed: int = 0,
) -> list[tuple[list[int], list[int]]]:
    """(prompt, answer) token lists of multi-turn chats, in arrival order.

    Each session starts with one of a few system prompts (Zipf-popular) and, at every turn,
    sends the whole conversation so far plus a new user message; sessions interleave. Models
    a chat service: the system prompt is shared by many sessions, the history by the turns of
    one session. User and answer lengths are lognormal around the given means.
    """
    require_positive_int("num_sessions", num_sessions)
    require_positive_int("turns", turns)
    rng = np.random.default_rng(seed)
    vocab = 32_000

    def fresh_tokens(mean: int) -> list[int]:
        length = max(1, int(rng.lognormal(np.log(mean), 0.5)))
        return [int(t) for t in rng.integers(0, vocab, length)]

    systems = [
        [int(t) for t in rng.integers(0, vocab, system_tokens)] for _ in range(num_system_prompts)
    ]
    choice = _zipf_choices(rng, num_system_prompts, num_sessions, alpha)
    history = [list(systems[int(c)]) for c in choice]
    # Session s opens at time s and sends its turns within the next few openings: sessions
    # overlap as in a live service.
    times = sorted(
        (s + float(rng.uniform(0, 5)), s) for s in range(num_sessions) for _ in range(turns)
    )
    requests = []
    for _, s in times:
        prompt = history[s] + fresh_tokens(user_tokens)
        answer = fresh_tokens(answer_tokens)
        requests.append((prompt, answer))
        history[s] = prompt + answer
    return requests
