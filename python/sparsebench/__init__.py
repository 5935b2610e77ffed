"""sparsebench from Python: sparse attention patterns as graphs (the C++ builders) and the graph-attention op.

    import sparsebench
    g = sparsebench.pattern("bpt", n=4096, k=4, causal=True)      # a Graph: CSR tensors, relations, statistics
    o = sparsebench.graph_attention(q, k, v, g.to(q.device))       # q, k, v: (B, g.n_nodes, H, D)
    mask = sparsebench.block_mask(g)                               # the same graph for FlexAttention
"""
try:
    import torch  # noqa: F401  (the ops library links LibTorch: torch first)
except ImportError as exc:
    raise ImportError("sparsebench needs PyTorch: pip install torch") from exc

from ._library import library_path, ops
from .flex import block_mask
from .graph import Graph, load_graph, pattern, patterns
from .attention import graph_attention
from .reference import reference_attention

ops()  # load the library now, so a missing or mismatched build fails at import with its reason

__version__ = "0.1.0"
__all__ = ["Graph", "block_mask", "graph_attention", "library_path", "load_graph", "pattern", "patterns",
           "reference_attention"]
