"""softattn: what replaces softmax in attention.

The flat API: normalizers (``softattn.normalizers``, also re-exported here by
name), ``dot_product_attention``, and the registry helpers ``get_normalizer`` and
``normalizer_names``.
"""

# Before anything imports jax: on a host without a TPU, jax would probe an
# installed libtpu, whose start-up errors then wrap every command's output.
from softattn import platforms  # pylint: disable=g-bad-import-order

platforms.quiet_start()

# pylint: disable=g-import-not-at-top,wrong-import-position
from softattn import normalizers
from softattn.attention import dot_product_attention
from softattn.normalizers import Normalizer
from softattn.normalizers import get as get_normalizer
from softattn.normalizers import names as normalizer_names
# pylint: enable=g-import-not-at-top,wrong-import-position

__version__ = "0.1.0"

__all__ = ["normalizers", "dot_product_attention", "Normalizer",
           "get_normalizer", "normalizer_names"]
