"""Confirm or refute all-masked attention rows by running the corpus modules on padded batches.

AMP103 labels say "this `-inf` makes a whole softmax row `-inf`: NaN in any dtype, which then
spreads".  Reading the code can be wrong both ways (a mask that always keeps one key, a
`masked_fill(..., 0)` after the softmax), so this script runs the module itself: it imports
the file from the benchmark cache (``.cache/src/<dist>/<path>``; run ``fetch.py`` first), builds
it small, feeds it a padded batch (sets / graphs / sequences of different sizes padded to the
batch maximum, the padded positions also being queries) in fp32, fp16 and bf16 on CPU, and
reports per case and dtype:

- ``-inf rows``: softmax rows (along the softmax's dim) whose every entry is ``-inf``;
- ``filled rows``: rows whose every entry is a finite fill (<= -5e3, since -1e4 is -9984 in
  bf16): uniform weights, no NaN;
- ``nan softmax``: softmax outputs with a NaN;
- ``nan padded`` / ``nan real``: NaN in the module's output at padded / real positions
  (``nan real`` is the spread: real nodes or frames get NaN);
- ``nan grad``: NaN in a parameter's gradient after ``backward`` of the real positions' sum;
- ``error``: the exception, e.g. ``masked_fill`` refusing a value that overflows half.

Softmax rows are seen by wrapping ``torch.softmax``, ``F.softmax``, ``Tensor.softmax`` (and their
``log_softmax``) while the case runs; a fused kernel (``scaled_dot_product_attention``) is not
seen, so a case that must be checked takes the explicit path.  This RUNS THIRD-PARTY CODE: it is
an opt-in bench script, never part of ``amplint check`` (which never runs what it reads); the
test suite runs it only on toy modules it writes (``tests/test_confirm_masked.py``).  Packages are imported
from the cache with their parent packages' ``__init__`` skipped (so a package's heavy optional
imports are not needed); a case that still cannot import says so and counts as not run.
Needs torch, numpy and einops; the ``transformers`` cases also need huggingface_hub, tqdm and
safetensors (the cached ``transformers/utils`` imports them), the ``pytorch-transformers`` cases six, boto3,
requests and tqdm (its ``file_utils``).  The cases cover
``corpus/blind-masked.jsonl`` and ``corpus/blind-masked-2.jsonl``, and three files of ``corpus/nlp.jsonl``
on a batch with an empty item (every key padding) beside an ordinary padded batch.

    python bench/realcode/confirm_masked.py [--case ID ...] [--json OUT]

Exit 0 when every case ran (whatever it found), 1 when some could not run.
``CONFIRM_MASKED_TRACEBACK=1`` prints the traceback of an error inside a case.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import importlib
import json
import logging
import os
import sys
import traceback
import types
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: a softmax row whose entries are all at or below this (and not all -inf) was filled with a
#: finite mask value: the softmax is uniform over the masked keys, not NaN
FILL_THRESHOLD = -5e3


@dataclasses.dataclass
class Trial:
    """One built case: ``run()`` returns the output ``(batch, positions, ...)``."""
    run: Callable[[], torch.Tensor]
    real: torch.Tensor  # bool (batch, positions): True at real (not padded) positions
    module: torch.nn.Module
    #: False where the module's backward cannot run on this torch (a custom autograd Function
    #: written for an older torch): no gradient check
    grad: bool = True
    #: batch items whose every key is padding (an empty source or sentence): NaN anywhere in the
    #: other items is reported apart, as NaN that crossed from one item to another
    empty_items: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Case:
    corpus_id: str
    module: str  # dotted module name inside the distribution
    build: Callable[[types.ModuleType, torch.dtype], Trial]
    about: str  # what is run, with which padded batch
    deps: tuple[str, ...] = ()  # other cached distributions the module imports
    #: stand-ins for modules the file imports only for plumbing (a logger factory), whose real
    #: package ``__init__`` needs what is not installed here: {module: {name: value}}
    stubs: dict = dataclasses.field(default_factory=dict)
    #: skip every package ``__init__`` of the distribution, not only the module's parents
    #: (for a library whose sibling packages' ``__init__`` import optional dependencies)
    bare_packages: bool = False
    #: attributes set on the bare parent packages, for a module that reads one of them from its
    #: skipped ``__init__`` (``from .. import __version__``): {package: {name: value}}
    package_attrs: dict = dataclasses.field(default_factory=dict)
    #: names a bare parent package re-exports from one of its modules, loaded for real once the
    #: bare packages exist (``from fairseq.modules import gelu``): {package: module}
    package_exports: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Outcome:
    corpus_id: str
    dtype: str
    ran: bool
    inf_rows: int = 0
    filled_rows: int = 0
    softmax_calls: int = 0
    nan_softmax: bool = False
    nan_padded: bool = False
    nan_real: bool = False
    nan_grad: bool = False
    empty_items: int = 0  # how many items of the batch have no real key
    nan_other_items: bool = False  # NaN at any position of an item that has real keys
    error: str = ""


# --- softmax probe ---------------------------------------------------------------------

class SoftmaxProbe:
    def __init__(self) -> None:
        self.calls = self.inf_rows = self.filled_rows = 0
        self.nan_out = False
        self._depth = 0

    def see(self, x: torch.Tensor, dim: int, out: torch.Tensor) -> None:
        if not torch.is_tensor(x) or not x.is_floating_point():
            return
        self.calls += 1
        xd = x.detach().float()
        all_inf = torch.isneginf(xd).all(dim=dim)
        all_low = (xd <= FILL_THRESHOLD).all(dim=dim) & ~all_inf
        self.inf_rows += int(all_inf.sum())
        self.filled_rows += int(all_low.sum())
        self.nan_out |= bool(torch.isnan(out.detach()).any())

    @contextlib.contextmanager
    def installed(self):
        probe = self
        saved = (torch.softmax, F.softmax, torch.Tensor.softmax,
                 torch.log_softmax, F.log_softmax, torch.Tensor.log_softmax)

        def wrap(fn):
            def softmax(x, dim=None, *args, **kwargs):
                probe._depth += 1
                try:
                    out = fn(x, dim, *args, **kwargs)
                finally:
                    probe._depth -= 1
                if probe._depth == 0:
                    d = dim if dim is not None else -1
                    probe.see(x, d, out)
                return out
            return softmax

        torch.softmax, F.softmax, torch.Tensor.softmax = (wrap(f) for f in saved[:3])
        torch.log_softmax, F.log_softmax, torch.Tensor.log_softmax = (wrap(f) for f in saved[3:])
        try:
            yield self
        finally:
            (torch.softmax, F.softmax, torch.Tensor.softmax,
             torch.log_softmax, F.log_softmax, torch.Tensor.log_softmax) = saved


# --- importing from the cache ----------------------------------------------------------

def corpus_entry(corpus_id: str) -> dict:
    for e in fetch.load_corpus():
        if e["id"] == corpus_id:
            return e
    raise KeyError(f"{corpus_id} is in no corpus/*.jsonl")


def dist_of(dist_or_id: str) -> str:
    return dist_or_id if "==" in dist_or_id else corpus_entry(dist_or_id)["dist"]


#: set while importing: DGL otherwise writes ~/.dgl/config.json to remember its backend
IMPORT_ENV = {"DGLBACKEND": "pytorch"}


def import_from_cache(dist: str, dotted: str, deps: tuple[str, ...] = (), stubs: dict | None = None,
                      bare_packages: bool = False, package_attrs: dict | None = None,
                      package_exports: dict | None = None) -> types.ModuleType:
    """Import ``dotted`` from the unpacked ``dist``, its parent packages as bare namespaces.

    A parent package's ``__init__`` often imports the whole library (and its optional
    dependencies); the module under test and the siblings it imports are loaded for real.
    """
    roots = [fetch.unpacked_dir(dist)] + [fetch.unpacked_dir(d) for d in deps]
    for root in roots:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not in the cache: run fetch.py")
    for name in [m for m in sys.modules if m.split(".")[0] == dotted.split(".")[0]]:
        del sys.modules[name]
    sys.path[:0] = roots
    for key, value in IMPORT_ENV.items():
        os.environ.setdefault(key, value)
    parts = dotted.split(".")
    packages = [parts[:i] for i in range(1, len(parts))]
    if bare_packages:
        top = os.path.join(roots[0], parts[0])
        packages += [[parts[0], *os.path.relpath(d, top).split(os.sep)] for d, _, files in os.walk(top)
                     if d != top and "__init__.py" in files]
    for names in packages:
        pkg = ".".join(names)
        folder = os.path.join(roots[0], *names)
        mod = types.ModuleType(pkg)
        mod.__path__ = [folder]
        mod.__package__ = pkg
        mod.__dict__.update((package_attrs or {}).get(pkg, {}))
        sys.modules[pkg] = mod
    for name, attrs in (stubs or {}).items():
        stub = types.ModuleType(name)
        stub.__dict__.update(attrs)
        sys.modules[name] = stub
    for pkg, source in (package_exports or {}).items():
        exported = importlib.import_module(source)
        sys.modules[pkg].__dict__.update({k: v for k, v in vars(exported).items() if not k.startswith("_")})
    return importlib.import_module(dotted)


# --- running ---------------------------------------------------------------------------

def run_case(case: Case, dtype_name: str) -> Outcome:
    outcome = Outcome(case.corpus_id, dtype_name, ran=False)
    dtype = DTYPES[dtype_name]
    try:
        mod = import_from_cache(dist_of(case.corpus_id), case.module, tuple(dist_of(d) for d in case.deps), case.stubs,
                               case.bare_packages, case.package_attrs, case.package_exports)
    except Exception as exc:  # the case cannot run here: say why
        outcome.error = f"import: {type(exc).__name__}: {exc}"
        return outcome
    torch.manual_seed(0)
    probe = SoftmaxProbe()
    try:
        trial = case.build(mod, dtype)
        trial.module.train(False)
    except Exception as exc:  # a constructor this case gets wrong, or a missing piece
        outcome.error = f"build: {type(exc).__name__}: {exc}"
        return outcome
    outcome.ran = True
    try:
        with probe.installed():
            out = trial.run()
            nan = torch.isnan(out.detach().float())
            while nan.dim() > trial.real.dim():
                nan = nan.any(dim=-1)
            outcome.nan_padded = bool(nan[~trial.real].any())
            outcome.nan_real = bool(nan[trial.real].any())
            if trial.empty_items:
                others = [i for i in range(nan.size(0)) if i not in trial.empty_items]
                outcome.empty_items = len(trial.empty_items)
                outcome.nan_other_items = bool(nan[others].any())
            loss = out.float()[trial.real].sum()
            if trial.grad and loss.requires_grad:
                loss.backward()
                outcome.nan_grad = any(p.grad is not None and bool(torch.isnan(p.grad).any())
                                       for p in trial.module.parameters())
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if os.environ.get("CONFIRM_MASKED_TRACEBACK"):
            traceback.print_exc()
    outcome.softmax_calls = probe.calls
    outcome.inf_rows, outcome.filled_rows = probe.inf_rows, probe.filled_rows
    outcome.nan_softmax = probe.nan_out
    return outcome


# --- padded batches --------------------------------------------------------------------

SIZES = (3, 5)  # two sets / graphs / sequences, padded to 5


def real_mask(sizes=SIZES) -> torch.Tensor:
    n = max(sizes)
    return torch.arange(n)[None, :] < torch.tensor(sizes)[:, None]


def padded(dim: int, dtype: torch.dtype, sizes=SIZES) -> torch.Tensor:
    """Features of real positions, zeros where padded (as ``to_dense_batch`` pads)."""
    x = torch.randn(len(sizes), max(sizes), dim)
    return (x * real_mask(sizes)[..., None]).to(dtype)


def pair_mask(sizes=SIZES) -> torch.Tensor:
    """(batch, n, n) True where both query and key are real."""
    m = real_mask(sizes)
    return m[:, :, None] & m[:, None, :]


def stacked(*layers: torch.nn.Module) -> torch.nn.ModuleList:
    return torch.nn.ModuleList(layers)


# --- the cases -------------------------------------------------------------------------

def _dgl_biased_mha(keys_only: bool):
    return lambda mod, dtype: _dgl_biased_mha_build(mod, dtype, keys_only)


def _dgl_biased_mha_build(mod, dtype, keys_only):
    # Graphormer-style batch: node features padded to the largest graph; attn_mask True
    # (not allowed) wherever the query or the key is a padded node, or (keys_only) wherever
    # the key is, as the docstring advises
    layers = stacked(mod.BiasedMHA(feat_size=16, num_heads=2), mod.BiasedMHA(feat_size=16, num_heads=2)).to(dtype)
    x = padded(16, dtype)
    mask = (~real_mask())[:, None, :].expand(-1, max(SIZES), -1) if keys_only else ~pair_mask()

    def run():
        h = x
        for layer in layers:
            h = layer(h, attn_mask=mask)
        return h
    return Trial(run, real_mask(), layers)


def _dgl_graphormer(mod, dtype):
    layers = stacked(*(mod.GraphormerLayer(feat_size=16, hidden_size=32, num_heads=2) for _ in range(2))).to(dtype)
    x, mask = padded(16, dtype), ~pair_mask()

    def run():
        h = x
        for layer in layers:
            h = layer(h, attn_mask=mask)
        return h
    return Trial(run, real_mask(), layers)


def _dgl_egt(mod, dtype):
    # EGT's mask is additive: 0 where allowed, -inf for pairs with a virtual (padded) node,
    # as its docstring asks
    layers = stacked(*(mod.EGTLayer(feat_size=16, edge_feat_size=8, num_heads=2, num_virtual_nodes=0)
                       for _ in range(2))).to(dtype)
    x = padded(16, dtype)
    e = torch.randn(2, 5, 5, 8).to(dtype)
    mask = torch.zeros(2, 5, 5).masked_fill(~pair_mask(), float("-inf")).to(dtype)

    def run():
        h, ef = x, e
        for layer in layers:
            h, ef = layer(h, ef, mask=mask)
        return h
    return Trial(run, real_mask(), layers)


def _supar_relpos_encoder(mod, dtype):
    enc = mod.RelativePositionTransformerEncoder(n_layers=2, n_heads=2, n_model=16, n_inner=32, dropout=0.0).to(dtype)
    x = padded(16, dtype)
    return Trial(lambda: enc(x, real_mask()), real_mask(), enc)


def _digress(mod, dtype):
    kw = dict(num_layers=2, input_dims={"X": 4, "E": 2, "y": 1},
              hidden_dims={"node_dim": 16, "edge_dim": 8, "global_dim": 8, "num_heads": 2,
                           "node_ff_dim": 16, "edge_ff_dim": 8, "global_ff_dim": 8},
              output_dims={"X": 4, "E": 2, "y": 1}, act_fn_in=torch.nn.ReLU(), act_fn_out=torch.nn.ReLU())
    net = mod.GraphTransformer(**kw).to(dtype)
    node_mask = real_mask()
    X = padded(4, dtype)
    E = (torch.randn(2, 5, 5, 2) * pair_mask()[..., None]).to(dtype)
    y = torch.zeros(2, 1).to(dtype)

    def run():
        out = net(X, E, y, node_mask)
        return out.X if hasattr(out, "X") else out[0]
    return Trial(run, node_mask, net)


def _tft_attention(mod, dtype):
    # TFT attends decoder steps to encoder + decoder steps; padded encoder steps are masked
    # for every query; a series shorter than the batch maximum has padded decoder queries
    att = mod.InterpretableMultiHeadAttention(n_head=2, d_model=16, dropout=0.0).to(dtype)
    x = padded(16, dtype)
    mask = ~pair_mask()  # True = not allowed, as TFT's get_attention_mask builds it
    return Trial(lambda: att(x, x, x, mask=mask)[0], real_mask(), att)


def _wavlm_mha(mod, dtype):
    att = mod.MultiheadAttention(16, 2, self_attention=True).to(dtype)
    x = padded(16, dtype).transpose(0, 1)  # (time, batch, dim)
    key_padding_mask = ~real_mask()

    def run():
        # need_weights: the explicit softmax path (the fused one hides the softmax rows)
        out = att(x, x, x, key_padding_mask=key_padding_mask, need_weights=True)[0]
        return out.transpose(0, 1)
    return Trial(run, real_mask(), att)


def _isab(mod, dtype):
    net = mod.ISAB(dim=16, heads=2, num_latents=4).to(dtype)
    x = padded(16, dtype)
    return Trial(lambda: net(x, mask=real_mask())[0], real_mask(), net)


def _point_transformer(mod, dtype):
    net = mod.MultiheadPointTransformerLayer(dim=16, pos_mlp_hidden_dim=16, attn_mlp_hidden_mult=2, heads=2).to(dtype)
    x = padded(16, dtype)
    pos = padded(3, dtype)
    return Trial(lambda: net(x, pos, mask=real_mask()), real_mask(), net)


def _graph_transformer(mod, dtype):
    net = mod.GraphTransformer(dim=16, depth=2, edge_dim=8, heads=2, dim_head=8).to(dtype)
    nodes = padded(16, dtype)
    edges = (torch.randn(2, 5, 5, 8) * pair_mask()[..., None]).to(dtype)
    return Trial(lambda: net(nodes, edges, mask=real_mask())[0], real_mask(), net)


def _data2vec_mha(mod, dtype):
    att = mod.MultiheadAttention(16, 2, self_attention=True).to(dtype)
    x = padded(16, dtype).transpose(0, 1)

    def run():
        return att(x, x, x, key_padding_mask=~real_mask(), need_weights=True)[0].transpose(0, 1)
    return Trial(run, real_mask(), att)


class BatchedGraph:
    """Stand-in for a DGL batched graph: the readouts only ask it for the graphs' sizes."""
    def __init__(self, sizes):
        self.sizes = torch.tensor(sizes)
        self.batch_size = len(sizes)

    def batch_num_nodes(self, ntype=None):
        return self.sizes


def _dgl_set_transformer_encoder(mod, dtype):
    enc = mod.SetTransformerEncoder(d_model=16, n_heads=2, d_head=8, d_ff=32, n_layers=2).to(dtype)
    feat = torch.randn(sum(SIZES), 16).to(dtype)  # packed nodes of both graphs
    return Trial(lambda: enc(BatchedGraph(SIZES), feat)[None], torch.ones(1, sum(SIZES), dtype=torch.bool), enc)


def _dgl_set_transformer_decoder(mod, dtype):
    enc = mod.SetTransformerEncoder(d_model=16, n_heads=2, d_head=8, d_ff=32, n_layers=1)
    dec = mod.SetTransformerDecoder(d_model=16, num_heads=2, d_head=8, d_ff=32, n_layers=1, k=2)
    both = stacked(enc, dec).to(dtype)
    feat = torch.randn(sum(SIZES), 16).to(dtype)

    def run():
        g = BatchedGraph(SIZES)
        return dec(g, enc(g, feat))  # (graphs, k * d_model)
    return Trial(run, torch.ones(len(SIZES), dtype=torch.bool), both)


def _rl4co_logits(finished: bool):
    def build(mod, dtype):
        # one decoding step of a pointer decoder over graphs of 3 and 5 nodes padded to 5:
        # mask True = not selectable (padded, or already visited)
        att = mod.LogitAttention(embed_dim=16, num_heads=2).to(dtype)
        query = torch.randn(2, 1, 16).to(dtype)
        nodes = padded(16, dtype)
        mask = ~real_mask()
        mask[:, 0] = True  # the start node was visited
        if finished:  # graph 0 has visited all of its nodes while graph 1 still decodes
            mask[0] = True
        feasible = ~mask
        return Trial(lambda: att(query, nodes, nodes, nodes[:, None], mask), feasible, att)
    return build


def _funasr_bat_chunks(mod, dtype):
    # streaming chunks of 2 frames that see only their own chunk (left_context 0): the
    # shorter utterance's last chunk is all padding
    att = mod.RelPositionMultiHeadedAttentionChunk(num_heads=2, embed_size=16).to(dtype)
    x = padded(16, dtype, sizes=(2, 6))
    t = x.size(1)
    pos = torch.randn(2, 2 * t - 1, 16).to(dtype)
    chunk = torch.arange(t) // 2
    chunk_mask = chunk[:, None] != chunk[None, :]  # True = masked
    pad = ~real_mask((2, 6))
    return Trial(lambda: att(x, x, x, pos, pad, chunk_mask=chunk_mask), real_mask((2, 6)), att)

def _olmo_collator(mod, dtype):
    # two causal sequences of 3 and 5 tokens, each with its own attention bias (0 allowed,
    # -inf above the diagonal), collated to the batch maximum; the collated bias is what the
    # model adds to its attention scores: here it is fed to a softmax over keys on zero scores
    def causal_bias(n):
        return torch.zeros(n, n).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    collate = mod.DataCollator(pad_direction=mod.PaddingDirection.right, pad_token_id=1)
    items = [{"input_ids": torch.arange(n), "attention_bias": causal_bias(n)} for n in SIZES]

    def run():
        bias = collate(items)["attention_bias"].to(dtype)  # (batch, 1, n, n)
        return torch.softmax(torch.zeros_like(bias) + bias, dim=-1)[:, 0]
    return Trial(run, real_mask(), torch.nn.Module())  # no parameters: no gradient check

def _zeta_mha(mod, dtype):
    att = mod.MultiheadAttention(embed_dim=16, num_heads=2, self_attention=True).to(dtype)
    x = padded(16, dtype)
    return Trial(lambda: att(x, x, x, key_padding_mask=~real_mask()), real_mask(), att)


def _emotion2vec_alt_attention(mod, dtype):
    att = mod.AltAttention(dim=16, num_heads=2).to(dtype)
    x = padded(16, dtype)
    return Trial(lambda: att(x, padding_mask=~real_mask()), real_mask(), att)

# --- packet 4 (corpus/blind-masked-2.jsonl) --------------------------------------------

#: transformers releases read from the cache: the bare ``transformers`` package needs the
#: ``__version__`` its ``utils`` import, and the runtime dependency check (which wants
#: sacremoses, tokenizers, ...) is a stand-in: only the model modules are run
def _transformers_case(version: str) -> dict:
    return dict(package_attrs={"transformers": {"__version__": version}},
                stubs={"transformers.dependency_versions_check": {"dep_version_check": lambda *a, **k: None}})


def left_real_mask(sizes=SIZES) -> torch.Tensor:
    """(batch, n) True at real positions of sequences padded on the left."""
    return real_mask(sizes).flip(-1)


def _cpmant(mod, dtype):
    # CPM-Ant pads on the left (token 0) and builds its own mask from the ids
    cfg = mod.CpmAntConfig(vocab_size=64, hidden_size=16, num_attention_heads=2, dim_head=8, dim_ff=32,
                           num_hidden_layers=2, prompt_types=3, prompt_length=2, segment_types=4,
                           position_bias_num_buckets=8, position_bias_max_distance=16, use_cache=False)
    net = mod.CpmAntModel(cfg).to(dtype)
    real = left_real_mask()
    ids = torch.randint(1, 64, real.shape) * real

    def run():
        return net(input_ids=ids, use_cache=False, return_dict=True).last_hidden_state
    return Trial(run, real, net)


def _deberta_hf(model_cls: str, config_cls: str, grad: bool = False):
    def build(mod, dtype):
        cfg = getattr(mod, config_cls)(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=32, max_position_embeddings=32, relative_attention=True,
                                       pos_att_type=["c2p", "p2c"], hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0)
        net = getattr(mod, model_cls)(cfg).to(dtype)
        ids = torch.randint(1, 64, real_mask().shape) * real_mask()
        return Trial(lambda: net(input_ids=ids, attention_mask=real_mask().long()).last_hidden_state, real_mask(), net,
                     grad=grad)
    return build


def _sew_d(mod, dtype):
    # the SEW-D encoder on frame features of utterances of 4 and 10 frames padded to 10 (squeezed 2x)
    cfg = mod.SEWDConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                         squeeze_factor=2, num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
                         max_position_embeddings=32, position_buckets=-1, hidden_dropout=0.0, activation_dropout=0.0,
                         attention_dropout=0.0, feat_proj_dropout=0.0)
    enc = mod.SEWDEncoder(cfg).to(dtype)
    sizes = (4, 10)
    x = padded(16, dtype, sizes)

    def run():
        return enc(x.clone(), attention_mask=real_mask(sizes).long()).last_hidden_state
    return Trial(run, real_mask(sizes), enc, grad=False)


class _DebertaConfig:
    """The attributes DeBERTa's ``DisentangledSelfAttention`` reads from its model config."""
    num_attention_heads = 2
    hidden_size = 16
    relative_attention = True
    max_relative_positions = 16
    pos_att_type = "c2p|p2c"
    hidden_dropout_prob = 0.0
    attention_probs_dropout_prob = 0.0


def _deberta_package(mod, dtype):
    # DisentangledSelfAttention with the pair mask the package's BertEncoder.get_attention_mask
    # builds from a (batch, n) padding mask (bert.py itself cannot be imported on Python >= 3.10:
    # it imports collections.Sequence)
    att = mod.DisentangledSelfAttention(_DebertaConfig()).to(dtype)
    rel = torch.nn.Embedding(32, 16).to(dtype)
    both = stacked(att, rel)
    x = padded(16, dtype)
    ext = real_mask().long()[:, None, None, :]
    pair = ext * ext.squeeze(-2).unsqueeze(-1)  # (batch, 1, n, n)

    def run():
        out = att(x, pair, rel_embeddings=rel.weight)
        return out["hidden_states"] if isinstance(out, dict) else out
    return Trial(run, real_mask(), both, grad=False)


class _Projected(torch.nn.Module):
    """q, k, v projections for a functional attention (so the gradient check has parameters)."""
    def __init__(self, dim: int):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def forward(self, x):
        return self.qkv(x).chunk(3, dim=-1)


def _lighthubert_sliding(mode: str):
    def build(mod, dtype):
        # one head over utterances of 2 and 8 frames padded to 8, windows of 2 (+1) frames;
        # key_padding_mask True at padded frames (the shorter utterance first: the strided
        # path reads the mask of the first batch row only)
        proj = _Projected(8).to(dtype)
        sizes = (2, 8)
        x = padded(8, dtype, sizes)

        def run():
            q, k, v = proj(x)
            out, _ = mod.slide_window_attention_forward(q * 8 ** -0.5, k, v, swz=2, key_padding_mask=~real_mask(sizes),
                                                        num_heads=1, mode=mode)
            return out
        return Trial(run, real_mask(sizes), proj)
    return build


def _fairseq_downsampled(scalar_bias: bool):
    def build(mod, dtype):
        # decoder self-attention over target sequences of 3 and 5 tokens padded (right) to 5,
        # future steps masked as the self-attentive ConvS2S decoder asks for
        att = mod.DownsampledMultiHeadAttention(16, 16, 2, dropout=0.0, gated=False, downsample=False).to(dtype)
        x = padded(16, dtype).transpose(0, 1)  # (time, batch, channels)

        def run():
            out, _ = att(x, x, x, mask_future_timesteps=True, use_scalar_bias=scalar_bias)
            return out.transpose(0, 1)
        return Trial(run, real_mask(), att)
    return build


def _speechbrain_chunked(mod, dtype):
    # RelPosMHAXL as the streaming Conformer runs it: dynamic chunk training with chunks of 2
    # frames and 1 chunk of left context, the chunk mask as TransformerASR's
    # make_transformer_src_mask builds it, plus key padding; utterances of 2 and 8 frames
    # fp16/bf16 under CPU autocast: the module multiplies its float32 softmax output with half
    # values, so it runs in half only under autocast; built in fp32, as a training run builds it
    att = mod.RelPosMHAXL(16, 2, dropout=0.0)
    pos = mod.RelPosEncXL(16)
    sizes = (2, 8)
    x = padded(16, torch.float32, sizes)
    t, chunk, left = x.size(1), 2, 1
    idx = torch.arange(t)
    mask_idx = torch.arange(chunk, chunk * (t // chunk + 2), chunk).repeat_interleave(chunk)[:t]
    src_mask = idx[None] >= mask_idx[:, None]
    src_mask = src_mask + (idx[None] < (mask_idx - chunk * (left + 1))[:, None])

    def run():
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            out, _ = att(x, x, x, pos(x), key_padding_mask=~real_mask(sizes), attn_mask=src_mask)
        return out
    return Trial(run, real_mask(sizes), att)


def chunk_pair_mask(sizes, chunk: int) -> torch.Tensor:
    """(batch, n, n) True where the key is real and in the query's chunk (no left context)."""
    n = max(sizes)
    same_chunk = (torch.arange(n) // chunk)[:, None] == (torch.arange(n) // chunk)[None, :]
    return real_mask(sizes)[:, None, :] & same_chunk


def _funasr_chunk_attention(mod, dtype):
    # as the BAT case: streaming chunks of 2 frames without left context, utterances of 2 and 6
    att = mod.RelPositionMultiHeadedAttentionChunk(num_heads=2, embed_size=16).to(dtype)
    sizes = (2, 6)
    x = padded(16, dtype, sizes)
    t = x.size(1)
    pos = torch.randn(2, 2 * t - 1, 16).to(dtype)
    chunk = torch.arange(t) // 2
    return Trial(lambda: att(x, x, x, pos, ~real_mask(sizes), chunk_mask=chunk[:, None] != chunk[None, :]),
                 real_mask(sizes), att)


def _funasr_mha_chunked(mod, dtype):
    # MultiHeadedAttention with a (batch, T, T) mask (1 = may attend): key padding and chunks
    # of 2 frames without left context, as a chunked streaming encoder builds it
    att = mod.MultiHeadedAttention(n_head=2, n_feat=16, dropout_rate=0.0).to(dtype)
    sizes = (2, 6)
    x = padded(16, dtype, sizes)
    return Trial(lambda: att(x, x, x, chunk_pair_mask(sizes, 2)), real_mask(sizes), att)


def _funasr_sanm_scama(mod, dtype):
    # MultiHeadedAttentionSANM as the SCAMA chunk encoder runs it: its overlap_chunk splits
    # utterances of 3 and 8 frames into chunks of 4 (stride 2, look-back 1, FSMN shift of a
    # kernel of 3) and gives the chunked masks; the chunked frames within length are real
    chunking = importlib.import_module("funasr.models.scama.chunk_utilis")
    nets_utils = importlib.import_module("funasr.models.transformer.utils.nets_utils")
    kernel = 3
    att = mod.MultiHeadedAttentionSANM(n_head=2, in_feat=16, n_feat=16, dropout_rate=0.0, kernel_size=kernel).to(dtype)
    chunker = chunking.overlap_chunk(chunk_size=(4,), stride=(2,), pad_left=(0,), encoder_att_look_back_factor=(1,),
                                     shfit_fsmn=(kernel - 1) // 2)
    sizes = (3, 8)
    lens = torch.tensor(sizes)
    chunk_outs = chunker.gen_chunk_mask(lens, 0)
    xs, chunked_lens = chunker.split_chunk(padded(16, dtype, sizes), lens, chunk_outs=chunk_outs)
    masks = ~nets_utils.make_pad_mask(chunked_lens)[:, None, :]
    shift = chunker.get_mask_shfit_chunk(chunk_outs, "cpu", len(sizes), dtype=dtype)
    att_chunks = chunker.get_mask_att_chunk_encoder(chunk_outs, "cpu", len(sizes), dtype=dtype)
    return Trial(lambda: att(xs, masks, shift, att_chunks), masks[:, 0], att)


def _loftr_full(mod, dtype):
    # LoFTR's coarse transformer (self, cross, self, cross) with full attention on two pairs of
    # images padded to a common size: feature maps of 3 and 5 positions padded to 5 on each side
    net = mod.LocalFeatureTransformer({"d_model": 16, "nhead": 2, "layer_names": ["self", "cross"] * 2,
                                       "attention": "full"}).to(dtype)
    f0, f1 = padded(16, dtype), padded(16, dtype, (5, 3))
    m0, m1 = real_mask(), real_mask((5, 3))
    return Trial(lambda: net(f0, f1, m0, m1)[0], m0, net)


def _esmfold_attention(mod, dtype):
    att = mod.Attention(embed_dim=16, num_heads=2, head_width=8, gated=True).to(dtype)
    x = padded(16, dtype)
    return Trial(lambda: att(x, mask=real_mask())[0], real_mask(), att)


def _zeta_mmca(mod, dtype):
    # visual tokens of 4 positions; text of a leading token plus 2 and 4 tokens padded to 4
    att = mod.MultiModalCausalAttention(dim=16, heads=2, dropout=0.0).to(dtype)
    vis = torch.randn(2, 4, 16).to(dtype)
    sizes = (2, 4)
    txt = torch.cat([torch.randn(2, 1, 16), torch.randn(2, 4, 16) * real_mask(sizes)[..., None]], 1).to(dtype)
    real = torch.cat([torch.ones(2, 1, dtype=torch.bool), real_mask(sizes)], 1)
    return Trial(lambda: att(vis, txt, mask=real_mask(sizes))[1], real, att)


def _mega_chunked(mod, dtype):
    # Mega with chunked softmax attention (chunks of 2) on sequences of 2 and 6 tokens padded to 6
    cfg = mod.MegaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, intermediate_size=32,
                         ema_projection_size=4, shared_representation_size=8, use_chunking=True, chunk_size=2,
                         attention_activation="softmax", max_positions=32, dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0, nffn_hidden_size=32)
    net = mod.MegaModel(cfg, add_pooling_layer=False).to(dtype)
    sizes = (2, 6)
    ids = torch.randint(1, 64, real_mask(sizes).shape) * real_mask(sizes)
    return Trial(lambda: net(input_ids=ids, attention_mask=real_mask(sizes).long()).last_hidden_state,
                 real_mask(sizes), net)


CASES_2 = [
    Case("transformers/cpmant", "transformers.models.cpmant.modeling_cpmant", _cpmant,
         "CpmAntModel (2 layers) on sequences of 3 and 5 tokens padded on the left (token 0), its own mask",
         **_transformers_case("4.31.0")),
    Case("transformers/deberta-4.15", "transformers.models.deberta.modeling_deberta",
         _deberta_hf("DebertaModel", "DebertaConfig"),
         "DebertaModel (2 layers, relative attention) with attention_mask on sentences of 3 and 5 tokens padded to 5; "
         "no gradient check (XSoftmax.backward calls the torch<1.11 _softmax_backward_data signature)",
         **_transformers_case("4.15.0")),
    Case("transformers/deberta_v2-4.15", "transformers.models.deberta_v2.modeling_deberta_v2",
         _deberta_hf("DebertaV2Model", "DebertaV2Config"),
         "DebertaV2Model, same batch; no gradient check (as above)", **_transformers_case("4.15.0")),
    Case("transformers/sew_d-4.15", "transformers.models.sew_d.modeling_sew_d", _sew_d,
         "SEWDEncoder (2 layers) with attention_mask on utterances of 4 and 10 frames padded to 10; no gradient check",
         **_transformers_case("4.15.0")),
    Case("transformers/deberta-4.25", "transformers.models.deberta.modeling_deberta",
         _deberta_hf("DebertaModel", "DebertaConfig", grad=True), "DebertaModel, same batch, on the later release",
         **_transformers_case("4.25.1")),
    Case("deberta/ops", "DeBERTa.deberta.disentangled_attention", _deberta_package,
         "the package's DisentangledSelfAttention (its XSoftmax from ops.py) with the pair mask its encoder builds, "
         "sentences of 3 and 5 tokens padded to 5; no gradient check",
         bare_packages=True, package_attrs={"DeBERTa.utils": {"get_logger": logging.getLogger}}),
    Case("s3prl/lighthubert_sliding_attn", "s3prl.upstream.lighthubert.lighthubert.functional.sliding_attn",
         _lighthubert_sliding("mask"),
         "slide_window_attention_forward (mode 'mask'), window 2, key padding, utterances of 2 and 8 frames"),
    Case("s3prl/lighthubert_sliding_attn", "s3prl.upstream.lighthubert.lighthubert.functional.sliding_attn",
         _lighthubert_sliding("stride"), "the same with mode 'stride' (as_strided windows)"),
    Case("fairseq/downsampled_mha", "fairseq.modules.downsampled_multihead_attention", _fairseq_downsampled(False),
         "DownsampledMultiHeadAttention, mask_future_timesteps=True, use_scalar_bias=False, sequences of 3 and 5"),
    Case("fairseq/downsampled_mha", "fairseq.modules.downsampled_multihead_attention", _fairseq_downsampled(True),
         "the same with use_scalar_bias=True (as fconv_self_att's SelfAttention calls it)"),
    Case("speechbrain/attention-1.1.2", "speechbrain.nnet.attention", _speechbrain_chunked,
         "RelPosMHAXL with a dynamic-chunk mask (chunks of 2, 1 left chunk) and key padding, utterances of 2 and 8 "
         "frames padded to 8; fp16/bf16 under CPU autocast (speechbrain.dataio / utils.logger stand-ins: only "
         "length_to_mask and get_logger)",
         stubs={"speechbrain.dataio.dataio": {"length_to_mask": None},
                "speechbrain.utils.logger": {"get_logger": logging.getLogger}}),
    Case("funasr/transformer_attention-1.4.16", "funasr.models.transformer.attention", _funasr_chunk_attention,
         "RelPositionMultiHeadedAttentionChunk on utterances of 2 and 6 frames, chunks of 2, no left context"),
    Case("funasr/transformer_attention-1.4.16", "funasr.models.transformer.attention", _funasr_mha_chunked,
         "MultiHeadedAttention with a (batch, T, T) mask: key padding and chunks of 2 without left context"),
    Case("funasr/sanm_attention-1.4.16", "funasr.models.sanm.attention", _funasr_sanm_scama,
         "MultiHeadedAttentionSANM with SCAMA's overlap_chunk masks (chunks of 4, stride 2, look-back 1, FSMN "
         "shift 1) on utterances of 3 and 8 frames"),
    Case("funasr/transformer_attention", "funasr.models.transformer.attention", _funasr_mha_chunked,
         "the same MultiHeadedAttention case on the earlier release"),
    Case("kornia/loftr_attention", "kornia.feature.loftr.loftr_module.transformer", _loftr_full,
         "LocalFeatureTransformer (self, cross x2) with full attention and mask0/mask1 on feature maps of 3/5 and 5/3 "
         "positions padded to 5", bare_packages=True),
    Case("fair-esm/esmfold_misc", "esm.esmfold.v1.misc", _esmfold_attention,
         "ESMFold Attention (gated) with the sequence mask, proteins of 3 and 5 residues padded to 5 "
         "(openfold stand-ins: misc imports it only for PDB output)",
         stubs={"openfold": {}, "openfold.np": {"residue_constants": None},
                "openfold.np.protein": {"Protein": object, "to_pdb": None},
                "openfold.utils": {}, "openfold.utils.feats": {"atom14_to_atom37": None}}),
    Case("zetascale/multi_modal_causal_attention", "zeta.nn.attention.multi_modal_causal_attention", _zeta_mmca,
         "MultiModalCausalAttention, text of 1 + 2 and 1 + 4 tokens padded to 5, mask on the padded text",
         bare_packages=True),
    Case("transformers/mega", "transformers.models.mega.modeling_mega", _mega_chunked,
         "MegaModel (2 layers, chunked softmax attention, chunks of 2) on sequences of 2 and 6 tokens padded to 6",
         **_transformers_case("4.31.0")),
]


# --- empty items: a batch item whose every key is padding ------------------------------

#: an empty item (no real token), a padded one and a full one, padded to 5
EMPTY_SIZES = (0, 3, 5)


def _empty_items(sizes) -> tuple[int, ...]:
    return tuple(i for i, n in enumerate(sizes) if n == 0)


def _distilbert(sizes):
    def build(mod, dtype):
        # DistilBertModel (2 layers) on token ids padded (id 0) to the batch maximum, with the
        # (batch, n) attention_mask a padded batch comes with: 1 at real tokens, 0 at padding
        cfg = mod.DistilBertConfig(vocab_size_or_config_json_file=64, max_position_embeddings=32, n_layers=2,
                                   n_heads=2, dim=16, hidden_dim=32, dropout=0.0, attention_dropout=0.0)
        with torch.no_grad():  # its sinusoidal table is written in place into a leaf (fine on torch 1.x)
            net = mod.DistilBertModel(cfg).to(dtype)
        real = real_mask(sizes)
        ids = torch.randint(1, 64, real.shape) * real
        return Trial(lambda: net(ids, attention_mask=real.long())[0], real, net, empty_items=_empty_items(sizes))
    return build


def _onmt_global_attention(sizes):
    def build(mod, dtype):
        # GlobalAttention ("general", the RNN decoder's default) of 4 target steps of every item
        # over its source memory bank, padded to the longest source; memory_lengths as the
        # encoder returns them (0 for an empty source line); every target step is real
        att = mod.GlobalAttention(16, attn_type="general").to(dtype)
        memory = padded(16, dtype, sizes)
        target = torch.randn(len(sizes), 4, 16).to(dtype)
        lengths = torch.tensor(sizes)

        def run():
            return att(target, memory, memory_lengths=lengths)[0].transpose(0, 1)  # (batch, tgt, dim)
        return Trial(run, torch.ones(len(sizes), 4, dtype=torch.bool), att, empty_items=_empty_items(sizes))
    return build


def _fairseq_mha(sizes):
    def build(mod, dtype):
        # encoder self-attention with key_padding_mask (True at pads) on sentences padded to the
        # longest; fairseq's own path (enable_torch_version off: with it on, torch's
        # multi_head_attention_forward runs instead and the labelled fill is never reached)
        att = mod.MultiheadAttention(16, 2, self_attention=True).to(dtype)
        att.enable_torch_version = False
        x = padded(16, dtype, sizes).transpose(0, 1)  # (time, batch, channels)

        def run():
            return att(x, x, x, key_padding_mask=~real_mask(sizes))[0].transpose(0, 1)
        return Trial(run, real_mask(sizes), att, empty_items=_empty_items(sizes))
    return build


_FAIRSEQ_0_9 = dict(package_exports={"fairseq.modules": "fairseq.modules.gelu"})

CASES_3 = [
    Case("pytorch-transformers/modeling_distilbert", "pytorch_transformers.modeling_distilbert", _distilbert(SIZES),
         "DistilBertModel (2 layers) with attention_mask on sentences of 3 and 5 tokens padded to 5"),
    Case("pytorch-transformers/modeling_distilbert", "pytorch_transformers.modeling_distilbert",
         _distilbert(EMPTY_SIZES),
         "the same on sentences of 0, 3 and 5 tokens: item 0's attention_mask is all 0, as padding an empty item "
         "gives it (the tokenizer's [CLS]/[SEP] would leave it one real key)"),
    Case("OpenNMT-py/global_attention", "onmt.modules.global_attention", _onmt_global_attention(SIZES),
         "GlobalAttention (general) of 4 target steps over sources of 3 and 5 tokens, memory_lengths (3, 5)"),
    Case("OpenNMT-py/global_attention", "onmt.modules.global_attention", _onmt_global_attention(EMPTY_SIZES),
         "the same over sources of 0, 3 and 5 tokens: a zero-length source (memory_lengths 0)"),
    Case("fairseq/multihead_attention", "fairseq.modules.multihead_attention", _fairseq_mha(SIZES),
         "MultiheadAttention (self-attention, fairseq's own path) with key_padding_mask on sentences of 3 and 5",
         **_FAIRSEQ_0_9),
    Case("fairseq/multihead_attention", "fairseq.modules.multihead_attention", _fairseq_mha(EMPTY_SIZES),
         "the same on sentences of 0, 3 and 5: item 0's every key is padding", **_FAIRSEQ_0_9),
]


class _PaddingDirection(enum.Enum):
    right = "right"
    left = "left"


CASES = [
    Case("dgl/biased_mha", "dgl.nn.pytorch.gt.biased_mha", _dgl_biased_mha(False),
         "two BiasedMHA layers on 2 graphs of 3 and 5 nodes padded to 5, attn_mask on padded rows and columns"),
    Case("dgl/biased_mha", "dgl.nn.pytorch.gt.biased_mha", _dgl_biased_mha(True),
         "the same with attn_mask on padded columns (keys) only"),
    Case("dgl/graphormer", "dgl.nn.pytorch.gt.graphormer", _dgl_graphormer,
         "two GraphormerLayers, same padded batch and mask"),
    Case("dgl/egt", "dgl.nn.pytorch.gt.egt", _dgl_egt,
         "two EGTLayers, additive -inf mask on pairs with a padded node"),
    Case("supar/transformer", "supar.modules.transformer", _supar_relpos_encoder,
         "RelativePositionTransformerEncoder (2 layers) on sentences of 3 and 5 words padded to 5"),
    Case("graphtransformer-digress/model", "graphtransformer_digress.model", _digress,
         "DiGress GraphTransformer (2 layers) on graphs of 3 and 5 nodes with node_mask"),
    Case("pytorch-forecasting/tft_sub_modules", "pytorch_forecasting.models.temporal_fusion_transformer.sub_modules",
         _tft_attention, "InterpretableMultiHeadAttention, mask True on pairs with a padded step"),
    Case("s3prl/wavlm_modules", "s3prl.upstream.wavlm.modules", _wavlm_mha,
         "WavLM MultiheadAttention with key_padding_mask, padded frames also queries"),
    Case("isab-pytorch/isab", "isab_pytorch.isab_pytorch", _isab, "ISAB on sets of 3 and 5 padded to 5, mask"),
    Case("point-transformer-pytorch/multihead_point_transformer",
         "point_transformer_pytorch.multihead_point_transformer_pytorch", _point_transformer,
         "MultiheadPointTransformerLayer on clouds of 3 and 5 points padded to 5, mask"),
    Case("graph-transformer-pytorch/graph_transformer", "graph_transformer_pytorch.graph_transformer_pytorch",
         _graph_transformer, "GraphTransformer (2 layers) on graphs of 3 and 5 nodes, node mask",
         deps=("rotary-embedding-torch==0.1.5",)),
    Case("dgl/glob", "dgl.nn.pytorch.glob", _dgl_set_transformer_encoder,
         "SetTransformerEncoder (2 SAB layers) on 2 graphs of 3 and 5 nodes (a stand-in batched graph gives the sizes)"),
    Case("dgl/glob", "dgl.nn.pytorch.glob", _dgl_set_transformer_decoder,
         "SetTransformerEncoder + SetTransformerDecoder (PMA, k=2) on the same graphs"),
    Case("rl4co/attention", "rl4co.models.nn.attention", _rl4co_logits(False),
         "LogitAttention, one pointer step on graphs of 3 and 5 nodes padded to 5 (padded and visited nodes masked)",
         stubs={"rl4co.utils": {"get_pylogger": logging.getLogger}}),
    Case("rl4co/attention", "rl4co.models.nn.attention", _rl4co_logits(True),
         "LogitAttention, same step with graph 0 finished (all its nodes visited) while graph 1 decodes "
         "(a batch state; whether an environment produces it is the labeller's question)",
         stubs={"rl4co.utils": {"get_pylogger": logging.getLogger}}),
    Case("funasr/bat_attention", "funasr.models.bat.attention", _funasr_bat_chunks,
         "RelPositionMultiHeadedAttentionChunk on utterances of 2 and 6 frames, chunks of 2, no left context"),
    Case("ai2-olmo/collator", "olmo.data.collator", _olmo_collator,
         "DataCollator on sequences of 3 and 5 tokens with causal attention biases, padded right; the "
         "collated bias into a softmax over keys; the model itself is not run (olmo.config stands in for PaddingDirection only: "
         "the real one imports omegaconf)",
         stubs={"olmo.config": {"PaddingDirection": _PaddingDirection, "TrainConfig": object}}),
    Case("zetascale/multihead_attention", "zeta.nn.attention.multihead_attention", _zeta_mha,
         "MultiheadAttention (self-attention) with key_padding_mask on sequences of 3 and 5 padded to 5",
         bare_packages=True),
    Case("funasr/emotion2vec_modules", "funasr.models.emotion2vec.modules", _emotion2vec_alt_attention,
         "AltAttention with padding_mask on sequences of 3 and 5 padded to 5"),
    Case("funasr/data2vec_mha", "funasr.models.data2vec.multihead_attention", _data2vec_mha,
         "data2vec MultiheadAttention with key_padding_mask, padded frames also queries"),
] + CASES_2 + CASES_3


def verdict_one(o: Outcome) -> str:
    if not o.ran:
        return "not run"
    if o.inf_rows:
        found = f"all-masked rows confirmed ({o.inf_rows} all -inf softmax rows)"
        if o.empty_items:
            found += f" with {o.empty_items} empty item(s), NaN {'reaches' if o.nan_other_items else 'not in'} the other items"
        if o.nan_real or o.nan_grad:
            where = [w for w, hit in (("real positions", o.nan_real), ("padded positions", o.nan_padded and not o.nan_real),
                                      ("gradients", o.nan_grad)) if hit]
            return f"{found}, NaN reaches {' and '.join(where)}"
        if o.error:
            return f"{found}, the run stops: {o.error}"
        if o.nan_padded:
            return f"{found}, NaN only at padded positions"
        return f"{found}, NaN does not reach the output"
    if o.error:
        return f"no all-masked row seen before: {o.error}"
    if not o.softmax_calls:
        return "softmax not observed (a fused kernel): rows not checked"
    if o.filled_rows:
        return f"rows fully masked with a finite fill ({o.filled_rows}): uniform softmax, no NaN" + (
            ", NaN elsewhere" if o.nan_real or o.nan_grad else "")
    return "no all-masked row" + (", but NaN in the output" if o.nan_real or o.nan_grad else "")


def verdict(outs: list[Outcome]) -> str:
    """One line for the case; per dtype where the dtypes disagree."""
    by_text: dict[str, list[str]] = {}
    for o in outs:
        by_text.setdefault(verdict_one(o), []).append(o.dtype)
    if len(by_text) == 1:
        return next(iter(by_text))
    return "; ".join(f"{'/'.join(d)}: {text}" for text, d in by_text.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[], help="only this corpus id (repeatable)")
    ap.add_argument("--json", help="write every outcome here")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.case or c.corpus_id in args.case]
    results, not_run = [], 0
    for case in cases:
        outs = [run_case(case, name) for name in DTYPES]
        results.extend(outs)
        print(f"{case.corpus_id}: {verdict(outs)}\n  {case.about}")
        for o in outs:
            if not o.ran:
                print(f"  {o.dtype}: not run: {o.error}")
                continue
            print(f"  {o.dtype}: -inf rows {o.inf_rows}, filled rows {o.filled_rows} ({o.softmax_calls} softmax calls), "
                  f"nan softmax {o.nan_softmax}, nan padded {o.nan_padded}, nan real {o.nan_real}, "
                  f"nan grad {o.nan_grad}"
                  + (f", nan other items {o.nan_other_items}" if o.empty_items else "")
                  + (f", error {o.error}" if o.error else ""))
        not_run += not any(o.ran for o in outs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(o) for o in results], f, indent=1)
    print(f"{len(cases) - not_run}/{len(cases)} cases ran")
    return 1 if not_run else 0


if __name__ == "__main__":
    sys.exit(main())
