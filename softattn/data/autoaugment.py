"""RandAugment and TrivialAugment on uint8 images, stateless.

Both draw from the same 14 image ops (the RandAugment list of Cubuk et al.,
2020, "RandAugment: Practical automated data augmentation with a reduced search
space"): identity, auto_contrast, equalize, rotate, solarize, color, posterize,
contrast, brightness, sharpness, shear_x, shear_y, translate_x, translate_y.
Magnitudes are on the common 0..10 scale: level ``m / 10`` maps linearly to each
op's strongest setting (rotate 30 degrees, shear 0.3, translate 0.33 of the
side, enhance factors 1 +- 0.9, posterize down to 4 bits, solarize threshold
down to 0); signed ops pick their sign at random. Geometric ops fill with gray
(128). Every random choice comes from the stateless ``seed``, so the same
(seed, image) always gives the same output (exact resume).

* RandAugment: ``num_layers`` ops drawn uniformly, each at magnitude ``m``.
* TrivialAugment (Mueller & Hutter, 2021): one op drawn uniformly, at a
  magnitude drawn uniformly from [0, 10].
"""

from __future__ import annotations

import math

import tensorflow as tf

_MAX_ROTATE_DEG = 30.0
_MAX_SHEAR = 0.3
_MAX_TRANSLATE = 0.33
_MAX_ENHANCE = 0.9
_FILL = 128.0


def _blend(degenerate, image, factor):
  """PIL's ImageEnhance: ``degenerate + factor * (image - degenerate)``."""
  d = tf.cast(degenerate, tf.float32)
  out = d + factor * (tf.cast(image, tf.float32) - d)
  return tf.cast(tf.clip_by_value(tf.round(out), 0.0, 255.0), tf.uint8)


def _gray(image):
  """Luma as a [H, W, 1] float image (a single channel is its own gray)."""
  x = tf.cast(image, tf.float32)
  if image.shape[-1] == 3:
    return tf.image.rgb_to_grayscale(x)
  return tf.reduce_mean(x, axis=-1, keepdims=True)


def _transform(image, matrix):
  """Applies a projective map, ``matrix`` = output -> input (8 numbers)."""
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=image[None], transforms=tf.cast(matrix, tf.float32)[None],
      output_shape=tf.shape(image)[:2], fill_value=_FILL,
      interpolation="BILINEAR", fill_mode="CONSTANT")
  return tf.ensure_shape(out[0], image.shape)


def _signed(level, seed):
  sign = tf.where(tf.random.stateless_uniform([], seed) < 0.5, -1.0, 1.0)
  return sign * level


def identity(image, level, seed):
  del level, seed
  return image


def auto_contrast(image, level, seed):
  """Stretches each channel to the full 0..255 range."""
  del level, seed
  x = tf.cast(image, tf.float64)  # float32 would make 255 * 1.0 land on 254.
  lo = tf.reduce_min(x, axis=[0, 1], keepdims=True)
  hi = tf.reduce_max(x, axis=[0, 1], keepdims=True)
  scale = tf.where(hi > lo, 255.0 / tf.maximum(hi - lo, 1.0), 1.0)
  offset = tf.where(hi > lo, lo, 0.0)
  # PIL truncates (int()) rather than rounds; we match it.
  return tf.cast(tf.clip_by_value(tf.floor(x * scale - offset * scale), 0, 255),
                 tf.uint8)


def _equalize_channel(channel):
  """PIL's ImageOps.equalize on one uint8 [H, W] channel."""
  values = tf.cast(channel, tf.int32)
  hist = tf.math.bincount(tf.reshape(values, [-1]), minlength=256,
                          maxlength=256)
  nonzero = tf.where(hist > 0)[:, 0]
  last = tf.gather(hist, nonzero[-1])
  step = (tf.reduce_sum(hist) - last) // 255
  lut = (tf.cumsum(hist, exclusive=True) + step // 2) // tf.maximum(step, 1)
  lut = tf.clip_by_value(lut, 0, 255)
  out = tf.where(step == 0, values, tf.gather(lut, values))
  return tf.cast(out, tf.uint8)


def equalize(image, level, seed):
  del level, seed
  channels = tf.unstack(image, num=image.shape[-1], axis=-1)
  return tf.stack([_equalize_channel(c) for c in channels], axis=-1)


def rotate(image, level, seed):
  angle = _signed(level, seed) * _MAX_ROTATE_DEG * math.pi / 180.0
  h = tf.cast(tf.shape(image)[0], tf.float32) - 1.0
  w = tf.cast(tf.shape(image)[1], tf.float32) - 1.0
  cos, sin = tf.cos(angle), tf.sin(angle)
  x_off = (w - (cos * w - sin * h)) / 2.0
  y_off = (h - (sin * w + cos * h)) / 2.0
  return _transform(image, tf.stack([cos, -sin, x_off, sin, cos, y_off,
                                     0.0, 0.0]))


def solarize(image, level, seed):
  """Inverts pixels at or above ``256 * (1 - level)``."""
  del seed
  threshold = 256.0 * (1.0 - level)
  x = tf.cast(image, tf.float32)
  return tf.cast(tf.where(x >= threshold, 255.0 - x, x), tf.uint8)


def posterize(image, level, seed):
  """Keeps the top ``8 - round(4 * level)`` bits."""
  del seed
  shift = tf.cast(tf.round(4.0 * level), tf.uint8)
  return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def _enhance(degenerate_fn):
  def op(image, level, seed):
    factor = 1.0 + _signed(level, seed) * _MAX_ENHANCE
    return _blend(degenerate_fn(image), image, factor)
  return op


def _color_degenerate(image):
  return tf.broadcast_to(_gray(image), tf.shape(image))


def _contrast_degenerate(image):
  return tf.fill(tf.shape(image), tf.reduce_mean(_gray(image)))


def _brightness_degenerate(image):
  return tf.zeros_like(image)


def _sharpness_degenerate(image):
  """PIL's SMOOTH filter inside, the original pixels on the border."""
  c = image.shape[-1]
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, c, 1])
  smooth = tf.nn.depthwise_conv2d(tf.cast(image, tf.float32)[None], kernel,
                                  strides=[1, 1, 1, 1], padding="VALID")[0]
  inner = tf.pad(tf.ones_like(smooth, tf.bool), [[1, 1], [1, 1], [0, 0]])
  smooth = tf.pad(smooth, [[1, 1], [1, 1], [0, 0]])
  return tf.where(inner, smooth, tf.cast(image, tf.float32))


color = _enhance(_color_degenerate)
contrast = _enhance(_contrast_degenerate)
brightness = _enhance(_brightness_degenerate)
sharpness = _enhance(_sharpness_degenerate)


def shear_x(image, level, seed):
  s = _signed(level, seed) * _MAX_SHEAR
  return _transform(image, tf.stack([1.0, s, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]))


def shear_y(image, level, seed):
  s = _signed(level, seed) * _MAX_SHEAR
  return _transform(image, tf.stack([1.0, 0.0, 0.0, s, 1.0, 0.0, 0.0, 0.0]))


def translate_x(image, level, seed):
  t = _signed(level, seed) * _MAX_TRANSLATE * tf.cast(tf.shape(image)[1],
                                                      tf.float32)
  return _transform(image, tf.stack([1.0, 0.0, t, 0.0, 1.0, 0.0, 0.0, 0.0]))


def translate_y(image, level, seed):
  t = _signed(level, seed) * _MAX_TRANSLATE * tf.cast(tf.shape(image)[0],
                                                      tf.float32)
  return _transform(image, tf.stack([1.0, 0.0, 0.0, 0.0, 1.0, t, 0.0, 0.0]))


OPS = (identity, auto_contrast, equalize, rotate, solarize, color, posterize,
       contrast, brightness, sharpness, shear_x, shear_y, translate_x,
       translate_y)


def apply_op(image, index, level, seed):
  """Runs ``OPS[index]`` (a scalar int tensor) at ``level`` in [0, 1]."""
  branches = [lambda op=op: op(image, level, seed) for op in OPS]
  out = tf.switch_case(tf.cast(index, tf.int32), branches)
  return tf.ensure_shape(out, image.shape)


def _check_uint8(image, name):
  if image.dtype != tf.uint8:
    raise ValueError(f"{name} works on uint8 images: put it before "
                     "value_range(...) in the pipeline string")


def randaugment(image, seed, *, num_layers=2, magnitude=9):
  """RandAugment: ``num_layers`` uniformly drawn ops at magnitude in [0, 10]."""
  _check_uint8(image, "randaug")
  if not 0 <= magnitude <= 10:
    raise ValueError(f"randaug magnitude must be in [0, 10], got {magnitude}")
  for layer in range(num_layers):
    pick, op_seed = tf.unstack(tf.random.experimental.stateless_split(
        tf.random.experimental.stateless_fold_in(seed, layer), 2))
    index = tf.random.stateless_uniform([], pick, 0, len(OPS), tf.int32)
    image = apply_op(image, index, magnitude / 10.0, op_seed)
  return image


def trivial_augment(image, seed):
  """TrivialAugment: one uniformly drawn op at a uniform magnitude in [0, 10]."""
  _check_uint8(image, "trivial_augment")
  pick, strength, op_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 3))
  index = tf.random.stateless_uniform([], pick, 0, len(OPS), tf.int32)
  level = tf.random.stateless_uniform([], strength)
  return apply_op(image, index, level, op_seed)
