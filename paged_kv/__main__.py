"""`python -m paged_kv`: a tiny model serves requests that share a system prompt, on the CPU.

Shows a live progress bar, then each request, the first one's prompt and completion as text,
and a summary of what the cache did. The model is the course's TinyLM trained on its own
lectures (`load_tiny_lm`): 0.6M parameters, so it writes the lectures' words and phrases, not
answers; how the cache behaves is the point.

`python -m paged_kv build` builds the C++ CPU attention kernel for this environment ahead of
time (optional: the first use builds it too), and says where it lives.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from paged_kv.cache.eviction import POLICIES
from paged_kv.serving.engine import Engine
from paged_kv.serving.pretrained import load_tiny_lm

SYSTEM_PROMPT = "You are a patient teacher. Answer in one short paragraph.\n"
QUESTIONS = [
    "What is a KV cache?",
    "Why split it into blocks?",
    "What does a block table hold?",
    "When is a block evicted?",
    "What is a prefix-cache hit?",
    "Why is LFU different from LRU?",
    "What does preemption cost?",
    "How does paged attention read keys?",
]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m paged_kv", description=__doc__)
    parser.add_argument("--requests", type=int, default=8, help="how many requests (max 8)")
    parser.add_argument("--new-tokens", type=int, default=48, help="tokens generated each")
    parser.add_argument("--blocks", type=int, default=24, help="KV blocks in the whole cache")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block")
    parser.add_argument("--eviction", choices=sorted(POLICIES), default="lru")
    parser.add_argument("--no-prefix-caching", action="store_true")
    commands = parser.add_subparsers(dest="command", title="commands (none: run the demo)")
    build_parser = commands.add_parser(
        "build",
        help="build the C++ CPU attention kernel for this environment, once",
        description=build.__doc__,
    )
    build_parser.add_argument("--force", action="store_true", help="rebuild even if built")
    args = parser.parse_args(argv)
    if args.command == "build":
        sys.exit(build(force=args.force))

    engine = Engine(
        load_tiny_lm(),
        num_blocks=args.blocks,
        block_size=args.block_size,
        eviction=args.eviction,
        prefix_caching=not args.no_prefix_caching,
    )
    prompts = [SYSTEM_PROMPT + q for q in QUESTIONS[: args.requests]]
    completions = engine.generate(prompts, args.new_tokens, progress=True)

    print(f"\n{'id':>3} {'prompt':>6} {'hits':>5} {'preempted':>9}  question")
    for c, question in zip(completions, QUESTIONS, strict=False):
        print(
            f"{c.request_id:>3} {len(c.prompt_ids):>6} {c.num_cached_prompt_tokens:>5} "
            f"{c.num_preemptions:>9}  {question}"
        )
    print("\nprompt:")
    print(indented(prompts[0]))
    print("completion:")
    print(indented(completions[0].text or ""))  # the engine decodes with its ByteTokenizer
    print(f"\n{args.blocks} blocks of {args.block_size} tokens, {args.eviction} eviction")
    for name, value in engine.stats().summary().items():
        print(f"  {name:<36} {value:>8}")


def indented(text: str) -> str:
    """`text` with every line behind a margin, so that a completion's own newlines show."""
    return "\n".join(f"  | {line}" for line in text.splitlines())


def build(force: bool = False) -> int:
    """Builds the C++ CPU decode kernel into this environment's build folder (once per
    environment, torch version and kernel source), so that no notebook cell or test has to.
    Progress goes to stdout; a failure says why on stderr and exits with status 1."""
    import torch

    from paged_kv.attention import cpu_decode

    folder = cpu_decode.build_dir()
    print(f"C++ CPU decode kernel for torch {torch.__version__} in the environment {sys.prefix}")
    print(f"  build folder: {folder}")
    if not force and cpu_decode.built_library() is not None:
        print("  already built (`python -m paged_kv build --force` rebuilds it)")
        return 0
    try:
        library = cpu_decode.build(force=force, out=sys.stdout)
    except cpu_decode.BuildError as err:
        print(f"the kernel did not build: {err}", file=sys.stderr)
        print(
            "paged_decode uses the torch reference on the CPU until this succeeds (the build "
            "needs a C++ compiler: on Debian, apt-get install g++).",
            file=sys.stderr,
        )
        return 1
    print(f"  built: {library}")
    return 0


if __name__ == "__main__":
    main()
