"""Models selectable by name (``config.model_name``): ``names``, ``model_class``.

A config's model is built by ``softattn.configlib.build_model(config)``, the
one way to build one: the class ``config.model_name`` names, with
``config.model`` as its arguments (and its fields checked). Every model is a
``flax.linen.Module`` called as
``model.apply(variables, images, train=bool, rngs={'dropout': r},
mutable=[...])`` on float32 NHWC images, returning ``[B, num_classes]``
logits. BatchNorm statistics live in ``batch_stats`` (mutable when
``train=True``), dropout uses the ``dropout`` rng, and every model sows its
pre-logit features as ``intermediates/pre_logits``.

``softattn.models.abstract`` builds a config's model without its data
(variable shapes, parameter count).
"""

from __future__ import annotations

import importlib

import flax.linen as nn

# name -> (module, class or factory); imported lazily so that a light model
# does not pay for the others.
_MODELS = {
    "vit": ("softattn.models.vit", "ViT"),
    "preresnet": ("softattn.models.resnet", "PreResNet"),
    "wrn": ("softattn.models.resnet", "WideResNet"),
    "resnet": ("softattn.models.resnet", "ResNet"),
    "levit_demo": ("softattn.models.levit_demo", "LeViTDemo"),
    "elementwise": ("softattn.models.elementwise", "ElementWiseNet"),
    "vgg_control": ("softattn.models.elementwise", "VGGControl"),
}


def names() -> list[str]:
  """Every model name ``model_class`` (``config.model_name``) accepts."""
  return sorted(_MODELS)


def model_class(name: str) -> type[nn.Module]:
  """The class of model ``name``; its dataclass fields are its arguments.

  Raises:
    ValueError: unknown model name (lists the valid ones).
  """
  if name not in _MODELS:
    raise ValueError(f"unknown model {name!r}; valid names: "
                     f"{', '.join(names())}")
  module, attr = _MODELS[name]
  return getattr(importlib.import_module(module), attr)


# Field checks the models run when built (``__post_init__``), so that a bad
# field is a config error before the workdir exists (``configlib.build_model``)
# rather than a traceback while the first step is traced.


def check_counts(why: dict[str, str] | None = None, **counts) -> None:
  """Raises ``ValueError`` naming the first of ``counts`` below 1 (None passes).

  ``why[field]`` says what the value 0 would mean, when it is not obvious.
  """
  for field, value in counts.items():
    if value is not None and (isinstance(value, bool) or value < 1):
      reason = (why or {}).get(field)
      raise ValueError(f"{field}={value!r} is invalid; it must be >= 1"
                       f"{f' ({reason})' if reason else ''}: set {field}.")


def check_heads(width: int, num_heads: int) -> None:
  """Raises ``ValueError`` unless ``num_heads`` divides ``width``."""
  if width % num_heads:
    divisors = [d for d in range(1, width + 1) if width % d == 0]
    raise ValueError(f"num_heads={num_heads} does not divide width={width}; "
                     f"set num_heads to a divisor of {width} "
                     f"({', '.join(map(str, divisors))}) or change width.")
