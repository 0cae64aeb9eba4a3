"""What the tier tests share: the redis-server check, a small model, reference runs, and
running an engine in a separate process (tests/tier_worker.py)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.tiers import redis_server_path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "tier_worker.py"
DISK_WRITER = HERE / "disk_writer.py"
BLOCK = 16


def require_redis_server() -> None:
    """Skip (with the reason) where redis-server is absent; in CI (CI=true) fail instead."""
    if redis_server_path() is not None:
        return
    message = (
        "redis-server is not installed (apt-get install redis-server); the Redis tier tests "
        "need a real server on 127.0.0.1"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}, and CI must run them: .ci/run installs it.")
    pytest.skip(message)


@functools.cache
def model(seed: int = 0) -> TinyLM:
    """The chapter's tiny fp32 byte-level model (2 layers, 2 KV heads of 16: 8 KiB a block)."""
    return TinyLM(seed=seed)


def system_prompt(num_tokens: int = 192) -> list[int]:
    text = "You are a careful assistant for a small library; answer in two sentences. " * 4
    tokens = list(text.encode())[:num_tokens]
    assert len(tokens) == num_tokens
    return tokens


def question(text: str) -> list[int]:
    return list(text.encode())


@functools.cache
def _dense_run(prompts: tuple[tuple[int, ...], ...], new: int, seed: int) -> tuple:
    engine = Engine(model(seed), num_blocks=256, block_size=BLOCK)
    return tuple(tuple(c.token_ids) for c in engine.generate([list(p) for p in prompts], new))


def reference_tokens(prompts: list[list[int]], new: int, seed: int = 0) -> list[list[int]]:
    """The tokens of a run with no tiers (the meaning of "identical" in the tests)."""
    return [list(t) for t in _dense_run(tuple(map(tuple, prompts)), new, seed)]


def run_worker(*args: str, timeout: float = 180) -> dict:
    """Run tests/tier_worker.py in a new Python process; return the JSON it prints."""
    done = subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # a tiny model: threads only contend
    )
    assert done.returncode == 0, f"worker failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
