"""reference_attention: graph attention in plain PyTorch (gathers and scatters over the edges), the op's check."""
import torch


def reference_attention(q, k, v, graph, rel_emb=None, scale=None):
    """What graph_attention computes, in plain PyTorch: for each node i, softmax over its sources j of
    (q_i . (k_j + rel_emb[rel_ij])) * scale (default 1 / sqrt(D)), weighting v_j; a node without sources gets 0.
    q, k, v: (B, N, H, D) on the graph's device; differentiable, memory O(B E H D)."""
    b, n, h, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    src = graph.col.to(torch.int64)
    dst = graph.destinations()
    keys = k[:, src]  # (B, E, H, D)
    if rel_emb is not None:
        keys = keys + rel_emb[graph.rel.to(torch.int64)][None, :, None, :]
    s = (q[:, dst] * keys).sum(-1) * scale  # (B, E, H)
    index = dst[None, :, None].expand_as(s)
    smax = torch.full((b, n, h), float("-inf"), dtype=s.dtype, device=s.device)
    smax = smax.scatter_reduce(1, index, s, reduce="amax", include_self=True)
    p = torch.exp(s - smax.gather(1, index))
    den = torch.zeros((b, n, h), dtype=s.dtype, device=s.device).scatter_add(1, index, p)
    num = torch.zeros_like(q).index_add(1, dst, p[..., None] * v[:, src])
    return num / den.clamp_min(torch.finfo(den.dtype).tiny)[..., None]
