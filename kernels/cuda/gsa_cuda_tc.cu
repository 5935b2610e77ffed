// Tensor-core forward and backward of graph self-attention over dense 16-row tiles (dq by tiles of destinations, dk
// and dv by tiles of sources in the transpose). Forward: per (tile, batch, head) one block of 4 warps
// gathers the tile's union of key and value rows in chunks of 32 columns into shared memory, takes S = Q K^T and
// O += P V with wmma (16x16x16, fp32 accumulation), masks S by the tile's bitmask and runs the online softmax per row
// in fp32. Relation embeddings (the kernels' Rel variants): each masked element finds its edge in the tile's edge list
// (gsa_tile_edge) and adds q . r of the edge's relation to its score on CUDA cores; dq adds sum dS r per row and
// writes each edge's dS where the lane groups' d_rel_emb reduction reads it. Rows outside dense tiles run through the
// per-edge kernels (gsa_forward_cuda) on their own schedule.
#include "kernels/cuda/gsa_cuda_tc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_common.cuh"
#include "kernels/gsa_math.h"
#include "kernels/gsa_tile_plan.h"

namespace sb {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = static_cast<int>(kGsaTileRows);  // one MMA tile of rows
constexpr int kChunk = 32;                              // union columns per step: one mask word per row
constexpr int kTcThreads = 128;                         // 4 warps
constexpr int kThreadsPerRow = kTcThreads / kRows;      // 8: the softmax's threads of one row
constexpr int kVec = 8;                                 // 2-byte elements per 16-byte load
static_assert(kChunk == kGsaTileMaskBits, "a chunk's mask is one word per row");

template <typename T> __device__ __forceinline__ T to_elem(float x);
template <> __device__ __forceinline__ __half to_elem<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 to_elem<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

using gsa_cuda::offset;

// Leading dimensions of the kernels' shared arrays: they keep wmma's rules (multiples of 16 bytes, fragment pointers
// 32-byte aligned) and shift rows against the banks.
template <int D>
struct TcLd {
  static constexpr int kLdT = D + 8;       // q, k, v, dO rows
  static constexpr int kLdP = kChunk + 8;  // P and dS rows (input type)
  static constexpr int kLdS = kChunk + 4;  // S and dP rows (fp32)
  static constexpr int kLdO = D + 4;       // o and gradient accumulator rows (fp32)
};

// Shared memory of one forward block.
template <typename T, int D>
struct TcShared : TcLd<D> {
  using L = TcLd<D>;
  alignas(32) T q[kRows * L::kLdT];                        // the tile's rows
  alignas(32) T k[kChunk * L::kLdT], v[kChunk * L::kLdT];  // the chunk's
  alignas(32) T p[kRows * L::kLdP];
  alignas(32) float s[kRows * L::kLdS];
  alignas(32) float o[kRows * L::kLdO];
};

// Reduces over the 8 threads of one row (consecutive lanes of one warp).
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int off = kThreadsPerRow / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int off = kThreadsPerRow / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// The dense tile of this block (blockIdx.x of `tiles`): its first row (or source) and row count, the union of its
// columns and its mask words (one per row and 32-column chunk).
struct TcTile {
  int64_t r0, rows, u0, n_union, words;
  const uint32_t* mask;
};
__device__ __forceinline__ TcTile tc_tile(const GsaParams& p, const GsaTileView& tiles) {
  const int64_t i = blockIdx.x;
  TcTile t;
  t.r0 = tiles.dense_tile[i] * kRows;
  t.rows = p.N - t.r0 < kRows ? p.N - t.r0 : kRows;
  t.u0 = tiles.union_ptr[i];
  t.n_union = tiles.union_ptr[i + 1] - t.u0;
  t.words = (t.n_union + kChunk - 1) / kChunk;
  t.mask = tiles.mask + tiles.mask_ptr[i];
  return t;
}

// Row `row`'s edges in the tile's edge list (gsa_tile_edge's row_edges); row_ptr: the CSR the tiles were planned on.
// Rows past the graph's end have no mask bits: they get the tile's first row.
__device__ __forceinline__ const int32_t* tc_row_edges(const GsaTileView& tiles, const int64_t* row_ptr,
                                                       const TcTile& tile, int row) {
  const int64_t r = row < tile.rows ? row : 0;
  return tiles.edge + tiles.edge_ptr[blockIdx.x] + (row_ptr[tile.r0 + r] - row_ptr[tile.r0]);
}

// Relation `rel`'s row of rel_emb (16-byte aligned: the launchers check rel_emb and rel_stride).
template <typename T>
__device__ __forceinline__ const T* rel_row(const GsaParams& p, int64_t rel) {
  return static_cast<const T*>(p.rel_emb) + rel * p.rel_stride;
}

// q . r over D in fp32 on CUDA cores: q a row in shared memory, r a relation row, both 16-byte aligned.
template <typename T, int D>
__device__ __forceinline__ float rel_dot(const T* q, const T* r) {
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < D; c += kVec) {
    float a[kVec], x[kVec];
    gsa_cuda::load_vec<T>(a, q + c);
    gsa_cuda::load_vec<T>(x, r + c);
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc += a[i] * x[i];
  }
  return acc;
}

// Copies `count` rows of x and y ([B, N, H, D], batch b, head h) to xs and ys in shared memory (row j at j * Ld), 16
// bytes per thread and step: row j is node(j) where in(j), else zeros (so masked products stay finite).
template <typename T, int D, int Ld, class In, class Node>
__device__ __forceinline__ void gather_pair(T* xs, const T* x, const GsaStrides& x_strides, T* ys, const T* y,
                                            const GsaStrides& y_strides, int64_t b, int64_t h, int count, In in,
                                            Node node) {
  constexpr int kVecs = D / kVec;  // 16-byte vectors per row
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int i = threadIdx.x; i < count * kVecs; i += kTcThreads) {
    const int j = i / kVecs, c = i % kVecs;
    uint4 xv = zero, yv = zero;
    if (in(j)) {
      const int64_t n = node(j);
      xv = *reinterpret_cast<const uint4*>(x + offset(x_strides, b, n, h) + c * kVec);
      yv = *reinterpret_cast<const uint4*>(y + offset(y_strides, b, n, h) + c * kVec);
    }
    *reinterpret_cast<uint4*>(xs + j * Ld + c * kVec) = xv;
    *reinterpret_cast<uint4*>(ys + j * Ld + c * kVec) = yv;
  }
}

// out [16 x 16] (fp32, leading dimension Ldo) = A B^T over D on wmma: A's and B's 16 rows in shared memory (leading
// dimension Ld).
template <typename T, int D, int Ld, int Ldo>
__device__ __forceinline__ void mma_abt(float* out, const T* a, const T* bt) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + kk * 16, Ld);
    wmma::load_matrix_sync(fb, bt + kk * 16, Ld);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(out, acc, Ldo, wmma::mem_row_major);
}

// Calls f(j, edge) for the columns j of chunk c0 that this thread takes in its row (sub, sub + kThreadsPerRow, ...);
// edge: whether the tile's mask has the row's edge to column j.
template <class F>
__device__ __forceinline__ void for_row_columns(const TcTile& tile, int row, int64_t c0, int sub, F&& f) {
  const uint32_t bits = tile.mask[row * tile.words + c0 / kChunk];
#pragma unroll
  for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
    const int j = sub + kThreadsPerRow * t;
    f(j, ((bits >> j) & 1u) != 0);
  }
}

// The backward's two products of a chunk [16 x kChunk] (fp32, leading dimension Ldo) on wmma, 16 columns a warp:
// warps 0-1 take s = A0 B0^T, warps 2-3 dp = A1 B1^T (A and B rows of D in shared memory, leading dimension Ld).
template <typename T, int D, int Ld, int Ldo>
__device__ __forceinline__ void mma_abt_pair(float* s, const T* a0, const T* b0, float* dp, const T* a1, const T* b1) {
  const int warp = threadIdx.x / 32, half = warp % 2;
  const bool first = warp < 2;
  mma_abt<T, D, Ld, Ldo>((first ? s : dp) + half * 16, first ? a0 : a1, (first ? b0 : b1) + half * 16 * Ld);
}

// c [16 x 16] (fp32 in shared memory, leading dimension Ldo) += A B over one chunk on wmma: A [16 x kChunk]
// (leading dimension Lda), B [kChunk x 16] (leading dimension Ldb).
template <typename T, int Lda, int Ldb, int Ldo>
__device__ __forceinline__ void mma_ab_acc(float* c, const T* a, const T* bm) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c, Ldo, wmma::mem_row_major);
#pragma unroll
  for (int kk = 0; kk < kChunk / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, a + kk * 16, Lda);
    wmma::load_matrix_sync(fb, bm + kk * 16 * Ldb, Ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c, acc, Ldo, wmma::mem_row_major);
}

// grid (dense tiles, B * H); q, k, v, o: [B, N, H, D] with 16-byte aligned rows; lse: [B, N, H] fp32; the tiles in
// p.graph.tiles. Rel: rel_emb [R, D] set, each edge's score gets q . r of its relation.
template <typename T, int D, bool Rel>
__global__ void __launch_bounds__(kTcThreads) tc_forward_kernel(GsaParams p) {
  __shared__ TcShared<T, D> sm;
  using Sh = TcShared<T, D>;
  constexpr int kVecs = D / kVec;  // 16-byte vectors per row
  const GsaTileView& tiles = p.graph.tiles;
  const TcTile tile = tc_tile(p, tiles);
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const T* q = static_cast<const T*>(p.q);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  for (int x = tid; x < kRows * kVecs; x += kTcThreads) {
    const int r = x / kVecs, c = x % kVecs;
    const T* src = q + offset(p.q_strides, b, tile.r0 + r, h) + c * kVec;
    const uint4 val = r < tile.rows ? *reinterpret_cast<const uint4*>(src) : zero;
    *reinterpret_cast<uint4*>(sm.q + r * Sh::kLdT + c * kVec) = val;
  }
  for (int x = tid; x < kRows * D; x += kTcThreads) sm.o[(x / D) * Sh::kLdO + x % D] = 0.0f;

  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const float scale = static_cast<float>(p.scale);
  const int32_t* row_edges = Rel ? tc_row_edges(tiles, p.graph.row_ptr, tile, row) : nullptr;
  int64_t seen = 0;  // Rel: set bits of the row's earlier chunks
  GsaSoftmaxState<float> st = gsa_softmax_init<float>();
  for (int64_t c0 = 0; c0 < tile.n_union; c0 += kChunk) {
    // The chunk's key and value rows.
    gather_pair<T, D, Sh::kLdT>(
        sm.k, static_cast<const T*>(p.k), p.k_strides, sm.v, static_cast<const T*>(p.v), p.v_strides, b, h, kChunk,
        [&](int j) { return c0 + j < tile.n_union; }, [&](int j) { return tiles.union_col[tile.u0 + c0 + j]; });
    __syncthreads();
    // S [16 x 32] = Q K^T: warps 0 and 1 take 16 columns each.
    if (warp < kChunk / 16) mma_abt<T, D, Sh::kLdT, Sh::kLdS>(sm.s + warp * 16, sm.q, sm.k + warp * 16 * Sh::kLdT);
    __syncthreads();
    // Online softmax of row `row` over the chunk: 8 threads, 4 columns each; P to shared, O rescaled.
    {
      const uint32_t bits = tile.mask[row * tile.words + c0 / kChunk];
      float s[kChunk / kThreadsPerRow];
      float mx = st.m;
#pragma unroll
      for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
        const int j = sub + kThreadsPerRow * t;
        if constexpr (Rel) {
          s[t] = gsa_neg_inf<float>();
          if ((bits >> j) & 1u) {
            const int64_t e = gsa_tile_edge(row_edges, seen, bits, j);
            const float qr = rel_dot<T, D>(sm.q + row * Sh::kLdT, rel_row<T>(p, p.graph.rel[e]));
            s[t] = (sm.s[row * Sh::kLdS + j] + qr) * scale;
          }
        } else {
          s[t] = (bits >> j) & 1u ? sm.s[row * Sh::kLdS + j] * scale : gsa_neg_inf<float>();
        }
        mx = fmaxf(mx, s[t]);
      }
      if constexpr (Rel) seen += __popc(bits);
      mx = row_max(mx);
      const float alpha = gsa_rescale(st.m, mx);
      float sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
        const float w = s[t] == gsa_neg_inf<float>() ? 0.0f : gsa_exp(s[t] - mx);
        sum += w;
        sm.p[row * Sh::kLdP + sub + kThreadsPerRow * t] = to_elem<T>(w);
      }
      st.l = st.l * alpha + row_sum(sum);
      st.m = mx;
      for (int d = sub; d < D; d += kThreadsPerRow) sm.o[row * Sh::kLdO + d] *= alpha;
    }
    __syncthreads();
    // O [16 x D] += P V: the D / 16 output tiles spread over the warps.
    for (int n = warp; n < D / 16; n += kTcThreads / 32) {
      mma_ab_acc<T, Sh::kLdP, Sh::kLdT, Sh::kLdO>(sm.o + n * 16, sm.p, sm.v + n * 16);
    }
    __syncthreads();
  }
  if (row < tile.rows) {
    const float inv = gsa_inv_norm(st);
    T* out = static_cast<T*>(p.o) + offset(p.o_strides, b, tile.r0 + row, h);
    for (int d = sub; d < D; d += kThreadsPerRow) out[d] = to_elem<T>(sm.o[row * Sh::kLdO + d] * inv);
    if (sub == 0) static_cast<float*>(p.lse)[(b * p.N + tile.r0 + row) * p.H + h] = gsa_lse(st);
  }
}

// 64-row tiles (GsaTileView::n_wide, SB_CUDA_TC_ROWS=64): one block of 4 warps per (tile, batch, head), warp w the
// rows [16 w, 16 w + 16) with its own online softmax, all four on one gathered K/V chunk of the tile's union, so
// neighbouring 16-row groups (overlapping unions) share each load. Chunks arrive by cp.async into two buffers: chunk
// c + 1 loads while chunk c multiplies, two barriers per chunk.
constexpr int kWideRows = static_cast<int>(kGsaWideTileRows);
constexpr int kLanesPerRow = 32 / kRows;  // 2: the softmax's lanes of one row in a warp
static_assert(kWideRows / kRows == kTcThreads / 32, "one 16-row group per warp");

// 16 bytes global -> shared, asynchronous (cp.async, sm_80+); !in: zeros, nothing read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(in ? 16 : 0) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = in ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most `Pending` of this thread's newest groups are in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Shared memory of one 64-row forward block (dynamic: 58 KB at D = 64, 98 KB at D = 128).
template <typename T, int D>
struct TcWideShared : TcLd<D> {
  using L = TcLd<D>;
  alignas(32) T q[kWideRows * L::kLdT];                              // the tile's rows
  alignas(32) T k[2][kChunk * L::kLdT], v[2][kChunk * L::kLdT];    // two chunks' (double buffer)
  alignas(32) T p[kWideRows * L::kLdP];                              // each warp its 16 rows
  alignas(32) float s[kWideRows * L::kLdS];
  alignas(32) float o[kWideRows * L::kLdO];
};

// grid (p.graph.tiles.n_wide, B * H): the plan's 64-row dense tiles (the first n_wide); q, k, v, o: [B, N, H, D] with
// 16-byte aligned rows; lse: [B, N, H] fp32. No relation embeddings (those calls keep 16-row tiles).
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads) tc_wide_forward_kernel(GsaParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<TcWideShared<T, D>*>(smem_raw);
  using Sh = TcWideShared<T, D>;
  constexpr int kVecs = D / kVec;  // 16-byte vectors per row
  const GsaTileView& tiles = p.graph.tiles;
  const int64_t i = blockIdx.x;
  const int64_t r0 = tiles.dense_tile[i] * kWideRows;
  const int64_t rows = p.N - r0 < kWideRows ? p.N - r0 : kWideRows;
  const int64_t u0 = tiles.union_ptr[i], n_union = tiles.union_ptr[i + 1] - u0;
  const int64_t words = (n_union + kChunk - 1) / kChunk;
  const uint32_t* mask = tiles.mask + tiles.mask_ptr[i];
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);

  // Chunk c0's key and value rows into buffer `buf`, zeros past the union; one commit group per chunk.
  const auto gather = [&](int64_t c0, int buf) {
    for (int x = tid; x < kChunk * kVecs; x += kTcThreads) {
      const int j = x / kVecs, c = x % kVecs;
      const bool in = c0 + j < n_union;
      const int64_t n = in ? tiles.union_col[u0 + c0 + j] : 0;
      cp_async16(sm.k[buf] + j * Sh::kLdT + c * kVec, k + offset(p.k_strides, b, n, h) + c * kVec, in);
      cp_async16(sm.v[buf] + j * Sh::kLdT + c * kVec, v + offset(p.v_strides, b, n, h) + c * kVec, in);
    }
    cp_async_commit();
  };
  gather(0, 0);  // a dense tile's union is not empty
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int x = tid; x < kWideRows * kVecs; x += kTcThreads) {
    const int r = x / kVecs, c = x % kVecs;
    const uint4 val = r < rows ? *reinterpret_cast<const uint4*>(q + offset(p.q_strides, b, r0 + r, h) + c * kVec)
                               : zero;
    *reinterpret_cast<uint4*>(sm.q + r * Sh::kLdT + c * kVec) = val;
  }
  for (int x = tid; x < kWideRows * D; x += kTcThreads) sm.o[(x / D) * Sh::kLdO + x % D] = 0.0f;

  // This warp's 16 rows; lanes 2 r and 2 r + 1 take its row r (16 columns of a chunk each).
  const int rw = lane / kLanesPerRow, sub = lane % kLanesPerRow, row = warp * kRows + rw;
  const T* qw = sm.q + warp * kRows * Sh::kLdT;
  float* sw = sm.s + warp * kRows * Sh::kLdS;
  T* pw = sm.p + warp * kRows * Sh::kLdP;
  float* ow = sm.o + warp * kRows * Sh::kLdO;
  const float scale = static_cast<float>(p.scale);
  GsaSoftmaxState<float> st = gsa_softmax_init<float>();
  int buf = 0;
  for (int64_t c0 = 0; c0 < n_union; c0 += kChunk, buf ^= 1) {
    if (c0 + kChunk < n_union) {
      gather(c0 + kChunk, buf ^ 1);  // its buffer's last readers passed the previous chunk's closing barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // chunk c0 (and, first time, q and o) visible to every warp
    const uint32_t bits = mask[row * words + c0 / kChunk];
    // A chunk none of the warp's rows attends to changes nothing (alpha 1, P 0): skipped.
    if (__any_sync(0xffffffffu, bits != 0)) {
      // S [16 x 32] = Q_w K^T
      mma_abt<T, D, Sh::kLdT, Sh::kLdS>(sw, qw, sm.k[buf]);
      mma_abt<T, D, Sh::kLdT, Sh::kLdS>(sw + 16, qw, sm.k[buf] + 16 * Sh::kLdT);
      __syncwarp();
      float s[kChunk / kLanesPerRow];
      float mx = st.m;
#pragma unroll
      for (int t = 0; t < kChunk / kLanesPerRow; ++t) {
        const int j = sub + kLanesPerRow * t;
        s[t] = (bits >> j) & 1u ? sw[rw * Sh::kLdS + j] * scale : gsa_neg_inf<float>();
        mx = fmaxf(mx, s[t]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float alpha = gsa_rescale(st.m, mx);
      float sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kChunk / kLanesPerRow; ++t) {
        const float w = s[t] == gsa_neg_inf<float>() ? 0.0f : gsa_exp(s[t] - mx);
        sum += w;
        pw[rw * Sh::kLdP + sub + kLanesPerRow * t] = to_elem<T>(w);
      }
      st.l = st.l * alpha + (sum + __shfl_xor_sync(0xffffffffu, sum, 1));
      st.m = mx;
      for (int d = sub; d < D; d += kLanesPerRow) ow[rw * Sh::kLdO + d] *= alpha;
      __syncwarp();
      // O_w [16 x D] += P_w V
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        mma_ab_acc<T, Sh::kLdP, Sh::kLdT, Sh::kLdO>(ow + n * 16, pw, sm.v[buf] + n * 16);
      }
    }
    __syncthreads();  // every warp done with buffer `buf`
  }
  if (row < rows) {
    const float inv = gsa_inv_norm(st);
    T* out = static_cast<T*>(p.o) + offset(p.o_strides, b, r0 + row, h);
    for (int d = sub; d < D; d += kLanesPerRow) out[d] = to_elem<T>(ow[rw * Sh::kLdO + d] * inv);
    if (sub == 0) static_cast<float*>(p.lse)[(b * p.N + r0 + row) * p.H + h] = gsa_lse(st);
  }
}

// Shared memory of the dq kernel: q and dO tiles, the chunk's k and v rows, S and dP (fp32), dS in the input type,
// the dq accumulator (fp32).
template <typename T, int D>
struct TcDqShared : TcLd<D> {
  using L = TcLd<D>;
  alignas(32) T q[kRows * L::kLdT], d_o[kRows * L::kLdT];  // the tile's rows
  alignas(32) T k[kChunk * L::kLdT], v[kChunk * L::kLdT];  // the chunk's
  alignas(32) float s[kRows * L::kLdS], dp[kRows * L::kLdS];
  alignas(32) T ds[kRows * L::kLdP];
  alignas(32) float acc[kRows * L::kLdO];
};
// With relation embeddings also each chunk element's relation (-1: no edge); dS in fp32 goes to dp, in place.
template <typename T, int D>
struct TcDqRelShared : TcDqShared<T, D> {
  int32_t rel[kRows * kChunk];
};

// dq of the rows of dense tiles: dq_u = scale * sum_v dS_uv k_v with dS = P (dO_u . v_v - delta_u), P = exp(s - lse_u),
// S and dP on wmma per 32-column chunk (warps 0-1: S = Q K^T, warps 2-3: dP = dO V^T), dq += dS K on wmma. grid (dense
// tiles, B * H); reads lse and delta [B, N, H] fp32 (the forward's and the lane-group backward's). Rel: scores with q . r,
// dq_u += scale * sum dS r on CUDA cores (each thread D / 8 values of its row, dS in fp32, columns in order), and each
// edge's dS (fp32) to edge_ds [B, E, H] for the d_rel_emb reduction.
template <typename T, int D, bool Rel>
__global__ void __launch_bounds__(kTcThreads) tc_dq_kernel(GsaParams p, float* edge_ds) {
  using Sh = std::conditional_t<Rel, TcDqRelShared<T, D>, TcDqShared<T, D>>;
  __shared__ Sh sm;
  const GsaTileView& tiles = p.graph.tiles;
  const TcTile tile = tc_tile(p, tiles);
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  gather_pair<T, D, Sh::kLdT>(
      sm.q, static_cast<const T*>(p.q), p.q_strides, sm.d_o, static_cast<const T*>(p.d_o), p.d_o_strides, b, h, kRows,
      [&](int r) { return r < tile.rows; }, [&](int r) { return tile.r0 + r; });
  for (int x = tid; x < kRows * D; x += kTcThreads) sm.acc[(x / D) * Sh::kLdO + x % D] = 0.0f;
  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const int64_t stat = (b * p.N + tile.r0 + row) * p.H + h;
  const float lse = row < tile.rows ? static_cast<const float*>(p.lse)[stat] : 0.0f;
  const float delta = row < tile.rows ? static_cast<const float*>(p.delta)[stat] : 0.0f;
  const float scale = static_cast<float>(p.scale);
  constexpr int kSlice = D / kThreadsPerRow;  // Rel: this thread's dq values d in [sub kSlice, (sub + 1) kSlice)
  const int32_t* row_edges = Rel ? tc_row_edges(tiles, p.graph.row_ptr, tile, row) : nullptr;
  int64_t seen = 0;
  float dq_rel[kSlice];
#pragma unroll
  for (int i = 0; i < kSlice; ++i) dq_rel[i] = 0.0f;
  for (int64_t c0 = 0; c0 < tile.n_union; c0 += kChunk) {
    gather_pair<T, D, Sh::kLdT>(
        sm.k, static_cast<const T*>(p.k), p.k_strides, sm.v, static_cast<const T*>(p.v), p.v_strides, b, h, kChunk,
        [&](int j) { return c0 + j < tile.n_union; }, [&](int j) { return tiles.union_col[tile.u0 + c0 + j]; });
    __syncthreads();
    // S = Q K^T, dP = dO V^T
    mma_abt_pair<T, D, Sh::kLdT, Sh::kLdS>(sm.s, sm.q, sm.k, sm.dp, sm.d_o, sm.v);
    __syncthreads();
    if constexpr (Rel) {
      const uint32_t bits = tile.mask[row * tile.words + c0 / kChunk];
      for_row_columns(tile, row, c0, sub, [&](int j, bool edge) {
        float ds = 0.0f;
        int32_t rel = -1;
        if (edge) {
          const int64_t e = gsa_tile_edge(row_edges, seen, bits, j);
          rel = p.graph.rel[e];
          const float qr = rel_dot<T, D>(sm.q + row * Sh::kLdT, rel_row<T>(p, rel));
          ds = gsa_dscore(gsa_prob((sm.s[row * Sh::kLdS + j] + qr) * scale, lse), sm.dp[row * Sh::kLdS + j], delta);
          edge_ds[(b * p.graph.n_edges + e) * p.H + h] = ds;
        }
        sm.ds[row * Sh::kLdP + j] = to_elem<T>(ds);
        sm.dp[row * Sh::kLdS + j] = ds;  // this thread's own entry, read above
        sm.rel[row * kChunk + j] = rel;
      });
      seen += __popc(bits);
    } else {
      for_row_columns(tile, row, c0, sub, [&](int j, bool edge) {
        float ds = 0.0f;
        if (edge) ds = gsa_dscore(gsa_prob(sm.s[row * Sh::kLdS + j] * scale, lse), sm.dp[row * Sh::kLdS + j], delta);
        sm.ds[row * Sh::kLdP + j] = to_elem<T>(ds);
      });
    }
    __syncthreads();
    for (int n = warp; n < D / 16; n += kTcThreads / 32) {
      mma_ab_acc<T, Sh::kLdP, Sh::kLdT, Sh::kLdO>(sm.acc + n * 16, sm.ds, sm.k + n * 16);
    }
    if constexpr (Rel) {  // reads dS and relations only, so alongside the MMA
      using Pair = typename gsa_cuda::HalfPair<T>::type;
      for (int j = 0; j < kChunk; ++j) {
        const int32_t rel = sm.rel[row * kChunk + j];
        if (rel < 0) continue;
        const float ds = sm.dp[row * Sh::kLdS + j];
        const Pair* r = reinterpret_cast<const Pair*>(rel_row<T>(p, rel) + sub * kSlice);
#pragma unroll
        for (int i = 0; i < kSlice / 2; ++i) {
          const float2 x = gsa_cuda::HalfPair<T>::unpack(r[i]);
          dq_rel[2 * i] += ds * x.x;
          dq_rel[2 * i + 1] += ds * x.y;
        }
      }
    }
    __syncthreads();
  }
  if constexpr (Rel) {
#pragma unroll
    for (int i = 0; i < kSlice; ++i) sm.acc[row * Sh::kLdO + sub * kSlice + i] += dq_rel[i];
    __syncthreads();
  }
  if (row < tile.rows) {
    T* out = static_cast<T*>(p.dq) + offset(p.dq_strides, b, tile.r0 + row, h);
    for (int d = sub; d < D; d += kThreadsPerRow) out[d] = to_elem<T>(sm.acc[row * Sh::kLdO + d] * scale);
  }
}

// Shared memory of the dk/dv kernel (dynamic: 50 KB at D = 128): the source tile's k and v rows, the chunk's
// destinations' q and dO rows with their lse and delta, S^T and dP^T (fp32), P^T and dS^T in the input type, and the
// dk and dv accumulators (fp32).
template <typename T, int D>
struct TcDkvShared : TcLd<D> {
  using L = TcLd<D>;
  alignas(32) T k[kRows * L::kLdT], v[kRows * L::kLdT];      // the source tile's rows
  alignas(32) T q[kChunk * L::kLdT], d_o[kChunk * L::kLdT];  // the chunk's destinations'
  alignas(32) float st[kRows * L::kLdS], dpt[kRows * L::kLdS];
  alignas(32) T pt[kRows * L::kLdP], dst[kRows * L::kLdP];
  alignas(32) float dk[kRows * L::kLdO], dv[kRows * L::kLdO];
  float lse[kChunk], delta[kChunk];
};

// dk and dv of the sources in dense tiles of the transpose (p.graph.src_tiles: 16 consecutive sources, the union of
// their destinations): per 32-destination chunk S^T = K Q^T (warps 0-1) and dP^T = V dO^T (warps 2-3) on wmma,
// P^T = exp(S^T - lse), dS^T = P^T (dP^T - delta) masked, then dv += P^T dO and dk += dS^T Q on wmma; dk scaled at the
// end. grid (dense source tiles, B * H). Rel: S^T with q . r of each edge's relation (dk takes no relation term).
template <typename T, int D, bool Rel>
__global__ void __launch_bounds__(kTcThreads) tc_dkv_kernel(GsaParams p) {
  extern __shared__ __align__(32) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<TcDkvShared<T, D>*>(smem_raw);
  using Sh = TcDkvShared<T, D>;
  const GsaTileView& tiles = p.graph.src_tiles;
  const TcTile tile = tc_tile(p, tiles);
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const float* lse = static_cast<const float*>(p.lse);
  const float* delta = static_cast<const float*>(p.delta);
  gather_pair<T, D, Sh::kLdT>(
      sm.k, static_cast<const T*>(p.k), p.k_strides, sm.v, static_cast<const T*>(p.v), p.v_strides, b, h, kRows,
      [&](int r) { return r < tile.rows; }, [&](int r) { return tile.r0 + r; });
  for (int x = tid; x < kRows * D; x += kTcThreads) {
    sm.dk[(x / D) * Sh::kLdO + x % D] = 0.0f;
    sm.dv[(x / D) * Sh::kLdO + x % D] = 0.0f;
  }
  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const float scale = static_cast<float>(p.scale);
  const int32_t* row_edges = Rel ? tc_row_edges(tiles, p.graph.t_row_ptr, tile, row) : nullptr;  // transposed CSR
  int64_t seen = 0;
  for (int64_t c0 = 0; c0 < tile.n_union; c0 += kChunk) {
    gather_pair<T, D, Sh::kLdT>(
        sm.q, static_cast<const T*>(p.q), p.q_strides, sm.d_o, static_cast<const T*>(p.d_o), p.d_o_strides, b, h,
        kChunk, [&](int j) { return c0 + j < tile.n_union; }, [&](int j) { return tiles.union_col[tile.u0 + c0 + j]; });
    if (tid < kChunk) {
      const bool in = c0 + tid < tile.n_union;
      const int64_t stat = in ? (b * p.N + tiles.union_col[tile.u0 + c0 + tid]) * p.H + h : 0;
      sm.lse[tid] = in ? lse[stat] : 0.0f;
      sm.delta[tid] = in ? delta[stat] : 0.0f;
    }
    __syncthreads();
    // S^T = K Q^T, dP^T = V dO^T
    mma_abt_pair<T, D, Sh::kLdT, Sh::kLdS>(sm.st, sm.k, sm.q, sm.dpt, sm.v, sm.d_o);
    __syncthreads();
    const uint32_t bits = Rel ? tile.mask[row * tile.words + c0 / kChunk] : 0u;
    for_row_columns(tile, row, c0, sub, [&](int j, bool edge) {
      float pr = 0.0f, ds = 0.0f;
      if (edge) {
        if constexpr (Rel) {  // column j is the destination: its q row is the chunk's row j
          const int64_t e = p.graph.t_edge[gsa_tile_edge(row_edges, seen, bits, j)];
          const float qr = rel_dot<T, D>(sm.q + j * Sh::kLdT, rel_row<T>(p, p.graph.rel[e]));
          pr = gsa_prob((sm.st[row * Sh::kLdS + j] + qr) * scale, sm.lse[j]);
        } else {
          pr = gsa_prob(sm.st[row * Sh::kLdS + j] * scale, sm.lse[j]);
        }
        ds = gsa_dscore(pr, sm.dpt[row * Sh::kLdS + j], sm.delta[j]);
      }
      sm.pt[row * Sh::kLdP + j] = to_elem<T>(pr);
      sm.dst[row * Sh::kLdP + j] = to_elem<T>(ds);
    });
    if constexpr (Rel) seen += __popc(bits);
    __syncthreads();
    for (int t = warp; t < 2 * (D / 16); t += kTcThreads / 32) {
      const bool is_dv = t < D / 16;
      const int n = is_dv ? t : t - D / 16;
      float* acc_mem = is_dv ? sm.dv : sm.dk;
      const T* a = is_dv ? sm.pt : sm.dst;      // dv += P^T dO, dk += dS^T Q
      const T* bm = is_dv ? sm.d_o : sm.q;
      mma_ab_acc<T, Sh::kLdP, Sh::kLdT, Sh::kLdO>(acc_mem + n * 16, a, bm + n * 16);
    }
    __syncthreads();
  }
  if (row < tile.rows) {
    T* dk_out = static_cast<T*>(p.dk) + offset(p.dk_strides, b, tile.r0 + row, h);
    T* dv_out = static_cast<T*>(p.dv) + offset(p.dv_strides, b, tile.r0 + row, h);
    for (int d = sub; d < D; d += kThreadsPerRow) {
      dk_out[d] = to_elem<T>(sm.dk[row * Sh::kLdO + d] * scale);
      dv_out[d] = to_elem<T>(sm.dv[row * Sh::kLdO + d]);
    }
  }
}

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string("graph_attention forward (tensor cores): ") + what + ": " +
                                      cudaGetErrorString(err));
}

bool aligned_rows(const void* ptr, const GsaStrides& s) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % kVec == 0 && s.node % kVec == 0 &&
         s.head % kVec == 0;
}

// Relation rows the kernels load 16 bytes at a time (or none).
bool aligned_relations(const GsaParams& p) {
  return p.rel_emb == nullptr || (reinterpret_cast<uintptr_t>(p.rel_emb) % 16 == 0 && p.rel_stride % kVec == 0);
}

// Calls launch(gsa_cuda::TypeTag<T>, std::integral_constant<int, D>, std::bool_constant<Rel>) with T p's half type,
// D its head dimension (16, 32, 64, else 128: gsa_cuda_tc_unsupported keeps other values out) and Rel whether it has
// relation embeddings (as the lane groups' backward decides, so the dq tiles find its dS workspace).
template <class F>
void by_type_and_dim(const GsaParams& p, F&& launch) {
  auto by_rel = [&](auto type, auto dim) {
    if (p.rel_emb != nullptr && p.R > 0) {
      launch(type, dim, std::true_type{});
    } else {
      launch(type, dim, std::false_type{});
    }
  };
  auto by_dim = [&](auto type) {
    switch (p.D) {
      case 16: by_rel(type, std::integral_constant<int, 16>{}); break;
      case 32: by_rel(type, std::integral_constant<int, 32>{}); break;
      case 64: by_rel(type, std::integral_constant<int, 64>{}); break;
      default: by_rel(type, std::integral_constant<int, 128>{}); break;
    }
  };
  if (p.dtype == GsaDtype::bf16) {
    by_dim(gsa_cuda::TypeTag<__nv_bfloat16>{});
  } else {
    by_dim(gsa_cuda::TypeTag<__half>{});
  }
}

// One block per (dense tile, batch x head).
dim3 tile_grid(const GsaParams& p, const GsaTileView& tiles) {
  return dim3(static_cast<unsigned>(tiles.n_dense), static_cast<unsigned>(p.B * p.H));
}

void launch_tiles(const GsaParams& p, cudaStream_t stream) {
  by_type_and_dim(p, [&](auto type, auto dim, auto rel) {
    tc_forward_kernel<typename decltype(type)::type, decltype(dim)::value, decltype(rel)::value>
        <<<tile_grid(p, p.graph.tiles), kTcThreads, 0, stream>>>(p);
  });
  cuda_check(cudaGetLastError(), "launch");
}

// The plan's 64-row tiles (the first n_wide of p.graph.tiles), without relation embeddings.
void launch_wide_tiles(const GsaParams& p, cudaStream_t stream) {
  by_type_and_dim(p, [&](auto type, auto dim, auto) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    constexpr size_t bytes = sizeof(TcWideShared<T, D>);
    cuda_check(cudaFuncSetAttribute(tc_wide_forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "shared memory of the 64-row forward");
    const dim3 grid(static_cast<unsigned>(p.graph.tiles.n_wide), static_cast<unsigned>(p.B * p.H));
    tc_wide_forward_kernel<T, D><<<grid, kTcThreads, bytes, stream>>>(p);
  });
  cuda_check(cudaGetLastError(), "launch (64-row tiles)");
}

// The 16-row dense tiles of a plan that starts with n_wide 64-row ones: its arrays past them, as a 16-row plan.
GsaTileView narrow_tiles(const GsaTileView& t) {
  GsaTileView v = t;
  v.dense_tile += t.n_wide;
  v.union_ptr += t.n_wide;
  v.mask_ptr += t.n_wide;
  v.edge_ptr += t.n_wide;
  v.n_dense = t.n_dense - t.n_wide;
  v.n_wide = 0;
  v.tile_rows = kGsaTileRows;
  return v;
}

void launch_dq_tiles(const GsaParams& p, cudaStream_t stream) {
  float* edge_ds = static_cast<float*>(gsa_cuda_edge_ds(p));  // nullptr without relations
  by_type_and_dim(p, [&](auto type, auto dim, auto rel) {
    tc_dq_kernel<typename decltype(type)::type, decltype(dim)::value, decltype(rel)::value>
        <<<tile_grid(p, p.graph.tiles), kTcThreads, 0, stream>>>(p, edge_ds);
  });
  cuda_check(cudaGetLastError(), "launch (dq)");
}

void launch_dkv_tiles(const GsaParams& p, cudaStream_t stream) {
  by_type_and_dim(p, [&](auto type, auto dim, auto rel) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    constexpr bool Rel = decltype(rel)::value;
    constexpr size_t bytes = sizeof(TcDkvShared<T, D>);
    cuda_check(cudaFuncSetAttribute(tc_dkv_kernel<T, D, Rel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "shared memory of the dk/dv kernel");
    tc_dkv_kernel<T, D, Rel><<<tile_grid(p, p.graph.src_tiles), kTcThreads, bytes, stream>>>(p);
  });
  cuda_check(cudaGetLastError(), "launch (dk, dv)");
}

// Backward: the lane groups' delta and the dq, dk, dv of rows and sources outside dense tiles (their schedules
// restricted to them), then the dense tiles' dq and dk, dv on tensor cores (after delta, on the same stream); with
// relation embeddings d_rel_emb last, once the lane groups and the dq tiles have written every edge's dS.
void run_backward_tiles(const GsaParams& p, cudaStream_t stream) {
  GsaParams rest = p;
  rest.graph.rows = p.graph.tiles.rest;
  rest.graph.srcs = p.graph.src_tiles.rest;
  const bool rel = p.rel_emb != nullptr && p.R > 0;
  gsa_backward_cuda(rest, stream, GsaCudaKernels::lane_groups, !rel);
  if (p.graph.tiles.n_dense > 0) launch_dq_tiles(p, stream);
  if (p.graph.src_tiles.n_dense > 0) launch_dkv_tiles(p, stream);
  if (rel) gsa_backward_cuda_rel(p, stream);
}

// Dense tiles on tensor cores (64-row ones first when the plan has them), the other rows on the lane groups;
// p.graph.tiles on the device.
void run_tiles(const GsaParams& p, cudaStream_t stream) {
  const GsaTileView& tiles = p.graph.tiles;
  if (tiles.n_wide > 0) {
    launch_wide_tiles(p, stream);
    if (tiles.n_dense > tiles.n_wide) {
      GsaParams narrow = p;
      narrow.graph.tiles = narrow_tiles(tiles);
      launch_tiles(narrow, stream);
    }
  } else if (tiles.n_dense > 0) {
    launch_tiles(p, stream);
  }
  if (tiles.n_rest_rows > 0) {
    GsaParams rest = p;
    rest.graph.rows = tiles.rest;
    gsa_forward_cuda(rest, stream, GsaCudaKernels::lane_groups);
  }
}

// The tiles of a graph that carries none: its CSR (by_source: the transpose) and schedule to the host, planned and
// packed for this call with tile_rows rows per tile.
GsaPackedTiles plan_per_call(const GsaParams& p, cudaStream_t stream, bool by_source,
                             int64_t tile_rows = kGsaTileRows) {
  const int64_t n = p.graph.n_nodes, ne = p.graph.n_edges;
  std::vector<int64_t> row_ptr(static_cast<size_t>(n + 1));
  std::vector<int32_t> col(static_cast<size_t>(ne));
  const int64_t* ptr_dev = by_source ? p.graph.t_row_ptr : p.graph.row_ptr;
  const int32_t* col_dev = by_source ? p.graph.t_col : p.graph.col;
  cuda_check(cudaMemcpyAsync(row_ptr.data(), ptr_dev, row_ptr.size() * 8, cudaMemcpyDeviceToHost, stream),
             "row_ptr to host");
  if (ne > 0) {
    cuda_check(cudaMemcpyAsync(col.data(), col_dev, col.size() * 4, cudaMemcpyDeviceToHost, stream), "col to host");
  }
  const GsaScheduleView& rows = by_source ? p.graph.srcs : p.graph.rows;
  std::vector<int64_t> full;
  if (rows.order != nullptr) {
    full.resize(static_cast<size_t>(3 * rows.n_pieces + 2 * rows.n_split + 1 + rows.n_order));
    cuda_check(cudaMemcpyAsync(full.data(), rows.piece_begin, full.size() * 8, cudaMemcpyDeviceToHost, stream),
               "schedule to host");
  }
  cuda_check(cudaStreamSynchronize(stream), "graph to host");
  GsaTileOptions options;
  options.rows = tile_rows;
  return gsa_pack_tiles(gsa_tile_plan(row_ptr.data(), col.data(), n, options), full, rows.n_pieces, rows.n_split);
}

// Device copies of packed tiles for one call, freed on the stream after it.
class CallTiles {
 public:
  CallTiles(const GsaPackedTiles& packed, cudaStream_t stream) : stream_(stream) {
    cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&dev_), std::max<size_t>(packed.data.size() * 8, 8), stream),
               "tile buffer");
    // Pageable source: the call returns once the bytes are staged, so `packed` may go before the copy ends.
    cuda_check(cudaMemcpyAsync(dev_, packed.data.data(), packed.data.size() * 8, cudaMemcpyHostToDevice, stream),
               "tiles to device");
    view_ = gsa_tile_view(dev_, packed);
  }
  ~CallTiles() { cudaFreeAsync(dev_, stream_); }
  CallTiles(const CallTiles&) = delete;
  CallTiles& operator=(const CallTiles&) = delete;
  const GsaTileView& view() const { return view_; }

 private:
  cudaStream_t stream_;
  int64_t* dev_ = nullptr;
  GsaTileView view_;
};

}  // namespace

std::string gsa_cuda_tc_unsupported(const GsaParams& p, bool relations) {
  if (p.dtype != GsaDtype::f16 && p.dtype != GsaDtype::bf16) {
    // gsa_dtype_name's words (sb_kernels links this library, not the other way round)
    const char* name = p.dtype == GsaDtype::f64 ? "float64" : "float32";
    return std::string("dtype ") + name + " (the tensor-core forward takes float16 and bfloat16)";
  }
  if ((p.rel_emb != nullptr || p.R > 0) && !relations) {
    return "relation embeddings (the tensor-core forward takes none)";
  }
  if (p.D != 16 && p.D != 32 && p.D != 64 && p.D != 128) {
    return "head dimension D = " + std::to_string(p.D) + " (the tensor-core forward takes 16, 32, 64 and 128)";
  }
  if (p.B * p.H > 65535) return "B * H = " + std::to_string(p.B * p.H) + " (the tensor-core forward takes <= 65535)";
  return "";
}

GsaTcStats gsa_forward_cuda_tc(const GsaParams& p, void* stream_ptr, bool relations, int64_t tile_rows) {
  GsaTcStats stats;
  stats.edges = p.graph.n_edges;
  const bool aligned = aligned_rows(p.q, p.q_strides) && aligned_rows(p.k, p.k_strides) &&
                       aligned_rows(p.v, p.v_strides) && aligned_relations(p);
  if (!gsa_cuda_tc_unsupported(p, relations).empty() || !aligned || p.B * p.N * p.H == 0) {
    gsa_forward_cuda(p, stream_ptr, GsaCudaKernels::lane_groups);
    return stats;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  stats.tensor_cores = true;
  // 64-row tiles take no relation embeddings: such calls keep 16-row ones.
  const bool rel = p.rel_emb != nullptr && p.R > 0;
  const auto ran = [&](const GsaTileView& t) {
    stats.dense_tiles = t.n_dense;
    stats.dense_edges = t.dense_edges;
    stats.tile_rows = t.tile_rows;
    stats.wide_tiles = t.n_wide;
  };
  if (!rel && p.graph.wide_tiles.n_dense >= 0) {  // 64-row tiles planned with the prepared graph
    GsaParams q = p;
    q.graph.tiles = p.graph.wide_tiles;
    ran(q.graph.tiles);
    run_tiles(q, stream);
    return stats;
  }
  if (p.graph.tiles.n_dense >= 0) {  // planned with the prepared graph
    ran(p.graph.tiles);
    run_tiles(p, stream);
    return stats;
  }
  const int64_t rows = rel ? kGsaTileRows : tile_rows > 0 ? tile_rows : gsa_tile_rows_from_env();
  const GsaPackedTiles packed = plan_per_call(p, stream, false, rows);
  const CallTiles tiles(packed, stream);
  ran(tiles.view());
  GsaParams q = p;
  q.graph.tiles = tiles.view();
  run_tiles(q, stream);
  return stats;
}

GsaTcStats gsa_backward_cuda_tc(const GsaParams& p, void* stream_ptr, bool relations) {
  GsaTcStats stats;
  stats.edges = p.graph.n_edges;
  const bool aligned = aligned_rows(p.q, p.q_strides) && aligned_rows(p.k, p.k_strides) &&
                       aligned_rows(p.v, p.v_strides) && aligned_rows(p.d_o, p.d_o_strides) && aligned_relations(p);
  if (!gsa_cuda_tc_unsupported(p, relations).empty() || !aligned || p.B * p.N * p.H == 0) {
    gsa_backward_cuda(p, stream_ptr, GsaCudaKernels::lane_groups);
    return stats;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  stats.tensor_cores = true;
  if (p.graph.tiles.n_dense >= 0 && p.graph.src_tiles.n_dense >= 0) {
    stats.dense_tiles = p.graph.tiles.n_dense;
    stats.dense_edges = p.graph.tiles.dense_edges;
    run_backward_tiles(p, stream);
    return stats;
  }
  const GsaPackedTiles by_dst = plan_per_call(p, stream, false), by_src = plan_per_call(p, stream, true);
  stats.dense_tiles = by_dst.n_dense;
  stats.dense_edges = by_dst.dense_edges;
  const CallTiles dst_tiles(by_dst, stream), src_tiles(by_src, stream);
  GsaParams q = p;
  q.graph.tiles = dst_tiles.view();
  q.graph.src_tiles = src_tiles.view();
  run_backward_tiles(q, stream);
  return stats;
}

}  // namespace sb
