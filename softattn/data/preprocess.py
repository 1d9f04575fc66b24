"""Preprocessing as named ops, composed from big_vision-style strings.

A pipeline string is ops joined by ``|``, each a call with literal arguments::

  "inception_crop(224)|flip_lr|randaug(2, 9)|value_range(-1, 1)|random_erasing(0.25)"
  "resize_small(256)|central_crop(224)|value_range(-1, 1)"
  "pad_and_crop(4)|flip_lr|value_range(-1, 1)"          # CIFAR

Every op maps ``(example, seed) -> example`` where ``example`` is a dict with an
``image`` (``uint8`` ``[H, W, C]`` until ``value_range`` turns it into float32)
and a ``label``, and ``seed`` is a stateless seed (int64 ``[2]``). The pipeline
derives one seed per op from the example's seed, so every random choice is a
pure function of (run seed, position of the example in the process's example
sequence): a resumed run sees the very same augmented images (``softattn.data.pipeline``).

Strings are parsed with ``ast`` (never ``eval``); an unknown op raises a
``ValueError`` listing the valid ones, bad arguments name the op's signature.
``check(spec)`` does all of that without building a pipeline:
``softattn.configlib.resolve_config`` runs it on every ``pp_*`` string of a
config, so a typo is a config error before the workdir exists.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import math
from typing import Callable

import tensorflow as tf

from softattn.data import autoaugment

Op = Callable[[dict, tf.Tensor], dict]

_OPS: dict[str, Callable[..., Op]] = {}
# Ops that ignore the seed and act on the last axis only, so they give the
# same result on a batch as on each example: the train pipeline runs a
# trailing run of them once per batch instead of once per example (cheaper).
_BATCHABLE: set[str] = set()


def register(name: str, batchable: bool = False):
  """Registers ``factory(*args, **kwargs) -> op`` under ``name``."""
  def wrap(factory):
    if name in _OPS:
      raise ValueError(f"preprocessing op {name!r} is already registered")
    _OPS[name] = factory
    if batchable:
      _BATCHABLE.add(name)
    return factory
  return wrap


def names() -> list[str]:
  """Every registered op name, sorted."""
  return sorted(_OPS)


def _parse_one(text: str):
  """``"name(1, b=2)"`` -> ``("name", (1,), {"b": 2})``."""
  try:
    node = ast.parse(text.strip(), mode="eval").body
  except SyntaxError:
    raise ValueError(f"malformed preprocessing op {text!r}; write e.g. "
                     "'resize(32)' or 'flip_lr'") from None
  if isinstance(node, ast.Name):
    return node.id, (), {}
  if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
    raise ValueError(f"malformed preprocessing op {text!r}; write e.g. "
                     "'resize(32)' or 'flip_lr'")
  try:
    args = tuple(ast.literal_eval(a) for a in node.args)
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
  except ValueError:
    raise ValueError(f"preprocessing op {text!r}: arguments must be Python "
                     "literals (numbers, strings, tuples)") from None
  return node.func.id, args, kwargs


def get_op(text: str) -> Op:
  """Builds one op from its string, e.g. ``"value_range(-1, 1)"``."""
  factory, args, kwargs = _bind(text)
  return factory(*args, **kwargs)


def _bind(text: str):
  """``(factory, args, kwargs)`` of one op string, its name and arguments
  checked against the registered ops."""
  name, args, kwargs = _parse_one(text)
  if name not in _OPS:
    close = difflib.get_close_matches(name, names(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    where = "" if text.strip() == name else f" in {text.strip()!r}"
    raise ValueError(f"unknown preprocessing op {name!r}{where}{hint}; valid "
                     f"ops: {', '.join(names())}")
  factory = _OPS[name]
  try:
    inspect.signature(factory).bind(*args, **kwargs)
  except TypeError as e:
    raise ValueError(f"preprocessing op {text!r}: {e}; signature is "
                     f"{name}{inspect.signature(factory)}") from None
  return factory, args, kwargs


def check(spec) -> list[str]:
  """Checks a pipeline string without running it; returns its op names.

  Every op is parsed, its name looked up (an unknown one names the nearest
  valid one), its arguments bound to its signature, and the op built, which
  runs the op's own argument checks (``standardize``'s ``std > 0``). Building
  is cheap and touches no data, so ``softattn.configlib.resolve_config`` runs
  this on every ``pp_*`` string of a config: a typo is a config error before
  the workdir exists, not a traceback when the input pipeline first runs.

  Raises:
    ValueError: one line naming the op and the fix.
  """
  if spec is not None and not isinstance(spec, str):
    raise ValueError(f"a preprocessing pipeline is a string of ops joined by "
                     f"'|', e.g. 'flip_lr|value_range(-1, 1)'; got "
                     f"{type(spec).__name__} {spec!r}")
  out = []
  for text in _texts(spec):
    factory, args, kwargs = _bind(text)
    try:
      factory(*args, **kwargs)
    except (ValueError, TypeError) as e:  # the op's own check: name the op
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise ValueError(f"preprocessing op {text.strip()!r}: {first}") from None
    out.append(_parse_one(text)[0])
  return out


def _compose(ops):
  def pipeline(example, seed):
    for i, op in enumerate(ops):
      example = op(example, tf.random.experimental.stateless_fold_in(seed, i))
    return example
  return pipeline


def _texts(spec):
  return [t for t in (spec or "").split("|") if t.strip()]


def parse(spec: str | None) -> Op:
  """Composes a ``|``-separated pipeline string into one ``(example, seed)`` op.

  Op ``i`` gets the seed ``fold_in(seed, i)``, so adding an op never changes the
  randomness of the ops before it.
  """
  return _compose([get_op(t) for t in _texts(spec)])


def parse_split(spec: str | None) -> tuple[Op | None, Op]:
  """``parse(spec)`` as ``(per-example part, per-batch part)``.

  The per-batch part is the longest trailing run of batchable ops
  (``value_range``, ``standardize``, ``to_rgb``); running them on the batch
  gives the same result as ``parse(spec)`` per example, with less
  per-example work. The
  per-example part is None when nothing is left for it.
  """
  texts = _texts(spec)
  ops = [get_op(t) for t in texts]
  cut = len(texts)
  while cut and _parse_one(texts[cut - 1])[0] in _BATCHABLE:
    cut -= 1
  return (_compose(ops[:cut]) if cut else None), _compose(ops[cut:])


def _hw(size):
  """``32`` or ``(32, 48)`` -> ``(h, w)``."""
  if isinstance(size, (tuple, list)):
    if len(size) != 2:
      raise ValueError(f"size must be an int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])
  return int(size), int(size)


def _like(image, dtype):
  """Rounds and saturates back to ``dtype`` (keeps uint8 images uint8)."""
  if dtype == tf.uint8:
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
  return tf.cast(image, dtype)


def _image_op(fn):
  """Lifts ``fn(image, seed) -> image`` to an op on the example dict."""
  def op(example, seed):
    return {**example, "image": fn(example["image"], seed)}
  return op


@register("resize")
def get_resize(size, method="bilinear", antialias=True):
  """Resizes to ``size`` (int or ``(h, w)``) ignoring the aspect ratio."""
  hw = _hw(size)

  def fn(image, seed):
    del seed
    out = tf.image.resize(image, hw, method=method, antialias=antialias)
    return _like(out, image.dtype)
  return _image_op(fn)


@register("resize_small")
def get_resize_small(size, method="bilinear", antialias=True):
  """Resizes so the shorter side is ``size``, keeping the aspect ratio."""
  def fn(image, seed):
    del seed
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = float(size) / tf.reduce_min(shape)
    hw = tf.cast(tf.round(shape * scale), tf.int32)
    out = tf.image.resize(image, hw, method=method, antialias=antialias)
    return _like(out, image.dtype)
  return _image_op(fn)


@register("central_crop")
def get_central_crop(size):
  """Crops the central ``size`` (int or ``(h, w)``) window."""
  h, w = _hw(size)

  def fn(image, seed):
    del seed
    shape = tf.shape(image)
    top, left = (shape[0] - h) // 2, (shape[1] - w) // 2
    return tf.ensure_shape(image[top:top + h, left:left + w],
                           [h, w, image.shape[-1]])
  return _image_op(fn)


@register("random_crop")
def get_random_crop(size):
  """Crops a uniformly placed ``size`` window (image must be at least that)."""
  h, w = _hw(size)

  def fn(image, seed):
    return tf.image.stateless_random_crop(image, [h, w, image.shape[-1]], seed)
  return _image_op(fn)


@register("pad_and_crop")
def get_pad_and_crop(pad=4, mode="CONSTANT"):
  """Pads ``pad`` pixels each side, then crops back to the original size.

  The CIFAR augmentation of He et al. (2016), "Deep residual learning";
  ``mode`` is ``tf.pad``'s (``CONSTANT`` zeros, ``REFLECT``, ``SYMMETRIC``).
  """
  def fn(image, seed):
    shape = tf.shape(image)
    padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], mode=mode)
    out = tf.image.stateless_random_crop(
        padded, tf.stack([shape[0], shape[1], shape[2]]), seed)
    return tf.ensure_shape(out, image.shape)
  return _image_op(fn)


@register("inception_crop")
def get_inception_crop(size=None, area_min=5, area_max=100,
                       aspect_min=3 / 4, aspect_max=4 / 3, method="bilinear"):
  """Random-resized crop of Szegedy et al. (2015), "Going deeper with convolutions".

  Samples a box covering ``area_min``..``area_max`` percent of the image with
  aspect ratio in ``[aspect_min, aspect_max]`` and, when ``size`` is given,
  resizes the crop to ``size`` (int or ``(h, w)``).
  """
  hw = None if size is None else _hw(size)

  def fn(image, seed):
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.zeros([0, 0, 4], tf.float32), seed=seed,
        area_range=(area_min / 100, area_max / 100),
        aspect_ratio_range=(aspect_min, aspect_max),
        use_image_if_no_bounding_boxes=True, max_attempts=100)
    crop = tf.slice(image, begin, crop_size)
    crop.set_shape([None, None, image.shape[-1]])
    if hw is None:
      return crop
    return _like(tf.image.resize(crop, hw, method=method, antialias=True),
                 image.dtype)
  return _image_op(fn)


@register("flip_lr")
def get_flip_lr():
  """Mirrors left-right with probability 1/2."""
  def fn(image, seed):
    return tf.image.stateless_random_flip_left_right(image, seed)
  return _image_op(fn)


def rotate(image, radians, interpolation="BILINEAR"):
  """Rotates ``image`` ``[H, W, C]`` by ``radians`` about its centre.

  Counter-clockwise as displayed (row 0 at the top); corners that come from
  outside the image are filled with zeros. Rotation by pi/2 equals
  ``np.rot90`` on a square image.
  """
  h = tf.cast(tf.shape(image)[0], tf.float32)
  w = tf.cast(tf.shape(image)[1], tf.float32)
  cos, sin = tf.cos(radians), tf.sin(radians)
  # The transform maps output pixel (x, y) to the input pixel it samples:
  # rotate about the centre ((w-1)/2, (h-1)/2) by -radians in (x, y) with y
  # pointing down, i.e. counter-clockwise on screen.
  cx, cy = (w - 1) / 2, (h - 1) / 2
  transform = tf.stack([cos, -sin, cx - cos * cx + sin * cy,
                        sin, cos, cy - sin * cx - cos * cy, 0.0, 0.0])
  # In float, then rounded: float32 cos(pi/2) is not 0, and truncating a
  # sample of 1.99999 to uint8 would give 1.
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=tf.cast(image, tf.float32)[None], transforms=transform[None],
      output_shape=tf.shape(image)[:2], fill_value=0.0,
      interpolation=interpolation, fill_mode="CONSTANT")[0]
  return tf.ensure_shape(_like(out, image.dtype), image.shape)


@register("random_rotate")
def get_random_rotate(degrees=90.0, interpolation="BILINEAR"):
  """Rotates by an angle drawn uniformly from ``[-degrees, degrees]``.

  torchvision's ``RandomRotation(degrees)`` (bilinear here, zero fill): the
  reading of the periodic-softmax paper's "random rotation 90°" used by its
  full-scale config (*inferred*; ``random_rot90`` is the other reading).
  """
  def fn(image, seed):
    angle = tf.random.stateless_uniform([], seed, -degrees, degrees)
    return rotate(image, angle * math.pi / 180.0, interpolation)
  return _image_op(fn)


@register("random_rot90")
def get_random_rot90():
  """Rotates by 0, 90, 180 or 270 degrees, uniformly (square images)."""
  def fn(image, seed):
    k = tf.random.stateless_uniform([], seed, 0, 4, dtype=tf.int32)
    return tf.ensure_shape(tf.image.rot90(image, k), image.shape)
  return _image_op(fn)


@register("value_range", batchable=True)
def get_value_range(vmin=-1.0, vmax=1.0, in_min=0.0, in_max=255.0,
                    clip_values=False):
  """Maps ``[in_min, in_max]`` linearly to ``[vmin, vmax]`` as float32."""
  def fn(image, seed):
    del seed
    x = (tf.cast(image, tf.float32) - in_min) / (in_max - in_min)
    x = vmin + x * (vmax - vmin)
    return tf.clip_by_value(x, vmin, vmax) if clip_values else x
  return _image_op(fn)


@register("standardize", batchable=True)
def get_standardize(mean, std):
  """``(x - mean) / std`` per channel, in the image's current units.

  E.g. CIFAR's ``value_range(0, 1)|standardize((0.4914, 0.4822, 0.4465),
  (0.2470, 0.2435, 0.2616))``; ``mean``/``std`` are numbers or per-channel
  tuples.
  """
  mean_t = tf.constant(mean, tf.float32)
  std_t = tf.constant(std, tf.float32)
  if not bool(tf.reduce_all(std_t > 0)):
    raise ValueError(f"standardize std must be positive, got {std!r}")

  def fn(image, seed):
    del seed
    return (tf.cast(image, tf.float32) - mean_t) / std_t
  return _image_op(fn)


@register("to_rgb", batchable=True)
def get_to_rgb():
  """Repeats a single channel three times (grayscale data into RGB models)."""
  def fn(image, seed):
    del seed
    if image.shape[-1] == 3:
      return image
    if image.shape[-1] != 1:
      raise ValueError(f"to_rgb needs 1 or 3 channels, got {image.shape[-1]}")
    return tf.repeat(image, 3, axis=-1)
  return _image_op(fn)


@register("randaug")
def get_randaug(num_layers=2, magnitude=9):
  """RandAugment: ``num_layers`` random ops at a fixed ``magnitude`` in [0, 10].

  Cubuk et al. (2020), "RandAugment: Practical automated data augmentation
  with a reduced search space". Apply to uint8 images, before ``value_range``.
  """
  def fn(image, seed):
    return autoaugment.randaugment(image, seed, num_layers=num_layers,
                                   magnitude=magnitude)
  return _image_op(fn)


@register("trivial_augment")
def get_trivial_augment():
  """TrivialAugment: one random op at a uniform random magnitude in [0, 10].

  Mueller & Hutter (2021), "TrivialAugment: Tuning-free yet state-of-the-art
  data augmentation". Apply to uint8 images, before ``value_range``.
  """
  def fn(image, seed):
    return autoaugment.trivial_augment(image, seed)
  return _image_op(fn)


@register("random_erasing")
def get_random_erasing(prob=0.25, area_min=0.02, area_max=1 / 3,
                       aspect_min=0.3, fill="normal"):
  r"""Random erasing of Zhong et al. (2020), "Random erasing data augmentation".

  With probability ``prob`` replaces a rectangle of area fraction
  :math:`s \sim U[\text{area\_min}, \text{area\_max}]` and aspect ratio
  :math:`r`, :math:`\log r \sim U[\log a, -\log a]` (``a = aspect_min``), by
  per-pixel standard normal noise (``fill="normal"``, for images already
  normalised around 0) or by a constant (``fill=<number>``). Use after
  ``value_range``: it needs float images.
  """
  if not (fill == "normal" or isinstance(fill, (int, float))):
    raise ValueError(f"random_erasing fill must be 'normal' or a number, got "
                     f"{fill!r}")

  def fn(image, seed):
    if image.dtype != tf.float32:
      raise ValueError("random_erasing needs float images: put it after "
                       "value_range(...) in the pipeline string")
    seeds = tf.random.experimental.stateless_split(seed, 6)
    shape = tf.shape(image)
    hf, wf = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    area = tf.random.stateless_uniform([], seeds[0], area_min, area_max) * hf * wf
    log_r = tf.random.stateless_uniform([], seeds[1], math.log(aspect_min),
                                        -math.log(aspect_min))
    ratio = tf.exp(log_r)
    eh = tf.clip_by_value(tf.round(tf.sqrt(area * ratio)), 1.0, hf)
    ew = tf.clip_by_value(tf.round(tf.sqrt(area / ratio)), 1.0, wf)
    top = tf.floor(tf.random.stateless_uniform([], seeds[2]) * (hf - eh + 1))
    left = tf.floor(tf.random.stateless_uniform([], seeds[3]) * (wf - ew + 1))
    rows = tf.range(hf)[:, None]
    cols = tf.range(wf)[None, :]
    box = ((rows >= top) & (rows < top + eh) & (cols >= left)
           & (cols < left + ew))
    apply = tf.random.stateless_uniform([], seeds[4]) < prob
    box = tf.logical_and(box, apply)[:, :, None]
    if fill == "normal":
      noise = tf.random.stateless_normal(shape, seeds[5])
    else:
      noise = tf.fill(shape, tf.cast(fill, tf.float32))
    return tf.where(box, noise, image)
  return _image_op(fn)
