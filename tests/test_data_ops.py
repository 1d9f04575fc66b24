"""Preprocessing ops, RandAugment/TrivialAugment and Mixup/CutMix."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageOps

from softattn.data import autoaugment, mix, preprocess


def _image(h=12, w=10, c=3, seed=0):
  return np.random.RandomState(seed).randint(0, 256, (h, w, c)).astype(np.uint8)


def _run(spec, image, seed=(1, 2), label=3):
  out = preprocess.parse(spec)({"image": tf.constant(image), "label": label},
                               tf.constant(seed, tf.int64))
  return out["image"].numpy()


def test_unknown_op_lists_valid_names():
  with pytest.raises(ValueError, match="unknown preprocessing op 'flip'.*flip_lr"):
    preprocess.parse("resize(8)|flip")


def test_bad_arguments_name_the_signature():
  with pytest.raises(ValueError, match=r"signature is resize\(size"):
    preprocess.parse("resize(8, 9, 10, 11, 12)")
  with pytest.raises(ValueError, match="malformed"):
    preprocess.parse("resize(8")


def test_shapes_and_value_range():
  image = _image()
  assert _run("resize(7)", image).shape == (7, 7, 3)
  assert _run("resize((6, 9))", image).shape == (6, 9, 3)
  assert _run("resize_small(5)", image).shape == (6, 5, 3)
  assert _run("central_crop(4)", image).shape == (4, 4, 3)
  assert _run("random_crop(4)", image).shape == (4, 4, 3)
  assert _run("inception_crop(8)", image).shape == (8, 8, 3)
  assert _run("to_rgb", image[..., :1]).shape == (12, 10, 3)
  out = _run("value_range(-1, 1)", np.array([[[0], [255]]], np.uint8))
  np.testing.assert_allclose(out[:, :, 0], [[-1.0, 1.0]])
  assert out.dtype == np.float32
  out = _run("value_range(0, 1)|standardize((0.5, 0.25), (0.5, 0.25))",
             np.array([[[0, 255]]], np.uint8))
  np.testing.assert_allclose(out, [[[-1.0, 3.0]]])
  with pytest.raises(ValueError, match="positive"):
    preprocess.parse("standardize(0.5, 0)")


def test_central_crop_is_the_center():
  image = _image(6, 6)
  np.testing.assert_array_equal(_run("central_crop(2)", image), image[2:4, 2:4])


def test_pad_and_crop_is_a_shifted_window():
  image = _image(8, 8)
  padded = np.pad(image, [(2, 2), (2, 2), (0, 0)])
  offsets = set()
  for s in range(12):
    out = _run("pad_and_crop(2)", image, seed=(s, 0))
    matches = [(dy, dx) for dy in range(5) for dx in range(5)
               if np.array_equal(out, padded[dy:dy + 8, dx:dx + 8])]
    assert matches, "pad_and_crop output is not a window of the padded image"
    offsets.add(matches[0])
  assert len(offsets) > 3  # the window moves with the seed


def test_rotate_quarter_turn_is_rot90_and_zero_is_identity():
  image = _image(7, 7)
  out = preprocess.rotate(tf.constant(image), tf.constant(math.pi / 2))
  np.testing.assert_array_equal(out.numpy(), np.rot90(image))
  out = preprocess.rotate(tf.constant(image), tf.constant(0.0))
  np.testing.assert_array_equal(out.numpy(), image)


def test_random_rotate_angles_stay_within_degrees():
  image = np.zeros((9, 9, 1), np.uint8)
  image[4, 4:] = 255  # a ray from the centre pointing right
  for s in range(8):
    # Within +-10 degrees the ray stays near the horizontal: it still covers
    # (4, 6) and never reaches the top, where a quarter turn would put it;
    # 0 degrees is the identity.
    out = _run("random_rotate(10)", image, seed=(s, 2))
    assert out[4, 6, 0] > 0 and not out[:2].any()
    np.testing.assert_array_equal(_run("random_rotate(0)", image, seed=(s, 2)),
                                  image)
  angles = {_run("random_rotate(90)", image, seed=(s, 3)).tobytes()
            for s in range(8)}
  assert len(angles) > 4  # the angle moves with the seed


def test_random_rot90_gives_the_four_quarter_turns():
  image = _image(6, 6)
  turns = [np.rot90(image, k) for k in range(4)]
  seen = set()
  for s in range(24):
    out = _run("random_rot90", image, seed=(s, 4))
    ks = [k for k, t in enumerate(turns) if np.array_equal(out, t)]
    assert ks, "random_rot90 output is not a quarter turn"
    seen.add(ks[0])
  assert seen == {0, 1, 2, 3}


def test_flip_lr_flips_sometimes():
  image = _image()
  outs = [_run("flip_lr", image, seed=(s, 1)) for s in range(16)]
  flipped = [np.array_equal(o, image[:, ::-1]) for o in outs]
  kept = [np.array_equal(o, image) for o in outs]
  assert all(f or k for f, k in zip(flipped, kept))
  assert any(flipped) and any(kept)


def test_random_ops_are_functions_of_the_seed():
  spec = "inception_crop(8)|flip_lr|randaug(2, 9)|value_range(-1, 1)|random_erasing(0.5)"
  image = _image(16, 16)
  a, b = _run(spec, image, seed=(4, 5)), _run(spec, image, seed=(4, 5))
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, _run(spec, image, seed=(4, 6)))


def test_random_erasing():
  image = np.zeros((10, 10, 1), np.uint8)
  out = _run("value_range(0, 1)|random_erasing(1.0, fill=7)", image)
  erased = out[..., 0] == 7
  assert erased.any()
  rows, cols = np.nonzero(erased)
  # one axis-aligned rectangle
  assert erased[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()
  np.testing.assert_array_equal(
      _run("value_range(0, 1)|random_erasing(0.0)", image), 0.0)
  with pytest.raises(ValueError, match="after value_range"):
    _run("random_erasing(1.0)", image)


def _op(op, image, level, seed=(0, 0)):
  return op(tf.constant(image), tf.constant(level, tf.float32),
            tf.constant(seed, tf.int64)).numpy()


@pytest.mark.parametrize("op", [autoaugment.identity, autoaugment.rotate,
                                autoaugment.solarize, autoaugment.posterize,
                                autoaugment.color, autoaugment.contrast,
                                autoaugment.brightness, autoaugment.sharpness,
                                autoaugment.shear_x, autoaugment.shear_y,
                                autoaugment.translate_x,
                                autoaugment.translate_y])
def test_magnitude_zero_is_identity(op):
  image = _image()
  np.testing.assert_array_equal(_op(op, image, 0.0), image)


def test_ops_match_pil():
  image = _image(16, 16)
  pil = Image.fromarray(image)
  np.testing.assert_array_equal(_op(autoaugment.equalize, image, 0.0),
                                np.asarray(ImageOps.equalize(pil)))
  np.testing.assert_array_equal(_op(autoaugment.auto_contrast, image, 0.0),
                                np.asarray(ImageOps.autocontrast(pil)))
  # level 0.5: solarize threshold 128, posterize to 6 bits.
  np.testing.assert_array_equal(_op(autoaugment.solarize, image, 0.5),
                                np.asarray(ImageOps.solarize(pil, 128)))
  np.testing.assert_array_equal(_op(autoaugment.posterize, image, 0.5),
                                np.asarray(ImageOps.posterize(pil, 6)))
  # enhance ops at factor 1 +- 0.9 * level; find the sign the seed picked.
  for ours, theirs in [(autoaugment.color, ImageEnhance.Color),
                       (autoaugment.brightness, ImageEnhance.Brightness),
                       (autoaugment.sharpness, ImageEnhance.Sharpness),
                       (autoaugment.contrast, ImageEnhance.Contrast)]:
    out = _op(ours, image, 0.5).astype(int)
    diffs = [np.abs(out - np.asarray(theirs(pil).enhance(f)).astype(int)).max()
             for f in (0.55, 1.45)]
    assert min(diffs) <= 2, (ours, diffs)  # PIL rounds its means to ints.


def test_geometric_ops_move_pixels():
  image = np.zeros((101, 101, 1), np.uint8)
  image[50, 50] = 255
  # translate 0.33 of the width = 33.33 pixels, either way (bilinear).
  moved = _op(autoaugment.translate_x, image, 1.0)[:, :, 0]
  assert max(moved[50, 16:18].max(), moved[50, 83:85].max()) > 150
  assert moved[50, 50] == 0
  # rotating the central dot keeps it in place; the corners get the fill.
  rotated = _op(autoaugment.rotate, image, 1.0)
  assert rotated[50, 50, 0] > 200 and rotated[0, 0, 0] == 128


def test_randaugment_and_trivial_augment():
  image = _image(16, 16)
  for spec in ("randaug(2, 10)", "trivial_augment"):
    outs = [_run(spec, image, seed=(s, 0)) for s in range(8)]
    assert all(o.shape == image.shape and o.dtype == np.uint8 for o in outs)
    assert len({o.tobytes() for o in outs}) > 4
    with pytest.raises(ValueError, match="before value_range"):
      _run("value_range(0, 1)|" + spec, image)


def _batch(b=4, h=6, w=6, k=3):
  rng = np.random.RandomState(0)
  images = jnp.asarray(rng.rand(b, h, w, 2), jnp.float32)
  labels = jax.nn.one_hot(jnp.arange(b) % k, k)
  return images, labels


def test_mix_disabled_is_identity():
  images, labels = _batch()
  out = mix.mixup_cutmix(jax.random.key(0), images, labels, mixup_alpha=0.0,
                         cutmix_alpha=0.0)
  assert out[0] is images and out[1] is labels


def test_mixup_blends_images_and_labels_alike():
  images, labels = _batch()
  fn = jax.jit(lambda r, x, y: mix.mixup_cutmix(r, x, y, mixup_alpha=0.4,
                                                cutmix_alpha=0.0))
  mixed, mixed_labels = fn(jax.random.key(1), images, labels)
  np.testing.assert_allclose(mixed_labels.sum(-1), 1.0, rtol=1e-6)
  # example 1 is class 1 and its partner (example 2) class 2: its label is lam.
  lam = float(mixed_labels[1, 1])
  assert 0.0 < lam < 1.0
  np.testing.assert_allclose(mixed, lam * images + (1 - lam) * images[::-1],
                             rtol=1e-5, atol=1e-6)


def test_cutmix_pastes_a_box_weighted_by_its_area():
  images, labels = _batch(b=4, h=8, w=8)
  for seed in range(5):
    mixed, mixed_labels = mix.mixup_cutmix(
        jax.random.key(seed), images, labels, mixup_alpha=0.0, cutmix_alpha=1.0)
    from_partner = np.all(np.asarray(mixed) == np.asarray(images[::-1]), -1)
    from_self = np.all(np.asarray(mixed) == np.asarray(images), -1)
    assert np.all(from_partner | from_self)
    kept = 1.0 - from_partner[1].mean()
    np.testing.assert_allclose(mixed_labels[1, 1], kept, atol=1e-6)
    np.testing.assert_allclose(mixed_labels[1, 2], 1 - kept, atol=1e-6)


def test_switch_picks_both_modes():
  images, labels = _batch()
  fn = jax.jit(lambda r: mix.mixup_cutmix(r, images, labels, mixup_alpha=1.0,
                                          cutmix_alpha=1.0, switch_prob=0.5)[0])
  modes = set()
  for seed in range(12):
    mixed = np.asarray(fn(jax.random.key(seed)))
    exact = np.all((mixed == images) | (mixed == images[::-1]))
    modes.add(bool(exact))
  assert modes == {True, False}
  with pytest.raises(ValueError, match=">= 0"):
    mix.mixup_cutmix(jax.random.key(0), images, labels, mixup_alpha=-1.0,
                     cutmix_alpha=0.0)


def test_i1k_in_i21k_table():
  import os  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from softattn.data import i1k_in_i21k  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(tfds.__file__), "datasets",
                      "imagenet2012", "labels.txt")
  with open(path) as f:
    wnids = [l.strip() for l in f if l.strip()]
  table = i1k_in_i21k.i1k_indices()
  assert table.shape == (1000,) and table.dtype == np.int32
  missing = [wnids[k] for k in np.nonzero(table == i1k_in_i21k.MISSING)[0]]
  assert tuple(missing) == i1k_in_i21k.MISSING_WNIDS
  present = table[table != i1k_in_i21k.MISSING]
  # Both wnid lists are sorted and i1k (but one) is a subset: indices increase.
  assert wnids == sorted(wnids)
  assert np.all(np.diff(present) > 0)
  assert present.min() >= 0 and present.max() < i1k_in_i21k.I21K_NUM_CLASSES
