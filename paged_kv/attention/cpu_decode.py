"""A fused paged decode kernel for CPU, in C++: K/V are read in place through the block table.

One task per (sequence, KV head) walks the sequence's blocks; each key is scored against all the
query heads that share it, and a running max and sum per head (online softmax) fold each block
into the output. No gather copy is made. It is built with `torch.utils.cpp_extension.load_inline`
the first time it is needed (~25 s on 2 cores; torch caches the build across processes), and
covers fp32 on CPU with head_dim a multiple of 16; `paged_decode` uses the torch reference
otherwise, and whenever the build fails (no compiler).
"""

from __future__ import annotations

import functools
import math
import subprocess
import warnings
from types import ModuleType

import torch

from paged_kv.attention.reference import _group

LANES = 16  # floats per vector in the kernel; head_dim must be a multiple of it

_SOURCE = r"""
#include <ATen/Parallel.h>

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

constexpr int64_t W = 16;  // floats per vector
typedef float vec __attribute__((vector_size(W * sizeof(float))));
typedef float vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float vec4 __attribute__((vector_size(4 * sizeof(float))));

static inline vec load(const float* p) { vec x; std::memcpy(&x, p, sizeof x); return x; }
static inline void store(float* p, vec x) { std::memcpy(p, &x, sizeof x); }

// The sum of a vector's lanes, by halving it twice (plain code would add them one by one).
static inline float hsum(vec x) {
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

// One sequence's keys and values for one KV head, as read through its block table.
struct Seq {
  const float *k, *v;
  const int64_t* table;
  int64_t len, block_size, block_stride, token_stride, dim;
};

// R query heads (q: [R, dim]) attend to one sequence for one KV head. Per block: score its
// tokens, rescale the running sums by exp(old max - new max), add the block's weights @ V.
template <int R>
CPU_CLONES static void attend_rows(const Seq& s, const float* q, float scale, float* out) {
  const int64_t chunks = s.dim / W;
  std::vector<float> p(R * s.block_size), acc(R * s.dim, 0.f);
  float m[R], l[R], alpha[R];
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.f);
  for (int64_t start = 0, i = 0; start < s.len; start += s.block_size, ++i) {
    const int64_t block = s.table[i], n = std::min(s.block_size, s.len - start);
    const float* kb = s.k + block * s.block_stride;
    const float* vb = s.v + block * s.block_stride;
    for (int64_t t = 0; t < n; ++t) {  // scores; each key chunk is loaded once for all R heads
      vec dot[R] = {};
      for (int64_t c = 0; c < chunks; ++c) {
        const vec key = load(kb + t * s.token_stride + c * W);
        for (int r = 0; r < R; ++r) dot[r] += load(q + r * s.dim + c * W) * key;
      }
      for (int r = 0; r < R; ++r) p[r * s.block_size + t] = hsum(dot[r]) * scale;
    }
    for (int r = 0; r < R; ++r) {  // online softmax: new max, rescale factor, weights
      float* pr = p.data() + r * s.block_size;
      const float new_max = std::max(m[r], *std::max_element(pr, pr + n));
      alpha[r] = std::exp(m[r] - new_max);
      float sum = 0.f;
      for (int64_t t = 0; t < n; ++t) sum += pr[t] = std::exp(pr[t] - new_max);
      l[r] = l[r] * alpha[r] + sum;
      m[r] = new_max;
    }
    for (int64_t c = 0; c < chunks; ++c) {  // acc = alpha * acc + weights @ V, a chunk at a time
      vec a[R];
      for (int r = 0; r < R; ++r) a[r] = load(&acc[r * s.dim + c * W]) * alpha[r];
      for (int64_t t = 0; t < n; ++t) {
        const vec value = load(vb + t * s.token_stride + c * W);
        for (int r = 0; r < R; ++r) a[r] += p[r * s.block_size + t] * value;
      }
      for (int r = 0; r < R; ++r) store(&acc[r * s.dim + c * W], a[r]);
    }
  }
  for (int r = 0; r < R; ++r)  // an empty sequence gives zeros, as in the reference
    for (int64_t d = 0; d < s.dim; ++d)
      out[r * s.dim + d] = l[r] > 0.f ? acc[r * s.dim + d] / l[r] : 0.f;
}

// The `group` query heads of one KV head, in tiles of 8, 4, 2 or 1 rows (kept in registers).
static void attend_group(const Seq& s, const float* q, int64_t group, float scale, float* out) {
  for (int64_t r = 0; r < group;) {
    const int64_t left = group - r, rows = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    const float* qr = q + r * s.dim;
    float* o = out + r * s.dim;
    switch (rows) {
      case 8: attend_rows<8>(s, qr, scale, o); break;
      case 4: attend_rows<4>(s, qr, scale, o); break;
      case 2: attend_rows<2>(s, qr, scale, o); break;
      default: attend_rows<1>(s, qr, scale, o);
    }
    r += rows;
  }
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

// q [B, Hq, D]; caches [num_blocks, block_size, Hkv, D]; block_tables [B, max_blocks] and
// seq_lens [B] as int64; all contiguous, fp32 data. Returns [B, Hq, D].
torch::Tensor paged_decode_f32(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                               torch::Tensor block_tables, torch::Tensor seq_lens, double scale) {
  const int64_t batch = q.size(0), q_heads = q.size(1), dim = q.size(2);
  const int64_t num_blocks = k_cache.size(0), block_size = k_cache.size(1);
  const int64_t kv_heads = k_cache.size(2), max_blocks = block_tables.size(1);
  TORCH_CHECK(block_tables.size(0) == batch && seq_lens.size(0) == batch,
              "block_tables and seq_lens need one row per sequence");
  const int64_t group = q_heads / kv_heads;
  const int64_t *lens = seq_lens.data_ptr<int64_t>(), *tables = block_tables.data_ptr<int64_t>();
  check_tables(tables, lens, batch, max_blocks, block_size, num_blocks);
  auto out = torch::empty_like(q);
  const float *qp = q.data_ptr<float>(), *k = k_cache.data_ptr<float>();
  const float* v = v_cache.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, batch * kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / kv_heads, h = i % kv_heads, off = (b * q_heads + h * group) * dim;
      const Seq s{k + h * dim, v + h * dim, tables + b * max_blocks, lens[b], block_size,
                  block_size * kv_heads * dim, kv_heads * dim, dim};
      attend_group(s, qp + off, group, static_cast<float>(scale), op + off);
    }
  });
  return out;
}
"""


@functools.cache
def _kernel() -> ModuleType | None:
    """The compiled extension, built once per process (torch reuses an earlier build), or None.

    A failed build (no compiler, no OpenMP) warns once and leaves the torch reference in charge.
    """
    from torch.utils.cpp_extension import load_inline

    try:
        return load_inline(
            name="paged_kv_cpu_decode",
            cpp_sources=_SOURCE,
            functions=["paged_decode_f32"],
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
        )
    except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        warnings.warn(f"the C++ CPU decode kernel did not build ({reason}); using the torch "
                      "reference.", RuntimeWarning, stacklevel=3)  # fmt: skip
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
