"""Where a benchmark writes its JSON, with the machine it ran on."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write_results(name: str, payload: dict) -> Path:
    """Write `payload` plus a description of this machine to bench/results/<name>.json."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "system": platform.platform(),
    }
    path.write_text(json.dumps({"benchmark": name, "machine": machine, **payload}, indent=2) + "\n")
    print(f"wrote {path}")
    return path
