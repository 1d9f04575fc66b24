"""Evaluation helpers: ImageNet-1k accuracy of an ImageNet-21k model.

Wortsman et al. (2023) report the i1k accuracy of i21k-trained models by
taking the top class *among the 1000 i1k classes* of the 21k-way output, on
the i1k validation set (no fine-tuning). That needs, for each i1k class, its
index in the i21k label space: ``i1k_indices(i21k_wnids)`` builds this table
from the two WordNet-id lists. The i1k list ships with TFDS
(``imagenet2012/labels.txt``, in TFDS's label order); the i21k list is the
one the user's i21k dataset was built with (one wnid per line, label order;
set ``config.eval.i21k_wnids_file``; for big_vision's ``imagenet21k`` that
is the 21,843 fall11 wnids, sorted). TFDS ships no i21k list, so the file is
required rather than guessed.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np


def i1k_wnids() -> list[str]:
  """The 1000 ImageNet-1k WordNet ids in TFDS ``imagenet2012`` label order."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(tfds.__file__), "datasets",
                      "imagenet2012", "labels.txt")
  with open(path, encoding="utf-8") as f:
    wnids = [l.strip() for l in f if l.strip()]
  if len(wnids) != 1000:
    raise ValueError(f"{path} has {len(wnids)} labels, expected 1000.")
  return wnids


def read_wnids(path: str) -> list[str]:
  """One wnid per line (blank lines ignored), in the dataset's label order."""
  if not path or not os.path.exists(path):
    raise FileNotFoundError(
        f"i21k class list {path!r} not found; set config.eval.i21k_wnids_file "
        "to the wnid-per-line file your imagenet21k labels follow.")
  with open(path, encoding="utf-8") as f:
    return [l.strip() for l in f if l.strip()]


def i1k_indices(i21k_wnids: list[str]) -> np.ndarray:
  """``int32[1000]``: index in the i21k label space of each i1k class.

  Raises:
    ValueError: an i1k wnid missing from the i21k list (the message names it).
  """
  pos = {w: i for i, w in enumerate(i21k_wnids)}
  missing = [w for w in i1k_wnids() if w not in pos]
  if missing:
    raise ValueError(f"{len(missing)} i1k classes are not in the i21k list "
                     f"(first: {missing[:3]}); check config.eval.i21k_wnids_file.")
  return np.asarray([pos[w] for w in i1k_wnids()], np.int32)


def restrict_logits(logits: jax.Array, indices: np.ndarray) -> jax.Array:
  """The columns of ``logits`` for ``indices`` (i21k logits -> i1k logits)."""
  return jnp.take(logits, jnp.asarray(indices), axis=-1)
