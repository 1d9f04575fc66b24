"""``MultiHeadAttention``: Flax linen multi-head attention with any normalizer.

Parameter names follow ``flax.linen.MultiHeadDotProductAttention`` (``query``,
``key``, ``value``, ``out``, and ``query_ln``/``key_ln`` for qk-LayerNorm), so a
big_vision ViT checkpoint maps onto it one to one (``softattn.models.vit``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from softattn import normalizers as norms
from softattn.attention import dot_product_attention
from softattn.modes import soft_cap
from softattn.normalizers.core import REQUIRED, Normalizer
from softattn.nn.diagnostics import sow_diagnostics
from softattn.nn.diagnostics import SINKS, sink_statistics, sow_sinks

GATE_ACTIVATIONS = {"silu": nn.silu, "gelu": nn.gelu, "sigmoid": nn.sigmoid,
                    "relu": nn.relu, "identity": lambda x: x}
OUTPUT_GATES = ("headwise", "elementwise")


def diff_lambda_init(layer_index: int) -> float:
  """``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for layer ``l = layer_index
  + 1`` (Ye et al. 2024, arXiv 2410.05258; the authors' code calls it with
  the 0-based depth)."""
  return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


def learnable_names(normalizer: Normalizer) -> list[str]:
  """Parameters of ``normalizer`` that ``MultiHeadAttention`` learns: those
  its declaration lists in ``learnable`` that no spec string fixed.

  Raises:
    ValueError: a required parameter the declaration does not make learnable.
  """
  out = []
  for k, v in normalizer.defaults.items():
    if k in normalizer.params:
      continue
    if k in normalizer.learnable:
      out.append(k)
    elif v is REQUIRED:
      learnable = sorted(normalizer.learnable) or "none"
      raise ValueError(
          f"normalizer {normalizer.name!r} needs parameter {k!r}, which "
          f"MultiHeadAttention cannot learn (learnable: {learnable}); "
          f"fix it in the spec string, e.g. '{normalizer.name}({k}=...)'.")
  return out


def normalizer_params(module, norm, num_heads, learnable_init=None):
  """Creates ``module``'s learnable normalizer parameters ``norm_<name>``
  (shape and initial value from ``norm.learnable``; ``learnable_init``
  overrides the initial values by parameter name)."""
  inits = dict(learnable_init or {})
  out = {}
  for k in learnable_names(norm):
    how = norm.learnable[k]
    shape = () if how.shape == "scalar" else (num_heads, 1, 1)
    out[k] = module.param(f"norm_{k}",
                          nn.initializers.constant(inits.get(k, how.init)),
                          shape, jnp.float32)
  return out


def observe(module, q, k, norm, p, scale=None, mask=None,
            logits_soft_cap=None):
  """Sows attention weights / diagnostics of ``q [B,Lq,H,D]``, ``k [B,Lk,H,D]``
  into ``module`` for the collections the caller made mutable
  (``logits_soft_cap``: the scores are capped first, as the layer's path
  caps them).

  Recomputes the dense scores (the training path may be linear or chunked);
  everything here is under ``stop_gradient``.
  """
  d = q.shape[-1]
  if scale is None:
    scale = (norm.default_scale if norm.default_scale is not None
             else 1.0 / math.sqrt(d))
  s = jnp.einsum("bqhd,bkhd->bhqk", q, k,
                 preferred_element_type=jnp.float32) * scale
  s = soft_cap(s, logits_soft_cap)
  s = jax.lax.stop_gradient(s)
  if mask is not None:
    mask = jnp.asarray(mask, bool)
    mask = jnp.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape),
                            s.shape)
  resolved = norm.resolve(p, head_dim=d)
  w = norm(s, mask=mask, **resolved)
  if module.is_mutable_collection("attention_weights"):
    module.sow("attention_weights", "weights", w)
  if module.is_mutable_collection("diagnostics"):
    sow_diagnostics(module, s, w, norm, resolved, mask)
  return w  # for the sink diagnostics, which also need the values


def wants_observation(module) -> bool:
  """True when the caller asked for diagnostics or weights (never at init:
  init makes every collection mutable and would return them as variables)."""
  return not module.is_initializing() and (
      module.is_mutable_collection("diagnostics")
      or module.is_mutable_collection("attention_weights")
      or module.is_mutable_collection(SINKS))


class MultiHeadAttention(nn.Module):
  """Multi-head attention ``softmax(QK^T/sqrt(d))V`` with softmax replaceable.

  ``o = W_o [ (N(s_h) V_h) (.) gate_h(x) ]_h``, ``s_h = scale * q_h k_h^T``,
  with ``N`` the normalizer (``softattn.normalizers.get(normalizer)``) and the
  optional gate of a gated attention unit.

  Attributes:
    num_heads: number of heads.
    qkv_features: total q/k/v width (default: input width); split over heads.
    out_features: output width (default: query input width).
    normalizer: registry string, e.g. ``"softmax"``, ``"relu_seqlen"``,
      ``"normsoftmax(gamma=sqrt_d)"``, ``"prenorm(sin2_max_shifted)"``.
      The parameters its declaration makes learnable (``Normalizer.learnable``)
      become parameters of this layer, named ``norm_<param>``.
    learnable_init: overrides of their initial values, by parameter name.
    qk_layernorm: LayerNorm (no bias) on q and k per head before the dot
      product (Dehghani et al. 2023; on in Wortsman et al. 2023).
    gated: gated attention unit (Hua et al. 2022, ablated in Wortsman et al.
      2023): an extra projection ``gate = act(x W_g)`` of the query input,
      multiplied elementwise into the attention output before ``out``. The
      activation (``gate_activation``, default ``silu`` as Hua et al.) is
      *inferred*: Wortsman et al. do not state it.
    output_gate: Qwen's gated attention (Qiu et al. 2025, arXiv 2505.06708):
      ``Y' = Y (.) sigmoid(x W_theta)`` on each head's attention output,
      before ``out``, with ``x`` the layer's query input. ``"headwise"``: one
      scalar gate per head and token (``output_gate`` kernel ``[D, H, 1]``);
      ``"elementwise"``: one per output channel (``[D, H, head_dim]``).
      Bias as ``use_bias``. ``None`` (default): no gate.
    differential: differential attention (Ye et al. 2024, arXiv 2410.05258;
      equation numbers not re-checked), on any normalizer ``N``: each head's q and k are split into
      halves ``q1, q2`` and ``k1, k2`` (head_dim must be even), and
      ``head = (1 - lambda_init) RMSNorm((N(q1 k1^T s) - lambda N(q2 k2^T s))
      V)`` with ``s = 1/sqrt(head_dim/2)`` and the scalar
      ``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init`` per layer
      (``lambda_q1`` ... ``lambda_k2`` ``[head_dim/2]``, init N(0, 0.1^2);
      RMSNorm eps 1e-5 with a learnable scale ``diff_norm`` shared by the
      heads; as the authors' code). Same projections as the plain layer, so
      ``num_heads`` here is the paper's ``h`` with ``d = head_dim / 2``.
    layer_index: 0-based depth of this layer, for ``lambda_init``.
    diff_lambda_init: a fixed ``lambda_init``; ``None`` (default): the
      paper's ``diff_lambda_init(layer_index)``.
    implementation: passed to ``dot_product_attention``
      (``auto | dense | chunked | linear | pallas``).
    chunk_size: key/query block size of the chunked path.
    scale: score scale (default: the normalizer's, else ``1/sqrt(head_dim)``).
    logits_soft_cap: ``c`` caps the scaled scores at ``c tanh(s / c)``
      before the normalizer (``dot_product_attention``'s argument: dense and
      chunked paths, ``auto`` picks one); None (default): no cap.
    use_bias: biases on the q/k/v/out projections.
    dtype: matmul dtype (e.g. ``jnp.bfloat16``); parameters stay
      ``param_dtype``; the normalizer always runs in float32.

  Collections (only written when the caller makes them mutable, so training
  steps stay on the configured path):

  * ``diagnostics``: ``score_std``, ``attn_entropy``, ``grad_saturation``
    and the quantiles ``score_qNN`` / ``lgrad_qNN`` of the normalizer's input
    and local gradient (``softattn.nn.diagnostics``), from the dense scores.
  * ``attention_weights``: ``weights`` ``[B, H, Lq, Lk]`` for plots.
  * ``sinks``: per example and head, the top key, its share of the weight
    and value norm, and the effective rank of the head's output (after the
    gates, before ``out``): ``softattn.nn.diagnostics.sink_statistics``.
  """
  num_heads: int
  qkv_features: Optional[int] = None
  out_features: Optional[int] = None
  normalizer: str | Normalizer = "softmax"
  learnable_init: Optional[Mapping[str, float]] = None
  qk_layernorm: bool = False
  gated: bool = False
  gate_activation: str = "silu"
  output_gate: Optional[str] = None
  differential: bool = False
  layer_index: int = 0
  diff_lambda_init: Optional[float] = None
  implementation: str = "auto"
  chunk_size: Optional[int] = None
  scale: Optional[float] = None
  logits_soft_cap: Optional[float] = None
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.xavier_uniform()
  bias_init: Callable = nn.initializers.zeros
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs_q, inputs_kv=None, *, mask=None):
    """Attends from ``inputs_q [B, Lq, D]`` to ``inputs_kv [B, Lk, D]``.

    ``inputs_kv=None`` is self-attention. ``mask``: boolean, broadcastable to
    ``[B, H, Lq, Lk]``; False keys get weight 0.
    """
    if inputs_kv is None:
      inputs_kv = inputs_q
    norm = norms.get(self.normalizer)
    features = self.out_features or inputs_q.shape[-1]
    qkv = self.qkv_features or inputs_q.shape[-1]
    if qkv % self.num_heads:
      raise ValueError(f"qkv_features={qkv} is not divisible by num_heads="
                       f"{self.num_heads}; pick a width that is a multiple")
    head_dim = qkv // self.num_heads
    dense = lambda name: nn.DenseGeneral(
        features=(self.num_heads, head_dim), axis=-1, use_bias=self.use_bias,
        kernel_init=self.kernel_init, bias_init=self.bias_init,
        dtype=self.dtype, param_dtype=self.param_dtype, name=name)
    q = dense("query")(inputs_q)
    k = dense("key")(inputs_kv)
    v = dense("value")(inputs_kv)
    if self.qk_layernorm:
      q = nn.LayerNorm(use_bias=False, dtype=self.dtype,
                       param_dtype=self.param_dtype, name="query_ln")(q)
      k = nn.LayerNorm(use_bias=False, dtype=self.dtype,
                       param_dtype=self.param_dtype, name="key_ln")(k)
    p = normalizer_params(self, norm, self.num_heads, self.learnable_init)
    attend = lambda q, k: dot_product_attention(  # noqa: E731
        q, k, v, normalizer=norm, normalizer_params=p, mask=mask,
        scale=self.scale, implementation=self.implementation,
        chunk_size=self.chunk_size, logits_soft_cap=self.logits_soft_cap)
    if self.differential:
      x, q, k = self._differential(attend, q, k, head_dim)
    else:
      x = attend(q, k)
    weights = None
    if wants_observation(self):  # differential: the first map's weights
      weights = observe(self, q, k, norm, p, self.scale, mask,
                        logits_soft_cap=self.logits_soft_cap)
    if self.output_gate is not None:
      if self.output_gate not in OUTPUT_GATES:
        raise ValueError(f"unknown output_gate {self.output_gate!r}; valid: "
                         f"{', '.join(OUTPUT_GATES)} or None")
      width = 1 if self.output_gate == "headwise" else x.shape[-1]
      gate = nn.DenseGeneral(
          features=(self.num_heads, width), axis=-1, use_bias=self.use_bias,
          kernel_init=self.kernel_init, bias_init=self.bias_init,
          dtype=self.dtype, param_dtype=self.param_dtype,
          name="output_gate")(inputs_q)
      x = x * nn.sigmoid(gate).astype(x.dtype)
    if self.gated:
      if self.gate_activation not in GATE_ACTIVATIONS:
        raise ValueError(f"unknown gate_activation {self.gate_activation!r}; "
                         f"valid: {', '.join(GATE_ACTIVATIONS)}")
      gate = GATE_ACTIVATIONS[self.gate_activation](dense("gate")(inputs_q))
      x = x * gate.astype(x.dtype)
    if weights is not None and self.is_mutable_collection(SINKS):
      sow_sinks(self, sink_statistics(weights, v, x, mask))
    return nn.DenseGeneral(
        features=features, axis=(-2, -1), use_bias=self.use_bias,
        kernel_init=self.kernel_init, bias_init=self.bias_init,
        dtype=self.dtype, param_dtype=self.param_dtype, name="out")(x)

  def _differential(self, attend, q, k, head_dim):
    """``(1 - lambda_init) RMSNorm(A1 V - lambda A2 V)`` per head; returns it
    and the first map's ``q1, k1``. Both maps go through ``attend`` (any
    normalizer and path): the difference is linear in the weights."""
    if head_dim % 2:
      raise ValueError(f"differential attention splits each head's q/k in "
                       f"two halves: head_dim={head_dim} must be even; change "
                       f"qkv_features or num_heads")
    half = head_dim // 2
    q1, q2 = q[..., :half], q[..., half:]
    k1, k2 = k[..., :half], k[..., half:]
    lam_init = (diff_lambda_init(self.layer_index)
                if self.diff_lambda_init is None else self.diff_lambda_init)
    init = nn.initializers.normal(stddev=0.1)
    lq1, lk1, lq2, lk2 = (
        self.param(f"lambda_{n}", init, (half,), self.param_dtype)
        for n in ("q1", "k1", "q2", "k2"))
    lam = (jnp.exp(jnp.sum(lq1 * lk1)) - jnp.exp(jnp.sum(lq2 * lk2))
           + lam_init)
    a1, a2 = attend(q1, k1), attend(q2, k2)
    x = a1 - lam.astype(a1.dtype) * a2
    x = nn.RMSNorm(epsilon=1e-5, dtype=self.dtype,
                   param_dtype=self.param_dtype, name="diff_norm")(x)
    return x * (1.0 - lam_init), q1, k1
