// libsparsebench_ops.so: torch.ops.load_library(path) registers torch.ops.sparsebench.* for Python.
// The op is declared and registered in graph_attention_op.cpp (CPU, Autograd) and graph_attention_cuda.cpp
// (CUDA); sb_torch_ops' link options pull both into this library, which adds no code of its own.
