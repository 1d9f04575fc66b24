"""Dataset facts for compiling a config on a host that does not hold the data.

``configlib.resolve_config`` normally reads the class count, image shape and
split sizes from the prepared TFDS dataset; an AOT compile for a pod runs
where ImageNet is not, so it takes them from here: split sizes by name
(published counts), the class count and stored image shape from
``softattn.studies``, and the model's input shape by tracing the config's
``pp_eval`` on the stored shape.
"""

from __future__ import annotations

from softattn import studies

# Examples per stored split (TFDS / the papers' counts).
SPLIT_SIZES = {
    "fashion_mnist": {"train": 60_000, "test": 10_000},
    "mnist": {"train": 60_000, "test": 10_000},
    "cifar10": {"train": 50_000, "test": 10_000},
    "cifar100": {"train": 50_000, "test": 10_000},
    "imagenet2012": {"train": 1_281_167, "validation": 50_000},
    # ImageNet-21k fall11 (21,843 classes): one split, big_vision holds out
    # its first 51,200 images.
    "imagenet21k": {"full": 14_197_122},
}
# Stored images of variable size: pp_eval must crop/resize them.
_VARIABLE_SIZE = ("imagenet2012", "imagenet21k")


def split_size(name: str, split: str) -> int:
  """Examples in ``split`` (TFDS syntax: ``"full[51200:]"``, ``"train[:90%]"``)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  class _Info:  # what ReadInstruction.to_absolute reads of a SplitInfo
    def __init__(self, n):
      self.num_examples = n

  sizes = {k: _Info(v) for k, v in SPLIT_SIZES[name].items()}
  total = 0
  for part in tfds.core.ReadInstruction.from_spec(split).to_absolute(sizes):
    n = sizes[part.splitname].num_examples
    start, stop = part.from_ or 0, n if part.to is None else part.to
    total += max(min(stop, n) - start, 0)
  return total


def dataset_info(data_config) -> dict:
  """What ``softattn.data.dataset_info`` would read from the prepared dataset."""
  from softattn.data import pipeline  # pylint: disable=g-import-not-at-top
  name = data_config.name
  if name not in SPLIT_SIZES:
    raise ValueError(f"No offline facts for dataset {name!r}; known: "
                     f"{', '.join(sorted(SPLIT_SIZES))}.")
  stored = studies.IMAGE_SHAPES[name]
  if name in _VARIABLE_SIZE:
    stored = (None, None, stored[-1])
  return dict(
      num_classes=studies.NUM_CLASSES[name],
      image_shape=pipeline.preprocessed_shape(data_config.pp_eval, stored),
      num_train=split_size(name, data_config.train_split),
      num_eval=split_size(name, data_config.eval_split))
