// Internal interface between the CPU kernels' driver (gsa_cpu.cpp: threads, heavy-row pieces, merges, target
// choice) and the per-SIMD-target cores (gsa_cpu_simd.cpp, compiled once per Highway target). Not a public API.
#pragma once

#include <cstdint>

#include "kernels/gsa_params.h"

namespace sb {

// One SIMD target's cores for one element type T (float or double; the accumulation type is T too). void*
// arguments point to T. `skip` (nullable, [N]) marks rows or sources handled as pieces instead. Scratch: at least
// gsa_cpu_scratch_elems(p) elements of T per calling thread. `pds` (nullable) is the backward's edge cache
// [B, E, H, 2]: P and dS of every (edge, head), written by the destination pass and read by the source pass instead
// of recomputing both there.
struct GsaCpuCores {
  // Forward over destination rows [u0, u1) of batch b: o, lse.
  void (*forward_rows)(const GsaParams& p, int64_t b, int64_t u0, int64_t u1, const uint8_t* skip, void* scratch);
  // Forward partial state of edges [e0, e1) of row u, batch b: m [H], l [H] and unnormalised acc [H, D].
  void (*forward_piece)(const GsaParams& p, int64_t b, int64_t u, int64_t e0, int64_t e1, void* m, void* l, void* acc,
                        void* scratch);
  // delta [B, N, H] = sum_d dO * O for rows [u0, u1) of every batch.
  void (*delta_rows)(const GsaParams& p, int64_t u0, int64_t u1);
  // Backward by destination rows [u0, u1) (every batch): dq, and d_rel_emb contributions added into
  // rel_part [R, D] (nullptr without rel_emb); fills pds for these rows' edges when given.
  void (*dq_rows)(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, void* rel_part, void* pds,
                  void* scratch);
  // Partial dq of edges [e0, e1) of row u, batch b: dq_acc [H, D] (unscaled), rel_part and pds as dq_rows.
  void (*dq_piece)(const GsaParams& p, int64_t b, int64_t u, int64_t e0, int64_t e1, void* dq_acc, void* rel_part,
                   void* pds, void* scratch);
  // Backward by sources [v0, v1) of batch b through the transposed graph: dk, dv (P and dS from pds when given).
  void (*dkv_rows)(const GsaParams& p, int64_t b, int64_t v0, int64_t v1, const uint8_t* skip, const void* pds,
                   void* scratch);
  // Partial dk (unscaled), dv of transposed edges [t0, t1) of source v, batch b: dk_acc, dv_acc [H, D].
  void (*dkv_piece)(const GsaParams& p, int64_t b, int64_t v, int64_t t0, int64_t t1, void* dk_acc, void* dv_acc,
                    const void* pds, void* scratch);
  // x[i] = exp(x[i]) with the kernels' vector exp, for i < n.
  void (*exp_inplace)(void* x, int64_t n);
  // Adds the row groups forward_rows would run over [u0, u1) to counts [6]: tiles with one relation table (or without
  // relations), tiles by column relations, per row, wide tiles, their rows, packed short rows.
  void (*forward_groups)(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, int64_t* counts);
  // Forward partial states of n (up to kGsaCpuRowGroup) pieces of different rows over the same columns, a column tile
  // of gsa_column_split_plan: rows u[i], edges [e0[i], e1[i]), batch b, as one register tile where it applies, else
  // per piece. st[i] receives piece i's state as forward_piece lays it out: acc [H, D], then m [H], then l [H].
  void (*forward_tile_pieces)(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0,
                              const int64_t* e1, void* const* st, void* scratch);
  // Which count of forward_groups such a group of pieces adds to: 0, 1 or 2.
  int (*group_kind)(const GsaParams& p, int n, const int64_t* u, const int64_t* e0, const int64_t* e1);
  // Partial dq of such a column tile's pieces, as dq_piece gives them (dq_acc[i]: [H, D], unscaled), relation
  // gradients added into rel_part, pds filled for the pieces' edges when given.
  void (*dq_tile_pieces)(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0, const int64_t* e1,
                         void* const* dq_acc, void* rel_part, void* pds, void* scratch);
  // Partial dk, dv of n pieces of different sources over the same destinations (a column tile of the sources'
  // plan), as dkv_piece gives them (dk_acc[i], dv_acc[i]: [H, D], dk unscaled).
  void (*dkv_tile_pieces)(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0, const int64_t* e1,
                          void* const* dk_acc, void* const* dv_acc, const void* pds, void* scratch);
};

struct GsaCpuTargetCores {
  const char* name;  // Highway's target name, e.g. "AVX2"
  GsaCpuCores f32;
  GsaCpuCores f64;
};

// Destination rows (or sources) the cores process together.
constexpr int kGsaCpuRowGroup = 4;

// Rows of the forward's wide tiles at most (a row per lane: 16 fp32 lanes of AVX-512) and their columns per segment.
constexpr int kGsaCpuWideRows = 16;
constexpr int kGsaCpuWideSeg = 48;

// Per-thread scratch size in elements, for any target (covers the widest vectors Highway has).
inline int64_t gsa_cpu_scratch_elems(const GsaParams& p) {
  const int64_t groups = kGsaCpuRowGroup * (2 * p.H * p.D + 256 * p.H + 3 * p.H * p.R) + 8 * 256;
  // A wide tile's transposed queries and output (and dO in the backward), two [H] vectors, two relation tables
  // (one in the forward), key-plus-relation rows, a segment's P and dS (backward), 64-byte alignment.
  const int64_t wide = kGsaCpuWideRows * (3 * p.H * p.D + 2 * p.H + 2 * p.H * p.R + 2 * p.H * kGsaCpuWideSeg) +
                       kGsaCpuWideSeg * p.D + 16;
  return groups > wide ? groups : wide;
}

// Every target compiled into this binary that this CPU can run, best first; and one target's cores by name
// (nullptr when unknown or not runnable here). Defined in gsa_cpu_simd.cpp.
struct GsaCpuTargetList {
  int count = 0;
  const GsaCpuTargetCores* cores[32] = {};
};
GsaCpuTargetList gsa_cpu_runnable_targets();

}  // namespace sb
