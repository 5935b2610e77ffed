"""graph_attention: the C++ op over a Graph, registered through torch.library (with fake implementations and
autograd) so torch.compile(fullgraph=True) traces modules that call it; on torch without torch.library.custom_op
(Debian's 1.13) it calls the C++ autograd op directly."""
from typing import List, Optional, Tuple

import torch

from ._library import ops
from .graph import Graph, graph_by_id

_HAS_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


_op = None


def _direct(q, k, v, rel_emb, prepared):
    global _op
    if _op is None:  # torch.ops' attribute lookup costs about 0.3 us a call
        _op = ops().graph_attention
    return _op(q, k, v, rel_emb, prepared)


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _prepared(graph_id, device):
    g = graph_by_id(graph_id)
    if g.device != device:
        raise RuntimeError(f"sparsebench: graph {g.id} is on {g.device}, the call on {device}")
    return g.prepared()


if _HAS_CUSTOM_OP:

    @torch.library.custom_op("sparsebench_py::attention_forward", mutates_args=())
    def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rel_emb: Optional[torch.Tensor],
                 graph_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
        o, lse = ops().graph_attention_forward(q, k, v, rel_emb, _prepared(graph_id, q.device))
        return o, lse

    @_forward.register_fake
    def _(q, k, v, rel_emb, graph_id):
        return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=_lse_dtype(q))

    @torch.library.custom_op("sparsebench_py::attention_backward", mutates_args=())
    def _backward(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rel_emb: Optional[torch.Tensor],
                  o: torch.Tensor, lse: torch.Tensor, graph_id: int) -> List[torch.Tensor]:
        grads = ops().graph_attention_backward(d_o, q, k, v, rel_emb, o, lse, _prepared(graph_id, q.device))
        return list(grads[:3]) + ([grads[3]] if rel_emb is not None else [])

    @_backward.register_fake
    def _(d_o, q, k, v, rel_emb, o, lse, graph_id):
        grads = [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)]
        return grads + ([rel_emb.new_empty(rel_emb.shape)] if rel_emb is not None else [])

    def _setup_context(ctx, inputs, output):
        q, k, v, rel_emb, graph_id = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, rel_emb, o, lse)
        ctx.graph_id = graph_id
        ctx.mark_non_differentiable(lse)

    def _autograd_backward(ctx, d_o, d_lse):
        q, k, v, rel_emb, o, lse = ctx.saved_tensors
        grads = _backward(d_o.contiguous(), q, k, v, rel_emb, o, lse, ctx.graph_id)
        return grads[0], grads[1], grads[2], (grads[3] if rel_emb is not None else None), None

    torch.library.register_autograd("sparsebench_py::attention_forward", _autograd_backward,
                                    setup_context=_setup_context)


_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check(q, k, v, graph, rel_emb):
    """Python exceptions naming the argument, before any kernel runs."""
    if (type(graph) is Graph and type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
            and rel_emb is None and q.dim() == 4 and q.shape[1] == graph.n_nodes and k.shape == q.shape
            and v.shape == q.shape and k.dtype == q.dtype and v.dtype == q.dtype and q.dtype in _DTYPES
            and k.device == q.device and v.device == q.device and graph.device == q.device):
        return  # the common call, checked in one expression (a few hundred ns)
    if not isinstance(graph, Graph):
        raise TypeError(f"graph_attention: graph must be a sparsebench.Graph (sparsebench.pattern(...)), "
                        f"got {type(graph).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"graph_attention: {name} must be a tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"graph_attention: {name} must have shape (B, N, H, D), got {tuple(t.shape)}")
    if q.shape[1] != graph.n_nodes:
        raise ValueError(f"graph_attention: q has {q.shape[1]} nodes (dimension 1) but the graph has {graph.n_nodes} "
                         f"({graph.n_tokens} tokens and {graph.n_nodes - graph.n_tokens} extra nodes)")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"graph_attention: {name} must have q's shape {tuple(q.shape)}, got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"graph_attention: {name} has dtype {t.dtype}, q has {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"graph_attention: {name} is on {t.device}, q on {q.device}")
    if q.dtype not in _DTYPES:
        raise TypeError(f"graph_attention: q has dtype {q.dtype} (expected float32, float64, float16 or bfloat16)")
    if graph.device != q.device:
        raise ValueError(f"graph_attention: graph is on {graph.device} but q is on {q.device}; "
                         f"use graph.to({str(q.device)!r})")
    if rel_emb is not None:
        if not isinstance(rel_emb, torch.Tensor) or rel_emb.dim() != 2:
            raise ValueError(f"graph_attention: rel_emb must be a (R, D) tensor, got "
                             f"{tuple(rel_emb.shape) if isinstance(rel_emb, torch.Tensor) else type(rel_emb).__name__}")
        if rel_emb.shape != (graph.n_relations, q.shape[3]):
            raise ValueError(f"graph_attention: rel_emb must have shape ({graph.n_relations}, {q.shape[3]}) "
                             f"(the graph's relations, q's head size), got {tuple(rel_emb.shape)}")
        if rel_emb.dtype != q.dtype or rel_emb.device != q.device:
            raise ValueError(f"graph_attention: rel_emb is {rel_emb.dtype} on {rel_emb.device}, q is {q.dtype} on "
                             f"{q.device}")


def graph_attention(q, k, v, graph, rel_emb=None):
    """Attention of every node over its sources in `graph`: softmax_j((q_i . (k_j + r_ij)) / sqrt(D)) v_j.

    q, k, v: (B, N, H, D) over the graph's N nodes (tokens first, then its extra nodes), on the graph's device;
    rel_emb: optional (R, D) relation embeddings shared by the heads (r_ij = rel_emb[relation of the edge]).
    Differentiable in q, k, v and rel_emb; a custom op that torch.compile(fullgraph=True) traces."""
    _check(q, k, v, graph, rel_emb)
    if _HAS_CUSTOM_OP and _compiling():
        o, _ = torch.ops.sparsebench_py.attention_forward(q, k, v, rel_emb, graph.id)
        return o
    # Eager: the C++ op with its own autograd, the same kernels without the custom op's Python dispatch (~20 us).
    return _direct(q, k, v, rel_emb, graph.prepared())
