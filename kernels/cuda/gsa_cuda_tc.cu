// Tensor-core forward of graph self-attention over dense 16-row tiles: per (tile, batch, head) one block of 4 warps
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

// The dense tiles on the device (gsa_tile_plan's arrays).
struct TcTiles {
  const int64_t* dense_tile;
  const int64_t* union_ptr;
  const int32_t* union_col;
  const int64_t* mask_ptr;
  const uint32_t* mask;
};

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

// grid (dense tiles, B * H); q, k, v, o: [B, N, H, D] with 16-byte aligned rows; lse: [B, N, H] fp32.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads) tc_forward_kernel(GsaParams p, TcTiles tiles) {
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
    const uint4 val = r < rows ? *reinterpret_cast<const uint4*>(q + offset(p.q_strides, b, r0 + r, h) + c * kVec) : zero;
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

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string("graph_attention forward (tensor cores): ") + what + ": " +
                                      cudaGetErrorString(err));
}

bool aligned_rows(const void* ptr, const GsaStrides& s) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % kVec == 0 && s.node % kVec == 0 &&
         s.head % kVec == 0;
}

template <typename T>
void launch_tiles(const GsaParams& p, const TcTiles& tiles, int64_t n_dense, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_dense), static_cast<unsigned>(p.B * p.H));
  switch (p.D) {
    case 16: tc_forward_kernel<T, 16><<<grid, kTcThreads, 0, stream>>>(p, tiles); break;
    case 32: tc_forward_kernel<T, 32><<<grid, kTcThreads, 0, stream>>>(p, tiles); break;
    case 64: tc_forward_kernel<T, 64><<<grid, kTcThreads, 0, stream>>>(p, tiles); break;
    default: tc_forward_kernel<T, 128><<<grid, kTcThreads, 0, stream>>>(p, tiles); break;
  }
  cuda_check(cudaGetLastError(), "launch");
}

template <typename X>
size_t append(std::vector<char>& buf, const std::vector<X>& x) {
  const size_t at = (buf.size() + 15) / 16 * 16;
  buf.resize(at + x.size() * sizeof(X));
  if (!x.empty()) std::memcpy(buf.data() + at, x.data(), x.size() * sizeof(X));
  return at;
}

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
  const int64_t n = p.graph.n_nodes, ne = p.graph.n_edges;
  std::vector<int64_t> row_ptr(static_cast<size_t>(n + 1));
  std::vector<int32_t> col(static_cast<size_t>(ne));
  cuda_check(cudaMemcpyAsync(row_ptr.data(), p.graph.row_ptr, row_ptr.size() * 8, cudaMemcpyDeviceToHost, stream),
             "row_ptr to host");
  if (ne > 0) {
    cuda_check(cudaMemcpyAsync(col.data(), p.graph.col, col.size() * 4, cudaMemcpyDeviceToHost, stream),
               "col to host");
  }
  const GsaScheduleView& rows = p.graph.rows;
  std::vector<int64_t> full;
  if (rows.order != nullptr) {
    full.resize(static_cast<size_t>(3 * rows.n_pieces + 2 * rows.n_split + 1 + rows.n_order));
    cuda_check(cudaMemcpyAsync(full.data(), rows.piece_begin, full.size() * 8, cudaMemcpyDeviceToHost, stream),
               "schedule to host");
  }
  cuda_check(cudaStreamSynchronize(stream), "graph to host");
  const GsaTilePlan plan = gsa_tile_plan(row_ptr.data(), col.data(), n);
  GsaScheduleSizes sizes;
  const std::vector<int64_t> fallback =
      gsa_fallback_schedule(full, n, rows.n_pieces, rows.n_split, plan, &sizes);
  stats.tiles = plan.n_tiles;
  stats.dense_tiles = plan.n_dense();
  stats.dense_edges = plan.dense_edges;
  stats.tensor_cores = true;

  std::vector<char> host;
  const size_t at_tile = append(host, plan.dense_tile), at_uptr = append(host, plan.union_ptr),
               at_mptr = append(host, plan.mask_ptr), at_fb = append(host, fallback),
               at_ucol = append(host, plan.union_col), at_mask = append(host, plan.mask);
  char* dev = nullptr;
  cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&dev), std::max<size_t>(host.size(), 16), stream), "plan buffer");
  // Pageable source: the call returns once the bytes are staged, so `host` may go at the end of this function.
  cuda_check(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream), "plan to device");
  if (plan.n_dense() > 0) {
    const TcTiles tiles{reinterpret_cast<const int64_t*>(dev + at_tile), reinterpret_cast<const int64_t*>(dev + at_uptr),
                        reinterpret_cast<const int32_t*>(dev + at_ucol), reinterpret_cast<const int64_t*>(dev + at_mptr),
                        reinterpret_cast<const uint32_t*>(dev + at_mask)};
    if (p.dtype == GsaDtype::bf16) {
      launch_tiles<__nv_bfloat16>(p, tiles, plan.n_dense(), stream);
    } else {
      launch_tiles<__half>(p, tiles, plan.n_dense(), stream);
    }
  }
  if (!plan.fallback_rows.empty()) {
    GsaParams rest = p;
    rest.graph.rows = gsa_schedule_view_sized(reinterpret_cast<const int64_t*>(dev + at_fb), sizes);
    gsa_forward_cuda(rest, stream_ptr, GsaCudaKernels::lane_groups);
  }
  cuda_check(cudaFreeAsync(dev, stream), "plan buffer");
  return stats;
}

}  // namespace sb
