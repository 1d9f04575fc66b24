"""Dataset facts for compiling a config on a host that does not hold the data.

``configlib.resolve_config`` normally reads the class count, image shape and
split sizes from the prepared TFDS dataset; an AOT compile for a pod runs
where ImageNet is not, so it takes them from the offline facts of
``softattn.data.datasets.KNOWN`` (published split sizes, class count, stored
image shape), and the model's input shape by tracing the config's
``pp_eval`` on the stored shape.
"""

from __future__ import annotations

from softattn.data import datasets


def dataset_info(data_config) -> dict:
  """What ``softattn.data.dataset_info`` would read from the prepared dataset."""
  from softattn.data import pipeline  # pylint: disable=g-import-not-at-top
  name = data_config.name
  facts = datasets.known(name)
  return dict(
      num_classes=facts.num_classes,
      image_shape=pipeline.preprocessed_shape(
          pipeline.pp_string(data_config, "pp_eval"), facts.image_shape),
      num_train=datasets.split_size(name, data_config.train_split),
      num_eval=datasets.split_size(name, data_config.eval_split))
