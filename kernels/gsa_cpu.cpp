// CPU graph self-attention driver: picks the SIMD target (best this CPU runs, or the one pinned by SB_CPU_TARGET or
// gsa_cpu_pin_target), spreads blocks of rows over OpenMP threads in the graph's block order (gsa_block_order:
// rows reading nearby sources run close in time), and runs heavy rows, and rows whose neighbours share none of
// their sources (gsa_column_split_plan: span nodes, as column tiles of pieces), as pieces whose partial results are
// merged in a fixed order (gsa_split_plan.h). The per-target cores are in gsa_cpu_simd.cpp.
// One parallel region per call (forward: one barrier inside; backward: three), every loop in dynamic chunks of one
// item: a thread the operating system deschedules (another process on its core) holds the others back by at most
// the item it is running, not by a static share of the work.
// Every output element is produced by one fixed sequence of operations, so results are bitwise identical across
// runs and thread counts (scheduling only decides which thread runs a work item).
// Measured with `sparsebench bench kernels` (B=1, H=8, D=64, n=8192, 2 threads) on a 2-core AMD EPYC (AVX2+FMA):
// see kernels/README.md, "CPU kernels and SIMD targets".
#include "kernels/gsa_cpu.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/gsa_cpu_kernels.h"
#include "kernels/gsa_math.h"
#include "kernels/gsa_split_plan.h"
#include "common/error.h"

namespace sb {

namespace {

constexpr int64_t kRowBlock = kGsaCpuRowBlock;  // destination rows (or sources) per scheduling unit

// The i-th block to run of a block order (nullptr: block i).
inline int64_t block_at(const int32_t* order, int64_t i) { return order != nullptr ? order[i] : i; }

const GsaCpuTargetList& runnable() {
  static const GsaCpuTargetList list = gsa_cpu_runnable_targets();
  return list;
}

std::string supported_list() {
  std::string s;
  for (int i = 0; i < runnable().count; ++i) s += (i ? ", " : "") + std::string(runnable().cores[i]->name);
  return s;
}

bool same_name(const std::string& a, const char* b) {
  const std::string bs(b);
  return a.size() == bs.size() && std::equal(a.begin(), a.end(), bs.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

const GsaCpuTargetCores* find_target(const std::string& name) {
  for (int i = 0; i < runnable().count; ++i) {
    if (same_name(name, runnable().cores[i]->name)) return runnable().cores[i];
  }
  return nullptr;
}

std::atomic<const GsaCpuTargetCores*> g_active{nullptr};
std::mutex g_active_mutex;

// The active target: pinned, else SB_CPU_TARGET (read on first use), else the best this CPU runs.
const GsaCpuTargetCores& active() {
  const GsaCpuTargetCores* c = g_active.load(std::memory_order_acquire);
  if (c != nullptr) return *c;
  const std::lock_guard<std::mutex> lock(g_active_mutex);
  c = g_active.load(std::memory_order_acquire);
  if (c == nullptr) {
    const char* env = std::getenv("SB_CPU_TARGET");
    if (env != nullptr && *env != '\0') {
      c = find_target(env);
      if (c == nullptr) {
        throw Error("SB_CPU_TARGET=" + std::string(env) + ": not a SIMD target this CPU and build can run (" +
                    supported_list() + ")");
      }
    } else {
      c = runnable().cores[0];
    }
    g_active.store(c, std::memory_order_release);
  }
  return *c;
}

template <typename T>
const GsaCpuCores& cores() {
  return sizeof(T) == 8 ? active().f64 : active().f32;
}

// Destination rows' plan: heavy rows, and rows that share no sources with their neighbours, cut into pieces, with
// column tiles (see gsa_column_split_plan); with rel, only rows of one relation are cut at blocks.
GsaSplitPlan rows_plan(const GsaGraphView& g, const int32_t* rel) {
  return gsa_column_split_plan(g.row_ptr, g.col, g.n_nodes, gsa_split_threshold(g.n_nodes, g.n_edges),
                               kGsaCpuColumnBlock, kGsaCpuRowGroup, rel);
}

// Sources' plan: heavy sources cut into pieces, at full blocks of destinations where they hold them (bpt's and
// segtree's span nodes, attended by runs of tokens), so that pieces of different sources over one block run as a
// tile (dkv_tile_pieces): each destination's q and dO rows, loaded once, serve up to 4 span sources.
GsaSplitPlan sources_plan(const GsaGraphView& g) {
  return gsa_column_split_plan(g.t_row_ptr, g.t_col, g.n_nodes, gsa_split_threshold(g.n_nodes, g.n_edges),
                               kGsaCpuSourceBlock, kGsaCpuRowGroup);
}

// One of a call's plans (which: a member of GsaCpuPlans): the prepared graph's, else only that one made here (kept
// in `made`).
const GsaSplitPlan& plan_of(const GsaParams& p, GsaSplitPlan GsaCpuPlans::*which, GsaSplitPlan& made) {
  if (p.graph.cpu_plans != nullptr) return p.graph.cpu_plans->*which;
  GsaGraphView g = p.graph;
  g.n_nodes = p.N;
  if (which == &GsaCpuPlans::sources) made = sources_plan(g);
  else made = rows_plan(g, which == &GsaCpuPlans::rows_rel ? g.rel : nullptr);
  return made;
}

// Rows, first and end edges of column tile t's pieces; returns how many.
int tile_members(const GsaSplitPlan& plan, int64_t t, int64_t* u, int64_t* e0, int64_t* e1, int64_t* pieces) {
  int n = 0;
  for (int64_t j = plan.tile_ptr[t]; j < plan.tile_ptr[t + 1] && n < kGsaCpuRowGroup; ++j, ++n) {
    const int64_t c = plan.tile_pieces[j];
    u[n] = plan.piece_row[c], e0[n] = plan.piece_begin[c], e1[n] = plan.piece_end[c], pieces[n] = c;
  }
  return n;
}

// Forward: column tiles of pieces, the other pieces one by one, unsplit rows in blocks (partial m, l, acc for
// pieces), then each split row merged from its pieces in piece order.
template <typename T>
void forward_impl(const GsaParams& p) {
  const GsaCpuCores& k = cores<T>();
  const GsaGraphView& g = p.graph;
  GsaSplitPlan made;
  const GsaSplitPlan& plan = plan_of(p, &GsaCpuPlans::rows, made);
  const uint8_t* skip = plan.empty() ? nullptr : plan.row_split.data();
  const int64_t H = p.H, D = p.D, HD = H * D;
  const int64_t n_pieces = plan.n_pieces(), n_tiles = plan.n_tiles();
  const int64_t state = HD + 2 * H;  // one piece's acc [H, D], m [H], l [H]
  std::vector<T> pieces(static_cast<size_t>(n_pieces * p.B * state));
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  const int64_t work = p.B * (n_tiles + n_pieces + n_blocks);
  const int64_t n_split = static_cast<int64_t>(plan.split_rows.size());
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(gsa_cpu_scratch_elems(p)));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w % p.B, i = w / p.B;  // tiles and pieces first: they include the longest items
      if (i < n_tiles) {
        int64_t u[kGsaCpuRowGroup], e0[kGsaCpuRowGroup], e1[kGsaCpuRowGroup], c[kGsaCpuRowGroup];
        void* st[kGsaCpuRowGroup];
        const int n = tile_members(plan, i, u, e0, e1, c);
        for (int j = 0; j < n; ++j) st[j] = pieces.data() + (c[j] * p.B + b) * state;
        k.forward_tile_pieces(p, b, n, u, e0, e1, st, scratch.data());
      } else if (i < n_tiles + n_pieces) {
        const int64_t c = i - n_tiles;
        if (plan.piece_tiled[static_cast<size_t>(c)]) continue;
        T* st = pieces.data() + (c * p.B + b) * state;
        k.forward_piece(p, b, plan.piece_row[c], plan.piece_begin[c], plan.piece_end[c], st + HD, st + HD + H, st,
                        scratch.data());
      } else {
        const int64_t u0 = block_at(g.row_blocks, i - n_tiles - n_pieces) * kRowBlock;
        k.forward_rows(p, b, u0, std::min(p.N, u0 + kRowBlock), skip, scratch.data());
      }
    }
    // The region's end joins the threads: no barrier after the merges.
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t w = 0; w < n_split * p.B; ++w) {
      const int64_t b = w % p.B, i = w / p.B;
      const int64_t u = plan.split_rows[i];
      T* o_u = static_cast<T*>(p.o) + b * p.o_strides.batch + u * p.o_strides.node;
      T* lse_u = static_cast<T*>(p.lse) + (b * p.N + u) * H;
      for (int64_t h = 0; h < H; ++h) {
        GsaSoftmaxState<T> st = gsa_softmax_init<T>();
        for (int64_t c = plan.piece_ptr[i]; c < plan.piece_ptr[i + 1]; ++c) {
          st.m = std::max(st.m, pieces[(c * p.B + b) * state + HD + h]);
        }
        T* out = o_u + h * p.o_strides.head;
        std::fill(out, out + D, T(0));
        for (int64_t c = plan.piece_ptr[i]; c < plan.piece_ptr[i + 1]; ++c) {
          const T* pc = pieces.data() + (c * p.B + b) * state;
          const T alpha = gsa_rescale(pc[HD + h], st.m);
          st.l += alpha * pc[HD + H + h];
          for (int64_t d = 0; d < D; ++d) out[d] += alpha * pc[h * D + d];
        }
        const T inv = gsa_inv_norm(st);
        for (int64_t d = 0; d < D; ++d) out[d] *= inv;
        lse_u[h] = gsa_lse(st);
      }
    }
  }
}

int64_t rel_chunks(const GsaParams& p) { return std::min<int64_t>(kGsaRelChunks, p.N); }

std::atomic<int64_t> g_edge_cache_limit{int64_t{1} << 30};

int64_t acc_bytes(const GsaParams& p) { return p.dtype == GsaDtype::f64 ? 8 : 4; }

int64_t rel_partial_elems(const GsaParams& p) { return p.rel_emb ? rel_chunks(p) * p.R * p.D : 0; }

// [B, E, H, 2] when that fits in the limit, else 0 (no cache).
int64_t edge_cache_elems(const GsaParams& p) {
  const int64_t elems = p.B * p.graph.n_edges * p.H * 2;
  return elems * acc_bytes(p) <= g_edge_cache_limit.load(std::memory_order_relaxed) ? elems : 0;
}

// out = scale * sum of the parts in order (each [len], part stride `stride`).
template <typename T>
void sum_parts(T* out, const T* parts, int64_t n_parts, int64_t stride, int64_t len, T scale) {
  std::fill(out, out + len, T(0));
  for (int64_t c = 0; c < n_parts; ++c) {
    const T* part = parts + c * stride;
    for (int64_t d = 0; d < len; ++d) out[d] += part[d];
  }
  if (scale != T(1)) {
    for (int64_t d = 0; d < len; ++d) out[d] *= scale;
  }
}

template <typename T>
void backward_impl(const GsaParams& p) {
  const GsaCpuCores& k = cores<T>();
  const GsaGraphView& g = p.graph;
  const bool has_rel = p.rel_emb != nullptr;
  const int64_t H = p.H, D = p.D, HD = H * D, R = has_rel ? p.R : 0;
  const T scale = static_cast<T>(p.scale);
  // Rows by destination: as the forward's plan, but with relations only rows of one relation are cut at blocks
  // (see below).
  GsaSplitPlan made_rows, made_srcs;
  const GsaSplitPlan& rows = plan_of(p, has_rel ? &GsaCpuPlans::rows_rel : &GsaCpuPlans::rows, made_rows);
  const GsaSplitPlan& srcs = plan_of(p, &GsaCpuPlans::sources, made_srcs);
  const uint8_t* skip_rows = rows.empty() ? nullptr : rows.row_split.data();
  const uint8_t* skip_srcs = srcs.empty() ? nullptr : srcs.row_split.data();
  const int64_t n_row_pieces = rows.n_pieces(), n_src_pieces = srcs.n_pieces();
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  // Pass 1 units: with rel_emb, row blocks (in their order) go in kGsaRelChunks fixed chunks (one d_rel partial
  // each); else row blocks.
  const int64_t n_chunks = has_rel ? rel_chunks(p) : n_blocks;
  T* rel_partial = static_cast<T*>(p.workspace);
  // The edge cache follows the partials when the caller's workspace holds it (gsa_cpu_workspace_elems).
  const int64_t rel_elems = rel_partial_elems(p), cache_elems = edge_cache_elems(p);
  const bool cached = cache_elems > 0 && p.workspace != nullptr &&
                      p.workspace_bytes >= (rel_elems + cache_elems) * acc_bytes(p);
  T* pds = cached ? rel_partial + rel_elems : nullptr;
  // Pieces' partial sums: dq [H, D] per (row piece, batch), d_rel [R, D] per (piece of a row of several relations,
  // batch); dk, dv [H, D] per (source piece, batch). A row whose edges share one relation r adds
  // scale * sum_h (sum_e dS_e,h) q_h to d_rel[r], and sum_e dS_e,h = sum_e P_e (dP_e - delta) = delta - delta = 0:
  // its pieces' relation partials (non-zero alone) are dropped, so column tiles need none.
  const int64_t dq_state = HD;
  std::vector<T> dq_pieces(static_cast<size_t>(n_row_pieces * p.B * dq_state));
  std::vector<int64_t> rel_slot(static_cast<size_t>(n_row_pieces), -1);  // the piece's d_rel partial, -1: none
  int64_t n_rel_pieces = 0;
  for (size_t i = 0; has_rel && i < rows.split_rows.size(); ++i) {
    const int64_t u = rows.split_rows[i];
    if (gsa_one_relation(g.rel, g.row_ptr[u], g.row_ptr[u + 1])) continue;
    for (int64_t c = rows.piece_ptr[i]; c < rows.piece_ptr[i + 1]; ++c) rel_slot[c] = n_rel_pieces++;
  }
  std::vector<T> rel_pieces(static_cast<size_t>(n_rel_pieces * p.B * R * D));
  const int64_t n_row_tiles = rows.n_tiles(), n_src_tiles = srcs.n_tiles();
  // Written whole by every piece before the merges read it, so not zeroed here (bpt k=16 at n=8192: 3,472 pieces,
  // 14 MB).
  const std::unique_ptr<T[]> dkv_pieces(new T[static_cast<size_t>(n_src_pieces * p.B * 2 * HD)]);
  const int64_t n_split_rows = static_cast<int64_t>(rows.split_rows.size());
  const int64_t n_split_srcs = static_cast<int64_t>(srcs.split_rows.size());
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(gsa_cpu_scratch_elems(p)));
    std::vector<T> dropped(static_cast<size_t>(R * D));  // relation partials of one-relation rows' pieces
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_blocks; ++c) k.delta_rows(p, c * kRowBlock, std::min(p.N, (c + 1) * kRowBlock));
    // Pass 1: dq (and d_rel partials) by destination: column tiles, the other pieces, then row chunks.
    const int64_t work1 = (n_row_tiles + n_row_pieces) * p.B + n_chunks;
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work1; ++w) {
      if (w < n_row_tiles * p.B) {
        const int64_t b = w % p.B, t = w / p.B;
        int64_t u[kGsaCpuRowGroup], e0[kGsaCpuRowGroup], e1[kGsaCpuRowGroup], c[kGsaCpuRowGroup];
        void* st[kGsaCpuRowGroup];
        const int n = tile_members(rows, t, u, e0, e1, c);
        for (int j = 0; j < n; ++j) st[j] = dq_pieces.data() + (c[j] * p.B + b) * dq_state;
        k.dq_tile_pieces(p, b, n, u, e0, e1, st, has_rel ? dropped.data() : nullptr, pds, scratch.data());
        continue;
      }
      if (w < (n_row_tiles + n_row_pieces) * p.B) {
        const int64_t b = w % p.B, i = w / p.B - n_row_tiles;
        if (rows.piece_tiled[static_cast<size_t>(i)]) continue;
        T* st = dq_pieces.data() + (i * p.B + b) * dq_state;
        T* part = has_rel ? dropped.data() : nullptr;
        if (rel_slot[i] >= 0) {
          part = rel_pieces.data() + (rel_slot[i] * p.B + b) * R * D;
          std::fill(part, part + R * D, T(0));
        }
        k.dq_piece(p, b, rows.piece_row[i], rows.piece_begin[i], rows.piece_end[i], st, part, pds, scratch.data());
        continue;
      }
      const int64_t c = w - (n_row_tiles + n_row_pieces) * p.B;
      const int64_t i0 = has_rel ? n_blocks * c / n_chunks : c, i1 = has_rel ? n_blocks * (c + 1) / n_chunks : c + 1;
      T* part = nullptr;
      if (has_rel) {
        part = rel_partial + c * R * D;
        std::fill(part, part + R * D, T(0));
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t u0 = block_at(g.row_blocks, i) * kRowBlock;
        k.dq_rows(p, u0, std::min(p.N, u0 + kRowBlock), skip_rows, part, pds, scratch.data());
      }
    }
    // Pass 2 (needs every row's delta, and the edge cache complete): dk, dv by source: column tiles, the other
    // pieces, then source blocks; in the same loop, what needs only pass 1: the split rows' dq merges and d_rel_emb
    // (chunk partials in chunk order, then the row pieces' partials in (piece, batch) order), one relation each.
    const int64_t work2 = p.B * (n_src_tiles + n_src_pieces + n_blocks);
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work2 + n_split_rows * p.B + R; ++w) {
      if (w >= work2 + n_split_rows * p.B) {
        const int64_t r = w - work2 - n_split_rows * p.B;
        T* out = static_cast<T*>(p.d_rel_emb) + r * p.rel_stride;
        sum_parts(out, rel_partial + r * D, n_chunks, R * D, D, T(1));
        for (int64_t x = 0; x < n_rel_pieces * p.B; ++x) {
          const T* part = rel_pieces.data() + x * R * D + r * D;
          for (int64_t d = 0; d < D; ++d) out[d] += part[d];
        }
        continue;
      }
      if (w >= work2) {
        const int64_t b = (w - work2) % p.B, i = (w - work2) / p.B;
        const int64_t u = rows.split_rows[i], c0 = rows.piece_ptr[i], nc = rows.piece_ptr[i + 1] - c0;
        T* dq_u = static_cast<T*>(p.dq) + b * p.dq_strides.batch + u * p.dq_strides.node;
        for (int64_t h = 0; h < H; ++h) {
          sum_parts(dq_u + h * p.dq_strides.head, dq_pieces.data() + (c0 * p.B + b) * dq_state + h * D, nc,
                    p.B * dq_state, D, scale);
        }
        continue;
      }
      const int64_t b = w % p.B;
      if (w < n_src_tiles * p.B) {
        int64_t v[kGsaCpuRowGroup], t0[kGsaCpuRowGroup], t1[kGsaCpuRowGroup], c[kGsaCpuRowGroup];
        void* dk_st[kGsaCpuRowGroup];
        void* dv_st[kGsaCpuRowGroup];
        const int n = tile_members(srcs, w / p.B, v, t0, t1, c);
        for (int j = 0; j < n; ++j) {
          dk_st[j] = dkv_pieces.get() + (c[j] * p.B + b) * 2 * HD;
          dv_st[j] = static_cast<T*>(dk_st[j]) + HD;
        }
        k.dkv_tile_pieces(p, b, n, v, t0, t1, dk_st, dv_st, pds, scratch.data());
        continue;
      }
      const int64_t i = w / p.B - n_src_tiles;
      if (i < n_src_pieces && srcs.piece_tiled[static_cast<size_t>(i)]) continue;
      if (i < n_src_pieces) {
        T* st = dkv_pieces.get() + (i * p.B + b) * 2 * HD;
        k.dkv_piece(p, b, srcs.piece_row[i], srcs.piece_begin[i], srcs.piece_end[i], st, st + HD, pds,
                    scratch.data());
      } else {
        const int64_t v0 = block_at(g.src_blocks, i - n_src_pieces) * kRowBlock;
        k.dkv_rows(p, b, v0, std::min(p.N, v0 + kRowBlock), skip_srcs, pds, scratch.data());
      }
    }
    // Merges of split sources: piece sums in piece order. The region's end joins the threads: no barrier here.
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t w = 0; w < n_split_srcs * p.B; ++w) {
      const int64_t b = w % p.B, j = w / p.B;
      const int64_t v = srcs.split_rows[j], c0 = srcs.piece_ptr[j], nc = srcs.piece_ptr[j + 1] - c0;
      T* dk_v = static_cast<T*>(p.dk) + b * p.dk_strides.batch + v * p.dk_strides.node;
      T* dv_v = static_cast<T*>(p.dv) + b * p.dv_strides.batch + v * p.dv_strides.node;
      const T* first = dkv_pieces.get() + (c0 * p.B + b) * 2 * HD;
      for (int64_t h = 0; h < H; ++h) {
        sum_parts(dk_v + h * p.dk_strides.head, first + h * D, nc, p.B * 2 * HD, D, scale);
        sum_parts(dv_v + h * p.dv_strides.head, first + HD + h * D, nc, p.B * 2 * HD, D, T(1));
      }
    }
  }
}

void check_cpu_dtype(const GsaParams& p, const char* what) {
  if (p.dtype != GsaDtype::f32 && p.dtype != GsaDtype::f64) {
    throw Error(std::string(what) + ": the CPU kernels support float32 and float64 only");
  }
}

}  // namespace

std::vector<std::string> gsa_cpu_targets() {
  std::vector<std::string> names;
  for (int i = 0; i < runnable().count; ++i) names.emplace_back(runnable().cores[i]->name);
  return names;
}

std::string gsa_cpu_target() { return active().name; }

void gsa_cpu_pin_target(const std::string& name) {
  const GsaCpuTargetCores* c = find_target(name);
  if (c == nullptr) {
    throw Error("CPU SIMD target '" + name + "' is not one this CPU and build can run (" + supported_list() + ")");
  }
  const std::lock_guard<std::mutex> lock(g_active_mutex);
  g_active.store(c, std::memory_order_release);
}

void gsa_cpu_exp(float* x, int64_t n) { cores<float>().exp_inplace(x, n); }
void gsa_cpu_exp(double* x, int64_t n) { cores<double>().exp_inplace(x, n); }

GsaCpuForwardGroups gsa_cpu_forward_groups(const GsaParams& p) {
  check_cpu_dtype(p, "gsa_cpu_forward_groups");
  const GsaCpuCores& k = p.dtype == GsaDtype::f32 ? cores<float>() : cores<double>();
  GsaSplitPlan made;
  const GsaSplitPlan& plan = plan_of(p, &GsaCpuPlans::rows, made);
  const uint8_t* skip = plan.empty() ? nullptr : plan.row_split.data();
  int64_t counts[6] = {0, 0, 0, 0, 0, 0};
  for (int64_t u0 = 0; u0 < p.N; u0 += kRowBlock) k.forward_groups(p, u0, std::min(p.N, u0 + kRowBlock), skip, counts);
  GsaCpuForwardGroups out{counts[0], counts[1], counts[2]};
  out.wide_tiles = counts[3];
  out.wide_rows = counts[4];
  out.packed = counts[5];
  for (int64_t t = 0; t < plan.n_tiles(); ++t) {
    int64_t u[kGsaCpuRowGroup], e0[kGsaCpuRowGroup], e1[kGsaCpuRowGroup], c[kGsaCpuRowGroup];
    const int n = tile_members(plan, t, u, e0, e1, c);
    (k.group_kind(p, n, u, e0, e1) < 2 ? out.column_tiles : out.column_tiles_per_row) += 1;
  }
  return out;
}

GsaCpuPlans gsa_cpu_plans(const GsaGraphView& g) {
  GsaCpuPlans plans;
  plans.rows = rows_plan(g, nullptr);
  plans.rows_rel = rows_plan(g, g.rel);
  plans.sources = sources_plan(g);
  return plans;
}

int64_t gsa_cpu_delta_elems(const GsaParams& p) { return p.B * p.N * p.H; }

int64_t gsa_cpu_workspace_elems(const GsaParams& p) { return rel_partial_elems(p) + edge_cache_elems(p); }

void gsa_cpu_set_edge_cache_limit(int64_t bytes) {
  g_edge_cache_limit.store(std::max<int64_t>(0, bytes), std::memory_order_relaxed);
}

int64_t gsa_cpu_edge_cache_limit() { return g_edge_cache_limit.load(std::memory_order_relaxed); }

void gsa_forward_cpu(const GsaParams& p) {
  check_cpu_dtype(p, "graph_attention forward");
  if (p.N == 0 || p.B == 0 || p.H == 0) return;
  if (p.dtype == GsaDtype::f32) {
    forward_impl<float>(p);
  } else {
    forward_impl<double>(p);
  }
}

void gsa_backward_cpu(const GsaParams& p) {
  check_cpu_dtype(p, "graph_attention backward");
  if (p.N == 0 || p.B == 0 || p.H == 0) return;
  if (p.dtype == GsaDtype::f32) {
    backward_impl<float>(p);
  } else {
    backward_impl<double>(p);
  }
}

}  // namespace sb
