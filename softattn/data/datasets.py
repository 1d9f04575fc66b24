"""The datasets the project trains on: their facts, and opening their TFDS builders.

Any dataset TFDS can read works (a registered builder, or one prepared with
``tfds build`` into ``data_dir``); the table below records, for the datasets
the project uses, the default splits and what a user must provide, so a
missing dataset fails with one line that names the fix instead of a TFDS
traceback. It also holds the facts a program needs without opening the data
(the one place they are written): class count, stored image shape and
examples per split, read by the AOT compile (``softattn.aot.datasets``) and
the studies (models built without data, runs' lengths in epochs).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import tensorflow_datasets as tfds

from softattn import paths
from softattn.data import i1k_in_i21k


@dataclasses.dataclass(frozen=True)
class KnownDataset:
  """A dataset the project uses, as known without opening it.

  ``image_shape`` is the stored image's ``(height, width, channels)``, with
  ``None`` sides where stored images vary in size (ImageNet: the config's
  ``pp_eval`` must crop or resize them). ``split_sizes``: examples per stored
  split, the TFDS / papers' published counts.
  """
  train_split: str
  eval_split: str
  how_to_get: str
  num_classes: int
  image_shape: tuple[int | None, int | None, int]
  split_sizes: Mapping[str, int]


def _tfds_build(name):
  return (f"run `tfds build {name} --data_dir <dir>` on a machine with "
          f"network, then copy <dir>/{name} here")


KNOWN = {
    "fashion_mnist": KnownDataset(
        "train", "test",
        "run `python -m softattn.data prepare fashion_mnist --data_dir <dir>` "
        "(offline from the Debian package dataset-fashion-mnist, or downloads "
        "when there is network)",
        num_classes=10, image_shape=(28, 28, 1),
        split_sizes={"train": 60_000, "test": 10_000}),
    "mnist": KnownDataset(
        "train", "test", _tfds_build("mnist"),
        num_classes=10, image_shape=(28, 28, 1),
        split_sizes={"train": 60_000, "test": 10_000}),
    "cifar10": KnownDataset(
        "train", "test", _tfds_build("cifar10"),
        num_classes=10, image_shape=(32, 32, 3),
        split_sizes={"train": 50_000, "test": 10_000}),
    "cifar100": KnownDataset(
        "train", "test", _tfds_build("cifar100"),
        num_classes=100, image_shape=(32, 32, 3),
        split_sizes={"train": 50_000, "test": 10_000}),
    "imagenet2012": KnownDataset(
        "train", "validation",
        "put ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (from "
        "image-net.org) in <manual_dir> and run `tfds build imagenet2012 "
        "--data_dir <dir> --manual_dir <manual_dir>`",
        num_classes=1000, image_shape=(None, None, 3),
        split_sizes={"train": 1_281_167, "validation": 50_000}),
    # ImageNet-21k fall11 (21,843 classes): one split, big_vision holds out
    # its first 51,200 images.
    "imagenet21k": KnownDataset(
        "full[51200:]", "full[:51200]",  # big_vision's held-out split
        "run `python -m softattn.data prepare imagenet21k --source=<"
        "fall11_whole.tar, winter21_whole.tar.gz, or a folder of synset tars "
        "or class folders> --data_dir <dir>` (see docs/data.md)",
        num_classes=i1k_in_i21k.I21K_NUM_CLASSES, image_shape=(None, None, 3),
        split_sizes={"full": 14_197_122}),
}


def known(name: str) -> KnownDataset:
  """``KNOWN[name]``, or a one-line error listing the datasets it holds."""
  if name not in KNOWN:
    raise ValueError(f"no offline facts for dataset {name!r}; known: "
                     f"{', '.join(sorted(KNOWN))} (add it to "
                     "softattn.data.datasets.KNOWN)")
  return KNOWN[name]


def split_size(name: str, split: str) -> int:
  """Examples in ``split`` of a known dataset, from ``split_sizes`` alone
  (TFDS syntax: ``"full[51200:]"``, ``"train[:90%]"``, ``"train+test"``)."""

  class _Info:  # what ReadInstruction.to_absolute reads of a SplitInfo
    def __init__(self, n):
      self.num_examples = n

  sizes = {k: _Info(v) for k, v in known(name).split_sizes.items()}
  total = 0
  for part in tfds.core.ReadInstruction.from_spec(split).to_absolute(sizes):
    n = sizes[part.splitname].num_examples
    start, stop = part.from_ or 0, n if part.to is None else part.to
    total += max(min(stop, n) - start, 0)
  return total


class DatasetNotFoundError(ValueError):
  """The named dataset is not prepared where the config points."""


def _where(data_dir):
  return data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"


def missing_message(name: str, data_dir: str | None) -> str:
  known = KNOWN.get(name)
  fix = (known.how_to_get.replace("<dir>", str(data_dir or "<dir>"))
         if known else "prepare it with `tfds build` into data_dir")
  return (f"dataset {name!r} is not prepared in {_where(data_dir)}: {fix}; "
          f"or point config.data.data_dir at your copy")


def get_builder(name: str, data_dir: str | None = None):
  """Returns the TFDS builder for ``name``; one-line error naming the fix."""
  if not name:
    raise ValueError("config.data.name is empty; set it to a TFDS name, e.g. "
                     f"one of {', '.join(sorted(KNOWN))}")
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    raise DatasetNotFoundError(
        missing_message(name, data_dir)
        + f" (TFDS knows no dataset {name!r}; project datasets: "
        f"{', '.join(sorted(KNOWN))})") from None


def as_dataset(builder, split, **kwargs):
  """``builder.as_dataset`` with a one-line error when the data is missing.

  A ``gs://`` data_dir is read through ``softattn.paths`` (``records``):
  TF's own GCS client, which TFDS would use, cannot be tested offline.
  """
  if paths.is_remote(builder.data_dir):
    from softattn.data import records  # pylint: disable=g-import-not-at-top
    return records.as_dataset(builder, split, **kwargs)
  try:
    return builder.as_dataset(split=split, **kwargs)
  except AssertionError as e:
    if "could not find data" in str(e).lower():
      raise DatasetNotFoundError(
          missing_message(builder.name, _data_dir_arg(builder))) from None
    raise


def _data_dir_arg(builder):
  # builder.data_dir is <data_dir>/<name>/<version>; report the root.
  path = str(builder.data_dir)
  for _ in range(2):
    path = os.path.dirname(path)
  return path
