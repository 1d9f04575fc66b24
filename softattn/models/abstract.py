"""A config's model without its data: the module, variable shapes, size.

What tests, memory analyses, the AOT launch table and the studies need of a
model before (or instead of) training it: the model from
``softattn.configlib.build_model`` (its class count from the dataset's
offline facts, ``softattn.data.datasets.KNOWN``, as is the input shape), the
variables from ``jax.eval_shape`` of ``model.init`` (nothing computed).
"""

from __future__ import annotations

import numpy as np

from softattn import configlib


def build_abstract(config, image_shape=None):
  """``(model, variables shapes)`` of a config's model, via ``jax.eval_shape``
  (no data, no training: what the tests use to check every study config).

  ``image_shape`` defaults to ``input_shape(config)``.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if image_shape is None:
    image_shape = input_shape(config)
  model = configlib.build_model(config)
  x = jax.ShapeDtypeStruct((2, *image_shape), jnp.float32)
  shapes = jax.eval_shape(
      lambda: model.init({"params": jax.random.key(0),
                          "dropout": jax.random.key(1)},
                         jnp.zeros(x.shape, x.dtype), train=False))
  return model, shapes


def input_shape(config) -> tuple[int, int, int]:
  """The image shape a config's model is built for: its dataset's stored
  shape, or, for images stored at varying sizes (ImageNet), the size the
  config's ``pp_eval`` makes of them (traced, nothing read)."""
  from softattn.data import datasets  # pylint: disable=g-import-not-at-top
  shape = datasets.known(config.data.name).image_shape
  if None not in shape:
    return shape
  from softattn.data import pipeline  # pylint: disable=g-import-not-at-top
  return pipeline.preprocessed_shape(config.data.pp_eval, shape)


def param_count(shapes) -> int:
  """Number of trainable parameters in ``shapes['params']``."""
  import jax  # pylint: disable=g-import-not-at-top
  return int(sum(np.prod(s.shape) for s in
                 jax.tree.leaves(shapes.get("params", {}))))
