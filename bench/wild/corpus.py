"""The corpus: which kernels of which library, with the reference, the call and the shapes.

Timed shapes are what the libraries are used for (LLM hidden sizes 4096-8192, 4096-16384
tokens, vocabularies of 32k-152k); verify shapes are small and odd (not multiples of any block
size) so that the Triton CPU interpreter gets through them in seconds. References are torch
(the formula the library documents). Numbering follows this list: NN_<lib>_<op>.py.
"""

from __future__ import annotations

from bench.wild.spec import Kernel

BF16 = "torch.bfloat16"

# --- liger-kernel 0.8.5 ---------------------------------------------------------------------------

_ROWS_HIDDEN = ((4096, 4096), (8192, 4096), (16384, 4096), (4096, 8192), (8192, 5120))
_ROWS_FFN = ((4096, 11008), (8192, 11008), (4096, 14336), (8192, 14336), (16384, 8192))
_ROWS_VOCAB = ((4096, 32000), (2048, 32000), (1024, 128256), (2048, 50257), (512, 151936))

_LLAMA_RMS = """
xf = x.float()
y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
return w * y.to(x.dtype)
"""

_ROTATE_HALF = """
def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
"""

_ROPE_INPUTS = """
q = torch.randn(b, s, hq, d, dtype=dtype).transpose(1, 2)  # (b, hq, s, d) over (b, s, hq, d)
k = torch.randn(b, s, hk, d, dtype=dtype).transpose(1, 2)
inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
freqs = torch.outer(torch.arange(s).float(), inv_freq)
emb = torch.cat((freqs, freqs), dim=-1)[None]
return [q, k, emb.cos().to(dtype), emb.sin().to(dtype)]
"""

# fmt: off
LIGER = [
    Kernel(
        "liger",
        "rms_norm",
        "liger_kernel.ops.rms_norm",
        ("rms_norm_forward",),
        "Llama RMSNorm (rstd in fp32, weight in bf16) over hidden 4096-8192, bf16.",
        "x, w",
        _LLAMA_RMS,
        'return rms_norm_forward(x, w, 1e-6, 0.0, "llama", False)[0]',
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN,
        ((37, 1000), (3, 4096)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "layer_norm",
        "liger_kernel.ops.layer_norm",
        ("layer_norm_forward",),
        "LayerNorm with weight and bias over hidden 4096-8192, bf16.",
        "x, w, b",
        "return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-6)",
        "return layer_norm_forward(x, w, b, 1e-6)[0]",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype),\n"
        "        (0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN,
        ((37, 1000), (3, 4096)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "swiglu",
        "liger_kernel.ops.swiglu",
        ("swiglu_forward",),
        "SwiGLU silu(a) * b over Llama FFN widths 8192-14336, bf16.",
        "a, b",
        "return torch.nn.functional.silu(a) * b",
        "return swiglu_forward(a, b)[2]",
        "rows, cols",
        "return [torch.randn(rows, cols, dtype=dtype), torch.randn(rows, cols, dtype=dtype)]",
        _ROWS_FFN,
        ((5, 1000), (3, 3001)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "geglu",
        "liger_kernel.ops.geglu",
        ("geglu_forward",),
        "GeGLU gelu_tanh(a) * b over FFN widths 8192-14336, bf16.",
        "a, b",
        'return torch.nn.functional.gelu(a, approximate="tanh") * b',
        "return geglu_forward(a, b)[2]",
        "rows, cols",
        "return [torch.randn(rows, cols, dtype=dtype), torch.randn(rows, cols, dtype=dtype)]",
        _ROWS_FFN,
        ((5, 1000), (3, 3001)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "softmax",
        "liger_kernel.ops.softmax",
        ("_softmax_forward",),
        "Softmax over the last dimension (1k-64k columns), fp32.",
        "x",
        "return torch.softmax(x, dim=-1)",
        "return _softmax_forward(x)[0]",
        "rows, cols",
        "return [torch.randn(rows, cols) * 3]",
        ((4096, 4096), (8192, 8192), (4096, 32000), (1024, 65536), (16384, 1024)),
        ((37, 1000), (5, 3000)),
    ),
    Kernel(
        "liger",
        "cross_entropy",
        "liger_kernel.ops.cross_entropy",
        ("cross_entropy_forward",),
        "Cross-entropy, mean over non-ignored tokens (-100), vocabularies 32k-152k, fp32 logits.",
        "logits, target",
        "return torch.nn.functional.cross_entropy(logits, target, ignore_index=-100)",
        'return cross_entropy_forward(logits, target, None, -100, 0.0, 0.0, "mean", None, False)[0]',
        "rows, vocab",
        """
        target = torch.randint(0, vocab, (rows,))
        target[::7] = -100
        return [torch.randn(rows, vocab) * 2, target]
        """,
        _ROWS_VOCAB,
        ((7, 1000), (2, 33000)),
    ),
    Kernel(
        "liger",
        "rope",
        "liger_kernel.ops.rope",
        ("rope_forward",),
        "Llama rotary embedding of q and k (head_dim 128, GQA), in place on contiguous copies, bf16.",
        "q, k, cos, sin",
        "c, s = cos.unsqueeze(1), sin.unsqueeze(1)\n"
        "return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s",
        "q2, k2, _, _ = rope_forward(q, k, cos, sin)\nreturn q2, k2",
        "b, s, hq, hk, d",
        _ROPE_INPUTS,
        (
            (1, 4096, 32, 8, 128),
            (2, 4096, 32, 8, 128),
            (4, 2048, 32, 32, 128),
            (1, 8192, 64, 8, 128),
            (8, 1024, 32, 8, 128),
        ),
        ((1, 5, 4, 2, 64), (2, 3, 6, 3, 128)),
        helpers=_ROTATE_HALF,
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "group_norm",
        "liger_kernel.ops.group_norm",
        ("group_norm_forward",),
        "GroupNorm (32 groups) of diffusion-UNet activations, fp32.",
        "x, w, b, groups",
        "return torch.nn.functional.group_norm(x, groups, w, b, 1e-6)",
        "return group_norm_forward(x, x.shape[1], groups, w, b, 1e-6)[0]",
        "n, c, groups, h, w",
        "return [torch.randn(n, c, h, w), 1 + 0.1 * torch.randn(c), 0.1 * torch.randn(c), groups]",
        (
            (8, 512, 32, 64, 64),
            (16, 256, 32, 64, 64),
            (4, 1280, 32, 32, 32),
            (32, 128, 32, 32, 32),
            (8, 640, 32, 64, 64),
        ),
        ((2, 6, 3, 5, 7), (3, 8, 2, 3, 3)),
    ),
    Kernel(
        "liger",
        "dyt",
        "liger_kernel.ops.dyt",
        ("liger_dyt_fwd",),
        "Dynamic tanh gamma * tanh(alpha * x) + beta (a LayerNorm replacement), hidden 4096-8192, bf16.",
        "x, alpha, gamma, beta",
        "return (gamma * torch.tanh(alpha * x.float()) + beta).to(x.dtype)",
        "return liger_dyt_fwd(x, alpha, gamma, beta)",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.full((1,), 0.5),\n"
        "        1 + 0.1 * torch.randn(hidden), 0.1 * torch.randn(hidden)]",
        _ROWS_HIDDEN,
        ((37, 1000), (3, 4100)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "kl_div",
        "liger_kernel.ops.kl_div",
        ("kldiv_forward_triton",),
        "KL divergence of log-probabilities against probabilities, batchmean, vocabularies 32k-152k, fp32.",
        "y_pred, y_true",
        'return torch.nn.functional.kl_div(y_pred, y_true, reduction="batchmean")',
        'return kldiv_forward_triton(y_pred, y_true, False, "batchmean", 1e-10)',
        "rows, vocab",
        "return [torch.log_softmax(torch.randn(rows, vocab), -1), torch.softmax(torch.randn(rows, vocab), -1)]",
        _ROWS_VOCAB,
        ((7, 1000), (2, 20000)),
    ),
    Kernel(
        "liger",
        "fused_add_rms_norm",
        "liger_kernel.ops.fused_add_rms_norm",
        ("fused_add_rms_norm_forward",),
        "Residual add then Llama RMSNorm, returning the normed output and the sum, hidden 4096-8192, bf16.",
        "x, r, w",
        "s = x + r\nx = s\n" + _LLAMA_RMS.replace("return w * y.to(x.dtype)", "return w * y.to(x.dtype), s"),
        'y, s, *_ = fused_add_rms_norm_forward(x, r, w, 1e-6, 0.0, "llama")\nreturn y, s',
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.randn(rows, hidden, dtype=dtype),\n"
        "        (1 + 0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN,
        ((37, 1000), (3, 4096)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "poly_norm",
        "liger_kernel.ops.poly_norm",
        ("poly_norm_forward",),
        "PolyNorm w0*norm(x^3) + w1*norm(x^2) + w2*norm(x) + b, hidden 4096-8192, fp32.",
        "x, w, b",
        """
        def norm(u):
            return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6)

        return w[0] * norm(x ** 3) + w[1] * norm(x ** 2) + w[2] * norm(x) + b
        """,
        "return poly_norm_forward(x, w, b, 1e-6)[0]",
        "rows, hidden",
        "return [torch.randn(rows, hidden), torch.tensor([0.3, 0.5, 0.8]), torch.tensor([0.1])]",
        _ROWS_HIDDEN,
        ((37, 1000), (3, 4096)),
    ),
    Kernel(
        "liger",
        "relu_squared",
        "liger_kernel.ops.relu_squared",
        ("relu_squared_forward",),
        "Squared ReLU (Primer, Nemotron FFN) over FFN widths 8192-14336, bf16.",
        "x",
        "return torch.relu(x).square()",
        "return relu_squared_forward(x)",
        "rows, cols",
        "return [torch.randn(rows, cols, dtype=dtype)]",
        _ROWS_FFN,
        ((5, 1000), (3, 3001)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "tvd",
        "liger_kernel.ops.tvd",
        ("tv_distance_forward_triton",),
        "Total variation distance 0.5 * sum|p - q|, batchmean, vocabularies 32k-152k, fp32.",
        "p, q",
        "return 0.5 * (p - q).abs().sum() / p.shape[0]",
        'return tv_distance_forward_triton(p, q, None, "batchmean", -100, False)[0]',
        "rows, vocab",
        "return [torch.softmax(torch.randn(rows, vocab), -1), torch.softmax(torch.randn(rows, vocab), -1)]",
        _ROWS_VOCAB,
        ((7, 1000), (2, 20000)),
    ),
    Kernel(
        "liger",
        "llama4_rope",
        "liger_kernel.ops.llama4_rope",
        ("llama4_rope_forward",),
        "Llama 4 rotary embedding with complex frequencies (interleaved pairs), head_dim 128, bf16.",
        "q, k, freqs",
        """
        def rotate(x):
            xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).to(x.dtype)

        return rotate(q), rotate(k)
        """,
        "return llama4_rope_forward(q, k, freqs)",
        "b, s, hq, hk, d",
        """
        inv_freq = 1.0 / (500000 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(s).float(), inv_freq)
        freqs = torch.polar(torch.ones_like(angles), angles)
        return [torch.randn(b, s, hq, d, dtype=dtype), torch.randn(b, s, hk, d, dtype=dtype), freqs]
        """,
        (
            (1, 4096, 32, 8, 128),
            (2, 4096, 32, 8, 128),
            (4, 2048, 40, 8, 128),
            (1, 8192, 40, 8, 128),
            (8, 1024, 32, 8, 128),
        ),
        ((1, 5, 4, 2, 64), (2, 3, 6, 3, 128)),
        dtype=BF16,
    ),
    Kernel(
        "liger",
        "sparsemax",
        "liger_kernel.ops.sparsemax",
        ("_sparsemax_forward",),
        "Sparsemax over the last dimension (a torch sort, then the kernel's threshold and projection), fp32.",
        "x",
        """
        z = torch.sort(x, dim=-1, descending=True).values
        k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
        support = 1 + k * z > z.cumsum(-1)
        k_z = support.sum(-1, keepdim=True)
        tau = (z.cumsum(-1).gather(-1, k_z - 1) - 1) / k_z.to(x.dtype)
        return torch.clamp(x - tau, min=0)
        """,
        "return _sparsemax_forward(x, -1)[0]",
        "rows, cols",
        "return [torch.randn(rows, cols)]",
        ((4096, 4096), (8192, 4096), (4096, 8192), (16384, 1024), (2048, 32000)),
        ((37, 1000), (5, 3000)),
    ),
    Kernel(
        "liger",
        "selective_log_softmax",
        "liger_kernel.ops.grpo_loss",
        ("fused_selective_log_softmax",),
        "GRPO's log-probability of each sampled token at temperature 0.9 (online logsumexp over the vocabulary).",
        "logits, ids",
        "L = logits.shape[1] - 1\n"
        "logp = torch.log_softmax(logits[:, :-1].float() / 0.9, dim=-1)\n"
        "return logp.gather(-1, ids[:, -L:].unsqueeze(-1)).squeeze(-1)",
        "return fused_selective_log_softmax(logits, ids, 0.9)",
        "b, seq, vocab",
        "return [torch.randn(b, seq + 1, vocab, dtype=dtype), torch.randint(0, vocab, (b, seq + 1))]",
        ((4, 1024, 32000), (8, 512, 32000), (2, 512, 151936), (8, 1024, 32000), (4, 512, 128256)),
        ((2, 5, 1000), (1, 3, 5000)),
        dtype=BF16,
    ),
]
# fmt: on


# --- flag-gems 5.0.2 -------------------------------------------------------------------------------

_G = "flag_gems.ops."
_GF = "flag_gems.fused."
_ROWS_COLS = ((4096, 4096), (8192, 8192), (4096, 32000), (1024, 65536), (16384, 1024))
_REDUCE = ((4096, 4096), (8192, 8192), (16384, 1024), (2048, 32000), (1024, 65536))
_GEMM = ((4096, 4096, 4096), (8192, 8192, 4096), (4096, 14336, 4096), (4096, 4096, 14336), (2048, 6144, 8192))


def _rows(
    about: str,
    op: str,
    module: str,
    entry: str,
    ref: str,
    new: str,
    *,
    cases=_ROWS_COLS,
    verify=((37, 1000), (5, 3001)),
    make: str = "return [torch.randn(rows, cols, dtype=dtype) * 3]",
    dtype: str = "torch.float32",
) -> Kernel:
    """A flag_gems op over a (rows, cols) tensor."""
    return Kernel(
        "gems", op, module, (entry,), about, "x", ref, new, "rows, cols", make, cases, verify, dtype=dtype
    )


# fmt: off
GEMS = [
    _rows("Softmax over the last dimension (heuristics pick the tile; one tile or an online loop), fp32.",
          "softmax", _G + "softmax", "softmax", "return torch.softmax(x, dim=-1)", "return softmax(x, -1)",
          verify=((37, 1000), (3, 33000))),
    Kernel(
        "gems", "softmax_dim1", _G + "softmax", ("softmax",),
        "Softmax over the middle dimension of (B, N, K) (the non-inner kernel, 2-D tiles), fp32.",
        "x", "return torch.softmax(x, dim=1)", "return softmax(x, 1)",
        "b, n, k", "return [torch.randn(b, n, k, dtype=dtype) * 3]",
        ((64, 512, 512), (16, 2048, 512), (8, 1024, 2048), (256, 256, 256), (32, 1000, 1024)),
        ((3, 37, 50), (2, 300, 17)),
    ),
    _rows("Log-softmax over the last dimension (autotuned 2-D tiles), fp32.",
          "log_softmax", _G + "log_softmax", "log_softmax",
          "return torch.log_softmax(x, dim=-1)", "return log_softmax(x, -1)"),
    Kernel(
        "gems", "layer_norm", _G + "layernorm", ("layer_norm",),
        "LayerNorm with weight and bias over hidden 4096-8192 (persistent or looped kernel), bf16.",
        "x, w, b", "return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)",
        "return layer_norm(x, [x.shape[-1]], w, b, 1e-5)[0]",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype),\n"
        "        (0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (3, 9000)), dtype=BF16,
    ),
    Kernel(
        "gems", "rms_norm", _G + "rms_norm", ("rms_norm_forward",),
        "RMSNorm x * rsqrt(mean(x^2) + eps) * w over hidden 4096-8192, bf16.",
        "x, w",
        "xf = x.float()\n"
        "return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)",
        "return rms_norm_forward(x, [x.shape[-1]], w, 1e-5)[0]",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (3, 4096)), dtype=BF16,
    ),
    Kernel(
        "gems", "group_norm", _G + "groupnorm", ("group_norm",),
        "GroupNorm (32 groups) of diffusion-UNet activations, fp32.",
        "x, w, b, groups", "return torch.nn.functional.group_norm(x, groups, w, b, 1e-5)",
        "n, c, h, w_ = x.shape\nreturn group_norm(x, w, b, n, c, h * w_, groups, 1e-5)[0]",
        "n, c, groups, h, w",
        "return [torch.randn(n, c, h, w), 1 + 0.1 * torch.randn(c), 0.1 * torch.randn(c), groups]",
        ((8, 512, 32, 64, 64), (16, 256, 32, 64, 64), (4, 1280, 32, 32, 32), (32, 128, 32, 32, 32),
         (8, 640, 32, 64, 64)),
        ((2, 6, 3, 5, 7), (3, 8, 2, 3, 3)),
    ),
    _rows("Cumulative sum along the rows (block scans, then a fan-out of the block sums), fp32.",
          "cumsum", _G + "cumsum", "cumsum", "return torch.cumsum(x, dim=1)", "return cumsum(x, 1)",
          cases=_REDUCE, make="return [torch.randn(rows, cols, dtype=dtype)]"),
    _rows("Row sums (sum over the last dimension), fp32.", "sum_dim", _G + "sum", "sum_dim",
          "return x.sum(dim=1)", "return sum_dim(x, [1])", cases=_REDUCE),
    _rows("Column means (mean over the first dimension: the non-inner kernel), fp32.", "mean_dim0",
          _G + "mean", "mean_dim", "return x.mean(dim=0)", "return mean_dim(x, [0])",
          cases=((4096, 4096), (8192, 8192), (16384, 1024), (32000, 2048), (1024, 65536))),
    _rows("Row max with its index (values, indices), fp32.", "max_dim", _G + "max", "max_dim",
          "m = torch.max(x, dim=1)\nreturn m.values, m.indices", "m = max_dim(x, 1)\nreturn m.values, m.indices",
          cases=_REDUCE),
    _rows("Row argmax (vocabulary-wide greedy decoding shapes included), fp32.", "argmax", _G + "argmax",
          "argmax", "return torch.argmax(x, dim=1)", "return argmax(x, dim=1)", cases=_REDUCE),
    _rows("Row amax (max over the last dimension), bf16.", "amax", _G + "amax", "amax",
          "return torch.amax(x, dim=1)", "return amax(x, [1])", cases=_REDUCE, dtype=BF16),
    _rows("Row variance and mean in one pass (Welford), fp32.", "var_mean", _G + "var_mean", "var_mean",
          "return torch.var_mean(x, dim=1, correction=1)", "return var_mean(x, [1], correction=1)",
          cases=_REDUCE),
    _rows("Row L2 norms, fp32.", "vector_norm", _G + "vector_norm", "vector_norm",
          "return torch.linalg.vector_norm(x, 2, dim=1)", "return vector_norm(x, 2, [1])", cases=_REDUCE),
    _rows("Row products of values near 1, fp32.", "prod_dim", _G + "prod", "prod_dim",
          "return torch.prod(x, dim=1)", "return prod_dim(x, 1)",
          cases=((4096, 512), (8192, 256), (16384, 128), (2048, 1024), (32768, 64)),
          make="return [1 + 0.01 * torch.randn(rows, cols, dtype=dtype)]"),
    _rows("Non-zero count per row of a ReLU output (int64 result).", "count_nonzero", _G + "count_nonzero",
          "count_nonzero", "return torch.count_nonzero(x, dim=1)", "return count_nonzero(x, 1)", cases=_REDUCE,
          make="return [torch.relu(torch.randn(rows, cols, dtype=dtype))]", verify=((37, 1000), (3, 5000))),
    _rows("2-D transpose copy (aten::t_copy), fp32.", "t_copy", _G + "t_copy", "t_copy",
          "return x.t().contiguous()", "return t_copy(x)",
          cases=((4096, 4096), (8192, 8192), (4096, 14336), (14336, 4096), (16384, 1024))),
    _rows("Lower triangle of square matrices (attention masks), fp32.", "tril", _G + "tril", "tril",
          "return torch.tril(x)", "return tril(x)",
          cases=((4096, 4096), (8192, 8192), (2048, 2048), (16384, 4096), (1024, 1024)),
          verify=((37, 37), (5, 301))),
    Kernel(
        "gems", "addmm", _G + "addmm", ("addmm",),
        "bias + A @ B (a linear layer with bias), fp16, autotuned tiles.",
        "bias, a, b", "return torch.addmm(bias, a, b)", "return addmm(bias, a, b)",
        "m, n, k", "return [torch.randn(n, dtype=dtype), torch.randn(m, k, dtype=dtype) / 8, torch.randn(k, n, dtype=dtype) / 8]",
        _GEMM, ((33, 47, 65), (64, 17, 128)), dtype="torch.float16",
    ),
    Kernel(
        "gems", "bmm", _G + "bmm", ("bmm",),
        "Batched matmul (attention-like shapes), fp16, autotuned tiles with divisibility heuristics.",
        "a, b", "return torch.bmm(a, b)", "return bmm(a, b)",
        "batch, m, n, k", "return [torch.randn(batch, m, k, dtype=dtype) / 8, torch.randn(batch, k, n, dtype=dtype) / 8]",
        ((32, 1024, 1024, 128), (64, 512, 512, 128), (16, 2048, 2048, 128), (8, 4096, 128, 4096), (128, 256, 256, 64)),
        ((3, 33, 47, 65), (2, 64, 17, 128)), dtype="torch.float16",
    ),
    Kernel(
        "gems", "mv", _G + "mv", ("mv",),
        "Matrix-vector product (a decode step's projection), fp16.",
        "a, x", "return torch.mv(a, x)", "return mv(a, x)",
        "m, k", "return [torch.randn(m, k, dtype=dtype) / 8, torch.randn(k, dtype=dtype) / 8]",
        ((4096, 4096), (14336, 4096), (4096, 14336), (32000, 4096), (8192, 8192)),
        ((33, 65), (130, 17)), dtype="torch.float16",
    ),
    Kernel(
        "gems", "mm", "flag_gems.runtime.backend._nvidia.hopper.ops.mm", ("mm",),
        "A @ B with the library's sm_90 (hopper) override: TMA descriptors when aligned, stream-K, gemv; bf16.",
        "a, b", "return torch.mm(a, b)", "return mm(a, b)",
        "m, n, k", "return [torch.randn(m, k, dtype=dtype) / 8, torch.randn(k, n, dtype=dtype) / 8]",
        _GEMM, ((33, 47, 65), (64, 17, 128)), dtype=BF16,
    ),
    Kernel(
        "gems", "embedding", _G + "embedding", ("embedding",),
        "Token embedding lookup (Llama vocabulary 32000, hidden 4096), bf16.",
        "weight, ids", "return torch.nn.functional.embedding(ids, weight)", "return embedding(weight, ids)",
        "vocab, hidden, batch, seq",
        "return [torch.randn(vocab, hidden, dtype=dtype), torch.randint(0, vocab, (batch, seq))]",
        ((32000, 4096, 4, 2048), (32000, 4096, 8, 2048), (128256, 4096, 2, 4096), (32000, 8192, 4, 1024),
         (151936, 3584, 4, 1024)),
        ((100, 37, 2, 5), (1000, 300, 1, 7)), dtype=BF16,
    ),
    Kernel(
        "gems", "index_select", _G + "index_select", ("index_select",),
        "Row gather x[idx] (index_select along dim 0), fp32.",
        "x, idx", "return torch.index_select(x, 0, idx)", "return index_select(x, 0, idx)",
        "rows, cols, n",
        "return [torch.randn(rows, cols, dtype=dtype), torch.randint(0, rows, (n,))]",
        ((32000, 4096, 8192), (65536, 1024, 16384), (8192, 8192, 8192), (128256, 2048, 4096), (4096, 4096, 32768)),
        ((37, 100, 11), (5, 3001, 3)),
    ),
    Kernel(
        "gems", "dot", _G + "dot", ("dot",),
        "Dot product of two long vectors (two-pass reduction), fp32.",
        "x, y", "return torch.dot(x, y)", "return dot(x, y)",
        "n", "return [torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)]",
        ((1 << 24,), (1 << 26,), (1 << 22,), (50_000_000,), (100_000_000,)), ((1000,), (100_003,)),
    ),
    Kernel(
        "gems", "weight_norm", _G + "weightnorm", ("weight_norm_interface",),
        "Weight normalization w = g * v / ||v|| over each output row (dim 0), fp32.",
        "v, g",
        "norm = v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))\nreturn v * (g / norm), norm",
        "return weight_norm_interface(v, g, 0)",
        "rows, cols", "return [torch.randn(rows, cols, dtype=dtype), torch.rand(rows, 1, dtype=dtype) + 0.5]",
        ((4096, 4096), (8192, 4096), (16384, 1024), (4096, 14336), (32000, 1024)), ((37, 100), (5, 3001)),
    ),
    Kernel(
        "gems", "cross_entropy", _GF + "cross_entropy_loss", ("cross_entropy_loss",),
        "Cross-entropy (an autograd Function's forward), mean over non-ignored tokens, vocabularies 32k-152k, fp32.",
        "logits, target", "return torch.nn.functional.cross_entropy(logits, target, ignore_index=-100)",
        "return cross_entropy_loss(logits, target)",
        "rows, vocab",
        """
        target = torch.randint(0, vocab, (rows,))
        target[::7] = -100
        return [torch.randn(rows, vocab, dtype=dtype) * 2, target]
        """,
        _ROWS_VOCAB, ((7, 1000), (2, 5000)),
    ),
    Kernel(
        "gems", "rotary_embedding", _GF + "rotary_embedding", ("apply_rotary_pos_emb",),
        "Rotary embedding of q and k in (batch, seq, heads, head_dim) with half-width cos/sin tables, bf16.",
        "q, k, cos, sin",
        """
        def rotate(x):
            c, s = cos[None, : x.shape[1], None, :], sin[None, : x.shape[1], None, :]
            x1, x2 = x[..., : x.shape[-1] // 2].float(), x[..., x.shape[-1] // 2 :].float()
            return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)

        return rotate(q), rotate(k)
        """,
        "return apply_rotary_pos_emb(q, k, cos, sin)",
        "b, s, hq, hk, d",
        """
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(s).float(), inv_freq)
        q = torch.randn(b, s, hq, d, dtype=dtype)
        return [q, torch.randn(b, s, hk, d, dtype=dtype), freqs.cos(), freqs.sin()]
        """,
        ((1, 4096, 32, 8, 128), (2, 4096, 32, 8, 128), (4, 2048, 32, 32, 128), (1, 8192, 64, 8, 128),
         (8, 1024, 32, 8, 128)),
        ((1, 5, 4, 2, 64), (2, 3, 6, 3, 128)), dtype=BF16,
    ),
    Kernel(
        "gems", "skip_layer_norm", _GF + "skip_layernorm", ("skip_layer_norm",),
        "LayerNorm of x + residual (an autograd Function's forward), hidden 4096-8192, bf16.",
        "x, r, w, b", "return torch.nn.functional.layer_norm(x + r, (x.shape[-1],), w, b, 1e-5)",
        "return skip_layer_norm(x, r, [x.shape[-1]], w, b, 1e-5)",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.randn(rows, hidden, dtype=dtype),\n"
        "        (1 + 0.1 * torch.randn(hidden)).to(dtype), (0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (3, 4096)), dtype=BF16,
    ),
    Kernel(
        "gems", "fused_add_rms_norm", _GF + "fused_add_rms_norm", ("fused_add_rms_norm",),
        "Residual add then RMSNorm, both written in place (normed x, the sum in residual), hidden 4096-8192, bf16.",
        "x, r, w",
        "s = (x.float() + r.float()).to(x.dtype)\nsf = s.float()\n"
        "return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype), s",
        "return fused_add_rms_norm(x, r, [x.shape[-1]], w, 1e-5)",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.randn(rows, hidden, dtype=dtype),\n"
        "        (1 + 0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (3, 4096)), dtype=BF16,
    ),
    Kernel(
        "gems", "topk_softmax", _GF + "topk_softmax", ("topk_softmax",),
        "MoE router: softmax over the experts, then the top k weights and expert ids per token (into given buffers).",
        "logits, k",
        "w, i = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)\nreturn w, i.to(torch.int32)",
        """
        n = logits.shape[0]
        weights = torch.empty(n, k, dtype=torch.float32, device=logits.device)
        ids = torch.empty(n, k, dtype=torch.int32, device=logits.device)
        rows = torch.empty(n, k, dtype=torch.int32, device=logits.device)
        topk_softmax(weights, ids, rows, logits)
        return weights, ids
        """,
        "tokens, experts, k", "return [torch.randn(tokens, experts, dtype=dtype), k]",
        ((16384, 8, 2), (16384, 64, 8), (8192, 128, 8), (32768, 16, 4), (4096, 256, 8)),
        ((37, 8, 2), (5, 60, 6)),
    ),
]
# fmt: on


# --- fla-core 0.6.0 ---------------------------------------------------------------------------------

_FM = "fla.modules."
_FO = "fla.ops.utils."
# (tokens, head_dim): q/k of linear-attention layers, flattened over batch, time and heads
_TOKENS_HEAD = ((32768, 128), (65536, 128), (16384, 256), (131072, 64), (8192, 4096))
_ACT = ((8192, 4096), (16384, 4096), (8192, 14336), (4096, 8192), (32768, 2048))


def _fla_act(op: str, entry: str, about: str, ref: str, new: str) -> Kernel:
    """fla's element-wise activations: one flat grid over all elements (offs // D, offs % D)."""
    return Kernel(
        "fla",
        op,
        _FM + "activations.ops",
        (entry,),
        about,
        "x",
        ref,
        new,
        "rows, cols",
        "return [torch.randn(rows, cols, dtype=dtype)]",
        _ACT,
        ((37, 100), (5, 3001)),
        dtype=BF16,
    )


# fmt: off
FLA = [
    Kernel(
        "fla", "l2norm", _FM + "norm.l2norm", ("l2norm_fwd",),
        "L2-normalize q/k rows: x / sqrt(sum(x^2) + eps); head_dim <= 512 takes the BT-tiled kernel, wider the row kernel; bf16.",
        "x", "xf = x.float()\nreturn (xf / torch.sqrt(xf.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)",
        "return l2norm_fwd(x)[0]",
        "tokens, d", "return [torch.randn(tokens, d, dtype=dtype)]",
        _TOKENS_HEAD, ((37, 100), (5, 1000)), dtype=BF16,
    ),
    Kernel(
        "fla", "layer_norm", _FM + "norm.layernorm", ("layer_norm_fwd",),
        "LayerNorm with weight and bias, hidden 4096-8192 (the row kernel; 512 and under are BT-tiled), bf16.",
        "x, w, b", "return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)",
        "return layer_norm_fwd(x, w, b, 1e-5)[0]",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype),\n"
        "        (0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (5, 300)), dtype=BF16,
    ),
    Kernel(
        "fla", "rms_norm_residual", _FM + "norm.layernorm", ("layer_norm_fwd",),
        "RMSNorm of x + residual (summed in fp32), returning the normed output and the new residual, bf16.",
        "x, r, w",
        "s = x.float() + r.float()\ny = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()\n"
        "return y.to(x.dtype), s.to(r.dtype)",
        "y, _, _, res = layer_norm_fwd(x, w, None, 1e-5, residual=r, is_rms_norm=True)\nreturn y, res",
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.randn(rows, hidden, dtype=dtype),\n"
        "        (1 + 0.1 * torch.randn(hidden)).to(dtype)]",
        _ROWS_HIDDEN, ((37, 1000), (5, 300)), dtype=BF16,
    ),
    Kernel(
        "fla", "layer_norm_swish_gate", _FM + "norm.fused_norm_gate", ("layer_norm_gated_fwd",),
        "LayerNorm(x) * swish(g), the output gate of GLA/RetNet-style layers, bf16.",
        "x, g, w, b",
        "y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5)\n"
        "return (y * torch.nn.functional.silu(g.float())).to(x.dtype)",
        'return layer_norm_gated_fwd(x, g, w, b, "swish", 1e-5)[0]',
        "rows, hidden",
        "return [torch.randn(rows, hidden, dtype=dtype), torch.randn(rows, hidden, dtype=dtype),\n"
        "        (1 + 0.1 * torch.randn(hidden)).to(dtype), (0.1 * torch.randn(hidden)).to(dtype)]",
        ((16384, 128), (32768, 256), (8192, 4096), (4096, 8192), (65536, 64)), ((37, 100), (5, 1000)), dtype=BF16,
    ),
    _fla_act("swish", "swish_fwd", "Swish/SiLU x * sigmoid(x), bf16.",
             "return torch.nn.functional.silu(x.float()).to(x.dtype)", "return swish_fwd(x)"),
    _fla_act("sigmoid", "sigmoid_fwd", "Sigmoid, bf16.", "return torch.sigmoid(x.float()).to(x.dtype)",
             "return sigmoid_fwd(x)"),
    _fla_act("logsigmoid", "logsigmoid_fwd", "Log-sigmoid (the gate of GLA-style layers) at temperature 1, bf16.",
             "return torch.nn.functional.logsigmoid(x.float()).to(x.dtype)", "return logsigmoid_fwd(x)"),
    _fla_act("elu_p1", "elu_p1_fwd", "ELU(x) + 1 (a linear-attention feature map), bf16.",
             "return (torch.nn.functional.elu(x.float()) + 1).to(x.dtype)", "return elu_p1_fwd(x)"),
    Kernel(
        "fla", "swiglu", _FM + "activations.ops", ("swiglu_fwd",),
        "SwiGLU silu(x) * y over flattened elements, a grid lambda inline in the launch, bf16.",
        "x, y", "return (torch.nn.functional.silu(x.float()) * y.float()).to(x.dtype)", "return swiglu_fwd(x, y)",
        "rows, cols", "return [torch.randn(rows, cols, dtype=dtype), torch.randn(rows, cols, dtype=dtype)]",
        _ROWS_FFN, ((37, 100), (5, 3001)), dtype=BF16,
    ),
    Kernel(
        "fla", "rotary", _FM + "rotary.ops", ("rotary_embedding_fwdbwd",),
        "Rotary embedding of (batch, seq, heads, head_dim) with half-width cos/sin caches, bf16.",
        "x, cos, sin",
        """
        c = torch.cat((cos, cos), -1)[None, : x.shape[1], None, :].float()
        s = torch.cat((sin, sin), -1)[None, : x.shape[1], None, :].float()
        xf = x.float()
        half = x.shape[-1] // 2
        rotated = torch.cat((-xf[..., half:], xf[..., :half]), -1)
        return (xf * c + rotated * s).to(x.dtype)
        """,
        "return rotary_embedding_fwdbwd(x, cos, sin)",
        "b, s, h, d",
        """
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(s).float(), inv_freq)
        return [torch.randn(b, s, h, d, dtype=dtype), freqs.cos().to(dtype), freqs.sin().to(dtype)]
        """,
        ((1, 4096, 32, 128), (2, 4096, 32, 128), (4, 2048, 32, 128), (1, 8192, 64, 128), (8, 1024, 16, 256)),
        ((1, 5, 3, 64), (2, 7, 2, 128)), dtype=BF16,
    ),
    Kernel(
        "fla", "chunk_local_cumsum", _FO + "cumsum", ("chunk_local_cumsum",),
        "Cumulative sum of log-gates within chunks of 64 steps, over [B, T, H] (chunked linear attention), fp32.",
        "g",
        "B, T, H = g.shape\npad = (-T) % 64\n"
        "x = torch.nn.functional.pad(g, (0, 0, 0, pad)).view(B, -1, 64, H)\n"
        "return x.cumsum(2).view(B, -1, H)[:, :T]",
        "return chunk_local_cumsum(g, 64)",
        "b, t, h", "return [torch.nn.functional.logsigmoid(torch.randn(b, t, h, dtype=dtype))]",
        ((8, 4096, 32), (4, 8192, 32), (16, 2048, 16), (1, 32768, 64), (32, 1024, 32)), ((2, 100, 3), (1, 200, 5)),
    ),
    Kernel(
        "fla", "chunk_global_cumsum", _FO + "cumsum", ("chunk_global_cumsum",),
        "Cumulative sum over the whole sequence of [B, T, H] gates (a loop over chunks per program), fp32.",
        "g", "return g.cumsum(1)", "return chunk_global_cumsum(g)",
        "b, t, h", "return [torch.nn.functional.logsigmoid(torch.randn(b, t, h, dtype=dtype))]",
        ((8, 4096, 32), (4, 8192, 32), (16, 2048, 16), (1, 32768, 64), (32, 1024, 32)), ((2, 100, 3), (1, 200, 5)),
    ),
    Kernel(
        "fla", "softmax", _FO + "softmax", ("softmax_fwd",),
        "Softmax over the last dimension with warps autotuned, keyword-only launch, fp32 output.",
        "x", "return torch.softmax(x.float(), dim=-1)", "return softmax_fwd(x)",
        "rows, cols", "return [torch.randn(rows, cols, dtype=dtype) * 3]",
        ((4096, 4096), (8192, 8192), (4096, 32000), (16384, 1024), (65536, 256)), ((37, 1000), (5, 3001)),
    ),
    Kernel(
        "fla", "logsumexp", _FO + "logsumexp", ("logsumexp_fwd",),
        "Log-sum-exp over the last dimension (block partials, then a torch reduction), fp32.",
        "x", "return torch.logsumexp(x, dim=-1)", "return logsumexp_fwd(x)",
        "rows, cols", "return [torch.randn(rows, cols, dtype=dtype) * 3]",
        ((4096, 4096), (8192, 8192), (4096, 32000), (16384, 1024), (2048, 65536)), ((37, 1000), (5, 3001)),
    ),
    Kernel(
        "fla", "mean_pooling", _FO + "pooling", ("mean_pooling_fwd",),
        "Mean over chunks of 64 time steps of [B, T, H, D] (chunk summaries), bf16.",
        "x",
        "B, T, H, D = x.shape\nn = -(-T // 64)\nout = torch.empty(B, n, H, D, dtype=x.dtype)\n"
        "for i in range(n):\n    out[:, i] = x[:, i * 64 : (i + 1) * 64].float().mean(1).to(x.dtype)\nreturn out",
        "return mean_pooling_fwd(x, 64)",
        "b, t, h, d", "return [torch.randn(b, t, h, d, dtype=dtype)]",
        ((4, 4096, 16, 128), (8, 2048, 32, 64), (1, 16384, 16, 128), (2, 8192, 8, 256), (16, 1024, 16, 128)),
        ((1, 100, 3, 20), (2, 70, 2, 64)), dtype=BF16,
    ),
    Kernel(
        "fla", "matmul", _FO + "matmul", ("matmul",),
        "A @ B with an optional fused activation (none here), autotuned tiles and a grid function, bf16.",
        "a, b", "return (a.float() @ b.float()).to(a.dtype)", "return matmul(a, b)",
        "m, n, k", "return [torch.randn(m, k, dtype=dtype) / 8, torch.randn(k, n, dtype=dtype) / 8]",
        _GEMM, ((33, 47, 65), (64, 17, 128)), dtype=BF16,
    ),
    Kernel(
        "fla", "token_shift", _FM + "token_shift", ("token_shift_fwd",),
        "RWKV-style token shift delta x[t-1] - x[t] over [B, T, D] (short or long kernel by T), bf16.",
        "x", "return token_shift_ref(x)", "return token_shift_fwd(x)[0]",
        "b, t, d", "return [torch.randn(b, t, d, dtype=dtype)]",
        ((8, 4096, 2048), (4, 8192, 4096), (16, 2048, 2048), (2, 16384, 1024), (1, 4096, 8192)),
        ((2, 37, 100), (1, 5, 300)), dtype=BF16, refs=("token_shift_ref",),
    ),
    Kernel(
        "fla", "cross_entropy", _FM + "fused_cross_entropy.ops", ("cross_entropy_fwd",),
        "Per-token cross-entropy losses (vocabulary split in 64k blocks, then a reduce), ignore -100, fp32.",
        "logits, target", "return torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction='none')",
        "return cross_entropy_fwd(logits, target)[0]",
        "rows, vocab",
        """
        target = torch.randint(0, vocab, (rows,))
        target[::7] = -100
        return [torch.randn(rows, vocab, dtype=dtype) * 2, target]
        """,
        _ROWS_VOCAB, ((7, 1000), (2, 5000)),
    ),
]
# fmt: on

CORPUS: list[Kernel] = LIGER + GEMS + FLA

# (lib, op) -> why it is not in the corpus
# fmt: off
SKIPPED: dict[tuple[str, str], str] = {
    ("gems", "argmin"): "wrong as released: argmin(x, dim) with K == 1 runs argmin_kernel_opt_k1, which loads "
    "`tl.load(inp + offset, mask=True)` with BLOCK_N = next_power_of_2(N): for N not a power of two each row "
    "reads the next row's first values (a 37 x 1000 case returned index 1000 for row 13) and the last rows "
    "read past the tensor",
    ("gems", "glu"): "the kernel is a @pointwise_dynamic scalar function: flag_gems generates the launching "
    "kernel's source at run time (utils/pointwise_dynamic.py, a 1743-line code generator)",
    ("gems", "silu_and_mul"): "@pointwise_dynamic (generated at run time), as glu",
    ("gems", "gelu_and_mul"): "@pointwise_dynamic (generated at run time), as glu",
    ("gems", "outer"): "@pointwise_dynamic (generated at run time), as glu",
    ("gems", "element-wise ops (add, mul, gelu, silu, exp, ...)"): "@pointwise_dynamic (generated at run "
    "time), as glu; 82 modules of flag_gems/ops",
    ("gems", "gather"): "the kernel source is generated as text at run time (ops/gather.py's generate_code)",
    ("liger", "jsd"): "jsd_forward calls liger's backend dispatcher (`dispatch('jsd_loss_and_grad', ...)`) "
    "that picks CuTe DSL on Hopper; the Triton implementation sits behind a registry, not a launch",
    ("liger", "embedding"): "launched only inside LigerEmbeddingFunction.forward (no module-level launch "
    "function); flag_gems' embedding is in the corpus",
    ("fla", "rotary_embedding_ref"): "the library's reference uses einops (not torch/triton/numpy); the "
    "module's reference is written in torch instead",
}
# fmt: on
