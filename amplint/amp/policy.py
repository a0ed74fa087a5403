"""Op-casting policies as plain data: the bundled engine's O1 lists and PyTorch autocast's.

This module imports nothing but the standard library (no torch), so the linter can read it
at start-up. Two policies are described:

``"amplint"``
    What ``amplint.amp`` does under O1: apex's lists, modernised. One list for every device,
    so O1 gives the same dtypes on CPU and CUDA. Names are Python-level qualified names, one
    entry per place the function lives (``torch.nn.functional.softmax``, ``torch.softmax``,
    ``torch.Tensor.softmax``): the engine patches exactly these attributes, and a call that
    reaches the op another way (a name imported before ``initialize``, a C++-internal call)
    is not cast.

``"torch"``
    What ``torch.autocast`` does, per device (``"cuda"`` and ``"cpu"``), as ATen op names
    from ``aten/src/ATen/autocast_mode.{h,cpp}`` (overload suffixes dropped). Look a Python
    name up with :func:`cast_of`, which maps it to its ATen name (:func:`aten_name`).

Cast kinds returned by :func:`cast_of`:

* ``"half"``    inputs cast to the low-precision dtype (fp16 or bf16);
* ``"float"``   inputs cast to fp32 (the op runs in fp32 and returns fp32);
* ``"promote"`` mixed low-precision/fp32 inputs run in fp32;
* ``"banned"``  raises when given low-precision inputs;
* ``None``      unlisted: runs in whatever dtype its inputs have.

Where the ``amplint`` lists differ from apex (all deliberate, see ``APEX_DIFFERENCES``):
modern ops added (``scaled_dot_product_attention``, ``linalg.vecdot``, ``linalg.multi_dot``,
``log1p``, ``logsumexp``, ``cdist``, ``rms_norm``, ``huber_loss``, ``Tensor.softmax`` ...);
``gelu`` and ``Tensor.cpu`` removed; arithmetic/comparison operators and ``cat``/``stack``
are left to PyTorch's own type promotion, which gives the fp32 result apex's wrappers gave.
``einsum`` stays unlisted, as in apex: register it with
``amp.register_half_function(torch, "einsum")`` to run it in half.
"""
from __future__ import annotations

#: apex's opt levels: O0 fp32, O1 per-op casting (these lists), O2 half model with fp32
#: master weights, O3 everything half -- one tuple for the linter, engine and verifier
OPT_LEVELS = ("O0", "O1", "O2", "O3")

HALF = "half"
FLOAT = "float"
PROMOTE = "promote"
BANNED = "banned"

_F = "torch.nn.functional."
_T = "torch."
_TT = "torch.Tensor."
_LA = "torch.linalg."
_SP = "torch.special."
_VF = "torch._VF."


def _q(prefix: str, names: str) -> tuple[str, ...]:
    return tuple(prefix + n for n in names.split())


# --------------------------------------------------------------------------------------------
# amplint O1 (the bundled engine)
# --------------------------------------------------------------------------------------------

#: Run in the low-precision dtype (fp16, or bf16 with ``half_dtype=torch.bfloat16``).
O1_HALF: tuple[str, ...] = (
    _q(_F, "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc "
           "linear prelu scaled_dot_product_attention")
    + _q(_T, "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc "
             "prelu addmm addmv addr matmul mm mv addbmm baddbmm bmm chain_matmul")
    + _q(_TT, "__matmul__ __rmatmul__ matmul mm mv addmm addmv addr addbmm baddbmm bmm prelu")
    + _q(_LA, "matmul multi_dot vecdot")
    # recurrent layers and cells (nn.RNN/LSTM/GRU, nn.*Cell reach these): input, hidden state
    # and weights in half, as apex (which patched _VF) and torch.autocast on CUDA do
    + _q(_VF, "rnn_tanh rnn_relu lstm gru rnn_tanh_cell rnn_relu_cell lstm_cell gru_cell")
)

#: Run in fp32 (inputs in fp16/bf16 are cast up; the result is fp32).
O1_FLOAT: tuple[str, ...] = (
    _q(_F, "interpolate grid_sample softplus softmin log_softmax softmax layer_norm group_norm "
           "rms_norm local_response_norm normalize cosine_similarity pdist poisson_nll_loss "
           "gaussian_nll_loss cosine_embedding_loss cross_entropy hinge_embedding_loss kl_div "
           "l1_loss mse_loss huber_loss margin_ranking_loss multilabel_margin_loss "
           "multilabel_soft_margin_loss multi_margin_loss nll_loss binary_cross_entropy_with_logits "
           "smooth_l1_loss soft_margin_loss triplet_margin_loss ctc_loss")
    + _q(_T, "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow "
             "cumprod cumsum dist norm prod std var std_mean var_mean sum renorm logsumexp cdist "
             "pdist cosine_similarity softmax log_softmax layer_norm group_norm rms_norm")
    + _q(_TT, "__pow__ __rpow__ acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal "
              "rsqrt sinh tan pow cumprod cumsum dist norm prod std var sum renorm logsumexp "
              "softmax log_softmax")
    + _q(_LA, "norm vector_norm matrix_norm")
    + _q(_SP, "softmax log_softmax logsumexp expm1 log1p")
)

#: Mixed fp16/bf16 + fp32 inputs are cast to fp32 by a wrapper (these ops refuse mixed dtypes).
O1_PROMOTE: tuple[str, ...] = (
    _q(_T, "dot vdot cross tensordot bilinear index_put scatter_add")
    + _q(_TT, "dot vdot cross index_put scatter_add")
    + _q(_F, "bilinear")
    + _q(_LA, "cross")
)

#: apex wrapped these to promote; PyTorch's type promotion now gives the same fp32 result,
#: so the engine does not wrap them (no per-call overhead). ``cast_of`` reports "promote".
O1_NATIVE_PROMOTE: tuple[str, ...] = (
    _q(_T, "addcdiv addcmul atan2 add sub mul div eq ne ge gt le lt cat stack")
    + _q(_TT, "__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ "
              "__truediv__ __rtruediv__ __itruediv__ __eq__ __ne__ __ge__ __gt__ __le__ __lt__ "
              "addcdiv addcmul atan2 add sub mul div eq ne ge gt le lt")
)

#: fp32-list ops that take a ``dtype=`` argument: under O1 they get ``dtype=torch.float32``
#: (what torch.autocast calls fp32_set_opt_dtype) instead of an fp32 copy of their input, which
#: saves a full-size cast in forward and backward. Value: positional index at which a caller
#: could pass dtype (a call with that many positional arguments is left alone).
O1_FLOAT_DTYPE_ARGUMENT: dict[str, int] = {
    "torch.nn.functional.softmax": 3, "torch.nn.functional.log_softmax": 3,
    "torch.nn.functional.softmin": 3,
    "torch.softmax": 2, "torch.log_softmax": 2, "torch.Tensor.softmax": 2,
    "torch.Tensor.log_softmax": 2, "torch.special.softmax": 2, "torch.special.log_softmax": 2,
    "torch.sum": 99, "torch.Tensor.sum": 3, "torch.cumsum": 99, "torch.Tensor.cumsum": 2,
    "torch.cumprod": 99, "torch.Tensor.cumprod": 2, "torch.prod": 99, "torch.Tensor.prod": 3,
}

#: Raise ``NotImplementedError`` when any floating input is fp16/bf16.
O1_BANNED: tuple[str, ...] = (_F + "binary_cross_entropy",)

#: In-place forms of fp32-list ops: raise when the tensor written is fp16/bf16, because the
#: result cannot be fp32 in place (apex did the same).
O1_INPLACE_GUARDED: tuple[str, ...] = (
    _q(_T, "acos_ asin_ cosh_ exp_ expm1_ log_ log10_ log2_ reciprocal_ rsqrt_ sinh_ tan_")
    + _q(_TT, "__ipow__ acos_ asin_ cosh_ erfinv_ exp_ expm1_ log_ log10_ log2_ log1p_ "
              "reciprocal_ rsqrt_ sinh_ tan_ pow_ cumprod_ cumsum_ renorm_")
)

#: Module checks that would refuse what the casts above produce, relaxed under O1 (only the
#: dtype part: ``nn.RNNBase`` refuses an input whose dtype differs from its fp32 weights
#: unless torch.autocast is on; its shape checks still run).
O1_RELAXED_CHECKS: tuple[str, ...] = ("torch.nn.RNNBase.check_input",)

#: Notable ops on no list, and why.
O1_UNLISTED_NOTES: dict[str, str] = {
    _T + "einsum": "unlisted as in apex: runs in its inputs' dtype (fp32 when a weight is "
                   "involved); amp.register_half_function(torch, 'einsum') makes it run in half",
    _F + "gelu": "apex ran gelu in fp32; PyTorch's gelu kernels compute in fp32 internally, so "
                 "amplint (like torch.autocast) leaves it in the input dtype",
    _TT + "cpu": "apex cast tensors to fp32 on .cpu(); amplint does not change dtypes there",
    _F + "batch_norm": "unlisted (apex, autocast): fp16 input with fp32 weights is supported natively",
    _F + "embedding": "unlisted: the output has the weight's dtype (fp32 under O1)",
    _T + "mean": "unlisted (apex on torch>=1.1, autocast): runs in the input dtype",
}

#: Where the amplint lists deliberately differ from apex's.
APEX_DIFFERENCES: dict[str, str] = {
    "added": "scaled_dot_product_attention, linalg.vecdot/multi_dot/matmul, chain_matmul, "
             "Tensor.__rmatmul__/prelu (half); log1p, logsumexp, cdist, pdist, rms_norm, "
             "huber_loss, gaussian_nll_loss, std_mean/var_mean, linalg norms, Tensor.softmax/"
             "log_softmax, torch.softmax/log_softmax/layer_norm/group_norm, torch.special.* "
             "(fp32); vdot, tensordot, index_put, scatter_add, linalg.cross (promote)",
    "removed": "gelu (fp32 in apex), Tensor.cpu (fp32 in apex)",
    "not wrapped": "arithmetic and comparison operators, cat, stack, addcmul, addcdiv, atan2: "
                   "native type promotion already runs fp16 x fp32 in fp32",
    "not cast": "float64 tensors (apex cast them to half)",
}

#: ``nn.Module`` classes and the function their ``forward`` reaches (for module-style lookups).
#: functions whose default is the vector 2-norm (``p`` for ``torch.norm``, ``ord`` for the
#: ``linalg`` ones): a vector divided by one of these is bounded by 1 (amplint/ranges.py)
VECTOR_NORMS = frozenset((_T + "norm", _LA + "norm", _LA + "vector_norm"))

MODULE_FUNCTIONS: dict[str, str] = {
    "torch.nn.Linear": _F + "linear",
    "torch.nn.Bilinear": _F + "bilinear",
    "torch.nn.Conv1d": _F + "conv1d",
    "torch.nn.Conv2d": _F + "conv2d",
    "torch.nn.Conv3d": _F + "conv3d",
    "torch.nn.ConvTranspose1d": _F + "conv_transpose1d",
    "torch.nn.ConvTranspose2d": _F + "conv_transpose2d",
    "torch.nn.ConvTranspose3d": _F + "conv_transpose3d",
    "torch.nn.PReLU": _F + "prelu",
    "torch.nn.Softmax": _F + "softmax",
    "torch.nn.LogSoftmax": _F + "log_softmax",
    "torch.nn.Softmin": _F + "softmin",
    "torch.nn.Softplus": _F + "softplus",
    "torch.nn.GELU": _F + "gelu",
    "torch.nn.LayerNorm": _F + "layer_norm",
    "torch.nn.GroupNorm": _F + "group_norm",
    "torch.nn.RMSNorm": _F + "rms_norm",
    "torch.nn.LocalResponseNorm": _F + "local_response_norm",
    "torch.nn.Upsample": _F + "interpolate",
    "torch.nn.CosineSimilarity": _F + "cosine_similarity",
    "torch.nn.PairwiseDistance": _F + "pairwise_distance",
    "torch.nn.CrossEntropyLoss": _F + "cross_entropy",
    "torch.nn.NLLLoss": _F + "nll_loss",
    "torch.nn.MSELoss": _F + "mse_loss",
    "torch.nn.L1Loss": _F + "l1_loss",
    "torch.nn.SmoothL1Loss": _F + "smooth_l1_loss",
    "torch.nn.HuberLoss": _F + "huber_loss",
    "torch.nn.KLDivLoss": _F + "kl_div",
    "torch.nn.BCELoss": _F + "binary_cross_entropy",
    "torch.nn.BCEWithLogitsLoss": _F + "binary_cross_entropy_with_logits",
    "torch.nn.CTCLoss": _F + "ctc_loss",
    "torch.nn.PoissonNLLLoss": _F + "poisson_nll_loss",
    "torch.nn.GaussianNLLLoss": _F + "gaussian_nll_loss",
    "torch.nn.MarginRankingLoss": _F + "margin_ranking_loss",
    "torch.nn.HingeEmbeddingLoss": _F + "hinge_embedding_loss",
    "torch.nn.CosineEmbeddingLoss": _F + "cosine_embedding_loss",
    "torch.nn.MultiLabelMarginLoss": _F + "multilabel_margin_loss",
    "torch.nn.MultiLabelSoftMarginLoss": _F + "multilabel_soft_margin_loss",
    "torch.nn.MultiMarginLoss": _F + "multi_margin_loss",
    "torch.nn.SoftMarginLoss": _F + "soft_margin_loss",
    "torch.nn.TripletMarginLoss": _F + "triplet_margin_loss",
    "torch.nn.RNN": _VF + "rnn_tanh",
    "torch.nn.LSTM": _VF + "lstm",
    "torch.nn.GRU": _VF + "gru",
    "torch.nn.RNNCell": _VF + "rnn_tanh_cell",
    "torch.nn.LSTMCell": _VF + "lstm_cell",
    "torch.nn.GRUCell": _VF + "gru_cell",
}

#: O2/O3 ``keep_fp32_modules``: kept in fp32 by default (affine BatchNorm, as apex's
#: ``keep_batchnorm_fp32``), and the classes that may be opted in by name.
O2_KEEP_FP32_DEFAULT: tuple[str, ...] = ("torch.nn.modules.batchnorm._BatchNorm",)
O2_KEEP_FP32_OPT_IN: tuple[str, ...] = ("torch.nn.Softmax", "torch.nn.LogSoftmax", "torch.nn.LayerNorm")

BANNED_MESSAGE = (
    "amplint.amp O1: F.binary_cross_entropy / nn.BCELoss got a {dtype} input. Its backward can "
    "produce gradients that fp16 cannot hold, so it is banned under O1 (as in apex and "
    "torch.autocast on CUDA).\nFix: drop the sigmoid in front of it and use "
    "F.binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss (safe, runs in fp32), or run "
    "the sigmoid in fp32 with amp.register_float_function(torch, 'sigmoid')."
)

# --------------------------------------------------------------------------------------------
# torch.autocast (ATen op names, overloads dropped) — reference doc sections 7.3 / 7.4
# --------------------------------------------------------------------------------------------

_CUDA_LOWER = frozenset((
    "_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d "
    "convolution cudnn_convolution cudnn_convolution_transpose prelu addmm addmv addr matmul einsum "
    "mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
    "_thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
    "_scaled_dot_product_flash_attention scaled_dot_product_attention _cudnn_rnn").split())
_CUDA_FP32 = frozenset((
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus "
    "layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity "
    "poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div "
    "l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss "
    "soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist "
    "pdist cdist renorm logsumexp upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d "
    "_upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d "
    "upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d "
    "_upsample_bicubic2d_aa").split())
_CUDA_FP32_SET_OPT_DTYPE = frozenset((
    "prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum").split())
_CUDA_FP32_APPEND_DTYPE = frozenset(("norm",))
_CUDA_PROMOTE = frozenset((
    "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot "
    "scatter_add").split())
_CUDA_BANNED = frozenset(("binary_cross_entropy",))

_CPU_LOWER = frozenset((
    "conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm _addmm_activation addbmm linear "
    "_convolution matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d "
    "conv_transpose3d prelu scaled_dot_product_attention _native_multi_head_attention").split())
_CPU_FP32 = frozenset((
    "avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist "
    "grid_sampler_2d _grid_sampler_2d_cpu_fallback grid_sampler_3d trace view_as_complex cholesky "
    "cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d "
    "max_unpool3d adaptive_avg_pool3d reflection_pad1d reflection_pad2d replication_pad1d "
    "replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss nll_loss2d "
    "hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy_loss l1_loss huber_loss "
    "margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div "
    "multilabel_margin_loss binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 fft_ifft2 "
    "fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft "
    "fft_ihfft linalg_cond linalg_matrix_rank linalg_solve linalg_cholesky linalg_svdvals "
    "linalg_eigvals linalg_eigvalsh linalg_inv linalg_householder_product linalg_tensorinv "
    "linalg_tensorsolve fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd "
    "triangular_solve fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d "
    "multilabel_margin_loss_forward linalg_qr linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh "
    "linalg_lstsq linalg_inv_ex").split())
_CPU_PROMOTE = frozenset(("stack cat index_copy").split())

#: torch.autocast's lists, keyed by device then by cast policy (ATen names).
TORCH_AUTOCAST: dict[str, dict[str, frozenset]] = {
    "cuda": {
        "lower_precision_fp": _CUDA_LOWER,
        "fp32": _CUDA_FP32,
        "fp32_set_opt_dtype": _CUDA_FP32_SET_OPT_DTYPE,
        "fp32_append_dtype": _CUDA_FP32_APPEND_DTYPE,
        "promote": _CUDA_PROMOTE,
        "banned": _CUDA_BANNED,
    },
    "cpu": {
        "lower_precision_fp": _CPU_LOWER,
        "fp32": _CPU_FP32,
        "promote": _CPU_PROMOTE,
    },
}

_TORCH_KIND = {
    "lower_precision_fp": HALF, "fp32": FLOAT, "fp32_set_opt_dtype": FLOAT,
    "fp32_append_dtype": FLOAT, "promote": PROMOTE, "banned": BANNED,
}

#: Python functions whose ATen op has another name (or that decompose into listed ops).
_PY_TO_ATEN: dict[str, tuple[str, ...]] = {
    "interpolate": ("upsample_nearest2d",),
    "upsample": ("upsample_nearest2d",),
    "grid_sample": ("grid_sampler",),
    # cross_entropy: CPU lists cross_entropy_loss; on CUDA it decomposes into log_softmax
    # (fp32_set_opt_dtype) + nll_loss (fp32).
    "cross_entropy": ("cross_entropy_loss", "log_softmax"),
    "multi_dot": ("linalg_multi_dot",),
    "normalize": ("norm",),
    "softmin": ("softmax",),
    # full RNN layers: CUDA autocast casts (and re-flattens) at _cudnn_rnn, CPU autocast at
    # mkldnn_rnn_layer (where oneDNN takes the layer)
    "lstm": ("_cudnn_rnn", "mkldnn_rnn_layer"), "gru": ("_cudnn_rnn",),
    "rnn_tanh": ("_cudnn_rnn",), "rnn_relu": ("_cudnn_rnn",),
}

# --------------------------------------------------------------------------------------------
# What the lists cannot say: op families, kernels, other names of listed ops
# --------------------------------------------------------------------------------------------

#: Families of the ops a policy should cover (:func:`op_family`): ``GEMM`` is fast in half on
#: Tensor Cores and slow (fp32) or crashing (mixed dtypes) when left out; ``FP32_ONLY`` has no
#: half kernel (raises on fp16/bf16 input); ``FFT`` runs in half only for power-of-two sizes
#: on CUDA and not at all on CPU.
GEMM = "gemm"
FP32_ONLY = "fp32-only"
FFT = "fft"

#: Outer and Kronecker products: GEMM-like, but rank-1 or elementwise underneath, so running
#: them in half gains little (AMP401 reports them at ``info``).
OUTER_PRODUCTS: frozenset = frozenset(("outer", "ger", "inner", "kron"))
#: GEMM-like functions on no cast list of either policy (names after ``torch.``).
GEMM_EXTRA: frozenset = OUTER_PRODUCTS | {"tensordot"}
#: GEMM-like functions outside torch (qualified names).
GEMM_EXTERNAL: frozenset = frozenset(("opt_einsum.contract",))
#: An ``einsum`` of another package in torch code (``tensorly.einsum``, ``torch_complex``'s
#: ``FC.einsum``) is a wrapper that contracts torch tensors with ``torch.einsum`` (or
#: opt_einsum on top of it): GEMM-like, and patched only by a registration on that package.
#: The array libraries below have an einsum of their own that never sees a torch tensor.
OTHER_ARRAY_LIBRARIES: tuple = ("numpy", "jax", "tensorflow", "cupy", "mxnet", "paddle", "scipy")

#: Linear-algebra functions with no fp16/bf16 kernel, measured on torch 2.13 CPU (each
#: raises on an fp16 input: ``linalg.inv: Low precision dtypes not supported. Got Half``,
#: ``"lu_cpu" not implemented for 'Half'``) and CUDA (``linalg.inv`` raises);
#: ``tests/rules/test_ops.py`` re-checks them on the installed torch.  ``torch.linalg``
#: functions that *do* take half (``diagonal``, ``matrix_power``, ``matrix_exp``, the norms,
#: ``cross``, ``matmul``, ``multi_dot``, ``vecdot``) are absent.
NO_HALF_LINALG: frozenset = frozenset((
    "cholesky cholesky_ex cond det eig eigh eigvals eigvalsh householder_product inv inv_ex "
    "ldl_factor ldl_factor_ex ldl_solve lstsq lu lu_factor lu_factor_ex lu_solve matrix_rank "
    "pinv qr slogdet solve solve_ex solve_triangular svd svdvals tensorinv tensorsolve vander"
).split())
#: The same under ``torch.`` (``rfft``/``irfft`` are the pre-1.8 spectral functions; the
#: rest are decompositions and distance ops with no half kernel).
NO_HALF_TORCH: frozenset = frozenset((
    "inverse det logdet slogdet svd svd_lowrank pca_lowrank cholesky cholesky_solve "
    "cholesky_inverse qr lu lu_solve lu_unpack pinverse triangular_solve geqrf orgqr ormqr "
    "lstsq eig symeig lobpcg cdist pdist solve matrix_rank"
).split())
#: Tensor methods with no half kernel (``cov.inverse()``).
NO_HALF_TENSOR_METHODS: frozenset = frozenset((
    "inverse det logdet slogdet svd cholesky cholesky_solve cholesky_inverse qr pinverse "
    "triangular_solve geqrf orgqr ormqr lu").split())
#: ``torch.fft`` transforms (the rest of the module, ``fftfreq``/``fftshift``, are helpers
#: that work in any dtype), and the spectral functions under ``torch.``; ``torch.rfft`` /
#: ``torch.irfft`` / ``torch.fft`` (a function before 1.8) are the pre-1.8 spellings.
FFT_TRANSFORMS: frozenset = frozenset((
    "fft ifft fft2 ifft2 fftn ifftn rfft irfft rfft2 irfft2 rfftn irfftn hfft ihfft hfft2 "
    "ihfft2 hfftn ihfftn").split())
FFT_HELPERS: frozenset = frozenset(("fftfreq", "rfftfreq", "fftshift", "ifftshift"))
SPECTRAL_TORCH: frozenset = frozenset(("stft", "istft", "rfft", "irfft", "ifft"))

_RNN_OR_CONV = ("conv", "cudnn", "lstm", "gru", "rnn", "_thnn", "_scaled_dot_product_flash")

#: Python functions that reach a listed op under another name. Measured under CUDA autocast
#: (H200, PyTorch 2.11): each returns fp32, although its own name is on no list.
#: :func:`cast_of` follows them when the name itself is unlisted.
RUNS_AS: dict[str, str] = {
    _F + "gumbel_softmax": _TT + "softmax",  # calls gumbels.softmax(dim)
    _SP + "softmax": _T + "softmax",
    _SP + "log_softmax": _T + "log_softmax",
    _LA + "norm": _LA + "vector_norm",  # vector norms, the form used in models
}


#: How the linter's dtype flow treats a GEMM (:func:`op_family`) that the ``amplint`` O1 lists
#: leave out (``einsum``, ``tensordot``): as run in half under O1, as ``torch.autocast`` runs
#: it and as it runs once registered. AMP401 reports the missing registration itself, so the
#: other rules judge the code as it runs after that fix.
ASSUME_REGISTERED = True


def op_family(qualname: str) -> str | None:
    """``GEMM``, ``FP32_ONLY``, ``FFT`` or None for a qualified name (``torch.einsum``,
    ``torch.linalg.inv``, ``torch.fft.rfft``, ``torch.Tensor.mm``): GEMM-like are the ops
    PyTorch's CUDA autocast runs in lower precision (convolutions and recurrent cells
    aside) plus :data:`GEMM_EXTRA` / :data:`GEMM_EXTERNAL`."""
    if qualname in GEMM_EXTERNAL:
        return GEMM
    if (qualname.endswith(".einsum") and not qualname.startswith("torch.")
            and qualname.split(".", 1)[0] not in OTHER_ARRAY_LIBRARIES):
        return GEMM
    if qualname.startswith(_LA):
        return FP32_ONLY if qualname[len(_LA):] in NO_HALF_LINALG else None
    if qualname.startswith("torch.fft."):
        name = qualname[len("torch.fft."):]
        return FFT if name in FFT_TRANSFORMS else None
    if qualname.startswith(_TT):
        name = qualname[len(_TT):]
        if name in NO_HALF_TENSOR_METHODS:
            return FP32_ONLY
        qualname = _T + name
    if qualname.startswith(_T) and qualname.count(".") == 1:
        name = qualname[len(_T):]
        if name in NO_HALF_TORCH:
            return FP32_ONLY
        if name in SPECTRAL_TORCH or name == "fft":
            return FFT
        if name in GEMM_EXTRA or (name in _CUDA_LOWER and not any(p in name for p in _RNN_OR_CONV)):
            return GEMM
    return None


def family_names() -> frozenset:
    """The last names of every op :func:`op_family` classifies (a cheap filter on calls)."""
    gemm = {n for n in _CUDA_LOWER if not any(p in n for p in _RNN_OR_CONV)}
    return frozenset(gemm | GEMM_EXTRA | {q.rsplit(".", 1)[-1] for q in GEMM_EXTERNAL} | NO_HALF_LINALG
                     | NO_HALF_TORCH | NO_HALF_TENSOR_METHODS | FFT_TRANSFORMS | SPECTRAL_TORCH)


# --------------------------------------------------------------------------------------------
# Lookup helpers
# --------------------------------------------------------------------------------------------

_AMPLINT: dict[str, str] = {}
for _kind, _names in ((PROMOTE, O1_NATIVE_PROMOTE), (PROMOTE, O1_PROMOTE), (FLOAT, O1_FLOAT),
                      (HALF, O1_HALF), (BANNED, O1_BANNED)):
    for _n in _names:
        _AMPLINT[_n] = _kind
del _kind, _names, _n

_PREFIX_ALIASES = (
    ("F.", _F), ("nn.functional.", _F), ("torch.nn.functional.", _F), ("Tensor.", _TT),
)


def normalize(qualname: str) -> str:
    """Spell a name the way the lists do: ``F.softmax`` -> ``torch.nn.functional.softmax``,
    a module class (``torch.nn.Softmax``) -> the function its forward calls."""
    for short, full in _PREFIX_ALIASES:
        if qualname.startswith(short):
            qualname = full + qualname[len(short):]
            break
    if qualname.startswith("nn."):
        qualname = "torch." + qualname
    return MODULE_FUNCTIONS.get(qualname, qualname)


def aten_name(qualname: str) -> str | None:
    """The ATen op a Python name reaches: ``torch.linalg.vecdot`` -> ``linalg_vecdot``,
    ``torch.Tensor.__matmul__`` -> ``matmul``; ``None`` for in-place forms (never autocast)."""
    qualname = normalize(qualname)
    for prefix, aten_prefix in ((_LA, "linalg_"), ("torch.fft.", "fft_"), (_SP, "special_"),
                                (_F, ""), (_TT, ""), (_VF, ""), (_T, "")):
        if qualname.startswith(prefix):
            name = qualname[len(prefix):]
            break
    else:
        return None
    if name.startswith("__") and name.endswith("__"):
        inner = name[2:-2]
        if inner.startswith("i") and inner[1:] in ("add", "sub", "mul", "truediv", "pow", "matmul"):
            return None
        if inner.startswith("r") and inner[1:] in ("add", "sub", "mul", "truediv", "pow", "matmul"):
            inner = inner[1:]
        name = {"truediv": "div"}.get(inner, inner)
    elif name.endswith("_") and not name.startswith("_"):
        return None
    return aten_prefix + name


def cast_of(qualname: str, policy: str = "amplint", device: str = "cuda") -> str | None:
    """How ``qualname`` is cast: ``"half"``, ``"float"``, ``"promote"``, ``"banned"`` or ``None``.

    ``policy="amplint"`` is the bundled engine's O1 (identical on every device);
    ``policy="torch"`` is ``torch.autocast`` on ``device`` (``"cuda"`` or ``"cpu"``).
    """
    if policy == "amplint":
        found = _AMPLINT.get(normalize(qualname))
        if found is None and qualname in RUNS_AS:
            return _AMPLINT.get(RUNS_AS[qualname])
        return found
    if policy != "torch":
        raise ValueError(f"unknown policy {policy!r}; expected 'amplint' or 'torch'")
    try:
        lists = TORCH_AUTOCAST[device]
    except KeyError:
        raise ValueError(f"unknown device {device!r}; expected 'cuda' or 'cpu'") from None
    found = _torch_cast(qualname, lists)
    if found is None and qualname in RUNS_AS:
        return _torch_cast(RUNS_AS[qualname], lists)
    return found


def _torch_cast(qualname: str, lists: dict) -> str | None:
    aten = aten_name(qualname)
    if aten is None:
        return None
    candidates = (aten,) + _PY_TO_ATEN.get(normalize(qualname).rsplit(".", 1)[-1], ())
    for name in candidates:
        for policy_name, ops in lists.items():
            if name in ops:
                return _TORCH_KIND[policy_name]
    return None


def names(kind: str, policy: str = "amplint", device: str = "cuda") -> frozenset:
    """Every name of one cast kind (qualified names for amplint, ATen names for torch)."""
    if policy == "amplint":
        return frozenset(n for n, k in _AMPLINT.items() if k == kind)
    return frozenset().union(*(ops for p, ops in TORCH_AUTOCAST[device].items()
                               if _TORCH_KIND[p] == kind))


#: Both policies in one structure, for tools that want the raw data.
POLICIES: dict[str, object] = {
    "amplint": {HALF: O1_HALF, FLOAT: O1_FLOAT, PROMOTE: O1_PROMOTE + O1_NATIVE_PROMOTE,
                BANNED: O1_BANNED},
    "torch": TORCH_AUTOCAST,
}
