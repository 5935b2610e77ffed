"""block_mask: FlexAttention's BlockMask of a graph, for the side-by-side with torch's flex_attention."""
import torch


def block_mask(graph, block_size=128, device=None):
    """The BlockMask of `graph` over its N nodes (query i may attend key j where the graph has the edge j -> i),
    for torch.nn.attention.flex_attention.flex_attention(q, k, v, block_mask=...) with (B, H, N, D) inputs.
    Relation embeddings are not part of a mask: FlexAttention computes the graph's attention without them.
    Built from the dense adjacency (N x N bytes) on `device` (default: the graph's)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as exc:
        raise ImportError(f"block_mask: needs torch >= 2.5 (FlexAttention), this is torch {torch.__version__}") from exc
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_mask: block_size must be a positive int, got {block_size!r}")
    device = graph.device if device is None else torch.device(device)
    adj = graph.to(device).adjacency()
    n = graph.n_nodes

    def mask_mod(b, h, q_idx, kv_idx):
        return adj[q_idx, kv_idx]

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=n, KV_LEN=n, device=str(device), BLOCK_SIZE=block_size)
