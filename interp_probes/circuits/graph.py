"""The attribution graph of one prompt (Ameisen et al. 2025), computed as circuit-tracer computes it.

The local replacement model: norm denominators and attention patterns frozen at their values on the prompt
(`interp.replacement`), every MLP replaced by the transcoders' features plus an error node (the MLP's output
minus the transcoders' estimate). The residual stream is then affine in the sources, so the direct effect of a
source s on a target t is an exact gradient:

    A[t, s] = <d input_t / d (what s writes), what s writes>

- sources: active features (their activation times their decoder vectors, into every layer they write to), error
  nodes (per layer and position), token embeddings (per position);
- targets: active features (input = pre-activation x_l . w_enc + b_enc at the MLP input) and logit nodes (input
  = the final residual, after the frozen final norm, read along the demeaned unembedding of the token: the
  token's logit minus the mean logit, before any soft-cap).

Gradients are batched: one forward of the prompt with the graph kept, then each backward takes B targets at once,
each target's read vector injected into its own row of a batch of vector-Jacobian products (`torch.autograd.grad`
with `is_grads_batched`). These are the rows circuit-tracer gets from one forward of B copies of the prompt
(`AttributionContext.compute_batch`), without the B-copy forward: the frozen model's gradients depend on the
frozen values only, not on the forward's. Each row is computed on its own, so the features waiting between two
influence refreshes are batched by layer, and a batch's backward starts at its highest target layer. Rows are
contracted with the sources' scaled decoder vectors one block of positions at a time (a batched matmul over
positions, `_Block`). MLPs are stop-gradients: their outputs are detached (a skip transcoder's linear path
x W_skip^T keeps its gradient, as in circuit-tracer).

Position 0 (BOS, or the first token) has no features: a transcoder never saw it in training (it trains on
positions >= 1), and its MLP output there is an attention sink's, not a reconstruction target. Two conventions for
what that output is in the graph (`bos_error`):
- default (False), circuit-tracer 0.5's: it belongs to no node. circuit-tracer zeroes both the features and the
  error vectors at `zero_positions` (`acts[zero_positions] = 0` in `encode_sparse`, `error_vectors[:,
  zero_positions] = 0` in `setup_attribution`), so the error nodes at position 0 send nothing; its real MLP output
  stays in the forward, a constant like a bias. Here it is held in each target's `bias` (the zero-source forward
  writes it at position 0), so completeness stays exact. This is the graph circuit-tracer draws, node for node.
- True: the MLP output at position 0 minus the estimate there (b_dec, and the skip path) is the error node of
  (layer, 0), as the paper's definition of an error node (the real MLP output minus the transcoders' estimate, at
  every (layer, position)) reads literally. Its norm is
  large (about 1,630 against 46 elsewhere on smollm2-135m), so these nodes take much of the influence and move the
  pruned graph and the replacement / completeness scores (issue 42: 0.225 / 0.746 with them, 0.343 / 0.806
  without, on one prompt).
The paper (Ameisen et al. 2025) states no special case for BOS; circuit-tracer's code does. The default follows
circuit-tracer because the reference graph is what this one is checked against (tests/compat/test_circuit_tracer.py).

Node order (circuit-tracer's): features, errors (layer-major), embeddings, logits. `bias[t]` is the target's
input when every source is zero, read off the forward the backwards run on, which runs there: the frozen values
substituted, the embeddings and sources zeroed (only biases and the skip path left). The bias is a forward value and
the edges are gradients, so `input = A[t] . 1 + bias` is a real check of the gradients (completeness), not an
identity.

Which features get rows when more than `max_feature_nodes` are active: circuit-tracer's greedy order, by partial
influence on the logits of the rows computed so far, refreshed every `update_interval` batches.

Memory, unlike circuit-tracer's dense (rows x every active feature, error and embedding) matrix, does not grow with
the prompt at a fixed feature budget: a row is dense only while its batch is in flight, then keeps its
`max_edges_per_row` strongest edges (`edges.Edges`; the rest joins the target's `unattributed` input, so
completeness stays exact), and the backward batch holds at most `batch_tokens` prompt tokens and 64 x batch_tokens
attention pairs (rows x n^2). Past sqrt(64 x batch_tokens) tokens (512 at the default) one row is the batch, and
the frozen patterns grow as the model's own backward's do. A row with no more entries than the budget is kept whole:
short prompts get circuit-tracer's dense graph exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from interp.replacement import Frozen, frozen, mlp_swap, record
from interp.sae import Transcoders
from interp.sites import Site

from .edges import Edges, strongest
from .prune import partial_influence


@dataclass
class AttributionGraph:
    """Nodes, their edges (a list: target, source, weight) and what checks them. Tensors on the host."""

    tokens: list[int]
    features: Tensor
    """(n_feat, 3) long: layer, position, feature index of every attributed (active) feature."""
    activations: Tensor
    """(n_feat,) their activations."""
    n_layers: int
    logit_tokens: Tensor
    """(n_logit,) token ids of the logit nodes."""
    logit_probs: Tensor
    """(n_logit,) their probabilities at the last position."""
    edges: Edges
    """A[target, source] as a list; sources that are not targets (errors, embeddings) have no incoming edges."""
    inputs: Tensor
    """(node,) each target's input on the real forward (pre-activation, or demeaned logit); 0 for non-targets."""
    bias: Tensor
    """(node,) each target's input with every source at zero."""
    unattributed: Tensor
    """(node,) what active features without a row (beyond max_feature_nodes) send each target, and the edges of
    its row beyond max_edges_per_row: not edges, but part of the input."""
    n_active: int
    """Active features on the prompt (the attributed ones are the first max_feature_nodes in influence order)."""

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    @property
    def n_feat(self) -> int:
        return self.features.shape[0]

    @property
    def n_logit(self) -> int:
        return self.logit_tokens.shape[0]

    def error_index(self, layer: int, pos: int) -> int:
        return self.n_feat + layer * self.n_pos + pos

    def embed_index(self, pos: int) -> int:
        return self.n_feat + self.n_layers * self.n_pos + pos

    def logit_index(self, i: int) -> int:
        return self.n_feat + (self.n_layers + 1) * self.n_pos + i

    @property
    def n_nodes(self) -> int:
        return self.edges.n

    @property
    def adjacency(self) -> Float[Tensor, "node node"]:
        """The dense (n_nodes, n_nodes) A[target, source], built on demand (for small graphs)."""
        return self.edges.dense()

    def completeness_error(self) -> float:
        """max |input - (sum of incoming edges + bias)| / max |input| over the target nodes."""
        rows = torch.cat([torch.arange(self.n_feat), torch.arange(self.logit_index(0), self.n_nodes)])
        resid = self.inputs[rows] - (self.edges.row_sums()[rows] + self.unattributed[rows] + self.bias[rows])
        return float(resid.abs().max() / self.inputs[rows].abs().max().clamp_min(1e-12))

    def _repr_html_(self) -> str:
        from .figures import graph_svg

        return graph_svg(self)


@dataclass
class Prompt:
    """What the real forward of one prompt gives the graph: features, errors, embeddings, logit targets."""

    ids: Tensor
    fz: Frozen
    acts: dict[int, Tensor]
    """layer -> (pos, F) feature activations (position 0 zeroed)."""
    errors: Float[Tensor, "layer pos d"]
    """The real MLP outputs minus the transcoders' estimates at every position, position 0 included (the exactness
    check adds them back)."""
    embed: Float[Tensor, "pos d"]
    logit_tokens: Tensor
    logit_probs: Tensor
    logit_vecs: Float[Tensor, "n_logit d"]
    bos_error: bool = False
    """Whether position 0's error is an error node (True) or held in the targets' bias (False, circuit-tracer's):
    see the module docstring."""

    @property
    def node_errors(self) -> Float[Tensor, "layer pos d"]:
        """What the error nodes write: `errors`, with position 0 zeroed unless `bos_error`."""
        if self.bos_error:
            return self.errors
        out = self.errors.clone()
        out[:, 0] = 0
        return out


def logit_targets(model, last_logits: Tensor, desired_prob: float = 0.95, max_logits: int = 10):
    """circuit-tracer's salient logits: the fewest top tokens whose probabilities reach `desired_prob`, at most
    `max_logits`; and each token's read vector, the demeaned unembedding times the family's linear logit scale."""
    probs = last_logits.float().softmax(-1)
    top_p, top_i = probs.topk(max_logits)
    n = int((top_p.cumsum(0) < desired_prob).sum()) + 1
    n = min(n, max_logits)
    W = model.unembed_weight.detach().float()  # (vocab, d)
    anat = model.anatomy
    scale = float(anat.logit_scale or 1.0) / float(anat.logits_scaling or 1.0)
    vecs = (W[top_i[:n]] - W.mean(0)) * scale
    return top_i[:n], top_p[:n], vecs


@torch.no_grad()
def prepare(model, tc: Transcoders, ids: Tensor, desired_prob: float = 0.95, max_logits: int = 10,
            bos_error: bool = False) -> Prompt:
    """The real forward of `ids` (1, pos): frozen values, MLP inputs and outputs, features, errors, logit nodes
    (`bos_error`: position 0's error as error nodes, or held in the bias as circuit-tracer does; module docstring)."""
    L = tc.n_layers
    sites = [Site("embed"), Site("final")] + [Site(k, layer) for layer in range(L) for k in ("mlp_in", "mlp_out")]
    fz = record(model, ids.to(model.device), sites)
    acts, errors = {}, []
    for layer in range(L):
        a = tc.encode(layer, fz.sites[Site("mlp_in", layer)].float())
        a[0] = 0  # position 0 (BOS): no features (circuit-tracer's zero_positions)
        acts[layer] = a
    for layer in range(L):
        x = fz.sites[Site("mlp_in", layer)].float()
        errors.append(fz.sites[Site("mlp_out", layer)].float() - tc.reconstruct(layer, acts, x))
    toks, probs, vecs = logit_targets(model, fz.logits[-1], desired_prob, max_logits)
    return Prompt(ids=ids, fz=fz, acts=acts, errors=torch.stack(errors),
                  embed=fz.sites[Site("embed")].float(), logit_tokens=toks, logit_probs=probs,
                  logit_vecs=vecs.to(errors[0].device), bos_error=bos_error)


WRITER_CHUNK = 4096
"""Slots (positions x the most features at one of them) of the scaled decoder vectors one step of a backward row
gathers for one output layer: a few positions' worth, never every active feature's at once."""


@dataclass
class _Block:
    """Active features writing to one output layer from a run of positions `start` .. `start + n_pos - 1`, laid out
    as (position, slot) with `width` slots a position: feature j sits at slot `at[j]` (position-major)."""

    cols: Tensor
    """(m,) their columns (indices into the source features)."""
    at: Tensor
    """(m,) their slots, (position - start) * width + rank at the position."""
    start: int
    n_pos: int
    width: int
    parts: list[tuple[int, Tensor]]
    """(source layer, indices into cols of its features)."""


class _Backward:
    """One forward of the prompt through the local replacement model with every source at zero, kept for batched
    backwards; it gives the targets' bias too.

    A batch of targets is one backward of B vector-Jacobian products at once (`is_grads_batched`, vmapped over the
    graph of one copy): the rows circuit-tracer gets from B copies of the prompt, without the B-copy forward. The
    frozen model is affine in the sources, so its gradients do not depend on the point the forward runs at: it runs
    at zero sources (embeddings zero, each MLP output b_dec, plus the skip path, plus at position 0 the error no node
    holds when not `p.bos_error`), where each target's input is its bias (`bias()`)."""

    def __init__(self, model, tc: Transcoders, p: Prompt):
        self.tc, self.p, self.L = tc, p, tc.n_layers
        self.errors = p.node_errors.float()  # (layer, pos, d)
        self.y: dict[int, Tensor] = {}
        self.e = torch.zeros_like(p.embed, dtype=model.dtype)[None].requires_grad_()  # (1, pos, d)
        held = None if p.bos_error else p.errors[:, 0]  # (layer, d)

        def stop(layer, x, out):
            y = tc.b_dec[layer].detach().to(out.dtype).expand_as(out).clone()
            if held is not None:
                y[:, 0] += held[layer].to(out.dtype)
            skip = tc.skip(layer, x)
            y = y.requires_grad_() if skip is None else y + skip.to(out.dtype)
            self.y[layer] = y
            return y

        def final(f):
            self.f = f

        swap, self.x = mlp_swap(self.L, stop)
        hooks = [(Site("embed"), lambda _x: self.e), *swap, (Site("final"), final)]
        with torch.enable_grad(), frozen(model, p.fz), model.hooks(hooks):
            model(p.ids.to(model.device))
        self.n = p.ids.shape[1]
        self.blocks: dict[int, list[_Block]] = {}
        """Per output layer, its writers' blocks (`set_features`)."""

    def set_features(self, feats: Tensor, act: Tensor) -> None:
        """The source features (rows of `feats`: layer, pos, index) and activations, as columns 0..n_feat-1. Their
        scaled decoder vectors are gathered per batch a block of positions at a time (`WRITER_CHUNK` slots), never
        all at once: they would take n_active x d_model, growing with the prompt."""
        self.n_feat = feats.shape[0]
        self.feats, self.act = feats, act.float()
        src = feats[:, 0]
        writers: dict[int, list[Tensor]] = {}
        for layer in src.unique().tolist():
            c = (src == layer).nonzero()[:, 0]
            for out in self.tc.out_layers(layer):
                writers.setdefault(out, []).append(c)
        for out, cs in writers.items():
            cols = torch.cat(cs)
            cols = cols[feats[cols, 1].argsort(stable=True)]  # position-major
            pos = feats[cols, 1]
            counts = torch.bincount(pos, minlength=self.n)
            first = counts.cumsum(0) - counts  # each position's first index in cols
            rank = torch.arange(cols.shape[0], device=cols.device) - first[pos]
            self.blocks[out] = []
            lo, counts = 0, counts.tolist()
            while lo < self.n:  # runs of positions whose slots fit WRITER_CHUNK (at least one position)
                hi, width = lo + 1, counts[lo]
                while hi < self.n and (hi + 1 - lo) * max(width, counts[hi]) <= WRITER_CHUNK:
                    width = max(width, counts[hi])
                    hi += 1
                sel = ((pos >= lo) & (pos < hi)).nonzero()[:, 0]
                if width and sel.shape[0]:
                    c = cols[sel]
                    s = feats[c, 0]
                    self.blocks[out].append(_Block(
                        cols=c, at=(pos[sel] - lo) * width + rank[sel], start=lo, n_pos=hi - lo, width=width,
                        parts=[(int(layer), (s == layer).nonzero()[:, 0]) for layer in s.unique().tolist()]))
                lo = hi

    def rows(self, layers: Tensor, pos: Tensor, vecs: Tensor, n_cols: int) -> Tensor:
        """Direct effects on B targets, each read at (layer, pos) along vecs (layer L: the final residual): (B,
        n_cols) with columns features, errors, embeddings (logit columns stay zero)."""
        B = layers.shape[0]
        outs, injected = [], []
        for layer in layers.unique().tolist():
            m = (layers == layer).nonzero()[:, 0]
            read = self.f if layer == self.L else self.x[layer]  # (1, pos, d)
            inject = torch.zeros(B, *read.shape, dtype=read.dtype, device=read.device)
            inject[m, 0, pos[m]] = vecs[m].to(read.dtype)  # target i's read vector in its own batch row
            outs.append(read)
            injected.append(inject)
        ins = [self.e] + [self.y[layer] for layer in range(self.L)]
        grads = torch.autograd.grad(outs, ins, injected, retain_graph=True, allow_unused=True, is_grads_batched=True)
        out = torch.zeros(B, n_cols, device=vecs.device)
        n = self.n
        for layer in range(self.L):
            if grads[1 + layer] is None:
                continue
            g = grads[1 + layer][:, 0].float()  # (B, pos, d)
            gp = g.transpose(0, 1)  # (pos, B, d)
            for b in self.blocks.get(layer, ()):
                # the block's scaled decoder vectors in (position, slot) layout, zero where no feature sits
                dec = torch.zeros(b.n_pos * b.width, g.shape[-1], device=g.device)
                for source, j in b.parts:
                    c = b.cols[j]
                    dec[b.at[j]] = self.tc.dec(source, layer)[self.feats[c, 2]].float() * self.act[c, None]
                got = torch.bmm(gp[b.start : b.start + b.n_pos], dec.view(b.n_pos, b.width, -1).transpose(1, 2))
                out[:, b.cols] += got.transpose(0, 1).reshape(B, -1)[:, b.at]  # (pos, B, slot) -> (B, feature)
            o = self.n_feat + layer * n
            out[:, o : o + n] = torch.einsum("bnd,nd->bn", g, self.errors[layer])
        if grads[0] is not None:
            o = self.n_feat + self.L * n
            out[:, o : o + n] = torch.einsum("bnd,nd->bn", grads[0][:, 0].float(), self.p.embed.float())
        return out

    @torch.no_grad()
    def bias(self, feats: Tensor) -> tuple[Tensor, Tensor]:
        """(feature biases, logit biases): each target's input on this forward, where every source is zero."""
        fb = _pre_at(self.tc, {layer: v[0] for layer, v in self.x.items()}, feats)
        return fb, self.f[0, -1].float() @ self.p.logit_vecs.T


PRE_CHUNK = 1 << 22
"""Pre-activations (positions x features a layer) `_pre_at` computes at a time."""


def _pre_at(tc: Transcoders, xs: dict[int, Tensor], feats: Tensor) -> Tensor:
    """(n_feat,) each feature's pre-activation at its (layer, position), read from xs[layer] (pos, d_in): a layer's
    positions at once, `PRE_CHUNK` pre-activations at a time."""
    out = torch.zeros(feats.shape[0], device=tc.W_enc.device)
    step = max(1, PRE_CHUNK // tc.spec.d_transcoder)
    for layer in feats[:, 0].unique().tolist():
        j = (feats[:, 0] == layer).nonzero()[:, 0]
        pos, inv = feats[j, 1].unique(return_inverse=True)
        for lo in range(0, pos.shape[0], step):
            pre = tc.pre(layer, xs[layer][pos[lo : lo + step]].float())  # (positions, F)
            k = (inv >= lo) & (inv < lo + step)
            out[j[k]] = pre[inv[k] - lo, feats[j[k], 2]].to(out.dtype)
    return out


def attribute(model, tc: Transcoders, ids: Tensor, *, desired_prob: float = 0.95, max_logits: int = 10,
              bos_error: bool = False, **kw) -> AttributionGraph:
    """The attribution graph of `ids` (1, pos) under `tc` (`kw`: `attribute_prepared`'s); see the module docstring."""
    return attribute_prepared(model, tc, prepare(model, tc, ids, desired_prob, max_logits, bos_error), **kw)


def attribute_prepared(model, tc: Transcoders, p: Prompt, *, batch_size: int = 64, max_feature_nodes: int = 8192,
                       update_interval: int = 4, max_edges_per_row: int = 8192,
                       batch_tokens: int = 4096) -> AttributionGraph:
    """`attribute` from the prompt's real forward (`prepare`). Each row keeps its `max_edges_per_row` strongest
    edges (the rest joins the target's `unattributed` input), and the backward batch holds at most `batch_tokens`
    prompt tokens and 64 x batch_tokens attention pairs, so the graph's memory stays flat in the prompt length at a
    fixed feature budget (up to one copy of the prompt: see the module docstring)."""
    ids = p.ids
    L, n = tc.n_layers, ids.shape[1]
    dev = p.embed.device
    found = [(layer, *p.acts[layer].nonzero().unbind(1)) for layer in range(L)]
    all_feats = torch.cat([torch.stack([torch.full_like(pos, layer), pos, f], 1) for layer, pos, f in found])
    all_act = torch.cat([p.acts[layer][pos, f] for layer, pos, f in found])
    n_active = all_feats.shape[0]
    n_logit = p.logit_tokens.shape[0]
    n_src = n_active + (L + 1) * n
    # copies of the prompt in the backward batch: at most batch_tokens tokens, and at most 64 x batch_tokens
    # attention pairs (each copy's frozen patterns are heads x n^2 a layer once the attention's product expands them)
    B = max(1, min(batch_size, max(n_active, n_logit), batch_tokens // n, 64 * batch_tokens // n**2))
    bw = _Backward(model, tc, p)
    bw.set_features(all_feats, all_act)
    m = min(max_edges_per_row, n_src)

    def sparse_rows(layers: Tensor, pos: Tensor, vecs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        cols, vals, rest = strongest(bw.rows(layers, pos, vecs, n_src), m)  # the dense rows live one batch
        return cols.to(torch.int32), vals, rest

    # logit rows first
    l_cols, l_vals, l_rest = (torch.cat(t) for t in zip(*[
        sparse_rows(torch.full((len(v),), L, device=dev), torch.full((len(v),), n - 1, device=dev), v)
        for v in p.logit_vecs.split(B)], strict=True))
    logit_nodes = torch.arange(n_src, n_src + n_logit, device=dev)
    keep = min(max_feature_nodes, n_active)
    f_cols = torch.full((keep, m), -1, dtype=torch.int32, device=dev)
    f_vals = torch.zeros(keep, m, device=dev)
    f_rest = torch.zeros(keep, device=dev)
    order = torch.empty(0, dtype=torch.long, device=dev)
    visited = torch.zeros(n_active, dtype=torch.bool, device=dev)
    while order.shape[0] < keep:
        if keep == n_active:
            pending = torch.arange(n_active, device=dev)[~visited]
        else:
            k = order.shape[0]
            so_far = Edges.from_rows(torch.cat([order, logit_nodes]), torch.cat([f_cols[:k], l_cols]).long(),
                                     torch.cat([f_vals[:k], l_vals]), n_src + n_logit)
            infl = partial_influence(so_far, p.logit_probs.to(dev))[:n_active]
            rank = infl.argsort(descending=True)
            pending = rank[~visited[rank]][: min(update_interval * B, keep - order.shape[0])]
            # the same features before the next refresh, in batches of nearby layers: a batch's backward starts at
            # its highest target layer, and each row is its own (the batch only shares the pass)
            pending = pending[all_feats[pending, 0].argsort(descending=True, stable=True)]
        for chunk in pending.split(B):
            f = all_feats[chunk]
            k = order.shape[0]
            f_cols[k : k + len(chunk)], f_vals[k : k + len(chunk)], f_rest[k : k + len(chunk)] = \
                sparse_rows(f[:, 0], f[:, 1], tc.W_enc[f[:, 0], f[:, 2]].float())
            order = torch.cat([order, chunk])
            visited[chunk] = True
    # keep the attributed features only, in their (layer, pos, index) order; sources renumbered to the graph's nodes
    sel = order.sort().values
    perm = order.argsort()
    n_feat = sel.shape[0]
    N = n_feat + (L + 1) * n + n_logit
    node_of = torch.full((n_src,), -1, dtype=torch.long, device=dev)
    node_of[sel] = torch.arange(n_feat, device=dev)
    node_of[n_active:] = torch.arange(n_feat, n_feat + (L + 1) * n, device=dev)
    cols = torch.cat([f_cols[perm], l_cols]).long()
    vals = torch.cat([f_vals[perm], l_vals])
    nodes = torch.where(cols >= 0, node_of[cols.clamp_min(0)], -1)
    targets = torch.cat([torch.arange(n_feat, device=dev), torch.arange(N - n_logit, N, device=dev)])
    unattributed = torch.zeros(N, device=dev)
    # what the active features without a row send, and what each row's weakest edges carry, is input, not edges
    unattributed[targets] = torch.where((cols >= 0) & (nodes < 0), vals, 0).sum(1) + torch.cat([f_rest[perm], l_rest])
    edges = Edges.from_rows(targets, nodes, vals, N)
    feats, act = all_feats[sel], all_act[sel]
    fb, lb = bw.bias(feats)
    inputs = torch.zeros(N, device=dev)
    bias = torch.zeros(N, device=dev)
    if n_feat:
        inputs[:n_feat] = _pre_at(tc, {layer: p.fz.sites[Site("mlp_in", layer)] for layer in range(L)}, feats)
        bias[:n_feat] = fb
    # the logit nodes' inputs on the real forward: demeaned, scaled logits before any soft-cap
    inputs[N - n_logit :] = p.fz.sites[Site("final")][-1].float() @ p.logit_vecs.T
    bias[N - n_logit :] = lb
    return AttributionGraph(tokens=ids[0].tolist(), features=feats.cpu(), activations=act.cpu(), n_layers=L,
                            logit_tokens=p.logit_tokens.cpu(), logit_probs=p.logit_probs.cpu(),
                            edges=Edges(*(t.cpu() for t in (edges.target, edges.source, edges.weight)), N),
                            inputs=inputs.cpu(), bias=bias.cpu(), unattributed=unattributed.cpu(),
                            n_active=n_active)


__all__ = ["AttributionGraph", "Prompt", "attribute", "attribute_prepared", "logit_targets", "prepare"]
