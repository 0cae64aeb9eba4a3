"""A fused paged decode kernel for CPU, in C++: K/V are read in place through the block table.

A block of the cache is `block_size` whole token rows (every KV head), one contiguous stretch, so
the kernel walks each block row by row, in memory order, scoring each key against all the query
heads that share it and keeping a running max and sum per query head (online softmax). Reading
one head's slice of every row instead (512 bytes every 4 KB at 8 heads x 128) ran up to 1.5x
slower than SDPA on contiguous K/V (batch 16 x 1k tokens). The work is cut into pieces (a
sequence's run of blocks), a few per thread, so one long sequence still keeps every core busy;
a sequence's pieces are merged by their running maxima (log-sum-exp). No gather copy is made.
It covers fp32 on CPU with head_dim a multiple of 16; `paged_decode` uses the torch reference
otherwise, and whenever the build fails (no compiler).

The build happens once per environment and torch version, into `build_dir()`: `python -m
paged_kv build` does it, and so does the test session's start (tests/conftest.py), so that no
notebook cell pays for it or times out; a process that finds no build makes one on first use,
with a one-line notice on stdout. Nothing is written to stderr unless the build fails (see
`_quiet_torch_builder`). It takes about 10 s of compiler time (13-42 s measured on 2 shared,
busy cores), because the source includes only the ATen headers it uses and registers a torch
operator; with <torch/extension.h> and pybind11 it took ~30 s of compiler time (70-100 s).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import torch

from paged_kv.attention.reference import _group

LANES = 16  # floats per vector in the kernel; head_dim must be a multiple of it

_SOURCE = r"""
// Only the headers this file uses: <torch/extension.h> (pybind11, the whole C++ API) would
// quadruple the build time. The function is registered as a torch operator, not a Python module.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// Compile the hot loop for AVX-512, AVX2 and baseline x86-64; the loader picks one for the CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif
// Helpers are inlined into the cloned loop, so each clone compiles them for its own CPU.
#define INLINE inline __attribute__((always_inline))

constexpr int64_t W = 16;  // floats per vector
typedef float vec __attribute__((vector_size(W * sizeof(float))));
typedef float vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float vec4 __attribute__((vector_size(4 * sizeof(float))));

static INLINE vec load(const float* p) { vec x; std::memcpy(&x, p, sizeof x); return x; }
static INLINE void store(float* p, vec x) { std::memcpy(p, &x, sizeof x); }

// The sum of a vector's lanes, by halving it twice (plain code would add them one by one).
static INLINE float hsum(vec x) {
  vec8 lo, hi;
  std::memcpy(&lo, &x, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&x) + sizeof lo, sizeof hi);
  vec8 h = lo + hi;
  vec4 a, b;
  std::memcpy(&a, &h, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&h) + sizeof a, sizeof b);
  vec4 r = a + b;
  return (r[0] + r[2]) + (r[1] + r[3]);
}

// The cache as the kernel sees it. A token row holds all KV heads (kv_heads * dim floats) and a
// block is block_size rows, contiguous, so walking a block row by row reads memory in order.
struct Cache {
  const float *k, *v;
  int64_t block_size, kv_heads, group, dim;
  int64_t row() const { return kv_heads * dim; }
};

// The next tile of query rows that share a key: 8, 4, 2 or 1 (a tile's sums stay in registers).
static INLINE int64_t tile(int64_t left) {
  return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

// R query rows (q: [R, dim]) against one key: scaled scores into p[0], p[stride], ...
template <int R>
static INLINE void score(const float* key, const float* q, int64_t dim, float scale, float* p,
                         int64_t stride) {
  vec dot[R] = {};
  for (int64_t c = 0; c < dim; c += W) {  // each key chunk is loaded once for all R rows
    const vec k = load(key + c);
    for (int r = 0; r < R; ++r) dot[r] += load(q + r * dim + c) * k;
  }
  for (int r = 0; r < R; ++r) p[r * stride] = hsum(dot[r]) * scale;
}

// R output rows (acc: [R, dim]) add weights w[0], w[stride], ... times one value.
template <int R>
static INLINE void accumulate(const float* value, const float* w, int64_t stride, int64_t dim,
                              float* acc) {
  for (int64_t c = 0; c < dim; c += W) {
    const vec x = load(value + c);
    for (int r = 0; r < R; ++r)
      store(acc + r * dim + c, load(acc + r * dim + c) + w[r * stride] * x);
  }
}

// Every query head against one token row: query head h * group + r reads KV head h. Scores go to
// p[qh * block_size + t] for token t; `keys` is that row.
static INLINE void score_row(const Cache& c, const float* keys, const float* q, float scale,
                             float* p) {
  for (int64_t h = 0; h < c.kv_heads; ++h)
    for (int64_t r = 0, rows; r < c.group; r += rows) {
      const int64_t qh = h * c.group + r;
      const float* key = keys + h * c.dim;
      const float* qr = q + qh * c.dim;
      float* out = p + qh * c.block_size;
      switch (rows = tile(c.group - r)) {
        case 8: score<8>(key, qr, c.dim, scale, out, c.block_size); break;
        case 4: score<4>(key, qr, c.dim, scale, out, c.block_size); break;
        case 2: score<2>(key, qr, c.dim, scale, out, c.block_size); break;
        default: score<1>(key, qr, c.dim, scale, out, c.block_size);
      }
    }
}

// Every query head's output (acc: [q_heads, dim]) adds its weight for token t (w = p + t) times
// that token's value for its KV head; `values` is the token's row.
static INLINE void accumulate_row(const Cache& c, const float* values, const float* w,
                                  float* acc) {
  for (int64_t h = 0; h < c.kv_heads; ++h)
    for (int64_t r = 0, rows; r < c.group; r += rows) {
      const int64_t qh = h * c.group + r;
      const float* value = values + h * c.dim;
      const float* wr = w + qh * c.block_size;
      float* out = acc + qh * c.dim;
      switch (rows = tile(c.group - r)) {
        case 8: accumulate<8>(value, wr, c.block_size, c.dim, out); break;
        case 4: accumulate<4>(value, wr, c.block_size, c.dim, out); break;
        case 2: accumulate<2>(value, wr, c.block_size, c.dim, out); break;
        default: accumulate<1>(value, wr, c.block_size, c.dim, out);
      }
    }
}

// A piece of work: blocks [first, last) of sequence `seq`'s table.
struct Piece {
  int64_t seq, first, last;
};

// All query heads (q: [q_heads, dim]) attend to one piece of a sequence of `len` tokens. Per
// block, in memory order: score every token row, then per head take the new running max m,
// rescale the running sum l and output acc by exp(old max - new max), and add weights @ V.
// Leaves m, l ([q_heads]) and the unnormalised acc ([q_heads, dim]) for `merge`.
CPU_CLONES static void attend_piece(const Cache& c, const Piece& piece, const int64_t* table,
                                    int64_t len, const float* q, float scale, float* m, float* l,
                                    float* acc) {
  const int64_t q_heads = c.kv_heads * c.group, row = c.row();
  std::vector<float> p(q_heads * c.block_size);  // scores, then weights: [q_heads, block_size]
  std::fill(m, m + q_heads, -std::numeric_limits<float>::infinity());
  std::fill(l, l + q_heads, 0.f);
  std::fill(acc, acc + q_heads * c.dim, 0.f);
  for (int64_t i = piece.first; i < piece.last; ++i) {
    const int64_t n = std::min(c.block_size, len - i * c.block_size);
    const float* kb = c.k + table[i] * c.block_size * row;
    const float* vb = c.v + table[i] * c.block_size * row;
    for (int64_t t = 0; t < n; ++t) score_row(c, kb + t * row, q, scale, p.data() + t);
    for (int64_t h = 0; h < q_heads; ++h) {  // online softmax, per query head
      float* ph = p.data() + h * c.block_size;
      const float new_max = std::max(m[h], *std::max_element(ph, ph + n));
      const float alpha = std::exp(m[h] - new_max);
      float sum = 0.f;
      for (int64_t t = 0; t < n; ++t) sum += ph[t] = std::exp(ph[t] - new_max);
      l[h] = l[h] * alpha + sum;
      m[h] = new_max;
      if (alpha != 1.f)  // once the max settles, most blocks skip this pass over acc
        for (int64_t d = 0; d < c.dim; ++d) acc[h * c.dim + d] *= alpha;
    }
    for (int64_t t = 0; t < n; ++t) accumulate_row(c, vb + t * row, p.data() + t, acc);
  }
}

// One query head's output from its sequence's pieces (m, l: one per piece, `heads` apart; acc:
// rows `heads * dim` apart): each piece's sums are weighted by exp(its max - the overall max),
// the log-sum-exp merge. A sequence with no tokens gives zeros, as in the reference.
static void merge(int64_t pieces, int64_t heads, int64_t dim, const float* m, const float* l,
                  const float* acc, float* out) {
  float top = -std::numeric_limits<float>::infinity(), total = 0.f;
  for (int64_t i = 0; i < pieces; ++i) top = std::max(top, m[i * heads]);
  std::fill(out, out + dim, 0.f);
  for (int64_t i = 0; i < pieces; ++i) {
    if (l[i * heads] == 0.f) continue;  // an empty piece (max -inf) adds nothing
    const float w = std::exp(m[i * heads] - top);
    total += w * l[i * heads];
    for (int64_t d = 0; d < dim; ++d) out[d] += w * acc[i * heads * dim + d];
  }
  if (total > 0.f)
    for (int64_t d = 0; d < dim; ++d) out[d] /= total;
}

// Every table entry a sequence uses names a block of the cache (checked before any read).
static void check_tables(const int64_t* tables, const int64_t* lens, int64_t batch,
                         int64_t max_blocks, int64_t block_size, int64_t num_blocks) {
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(lens[b] >= 0 && lens[b] <= max_blocks * block_size, "sequence ", b, " has ",
                lens[b], " tokens; its table holds ", max_blocks * block_size);
    for (int64_t i = 0; i * block_size < lens[b]; ++i) {
      const int64_t block = tables[b * max_blocks + i];
      TORCH_CHECK_INDEX(block >= 0 && block < num_blocks, "block id ", block, " is not a block");
    }
  }
}

// Cuts each sequence into pieces of about equal size so that every thread gets work, even for
// one sequence: about 4 pieces per thread over the batch, but no piece under ~128 tokens, since
// each costs a merge. Sequence b's pieces are pieces[starts[b] .. starts[b + 1]).
static std::vector<Piece> plan(const int64_t* lens, int64_t batch, int64_t block_size,
                               std::vector<int64_t>& starts) {
  std::vector<int64_t> blocks(batch);
  int64_t total = 0;
  for (int64_t b = 0; b < batch; ++b)
    total += blocks[b] = (lens[b] + block_size - 1) / block_size;
  const int64_t want = 4 * at::get_num_threads();
  const int64_t size = std::max((total + want - 1) / want, (128 + block_size - 1) / block_size);
  std::vector<Piece> pieces;
  starts.assign(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t count = std::max<int64_t>(1, (blocks[b] + size - 1) / size);
    for (int64_t j = 0; j < count; ++j)  // an empty sequence gets one empty piece
      pieces.push_back({b, blocks[b] * j / count, blocks[b] * (j + 1) / count});
    starts.push_back(pieces.size());
  }
  return pieces;
}

// q [B, Hq, D]; caches [num_blocks, block_size, Hkv, D]; block_tables [B, max_blocks] and
// seq_lens [B] as int64; all contiguous, fp32 data. Returns [B, Hq, D].
at::Tensor paged_decode_f32(const at::Tensor& q, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& block_tables,
                            const at::Tensor& seq_lens, double scale) {
  const int64_t batch = q.size(0), q_heads = q.size(1), dim = q.size(2);
  const int64_t num_blocks = k_cache.size(0), block_size = k_cache.size(1);
  const int64_t kv_heads = k_cache.size(2), max_blocks = block_tables.size(1);
  TORCH_CHECK(block_tables.size(0) == batch && seq_lens.size(0) == batch,
              "block_tables and seq_lens need one row per sequence");
  const int64_t *lens = seq_lens.data_ptr<int64_t>(), *tables = block_tables.data_ptr<int64_t>();
  check_tables(tables, lens, batch, max_blocks, block_size, num_blocks);
  const Cache c{k_cache.data_ptr<float>(), v_cache.data_ptr<float>(), block_size, kv_heads,
                q_heads / kv_heads, dim};
  std::vector<int64_t> starts;
  const std::vector<Piece> pieces = plan(lens, batch, block_size, starts);
  // Each piece's running max, sum and output for every query head: [pieces, q_heads(, dim)].
  std::vector<float> m(pieces.size() * q_heads), l(m.size()), acc(m.size() * dim);
  const float* qp = q.data_ptr<float>();
  at::parallel_for(0, pieces.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = pieces[i].seq;
      attend_piece(c, pieces[i], tables + b * max_blocks, lens[b], qp + b * q_heads * dim,
                   static_cast<float>(scale), &m[i * q_heads], &l[i * q_heads],
                   &acc[i * q_heads * dim]);
    }
  });
  auto out = at::empty_like(q);  // then one merge per (sequence, query head)
  float* op = out.data_ptr<float>();
  at::parallel_for(0, batch * q_heads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / q_heads, h = i % q_heads, first = starts[b] * q_heads + h;
      merge(starts[b + 1] - starts[b], q_heads, dim, &m[first], &l[first], &acc[first * dim],
            op + i * dim);
    }
  });
  return out;
}

TORCH_LIBRARY(paged_kv_cpu, m) { m.def("paged_decode_f32", &paged_decode_f32); }
"""


NAME = "paged_kv_cpu_decode"
CFLAGS = ["-O3", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
_BUILT = "built.txt"  # written last: names the library, which is then whole


class BuildError(RuntimeError):
    """The kernel did not build: `cause` is the compiler's (or torch's) first error line, and
    `log` the file holding the whole output."""

    def __init__(self, cause: str, log: Path | None):
        super().__init__(cause if log is None else f"{cause} (full log: {log})")
        self.cause, self.log = cause, log


def build_dir() -> Path:
    """This environment's folder for the kernel.

    One folder per Python environment (`sys.prefix`), Python, torch build and kernel source,
    named `cpu_decode-py<version>-torch<version>-<hash of all four>`, under $PAGED_KV_BUILD_DIR,
    else $XDG_CACHE_HOME/paged_kv, else ~/.cache/paged_kv. Two environments never rebuild each
    other's kernel; a new torch or a changed kernel gets a new folder.
    """
    root = os.environ.get("PAGED_KV_BUILD_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "paged_kv"
    key = [os.path.realpath(sys.prefix), sys.version, torch.__version__]
    key += [str(torch.version.git_version), str(torch.version.cuda), _SOURCE, *CFLAGS, *LDFLAGS]
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:12]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"cpu_decode-{python}-torch{torch.__version__}-{digest}"


def built_library() -> Path | None:
    """The library a finished build left in `build_dir()`, or None."""
    folder = build_dir()
    try:
        library = folder / (folder / _BUILT).read_text().strip()
    except OSError:
        return None
    return library if library.is_file() else None


@contextlib.contextmanager
def _quiet_torch_builder() -> Iterator[list[str]]:
    """Holds back what torch's extension builder logs or warns, and yields it as a list of lines.

    torch logs to stderr, where a notebook cell shows it and nbval fails the cell: importing
    `torch.utils.cpp_extension` on a CUDA build of torch without a GPU logs "No CUDA runtime is
    found, using CUDA_HOME=...", and a build may log compiler-version notes. None of it concerns
    a CPU kernel that builds; when the build fails, it goes into the build log.
    """

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(f"{record.levelname}: {record.getMessage()}")

    held: list[str] = []
    logger, handler = logging.getLogger("torch.utils.cpp_extension"), Hold()
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield held
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        held += [f"{w.category.__name__}: {w.message}" for w in caught]


def _first_error(text: str) -> str:
    """The line of a build's output that says what went wrong (the first compiler or linker
    error), else its first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b|not found|No such file", line, re.IGNORECASE) and not (
            line.startswith("Error building extension")
        ):
            return line[:300]
    return lines[0][:300] if lines else "no output"


@contextlib.contextmanager
def _progress(out: TextIO | None, message: str) -> Iterator[None]:
    """`message...` on one line of `out`, then how long it took; on a terminal, seconds tick."""
    if out is None:
        yield
        return
    start, stop = time.perf_counter(), threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            out.write(f"\r{message}... {time.perf_counter() - start:.0f} s")
            out.flush()

    out.write(f"{message}...")
    out.flush()
    ticker = threading.Thread(target=tick, daemon=True) if out.isatty() else None
    if ticker:
        ticker.start()
    outcome = "failed after"
    try:
        yield
        outcome = "done in"
    finally:
        stop.set()
        if ticker:
            ticker.join()
            out.write(f"\r{message}...")
        out.write(f" {outcome} {time.perf_counter() - start:.0f} s\n")
        out.flush()


def build(*, force: bool = False, out: TextIO | None = None, on_demand: bool = False) -> Path:
    """Builds the kernel into `build_dir()` unless a build is there already (`force` rebuilds),
    and returns the library. One line on `out` says it is building and how long it took (and,
    `on_demand`, how to build ahead of time); nothing goes to stderr. Raises `BuildError` naming
    the cause when the build fails.
    """
    library = None if force else built_library()
    if library is not None:
        return library
    folder = build_dir()
    if force:
        shutil.rmtree(folder, ignore_errors=True)
    source = folder / f"{NAME}.cpp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not source.is_file() or source.read_text() != _SOURCE:
            source.write_text(_SOURCE)  # rewriting the same text would make ninja recompile it
    except OSError as err:
        raise BuildError(f"cannot write the build folder {folder}: {err}", None) from err
    message = "paged_kv: building the C++ CPU decode kernel for this environment, once "
    message += "(under a minute"
    message += "; `python -m paged_kv build` does it ahead of time)" if on_demand else ")"
    with _progress(out, message), _quiet_torch_builder() as held:
        try:
            from torch.utils.cpp_extension import load

            library = load(
                name=NAME,
                sources=[str(source)],
                extra_cflags=CFLAGS,
                extra_ldflags=LDFLAGS,
                build_directory=str(folder),
                is_python_module=False,  # a torch operator library: no pybind11 to compile
                verbose=False,
            )
        except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as err:
            text = str(err).strip() or type(err).__name__
            log: Path | None = folder / "build.log"
            try:
                log.write_text("\n".join([text, *held]) + "\n")
            except OSError:
                log = None
            raise BuildError(_first_error(text), log) from err
    (folder / _BUILT).write_text(Path(library).name + "\n")
    return Path(library)


def _load(library: Path):
    """Loads the library and returns the namespace of its operator, `paged_decode_f32`.

    Once per process: a second copy (another build folder) would register the operator again,
    which torch refuses while the library initialises, ending the process.
    """
    try:
        torch.ops.paged_kv_cpu.paged_decode_f32  # noqa: B018 - raises if not registered yet
    except AttributeError:
        torch.ops.load_library(str(library))
    return torch.ops.paged_kv_cpu


@functools.cache
def _kernel():
    """The kernel (`_kernel().paged_decode_f32`), loaded once per process, or None.

    It loads this environment's build (see `build_dir`); if nothing built it yet (`python -m
    paged_kv build` and the test session do), it builds it here, with a one-line notice on
    stdout. A failed build warns once, naming the cause, and leaves the torch reference in charge.
    """
    try:
        library = built_library() or build(out=sys.stdout, on_demand=True)
    except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as err:
        cause = str(err).strip() or type(err).__name__
        warnings.warn(f"the C++ CPU decode kernel did not build ({cause}); using the torch "
                      "reference.", RuntimeWarning, stacklevel=3)  # fmt: skip
        return None
    try:
        return _load(library)
    except OSError as err:
        warnings.warn(f"the C++ CPU decode kernel did not load ({err}); using the torch "
                      f"reference. `python -m paged_kv build --force` rebuilds it.",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        return None


def handles(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether `cpu_paged_decode` takes this call: fp32 CPU tensors, contiguous caches, head_dim
    a multiple of 16, no gradient wanted, and a kernel that built."""
    tensors = (q, k_cache, v_cache)
    return (
        all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
        and q.dim() == 3
        and k_cache.dim() == 4
        and k_cache.shape == v_cache.shape
        and q.shape[-1] == k_cache.shape[-1]
        and q.shape[-1] % LANES == 0
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
        and _kernel() is not None
    )


def cpu_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Same contract as `paged_kv.attention.paged_decode`, computed by the C++ kernel.

    Call it only where `handles(q, k_cache, v_cache)` is True.
    """
    _group(q.shape[1], k_cache.shape[2])
    kernel = _kernel()
    return kernel.paged_decode_f32(
        q.contiguous(),
        k_cache,
        v_cache,
        block_tables.to(torch.int64).contiguous(),
        seq_lens.to(torch.int64).contiguous(),
        scale if scale is not None else 1 / math.sqrt(q.shape[-1]),
    )
