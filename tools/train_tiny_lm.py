"""Train the byte-level TinyLM the demo and chapter 06 load (`paged_kv.serving.load_tiny_lm`).

    python tools/train_tiny_lm.py            # a few minutes on 2 CPU cores; seeded

Text: the markdown cells of the course's own lectures (notebooks/*.ipynb), which are part of
this repository and under its MIT licence, so the weights may ship with it. Markdown tables,
code spans and link targets are dropped, leaving the prose. The model is `TinyLM` itself
(paged_kv/serving/model.py) with the config below; the script trains it on random windows of
that text with AdamW, then writes paged_kv/serving/weights/tiny_lm.safetensors (fp16, with the
config, the corpus's SHA-256 and this run's settings in its header) and its `.sha256`.
The same seed, steps and text give the same weights on the same torch build and thread count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paged_kv.serving import ByteTokenizer, ModelConfig, TinyLM, greedy_dense  # noqa: E402
from paged_kv.serving.pretrained import TINY_LM_WEIGHTS, load_tiny_lm, save_tiny_lm  # noqa: E402

CONFIG = ModelConfig(
    hidden_size=128,
    intermediate_size=320,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
)
SOURCE = "the markdown cells of notebooks/*.ipynb (the paged_kv course's lectures)"
LICENCE = "MIT (the paged_kv repository's own text)"
PROMPT = "The block pool"


def lecture_text(root: Path) -> str:
    """The prose of every lecture's markdown cells, in chapter order."""
    cells = []
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                cells.append("".join(cell["source"]))
    text = "\n\n".join(cells)
    text = re.sub(r"^\|.*\n?", "", text, flags=re.M)  # tables
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"`[^`]*`", "", text)  # code spans
    text = re.sub(r"<[^>]+>", "", text)  # html tags
    return re.sub(r"\n{3,}", "\n\n", text)


def batched_causal(batch: int, length: int) -> Callable[..., torch.Tensor]:
    """Causal attention for `batch` sequences of `length` tokens flattened into [N, heads,
    dim] rows, as `TinyLM.run_layers` passes them."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch, length, *x.shape[1:]).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            split(q), split(k), split(v), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(q.shape)

    return attend


def train(data: torch.Tensor, steps: int, batch: int, length: int, seed: int) -> TinyLM:
    """AdamW on random windows of `data` (byte ids), with warm-up and cosine decay."""
    model = TinyLM(CONFIG, seed=seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    generator = torch.Generator().manual_seed(seed)
    positions = torch.arange(length).repeat(batch)
    attend = batched_causal(batch, length)
    start = time.perf_counter()
    for step in range(steps):
        lr = 3e-3 * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        offsets = torch.randint(len(data) - length - 1, (batch,), generator=generator)
        window = torch.stack([data[o : o + length + 1] for o in offsets.tolist()])
        hidden = model.run_layers(window[:, :-1].reshape(-1), positions, lambda _: attend)
        logits = model.lm_head(model.norm(hidden))
        loss = F.cross_entropy(logits, window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0 or step == steps - 1:
            print(
                f"step {step:>5}  loss {loss.item():.3f}  {time.perf_counter() - start:6.0f} s",
                flush=True,
            )
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the TinyLM the demo and chapter 06 load.")
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128, help="tokens per training window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=TINY_LM_WEIGHTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    tokenizer = ByteTokenizer()
    text = lecture_text(ROOT)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    params = sum(p.numel() for p in TinyLM(CONFIG).parameters())
    print(f"{len(data):,} bytes of lecture text, {params:,} parameters, {args.steps} steps")
    model = train(data, args.steps, args.batch, args.length, args.seed)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    digest = save_tiny_lm(
        model,
        args.out,
        {
            "source": SOURCE,
            "licence": LICENCE,
            "corpus_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "training": json.dumps(
                {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
            ),
            "torch": torch.__version__,
        },
    )
    completion = greedy_dense(load_tiny_lm(args.out), tokenizer.encode(PROMPT), 80)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes, sha256 {digest[:12]}...)")
    print(f"{PROMPT!r} -> {tokenizer.decode(completion)!r}")


if __name__ == "__main__":
    main()
