"""softattn: what replaces softmax in attention.

The flat API: normalizers (``softattn.normalizers``, also re-exported here by
name), ``dot_product_attention``, and the registry helpers ``get_normalizer`` and
``normalizer_names``.
"""

from softattn import normalizers
from softattn.attention import dot_product_attention
from softattn.normalizers import Normalizer
from softattn.normalizers import get as get_normalizer
from softattn.normalizers import names as normalizer_names

__version__ = "0.1.0"

__all__ = ["normalizers", "dot_product_attention", "Normalizer",
           "get_normalizer", "normalizer_names"]
