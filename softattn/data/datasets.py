"""The datasets the project trains on, and opening their TFDS builders.

Any dataset TFDS can read works (a registered builder, or one prepared with
``tfds build`` into ``data_dir``); the table below records, for the five the
project uses, the default splits and what a user must provide, so a missing
dataset fails with one line that names the fix instead of a TFDS traceback.
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow_datasets as tfds

from softattn import paths


@dataclasses.dataclass(frozen=True)
class KnownDataset:
  train_split: str
  eval_split: str
  how_to_get: str


KNOWN = {
    "fashion_mnist": KnownDataset(
        "train", "test",
        "run `python -m softattn.data prepare fashion_mnist --data_dir <dir>` "
        "(offline from the Debian package dataset-fashion-mnist, or downloads "
        "when there is network)"),
    "cifar10": KnownDataset(
        "train", "test",
        "run `tfds build cifar10 --data_dir <dir>` on a machine with network, "
        "then copy <dir>/cifar10 here"),
    "cifar100": KnownDataset(
        "train", "test",
        "run `tfds build cifar100 --data_dir <dir>` on a machine with network, "
        "then copy <dir>/cifar100 here"),
    "imagenet2012": KnownDataset(
        "train", "validation",
        "put ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar (from "
        "image-net.org) in <manual_dir> and run `tfds build imagenet2012 "
        "--data_dir <dir> --manual_dir <manual_dir>`"),
    "imagenet21k": KnownDataset(
        "full[51200:]", "full[:51200]",  # big_vision's held-out split
        "run `python -m softattn.data prepare imagenet21k --source=<"
        "fall11_whole.tar, winter21_whole.tar.gz, or a folder of synset tars "
        "or class folders> --data_dir <dir>` (see docs/data.md)"),
}


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
