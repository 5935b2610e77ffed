// Tensor-core forward and backward of graph self-attention over dense 16-row tiles (dq by tiles of destinations, dk
// and dv by tiles of sources in the transpose). Forward: per (tile, batch, head) one block of 4 warps
// gathers the tile's union of key and value rows in chunks of 32 columns into shared memory, takes S = Q K^T and
// O += P V with wmma (16x16x16, fp32 accumulation), masks S by the tile's bitmask and runs the online softmax per row
// in fp32. Rows outside dense tiles run through the per-edge kernels (gsa_forward_cuda) on their own schedule.
#include "kernels/cuda/gsa_cuda_tc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/gsa_cuda.h"
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

__device__ __forceinline__ int64_t offset(const GsaStrides& s, int64_t b, int64_t n, int64_t h) {
  return b * s.batch + n * s.node + h * s.head;
}

// Shared memory of one block. Leading dimensions keep wmma's rules (multiples of 16 bytes, fragment pointers 32-byte
// aligned) and shift rows against the banks.
template <typename T, int D>
struct TcShared {
  static constexpr int kLdT = D + 8;       // q, k, v rows
  static constexpr int kLdP = kChunk + 8;  // p rows
  static constexpr int kLdS = kChunk + 4;  // s rows (fp32)
  static constexpr int kLdO = D + 4;       // o rows (fp32)
  alignas(32) T q[kRows * kLdT];
  alignas(32) T k[kChunk * kLdT];
  alignas(32) T v[kChunk * kLdT];
  alignas(32) T p[kRows * kLdP];
  alignas(32) float s[kRows * kLdS];
  alignas(32) float o[kRows * kLdO];
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

// grid (dense tiles, B * H); q, k, v, o: [B, N, H, D] with 16-byte aligned rows; lse: [B, N, H] fp32; the tiles in
// p.graph.tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads) tc_forward_kernel(GsaParams p) {
  const GsaTileView& tiles = p.graph.tiles;
  __shared__ TcShared<T, D> sm;
  using Sh = TcShared<T, D>;
  constexpr int kVecs = D / kVec;  // 16-byte vectors per row
  const int64_t i = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t r0 = tiles.dense_tile[i] * kRows;
  const int64_t rows = p.N - r0 < kRows ? p.N - r0 : kRows;
  const int64_t u0 = tiles.union_ptr[i];
  const int64_t n_union = tiles.union_ptr[i + 1] - u0;
  const int64_t words = (n_union + kChunk - 1) / kChunk;
  const uint32_t* mask = tiles.mask + tiles.mask_ptr[i];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  for (int x = tid; x < kRows * kVecs; x += kTcThreads) {
    const int r = x / kVecs, c = x % kVecs;
    const T* src = q + offset(p.q_strides, b, r0 + r, h) + c * kVec;
    const uint4 val = r < rows ? *reinterpret_cast<const uint4*>(src) : zero;
    *reinterpret_cast<uint4*>(sm.q + r * Sh::kLdT + c * kVec) = val;
  }
  for (int x = tid; x < kRows * D; x += kTcThreads) sm.o[(x / D) * Sh::kLdO + x % D] = 0.0f;

  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const float scale = static_cast<float>(p.scale);
  GsaSoftmaxState<float> st = gsa_softmax_init<float>();
  for (int64_t c0 = 0; c0 < n_union; c0 += kChunk) {
    // Gather the chunk's key and value rows (zero past the union, so masked products stay finite).
    for (int x = tid; x < kChunk * kVecs; x += kTcThreads) {
      const int j = x / kVecs, c = x % kVecs;
      uint4 kv = zero, vv = zero;
      if (c0 + j < n_union) {
        const int64_t src = tiles.union_col[u0 + c0 + j];
        kv = *reinterpret_cast<const uint4*>(k + offset(p.k_strides, b, src, h) + c * kVec);
        vv = *reinterpret_cast<const uint4*>(v + offset(p.v_strides, b, src, h) + c * kVec);
      }
      *reinterpret_cast<uint4*>(sm.k + j * Sh::kLdT + c * kVec) = kv;
      *reinterpret_cast<uint4*>(sm.v + j * Sh::kLdT + c * kVec) = vv;
    }
    __syncthreads();
    // S [16 x 32] = Q K^T: warps 0 and 1 take 16 columns each.
    if (warp < kChunk / 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sm.q + kk * 16, Sh::kLdT);
        wmma::load_matrix_sync(fb, sm.k + warp * 16 * Sh::kLdT + kk * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sm.s + warp * 16, acc, Sh::kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    // Online softmax of row `row` over the chunk: 8 threads, 4 columns each; P to shared, O rescaled.
    {
      const uint32_t bits = mask[row * words + c0 / kChunk];
      float s[kChunk / kThreadsPerRow];
      float mx = st.m;
#pragma unroll
      for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
        const int j = sub + kThreadsPerRow * t;
        s[t] = (bits >> j) & 1u ? sm.s[row * Sh::kLdS + j] * scale : gsa_neg_inf<float>();
        mx = fmaxf(mx, s[t]);
      }
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
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, sm.o + n * 16, Sh::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, sm.p + kk * 16, Sh::kLdP);
        wmma::load_matrix_sync(fb, sm.v + kk * 16 * Sh::kLdT + n * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sm.o + n * 16, acc, Sh::kLdO, wmma::mem_row_major);
    }
    __syncthreads();
  }
  if (row < rows) {
    const float inv = gsa_inv_norm(st);
    T* out = static_cast<T*>(p.o) + offset(p.o_strides, b, r0 + row, h);
    for (int d = sub; d < D; d += kThreadsPerRow) out[d] = to_elem<T>(sm.o[row * Sh::kLdO + d] * inv);
    if (sub == 0) static_cast<float*>(p.lse)[(b * p.N + r0 + row) * p.H + h] = gsa_lse(st);
  }
}

// Shared memory of the dq kernel: q and dO tiles, the chunk's k and v rows, S and dP (fp32), dS in the input type,
// the dq accumulator (fp32).
template <typename T, int D>
struct TcDqShared {
  static constexpr int kLdT = D + 8;
  static constexpr int kLdP = kChunk + 8;
  static constexpr int kLdS = kChunk + 4;
  static constexpr int kLdO = D + 4;
  alignas(32) T q[kRows * kLdT];
  alignas(32) T d_o[kRows * kLdT];
  alignas(32) T k[kChunk * kLdT];
  alignas(32) T v[kChunk * kLdT];
  alignas(32) float s[kRows * kLdS];
  alignas(32) float dp[kRows * kLdS];
  alignas(32) T ds[kRows * kLdP];
  alignas(32) float acc[kRows * kLdO];
};

// dq of the rows of dense tiles: dq_u = scale * sum_v dS_uv k_v with dS = P (dO_u . v_v - delta_u), P = exp(s - lse_u),
// S and dP on wmma per 32-column chunk (warps 0-1: S = Q K^T, warps 2-3: dP = dO V^T), dq += dS K on wmma. grid (dense
// tiles, B * H); reads lse and delta [B, N, H] fp32 (the forward's and the lane-group backward's).
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads) tc_dq_kernel(GsaParams p) {
  __shared__ TcDqShared<T, D> sm;
  using Sh = TcDqShared<T, D>;
  const GsaTileView& tiles = p.graph.tiles;
  constexpr int kVecs = D / kVec;
  const int64_t i = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t r0 = tiles.dense_tile[i] * kRows;
  const int64_t rows = p.N - r0 < kRows ? p.N - r0 : kRows;
  const int64_t u0 = tiles.union_ptr[i];
  const int64_t n_union = tiles.union_ptr[i + 1] - u0;
  const int64_t words = (n_union + kChunk - 1) / kChunk;
  const uint32_t* mask = tiles.mask + tiles.mask_ptr[i];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* d_o = static_cast<const T*>(p.d_o);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  for (int x = tid; x < kRows * kVecs; x += kTcThreads) {
    const int r = x / kVecs, c = x % kVecs;
    uint4 qv = zero, dv = zero;
    if (r < rows) {
      qv = *reinterpret_cast<const uint4*>(q + offset(p.q_strides, b, r0 + r, h) + c * kVec);
      dv = *reinterpret_cast<const uint4*>(d_o + offset(p.d_o_strides, b, r0 + r, h) + c * kVec);
    }
    *reinterpret_cast<uint4*>(sm.q + r * Sh::kLdT + c * kVec) = qv;
    *reinterpret_cast<uint4*>(sm.d_o + r * Sh::kLdT + c * kVec) = dv;
  }
  for (int x = tid; x < kRows * D; x += kTcThreads) sm.acc[(x / D) * Sh::kLdO + x % D] = 0.0f;
  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const int64_t stat = (b * p.N + r0 + row) * p.H + h;
  const float lse = row < rows ? static_cast<const float*>(p.lse)[stat] : 0.0f;
  const float delta = row < rows ? static_cast<const float*>(p.delta)[stat] : 0.0f;
  const float scale = static_cast<float>(p.scale);
  for (int64_t c0 = 0; c0 < n_union; c0 += kChunk) {
    for (int x = tid; x < kChunk * kVecs; x += kTcThreads) {
      const int j = x / kVecs, c = x % kVecs;
      uint4 kv = zero, vv = zero;
      if (c0 + j < n_union) {
        const int64_t src = tiles.union_col[u0 + c0 + j];
        kv = *reinterpret_cast<const uint4*>(k + offset(p.k_strides, b, src, h) + c * kVec);
        vv = *reinterpret_cast<const uint4*>(v + offset(p.v_strides, b, src, h) + c * kVec);
      }
      *reinterpret_cast<uint4*>(sm.k + j * Sh::kLdT + c * kVec) = kv;
      *reinterpret_cast<uint4*>(sm.v + j * Sh::kLdT + c * kVec) = vv;
    }
    __syncthreads();
    {
      const int half = warp % 2;               // which 16 columns of the chunk
      const T* a = warp < 2 ? sm.q : sm.d_o;   // S = Q K^T or dP = dO V^T
      const T* bt = warp < 2 ? sm.k : sm.v;
      float* out = warp < 2 ? sm.s : sm.dp;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, a + kk * 16, Sh::kLdT);
        wmma::load_matrix_sync(fb, bt + half * 16 * Sh::kLdT + kk * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(out + half * 16, acc, Sh::kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    {
      const uint32_t bits = mask[row * words + c0 / kChunk];
#pragma unroll
      for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
        const int j = sub + kThreadsPerRow * t;
        float ds = 0.0f;
        if ((bits >> j) & 1u) {
          const float pr = gsa_prob(sm.s[row * Sh::kLdS + j] * scale, lse);
          ds = gsa_dscore(pr, sm.dp[row * Sh::kLdS + j], delta);
        }
        sm.ds[row * Sh::kLdP + j] = to_elem<T>(ds);
      }
    }
    __syncthreads();
    for (int n = warp; n < D / 16; n += kTcThreads / 32) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, sm.acc + n * 16, Sh::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, sm.ds + kk * 16, Sh::kLdP);
        wmma::load_matrix_sync(fb, sm.k + kk * 16 * Sh::kLdT + n * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sm.acc + n * 16, acc, Sh::kLdO, wmma::mem_row_major);
    }
    __syncthreads();
  }
  if (row < rows) {
    T* out = static_cast<T*>(p.dq) + offset(p.dq_strides, b, r0 + row, h);
    for (int d = sub; d < D; d += kThreadsPerRow) out[d] = to_elem<T>(sm.acc[row * Sh::kLdO + d] * scale);
  }
}

// Shared memory of the dk/dv kernel (dynamic: 50 KB at D = 128): the source tile's k and v rows, the chunk's
// destinations' q and dO rows with their lse and delta, S^T and dP^T (fp32), P^T and dS^T in the input type, and the
// dk and dv accumulators (fp32).
template <typename T, int D>
struct TcDkvShared {
  static constexpr int kLdT = D + 8;
  static constexpr int kLdP = kChunk + 8;
  static constexpr int kLdS = kChunk + 4;
  static constexpr int kLdO = D + 4;
  alignas(32) T k[kRows * kLdT];
  alignas(32) T v[kRows * kLdT];
  alignas(32) T q[kChunk * kLdT];
  alignas(32) T d_o[kChunk * kLdT];
  alignas(32) float st[kRows * kLdS];
  alignas(32) float dpt[kRows * kLdS];
  alignas(32) T pt[kRows * kLdP];
  alignas(32) T dst[kRows * kLdP];
  alignas(32) float dk[kRows * kLdO];
  alignas(32) float dv[kRows * kLdO];
  float lse[kChunk];
  float delta[kChunk];
};

// dk and dv of the sources in dense tiles of the transpose (p.graph.src_tiles: 16 consecutive sources, the union of
// their destinations): per 32-destination chunk S^T = K Q^T (warps 0-1) and dP^T = V dO^T (warps 2-3) on wmma,
// P^T = exp(S^T - lse), dS^T = P^T (dP^T - delta) masked, then dv += P^T dO and dk += dS^T Q on wmma; dk scaled at the
// end. grid (dense source tiles, B * H).
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads) tc_dkv_kernel(GsaParams p) {
  extern __shared__ __align__(32) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<TcDkvShared<T, D>*>(smem_raw);
  using Sh = TcDkvShared<T, D>;
  const GsaTileView& tiles = p.graph.src_tiles;
  constexpr int kVecs = D / kVec;
  const int64_t i = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t r0 = tiles.dense_tile[i] * kRows;
  const int64_t rows = p.N - r0 < kRows ? p.N - r0 : kRows;
  const int64_t u0 = tiles.union_ptr[i];
  const int64_t n_union = tiles.union_ptr[i + 1] - u0;
  const int64_t words = (n_union + kChunk - 1) / kChunk;
  const uint32_t* mask = tiles.mask + tiles.mask_ptr[i];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* d_o = static_cast<const T*>(p.d_o);
  const float* lse = static_cast<const float*>(p.lse);
  const float* delta = static_cast<const float*>(p.delta);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  for (int x = tid; x < kRows * kVecs; x += kTcThreads) {
    const int r = x / kVecs, c = x % kVecs;
    uint4 kv = zero, vv = zero;
    if (r < rows) {
      kv = *reinterpret_cast<const uint4*>(k + offset(p.k_strides, b, r0 + r, h) + c * kVec);
      vv = *reinterpret_cast<const uint4*>(v + offset(p.v_strides, b, r0 + r, h) + c * kVec);
    }
    *reinterpret_cast<uint4*>(sm.k + r * Sh::kLdT + c * kVec) = kv;
    *reinterpret_cast<uint4*>(sm.v + r * Sh::kLdT + c * kVec) = vv;
  }
  for (int x = tid; x < kRows * D; x += kTcThreads) {
    sm.dk[(x / D) * Sh::kLdO + x % D] = 0.0f;
    sm.dv[(x / D) * Sh::kLdO + x % D] = 0.0f;
  }
  const int row = tid / kThreadsPerRow, sub = tid % kThreadsPerRow;
  const float scale = static_cast<float>(p.scale);
  for (int64_t c0 = 0; c0 < n_union; c0 += kChunk) {
    for (int x = tid; x < kChunk * kVecs; x += kTcThreads) {
      const int j = x / kVecs, c = x % kVecs;
      uint4 qv = zero, dv = zero;
      if (c0 + j < n_union) {
        const int64_t dst = tiles.union_col[u0 + c0 + j];
        qv = *reinterpret_cast<const uint4*>(q + offset(p.q_strides, b, dst, h) + c * kVec);
        dv = *reinterpret_cast<const uint4*>(d_o + offset(p.d_o_strides, b, dst, h) + c * kVec);
      }
      *reinterpret_cast<uint4*>(sm.q + j * Sh::kLdT + c * kVec) = qv;
      *reinterpret_cast<uint4*>(sm.d_o + j * Sh::kLdT + c * kVec) = dv;
    }
    if (tid < kChunk) {
      const bool in = c0 + tid < n_union;
      const int64_t stat = in ? (b * p.N + tiles.union_col[u0 + c0 + tid]) * p.H + h : 0;
      sm.lse[tid] = in ? lse[stat] : 0.0f;
      sm.delta[tid] = in ? delta[stat] : 0.0f;
    }
    __syncthreads();
    {
      const int half = warp % 2;
      const T* a = warp < 2 ? sm.k : sm.v;     // S^T = K Q^T or dP^T = V dO^T
      const T* bt = warp < 2 ? sm.q : sm.d_o;
      float* out = warp < 2 ? sm.st : sm.dpt;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, a + kk * 16, Sh::kLdT);
        wmma::load_matrix_sync(fb, bt + half * 16 * Sh::kLdT + kk * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(out + half * 16, acc, Sh::kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    {
      const uint32_t bits = mask[row * words + c0 / kChunk];
#pragma unroll
      for (int t = 0; t < kChunk / kThreadsPerRow; ++t) {
        const int j = sub + kThreadsPerRow * t;
        float pr = 0.0f, ds = 0.0f;
        if ((bits >> j) & 1u) {
          pr = gsa_prob(sm.st[row * Sh::kLdS + j] * scale, sm.lse[j]);
          ds = gsa_dscore(pr, sm.dpt[row * Sh::kLdS + j], sm.delta[j]);
        }
        sm.pt[row * Sh::kLdP + j] = to_elem<T>(pr);
        sm.dst[row * Sh::kLdP + j] = to_elem<T>(ds);
      }
    }
    __syncthreads();
    for (int t = warp; t < 2 * (D / 16); t += kTcThreads / 32) {
      const bool is_dv = t < D / 16;
      const int n = is_dv ? t : t - D / 16;
      float* acc_mem = is_dv ? sm.dv : sm.dk;
      const T* a = is_dv ? sm.pt : sm.dst;      // dv += P^T dO, dk += dS^T Q
      const T* bm = is_dv ? sm.d_o : sm.q;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, acc_mem + n * 16, Sh::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, a + kk * 16, Sh::kLdP);
        wmma::load_matrix_sync(fb, bm + kk * 16 * Sh::kLdT + n * 16, Sh::kLdT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(acc_mem + n * 16, acc, Sh::kLdO, wmma::mem_row_major);
    }
    __syncthreads();
  }
  if (row < rows) {
    T* dk_out = static_cast<T*>(p.dk) + offset(p.dk_strides, b, r0 + row, h);
    T* dv_out = static_cast<T*>(p.dv) + offset(p.dv_strides, b, r0 + row, h);
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

template <typename T>
void launch_tiles(const GsaParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.graph.tiles.n_dense), static_cast<unsigned>(p.B * p.H));
  switch (p.D) {
    case 16: tc_forward_kernel<T, 16><<<grid, kTcThreads, 0, stream>>>(p); break;
    case 32: tc_forward_kernel<T, 32><<<grid, kTcThreads, 0, stream>>>(p); break;
    case 64: tc_forward_kernel<T, 64><<<grid, kTcThreads, 0, stream>>>(p); break;
    default: tc_forward_kernel<T, 128><<<grid, kTcThreads, 0, stream>>>(p); break;
  }
  cuda_check(cudaGetLastError(), "launch");
}

template <typename T>
void launch_dq_tiles(const GsaParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.graph.tiles.n_dense), static_cast<unsigned>(p.B * p.H));
  switch (p.D) {
    case 16: tc_dq_kernel<T, 16><<<grid, kTcThreads, 0, stream>>>(p); break;
    case 32: tc_dq_kernel<T, 32><<<grid, kTcThreads, 0, stream>>>(p); break;
    case 64: tc_dq_kernel<T, 64><<<grid, kTcThreads, 0, stream>>>(p); break;
    default: tc_dq_kernel<T, 128><<<grid, kTcThreads, 0, stream>>>(p); break;
  }
  cuda_check(cudaGetLastError(), "launch (dq)");
}

template <typename T, int D>
void launch_dkv(const GsaParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.graph.src_tiles.n_dense), static_cast<unsigned>(p.B * p.H));
  constexpr size_t bytes = sizeof(TcDkvShared<T, D>);
  cuda_check(cudaFuncSetAttribute(tc_dkv_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)),
             "shared memory of the dk/dv kernel");
  tc_dkv_kernel<T, D><<<grid, kTcThreads, bytes, stream>>>(p);
  cuda_check(cudaGetLastError(), "launch (dk, dv)");
}

template <typename T>
void launch_dkv_tiles(const GsaParams& p, cudaStream_t stream) {
  switch (p.D) {
    case 16: launch_dkv<T, 16>(p, stream); break;
    case 32: launch_dkv<T, 32>(p, stream); break;
    case 64: launch_dkv<T, 64>(p, stream); break;
    default: launch_dkv<T, 128>(p, stream); break;
  }
}

// Backward: the lane groups' delta and the dq, dk, dv of rows and sources outside dense tiles (their schedules
// restricted to them), then the dense tiles' dq and dk, dv on tensor cores (after delta, on the same stream).
void run_backward_tiles(const GsaParams& p, cudaStream_t stream) {
  GsaParams rest = p;
  rest.graph.rows = p.graph.tiles.rest;
  rest.graph.srcs = p.graph.src_tiles.rest;
  gsa_backward_cuda(rest, stream, GsaCudaKernels::lane_groups);
  const bool bf16 = p.dtype == GsaDtype::bf16;
  if (p.graph.tiles.n_dense > 0) {
    if (bf16) {
      launch_dq_tiles<__nv_bfloat16>(p, stream);
    } else {
      launch_dq_tiles<__half>(p, stream);
    }
  }
  if (p.graph.src_tiles.n_dense > 0) {
    if (bf16) {
      launch_dkv_tiles<__nv_bfloat16>(p, stream);
    } else {
      launch_dkv_tiles<__half>(p, stream);
    }
  }
}

// Dense tiles on tensor cores, the other rows on the lane groups; p.graph.tiles on the device.
void run_tiles(const GsaParams& p, cudaStream_t stream) {
  const GsaTileView& tiles = p.graph.tiles;
  if (tiles.n_dense > 0) {
    if (p.dtype == GsaDtype::bf16) {
      launch_tiles<__nv_bfloat16>(p, stream);
    } else {
      launch_tiles<__half>(p, stream);
    }
  }
  if (tiles.n_rest_rows > 0) {
    GsaParams rest = p;
    rest.graph.rows = tiles.rest;
    gsa_forward_cuda(rest, stream, GsaCudaKernels::lane_groups);
  }
}

// The tiles of a graph that carries none: its CSR (by_source: the transpose) and schedule to the host, planned and
// packed for this call.
GsaPackedTiles plan_per_call(const GsaParams& p, cudaStream_t stream, bool by_source) {
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
  return gsa_pack_tiles(gsa_tile_plan(row_ptr.data(), col.data(), n), full, rows.n_pieces, rows.n_split);
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

std::string gsa_cuda_tc_unsupported(const GsaParams& p) {
  if (p.dtype != GsaDtype::f16 && p.dtype != GsaDtype::bf16) {
    // gsa_dtype_name's words (sb_kernels links this library, not the other way round)
    const char* name = p.dtype == GsaDtype::f64 ? "float64" : "float32";
    return std::string("dtype ") + name + " (the tensor-core forward takes float16 and bfloat16)";
  }
  if (p.rel_emb != nullptr || p.R > 0) return "relation embeddings (the tensor-core forward takes none)";
  if (p.D != 16 && p.D != 32 && p.D != 64 && p.D != 128) {
    return "head dimension D = " + std::to_string(p.D) + " (the tensor-core forward takes 16, 32, 64 and 128)";
  }
  if (p.B * p.H > 65535) return "B * H = " + std::to_string(p.B * p.H) + " (the tensor-core forward takes <= 65535)";
  return "";
}

GsaTcStats gsa_forward_cuda_tc(const GsaParams& p, void* stream_ptr) {
  GsaTcStats stats;
  stats.edges = p.graph.n_edges;
  const bool aligned = aligned_rows(p.q, p.q_strides) && aligned_rows(p.k, p.k_strides) &&
                       aligned_rows(p.v, p.v_strides);
  if (!gsa_cuda_tc_unsupported(p).empty() || !aligned || p.B * p.N * p.H == 0) {
    gsa_forward_cuda(p, stream_ptr, GsaCudaKernels::lane_groups);
    return stats;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  stats.tensor_cores = true;
  if (p.graph.tiles.n_dense >= 0) {  // planned with the prepared graph
    stats.dense_tiles = p.graph.tiles.n_dense;
    stats.dense_edges = p.graph.tiles.dense_edges;
    run_tiles(p, stream);
    return stats;
  }
  const GsaPackedTiles packed = plan_per_call(p, stream, false);
  stats.dense_tiles = packed.n_dense;
  stats.dense_edges = packed.dense_edges;
  const CallTiles tiles(packed, stream);
  GsaParams q = p;
  q.graph.tiles = tiles.view();
  run_tiles(q, stream);
  return stats;
}

GsaTcStats gsa_backward_cuda_tc(const GsaParams& p, void* stream_ptr) {
  GsaTcStats stats;
  stats.edges = p.graph.n_edges;
  const bool aligned = aligned_rows(p.q, p.q_strides) && aligned_rows(p.k, p.k_strides) &&
                       aligned_rows(p.v, p.v_strides) && aligned_rows(p.d_o, p.d_o_strides);
  if (!gsa_cuda_tc_unsupported(p).empty() || !aligned || p.B * p.N * p.H == 0) {
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
