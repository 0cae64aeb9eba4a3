"""`python -m paged_kv`: a tiny model serves requests that share a system prompt, on the CPU.

Shows a live progress bar, then each request, the first one's prompt and completion as text,
and a summary of what the cache did. The model is the course's TinyLM trained on its own
lectures (`load_tiny_lm`): 0.6M parameters, so it writes the lectures' words and phrases, not
answers; how the cache behaves is the point.

Every number the demo takes has a range (`--help` shows them), and the cache must hold the
longest request (its prompt plus `--new-tokens`); anything else is a usage error naming what
is allowed. The table gives each request's prompt tokens found in the prefix cache at its
first admission (`hits`) apart from the tokens it computed again after being preempted
(`recomputed`): a readmission's hits include its own generated tokens, which no prompt shared.

`python -m paged_kv build` builds the C++ CPU attention kernel for this environment ahead of
time (optional: the first use builds it too), and says where it lives.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.eviction import POLICIES
from paged_kv.serving.engine import Engine
from paged_kv.serving.pretrained import load_tiny_lm
from paged_kv.serving.tokenizer import ByteTokenizer

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


RANGES = {
    "requests": (1, len(QUESTIONS)),
    "new_tokens": (1, 1024),
    "blocks": (1, 1024),
    "block_size": (1, 256),
}
"""The demo's numbers, each a whole number in lo..hi (a cache of at most 256K tokens)."""


def whole_number(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse `type` taking a whole number in lo..hi; anything else is a usage error
    that states the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be a whole number in {lo}..{hi}, got {text!r}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m paged_kv", description=__doc__)
    for flag, default, what in [
        ("--requests", 8, "how many requests"),
        ("--new-tokens", 48, "tokens generated for each"),
        ("--blocks", 24, "KV blocks in the whole cache"),
        ("--block-size", 16, "tokens per block"),
    ]:
        lo, hi = RANGES[flag[2:].replace("-", "_")]
        parser.add_argument(
            flag,
            type=whole_number(lo, hi),
            default=default,
            metavar=f"{lo}..{hi}",
            help=f"{what} (default {default})",
        )
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
    prompts = [SYSTEM_PROMPT + q for q in QUESTIONS[: args.requests]]
    longest = max(len(ByteTokenizer().encode(p)) for p in prompts)  # the engine's tokenizer
    need = blocks_needed(longest + args.new_tokens, args.block_size)
    if need > args.blocks:
        parser.error(
            f"the longest prompt ({longest} tokens) plus --new-tokens {args.new_tokens} needs "
            f"{need} blocks of {args.block_size} tokens, but --blocks is {args.blocks}: pass "
            f"--blocks {need} or more, or fewer --new-tokens."
        )

    engine = Engine(
        load_tiny_lm(),
        num_blocks=args.blocks,
        block_size=args.block_size,
        eviction=args.eviction,
        prefix_caching=not args.no_prefix_caching,
    )
    completions = engine.generate(prompts, args.new_tokens, progress=True)

    print(f"\n{'id':>3} {'prompt':>6} {'hits':>5} {'preempted':>9} {'recomputed':>10}  question")
    for c, question in zip(completions, QUESTIONS, strict=False):
        print(
            f"{c.request_id:>3} {len(c.prompt_ids):>6} {c.num_cached_prompt_tokens:>5} "
            f"{c.num_preemptions:>9} {c.num_recomputed_tokens:>10}  {question}"
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
