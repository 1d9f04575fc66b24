"""Plot helpers every study uses: CI error bars, seed counts, no hidden lines.

Every panel gets labelled axes (``save`` refuses a figure with an unlabelled
axis that holds data); every series says how many seeds it averages
(``n=``); points of several series at the same x are dodged sideways and
drawn with distinct markers, and a curve identical to an earlier one is
named so in the legend ("= C") and drawn dashed on top, so none hides
another. Error bars and bands are two-sided 95 % t intervals across seeds.
"""

from __future__ import annotations

import io
import itertools
import os
from typing import Mapping, Sequence

import numpy as np

from softattn import paths
from softattn.studies import stats
from softattn.studies.runs import Run

MARKERS = "osD^vPX*<>"
LINESTYLES = ("-", "--", "-.", ":")


def pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def subplots(ncols: int = 1, nrows: int = 1, size=(5.0, 3.8), **kw):
  plt = pyplot()
  fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols,
                                                  size[1] * nrows),
                           squeeze=False, **kw)
  return fig, axes


def unlabelled(fig) -> list[str]:
  """Axes of ``fig`` that hold data but lack an x or y label."""
  bad = []
  for i, ax in enumerate(fig.axes):
    if not ax.get_visible() or not (ax.lines or ax.collections or
                                    ax.images or ax.patches):
      continue
    if getattr(ax, "_colorbar", None) is not None:   # labelled by its image
      continue
    if not ax.get_xlabel() or not ax.get_ylabel():
      bad.append(f"panel {i} ({ax.get_title() or 'untitled'})")
  return bad


def save(fig, path: str) -> str:
  """Saves ``fig`` after checking every data panel has both axis labels."""
  bad = unlabelled(fig)
  plt = pyplot()
  if bad:
    plt.close(fig)
    raise ValueError(f"{path}: label both axes of {', '.join(bad)}")
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, dpi=110, format=os.path.splitext(path)[1][1:] or "png")
  plt.close(fig)
  paths.write_atomic(path, buf.getvalue())  # local (parents made) or gs://
  return path


def seeds_label(label: str, ns: Sequence[int]) -> str:
  ns = sorted(set(int(n) for n in ns if n))
  if not ns:
    return label
  return f"{label} (n={ns[0]})" if len(ns) == 1 else \
      f"{label} (n={ns[0]}-{ns[-1]})"


def errorbars(ax, series: Mapping[str, Sequence[tuple[float, stats.Summary]]],
              *, dodge: float = 0.0, logx: bool = False) -> int:
  """Mean ± 95 % CI per x for each series, dodged sideways by ``dodge``
  (a fraction of the x spacing; multiplicative when ``logx``). Returns the
  number of series drawn."""
  drawn = 0
  items = [(k, [(x, s) for x, s in pts if s.n]) for k, pts in series.items()]
  items = [(k, pts) for k, pts in items if pts]
  k_mid = (len(items) - 1) / 2
  for i, ((label, pts), marker) in enumerate(zip(items,
                                                 itertools.cycle(MARKERS))):
    off = (i - k_mid) * dodge
    xs = np.asarray([x for x, _ in pts], float)
    xs = xs * (2 ** off) if logx else xs + off
    ys = [s.mean for _, s in pts]
    err = [s.half or 0.0 for _, s in pts]
    ax.errorbar(xs, ys, yerr=err, marker=marker, capsize=3, ms=5,
                ls=LINESTYLES[i % len(LINESTYLES)],
                label=seeds_label(label, [s.n for _, s in pts]))
    drawn += 1
  return drawn


def _mean_curve(runs: Sequence[Run], metric: str, split: str):
  curves = [r.curve(metric, split) for r in runs if r.done or r.diverged]
  curves = [(s, v) for s, v in curves if s.size]
  if not curves:
    return None
  n = min(s.size for s, _ in curves)
  steps = curves[0][0][:n]
  vals = np.stack([v[:n] for _, v in curves])
  mean = vals.mean(0)
  if len(vals) > 1:
    cis = [stats.t_interval(vals[:, j]) for j in range(n)]
    lo = np.asarray([c[0] for c in cis])
    hi = np.asarray([c[1] for c in cis])
  else:
    lo = hi = None
  return steps, mean, lo, hi, len(vals)


def curves(ax, groups: Mapping[str, Sequence[Run]], metric: str,
           split: str = "train", scale: float = 1.0) -> int:
  """Mean over seeds of ``<split>/<metric>`` per group with its 95 % band;
  a curve equal to an earlier one is labelled "= <that>" and dashed."""
  drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
  for i, (label, runs) in enumerate(groups.items()):
    got = _mean_curve(runs, metric, split)
    if got is None:
      continue
    steps, mean, lo, hi, n = got
    same = next((lab for lab, s, m in drawn if s.shape == steps.shape
                 and np.allclose(s, steps) and np.allclose(m, mean,
                                                           atol=1e-9)), None)
    name = seeds_label(label, [n]) + (f" = {same}" if same else "")
    line, = ax.plot(steps, mean * scale, label=name,
                    marker=MARKERS[i % len(MARKERS)],
                    markevery=(i % 3, 3) if steps.size > 6 else 1, ms=4,
                    ls="--" if same else LINESTYLES[i % len(LINESTYLES)],
                    lw=1.0 if same else 1.6, zorder=3 + i)
    if lo is not None:
      ax.fill_between(steps, lo * scale, hi * scale, alpha=0.15,
                      color=line.get_color())
    drawn.append((label, steps, mean))
  return len(drawn)


def points(ax, groups: Mapping[str, stats.Summary]) -> int:
  """One point ± 95 % CI per group (a dot plot: unlike bars from 0, it
  keeps small gaps between groups visible)."""
  items = [(k, s) for k, s in groups.items() if s.n]
  for i, (k, s) in enumerate(items):
    ax.errorbar([i], [s.mean], yerr=[s.half or 0.0], marker=MARKERS[
        i % len(MARKERS)], capsize=4, ms=6, ls="none")
  ax.set_xticks(range(len(items)))
  ax.set_xticklabels([seeds_label(k, [s.n]) for k, s in items], rotation=40,
                     ha="right", fontsize=7)
  return len(items)
