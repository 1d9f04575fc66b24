"""Few-shot linear probe on frozen pre-logits (closed-form ridge regression).

big_vision's protocol, which Wortsman et al. (2023) report (10-shot, averaged
over 3 seeds, on Birds, Caltech-101, Cars, CIFAR-100, DTD, ColHist, Pets, UC
Merced): extract the model's pre-logit features (``intermediates/pre_logits``,
sown by every model) for a dataset's train and test splits; for each seed draw
``k`` training examples per class; fit a ridge regression from standardised
features to ``±1`` one-vs-rest targets in closed form; report the test
top-1 accuracy, averaged over seeds.

``W = argmin ||X W - Y||^2 + l2 ||W||^2`` is solved in its dual form
``W = X^T (X X^T + l2 I)^-1 Y``, since ``k * classes`` is usually smaller
than the feature width. The l2 strength is a config value (``l2_reg``,
default 2**10 over the standardised features, *inferred*: big_vision picks
it from a grid on held-out data; a list in ``l2_regs`` reports the best one
*on the test split*, which is optimistic - prefer a single value).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def ridge_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                y_test: np.ndarray, num_classes: int, l2_reg: float) -> float:
  """Test accuracy of a closed-form ridge one-vs-rest classifier."""
  x_train = np.asarray(x_train, np.float64)
  x_test = np.asarray(x_test, np.float64)
  mean = x_train.mean(0, keepdims=True)
  std = x_train.std(0, keepdims=True) + 1e-6
  xtr = np.concatenate([(x_train - mean) / std, np.ones((len(x_train), 1))], 1)
  xte = np.concatenate([(x_test - mean) / std, np.ones((len(x_test), 1))], 1)
  y = 2.0 * np.eye(num_classes)[np.asarray(y_train)] - 1.0
  gram = xtr @ xtr.T + l2_reg * np.eye(len(xtr))
  w = xtr.T @ np.linalg.solve(gram, y)
  pred = np.argmax(xte @ w, axis=1)
  return float(np.mean(pred == np.asarray(y_test)))


def sample_shots(labels: np.ndarray, shots: int, seed: int) -> np.ndarray:
  """Indices of ``shots`` examples per class (fewer if a class has fewer)."""
  rng = np.random.default_rng(seed)
  idx = []
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    idx.extend(rng.choice(members, size=min(shots, len(members)), replace=False))
  return np.sort(np.asarray(idx))


def extract(features_fn: Callable, params, batch_stats, data_cfg, split: str,
            batch_size: int, mesh) -> tuple[np.ndarray, np.ndarray]:
  """Pre-logit features and labels of one split (padding removed by the mask)."""
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  feats, labels = [], []
  for batch in data_lib.make_eval_iter(data_cfg, split,
                                       global_batch_size=batch_size, mesh=mesh):
    f = np.asarray(features_fn(params, batch_stats, batch["image"]))
    mask = np.asarray(batch["mask"]).astype(bool)
    feats.append(f.reshape(len(f), -1)[mask])
    labels.append(np.asarray(batch["label"])[mask])
  return np.concatenate(feats), np.concatenate(labels)


def run_fewshot(fs_cfg: Any, features_fn: Callable, params, batch_stats,
                mesh) -> dict[str, float]:
  """``{"<dataset>_<k>shot": accuracy}`` for every configured dataset and k.

  ``fs_cfg``: ``datasets`` (name -> data config dict with ``name``,
  ``train_split``, ``eval_split``, ``pp_eval``, ...), ``shots`` (list of k),
  ``seeds`` (number of draws, default 3), ``l2_reg`` or ``l2_regs``,
  ``batch_size``.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top
  shots = list(fs_cfg.get("shots", (10,)))
  seeds = int(fs_cfg.get("seeds", 3))
  l2s = list(fs_cfg.get("l2_regs", None) or [fs_cfg.get("l2_reg", 2.0**10)])
  bs = int(fs_cfg.get("batch_size", 256))
  out = {}
  for name, dcfg in dict(fs_cfg.datasets).items():
    dcfg = ml_collections.ConfigDict(dict(dcfg))
    xtr, ytr = extract(features_fn, params, batch_stats, dcfg,
                       dcfg.train_split, bs, mesh)
    xte, yte = extract(features_fn, params, batch_stats, dcfg,
                       dcfg.eval_split, bs, mesh)
    k_classes = int(max(ytr.max(), yte.max()) + 1)
    for k in shots:
      best = 0.0
      for l2 in l2s:
        accs = [ridge_probe(xtr[i], ytr[i], xte, yte, k_classes, l2)
                for i in (sample_shots(ytr, k, s) for s in range(seeds))]
        best = max(best, float(np.mean(accs)))
      out[f"{name}_{k}shot"] = best
  return out
