// Google Benchmark suites run by `sparsebench bench SUITE`; each registers its benchmarks at run time.
#pragma once

#include <string>

namespace sb {

void register_graph_benchmarks();  // harness/bench/bench_graphs.cpp
// One benchmark per point of an attention scenario file (harness/bench/bench_kernels.cpp), then the op-call
// benchmarks.
void register_kernel_benchmarks(const std::string& scenario_file);
void register_op_call_benchmarks();  // harness/bench/bench_op_calls.cpp (part of the kernels suite)

}  // namespace sb
