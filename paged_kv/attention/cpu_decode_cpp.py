"""The C++ source of the CPU paged decode kernel (`cpu_decode.py` builds, loads and calls it).

Each block of the cache is walked row by row, in memory order, every query head of a group
scored against the key it shares, with a running max and sum per head (online softmax); the
work is cut into pieces of a sequence's blocks, merged by log-sum-exp. Changing this text
changes the build folder's name, so the next use builds the new kernel.
"""

SOURCE = r"""
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
