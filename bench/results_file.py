"""Where a benchmark writes its JSON, with the machine it ran on; only when asked (`--save`).

Running a benchmark must not change tracked files: every script takes `--save` (added by
`add_save_flag`) and calls `write_results` only when it is given.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def add_save_flag(parser: argparse.ArgumentParser, name: str) -> None:
    """Add `--save`: write bench/results/<name>.json (otherwise nothing is written)."""
    parser.add_argument(
        "--save",
        action="store_true",
        help=f"write the figures to bench/results/{name}.json (default: print only)",
    )


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


def save_or_say(save: bool, name: str, payload: dict) -> None:
    """Write the results if `--save` was given; otherwise say how to."""
    if save:
        write_results(name, payload)
    else:
        print(f"\n(not saved; pass --save to write bench/results/{name}.json)")


def merge_saved_parts(name: str, payload: dict) -> dict:
    """For a run of one part (`--part`): the other parts of bench/results/<name>.json, kept as
    they were saved (parts are measured separately), under this run's figures."""
    saved = RESULTS_DIR / f"{name}.json"
    if not saved.exists():
        return payload
    previous = json.loads(saved.read_text())
    kept = {k: v for k, v in previous.items() if k not in ("benchmark", "machine", *payload)}
    return {**kept, **payload}
