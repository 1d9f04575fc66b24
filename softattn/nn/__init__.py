"""Flax linen layers: attention with any normalizer, non-local blocks,
element-wise attention."""

from softattn.nn.attention import LEARNABLE, MultiHeadAttention, learnable_names
from softattn.nn.diagnostics import attention_diagnostics, jacobian_diagonal

__all__ = ["MultiHeadAttention", "LEARNABLE", "learnable_names",
           "attention_diagnostics", "jacobian_diagonal"]
