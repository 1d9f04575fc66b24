"""Input pipeline: TFDS + tf.data to global sharded ``jax.Array`` batches.

* ``make_train_iter`` / ``make_eval_iter`` / ``dataset_info``: the pipelines
  (``softattn.data.pipeline``); training order is a pure function of
  ``(seed, step)``.
* ``preprocess``: named preprocessing ops composed from strings like
  ``"inception_crop(224)|flip_lr|randaug(2, 9)|value_range(-1, 1)"``.
* ``datasets.KNOWN`` (``KNOWN_DATASETS``): the project's datasets, their
  default splits and offline facts (class count, stored image shape,
  examples per split), written once; ``datasets.split_size``.
* ``mix.mixup_cutmix``: Mixup / CutMix in JAX, applied in the train step.
* ``python -m softattn.data prepare fashion_mnist``: offline Fashion-MNIST.
"""

from softattn.data import mix
from softattn.data import preprocess
from softattn.data.datasets import KNOWN as KNOWN_DATASETS
from softattn.data.datasets import DatasetNotFoundError
from softattn.data.pipeline import dataset_info
from softattn.data.pipeline import eval_dataset
from softattn.data.pipeline import make_eval_iter
from softattn.data.pipeline import make_train_iter
from softattn.data.pipeline import train_dataset

__all__ = ["mix", "preprocess", "KNOWN_DATASETS", "DatasetNotFoundError",
           "dataset_info", "eval_dataset", "make_eval_iter", "make_train_iter",
           "train_dataset"]
