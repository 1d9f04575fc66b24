"""Flax linen layers: attention with any normalizer, non-local blocks,
element-wise attention, and the attention diagnostics they sow."""

from softattn.nn.attention import MultiHeadAttention, learnable_names
from softattn.nn.diagnostics import attention_diagnostics, jacobian_diagonal
from softattn.nn.elementwise import ElementWiseAttention
from softattn.nn.nonlocal_block import NonLocalBlock2D

__all__ = ["MultiHeadAttention", "NonLocalBlock2D", "ElementWiseAttention",
           "learnable_names", "attention_diagnostics",
           "jacobian_diagonal"]
