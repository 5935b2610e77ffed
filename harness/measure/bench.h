// Google Benchmark suites run by `sparsebench bench SUITE`; each registers its benchmarks at run time.
#pragma once

namespace sb {

void register_graph_benchmarks();     // harness/measure/bench_graphs.cpp
void register_kernel_benchmarks();    // harness/measure/bench_kernels.cpp
void register_op_call_benchmarks();  // harness/measure/bench_op_calls.cpp (part of the kernels suite)

}  // namespace sb
