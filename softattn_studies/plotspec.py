"""Plots declared as data, drawn by one function (``draw``).

A study declares each figure as a ``Plot``: its panels, each a ``Points``
(a metric per selection of runs against an x value or another metric),
``Curves`` (a training series over steps) or ``Paired`` (the per-pair
contrasts of claims, as the rule judges them). The drawing rules hold for
every study:

* one colour per series label across every panel of every figure of a
  study (``palette``);
* every seed is a point; the mean gets a 95 % t interval only from
  ``MIN_BAND`` seeds up (with fewer, an interval of 2 seeds spans most of
  the axis and says nothing): hollow mean markers mark those points;
* series that share x values are dodged sideways so none hides another;
* a paired-difference panel draws each pair's contrast, its mean and the
  null (0, or 1 for a ratio), so "paired by seed" is visible;
* ``Quantiles`` (one run's quantile bands) and ``Heatmap`` (a probe's
  per-token map, one colour scale per figure) say n=1 where they show it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from softattn.sweep.records import RunRecord
from softattn_studies import claims as claims_lib
from softattn_studies import plots, stats
from softattn_studies.claims import Claim, Metric
from softattn_studies.runs import select

MIN_BAND = 3   # seeds from which a mean gets its 95 % interval

Selection = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Points:
  """``y`` over the runs of each (x, selection) point of each series;
  ``x_metric``: x is that metric's mean over the same runs instead of the
  declared x. ``reference``: a (label, selection) drawn as a horizontal
  line (e.g. the baseline every curve is compared with)."""
  title: str
  y: Metric
  xlabel: str
  series: Mapping[str, Sequence[tuple[float, Selection]]]
  x_metric: Metric | None = None
  logx: bool = False
  dodge: float = 0.02
  reference: tuple[str, Selection] | None = None
  xticks: Sequence[float] = ()


@dataclasses.dataclass(frozen=True)
class Curves:
  """The mean over seeds of ``<split>/<metric>`` per group (label ->
  (selection, metric)) over steps, times ``scale``; the seeds' own curves
  are drawn thin below ``MIN_BAND`` seeds, a 95 % band from there up.
  ``hline``: a (label, y) reference line."""
  title: str
  ylabel: str
  groups: Mapping[str, tuple[Selection, str]]
  split: str = "train"
  scale: float = 1.0
  logy: bool = False
  hline: tuple[str, float] | None = None


@dataclasses.dataclass(frozen=True)
class Paired:
  """Per-pair contrasts (lhs - rhs, or lhs / rhs) of each claim named in
  ``claims`` (label -> claim id)."""
  title: str
  claims: Mapping[str, str]
  ylabel: str


@dataclasses.dataclass(frozen=True)
class Quantiles:
  """One run's training series of quantiles (``<prefix>_q01 .. _q99`` of
  the first layer as bands, the deeper layers' medians as dashed lines):
  the lowest finished seed of ``where`` (n=1, said in the title)."""
  title: str
  ylabel: str
  where: Selection
  prefix: str
  logy: bool = False


@dataclasses.dataclass(frozen=True)
class Heatmap:
  """A map a probe stored (``run.probes[probe]``: a matrix, or a square
  grid flattened), of the lowest seed of ``where`` that has it. With
  ``centred``, every heatmap of a figure shares one colour scale centred at
  uniform (1 / its entries), at least ±10 % of it wide, so noise does
  not read as structure; else each has its own (viridis)."""
  title: str
  where: Selection
  probe: str
  label: str = "mean attention received"
  centred: bool = True
  axes: tuple[str, str] = ("token column", "token row")


Panel = Points | Curves | Paired | Quantiles | Heatmap


@dataclasses.dataclass(frozen=True)
class Plot:
  """One figure: ``title`` is its alt text in RESULTS.md; panels fill rows
  of ``ncols`` (default: one row)."""
  title: str
  panels: Sequence[Panel]
  size: tuple[float, float] = (5.0, 3.8)
  ncols: int | None = None


# Distinct colours, enough for a study's settings (tab10, then ten more of
# other hues): a study with more series labels fails loudly rather than
# reusing one.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#e6550d",
          "#31a354", "#843c39", "#7b4173", "#636363", "#8ca252", "#3182bd",
          "#fd8d3c", "#ad494a")
SEPARATORS = (", ", " - ", " / ", " vs ", ": ")


def _setting(label: str, known) -> str | None:
  """The series label a paired label names first ("nsm-inf - sm" ->
  "nsm-inf", "relu, small" -> "relu"), if it is one of ``known``."""
  for sep in SEPARATORS:
    head = label.split(sep)[0]
    if head != label and head in known:
      return head
  return None


def palette(plots_: Plot | Sequence[Plot]) -> dict[str, str]:
  """One colour per series label across every panel of ``plots_`` (one
  figure, or all of a study's, so a setting keeps its colour from figure
  to figure), in order of first appearance; a paired label takes the
  colour of the series it names first ("relu, small", "nsm-inf - sm")
  when there is one."""
  figs = [plots_] if isinstance(plots_, Plot) else list(plots_)
  panels = [p for f in figs for p in f.panels]
  labels = list(dict.fromkeys(k for p in panels for k in (
      p.series if isinstance(p, Points) else
      p.groups if isinstance(p, Curves) else ())))
  paired = [k for p in panels if isinstance(p, Paired) for k in p.claims
            if k not in labels and _setting(k, labels) is None]
  labels += list(dict.fromkeys(paired))
  if len(labels) > len(COLORS):
    raise ValueError(f"{len(labels)} series labels across the study's plots "
                     f"but {len(COLORS)} distinct colours: name fewer "
                     "settings, or reuse labels for the same setting")
  colors = dict(zip(labels, COLORS))
  for p in panels:
    if isinstance(p, Paired):
      for k in p.claims:
        if k not in colors:
          colors[k] = colors[_setting(k, labels)]
  return colors


def _mean_ci(ax, x: float, vals: Sequence[float], color: str,
             marker: str) -> float:
  """Every value as a small dot, the mean as a marker with its 95 %
  interval (``MIN_BAND`` seeds up; hollow, no bar, below)."""
  ax.plot([x] * len(vals), vals, ls="none", marker=".", ms=4, alpha=0.6,
          color=color)
  s = stats.summarize(vals)
  if s.n >= MIN_BAND:
    ax.errorbar([x], [s.mean], yerr=[s.half or 0.0], marker=marker, ms=5,
                capsize=3, color=color)
  else:
    ax.plot([x], [s.mean], marker=marker, ms=5, mfc="none", color=color)
  return s.mean


def _points(ax, p: Points, runs, colors) -> int:
  items = list(p.series.items())
  mid = (len(items) - 1) / 2
  drawn = 0
  for i, (label, pts) in enumerate(items):
    marker, off = plots.MARKERS[i % len(plots.MARKERS)], (i - mid) * p.dodge
    line, ns = [], []
    for x, where in pts:
      vals = p.y.finished(runs, where)
      if not vals:
        continue
      if p.x_metric is not None:
        xs = p.x_metric.finished(runs, where)
        if not xs:
          continue
        x = float(np.mean(xs))
      x = x * 2 ** off if p.logx else x + off
      line.append((x, _mean_ci(ax, x, vals, colors[label], marker)))
      ns.append(len(vals))
    if line:
      line.sort()
      ax.plot(*zip(*line), ls=":", lw=1, color=colors[label])
      ax.plot([], [], ls=":", color=colors[label], marker=marker,
              label=plots.seeds_label(label, ns))
      drawn += 1
  if p.reference is not None:
    label, where = p.reference
    vals = p.y.finished(runs, where)
    if vals:
      s = stats.summarize(vals)
      ax.axhline(s.mean, color="k", ls="--",
                 label=plots.seeds_label(label, [s.n]))
      if s.n >= MIN_BAND and s.ci:
        ax.axhspan(*s.ci, color="k", alpha=0.08)
  if p.logx:
    ax.set_xscale("log")
  if p.xticks:   # the declared x values, not "5 x 10^1"
    ax.set_xticks(p.xticks, labels=[f"{x:g}" for x in p.xticks])
    ax.minorticks_off()
  ax.set_xlabel(p.xlabel + (" (series dodged sideways)" if p.dodge and
                            len(items) > 1 else ""))
  ax.set_ylabel(p.y.name)
  return drawn


def _curves(ax, p: Curves, runs, colors) -> int:
  drawn = 0
  for i, (label, (where, metric)) in enumerate(p.groups.items()):
    got = [r.curve(metric, p.split) for r in select(runs, where)
           if r.done or r.diverged]
    got = [(s, v) for s, v in got if s.size]
    if not got:
      continue
    n = min(s.size for s, _ in got)
    steps, vals = got[0][0][:n], np.stack([v[:n] for _, v in got]) * p.scale
    c = colors[label]
    ax.plot(steps, vals.mean(0), color=c, lw=1.6,
            ls=plots.LINESTYLES[i % len(plots.LINESTYLES)],
            label=plots.seeds_label(label, [len(vals)]))
    if len(vals) >= MIN_BAND:
      ci = np.asarray([stats.t_interval(vals[:, j]) for j in range(n)])
      ax.fill_between(steps, ci[:, 0], ci[:, 1], color=c, alpha=0.15)
    else:
      for v in vals:
        ax.plot(steps, v, color=c, lw=0.6, alpha=0.5)
    drawn += 1
  if p.hline is not None:
    ax.axhline(p.hline[1], color="k", lw=0.8, ls=":", label=p.hline[0])
  if p.logy:
    ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel(p.ylabel)
  return drawn


def _paired(ax, p: Paired, runs, colors, claims: Mapping[str, Claim]) -> int:
  """Each claim's per-pair contrasts; a claim that covers several settings
  (budgets, depths) shows each setting's pairs, then the per-seed means
  over all of them, the values its test reads (``claims.covered_pairs``)."""
  drawn, nulls, ticks, x = 0, set(), [], 0
  for i, (label, cid) in enumerate(p.claims.items()):
    if cid not in claims:
      raise ValueError(f"paired panel {p.title!r}: unknown claim {cid!r}")
    c = claims[cid]
    nulls.add(c.null)
    marker = plots.MARKERS[i % len(plots.MARKERS)]
    settings = list(c.covers) if c.covers and not c.event else [("", {})]
    for setting, o in settings:
      diffs, _ = claims_lib.pairs(c.at(o), runs)
      ticks.append(plots.seeds_label(
          f"{label}: {setting}" if setting else label, [len(diffs)]))
      if diffs:
        _mean_ci(ax, x, diffs, colors[label], marker)
        drawn += 1
      x += 1
    if len(settings) > 1:
      pooled, _ = claims_lib.covered_pairs(c, runs)
      ticks.append(plots.seeds_label(f"{label}: all, per-seed mean",
                                     [len(pooled)]))
      if pooled:
        _mean_ci(ax, x, pooled, colors[label], "D")
        drawn += 1
      ax.axvline(x + 0.5, color="0.8", lw=0.6)
      x += 1
  for null in nulls:
    ax.axhline(null, color="k", lw=0.8)
  ax.set_xticks(range(len(ticks)))
  ax.set_xticklabels(ticks, rotation=30, ha="right", fontsize=7)
  ax.set_xlabel("claim (pairs)")
  ax.set_ylabel(p.ylabel)
  return drawn


def _first_run(runs, where, has: str = "", probe: str = ""):
  """The lowest finished seed of ``where`` with series ``has`` / probe."""
  rs = sorted((r for r in select(runs, where) if r.done and (
      not has or r.keys("diag/", has)) and (not probe or probe in r.probes)),
              key=lambda r: r.seed)
  return rs[0] if rs else None


def _quantiles(ax, p: Quantiles, runs) -> int:
  r = _first_run(runs, p.where, has=f"/{p.prefix}_q50")
  if r is None:
    return 0
  keys = r.keys("diag/", f"/{p.prefix}_q50")
  base = keys[0][:-len("_q50")]
  q = {lv: r.curve(f"{base}_q{lv}") for lv in ("01", "10", "50", "90", "99")}
  clip = (lambda v: np.maximum(v, 1e-8)) if p.logy else (lambda v: v)
  steps = q["50"][0]
  ax.fill_between(steps, clip(q["01"][1]), clip(q["99"][1]), alpha=0.15,
                  color="C0", label="1-99 %")
  ax.fill_between(steps, clip(q["10"][1]), clip(q["90"][1]), alpha=0.35,
                  color="C0", label="10-90 %")
  ax.plot(steps, clip(q["50"][1]), color="C0", label="median")
  for i, k in enumerate(keys[1:]):
    st, v = r.curve(k)
    ax.plot(st, clip(v), color="C1", lw=0.8, ls="--",
            label="median, deeper layers" if i == 0 else None)
  if p.logy:
    ax.set_yscale("log")
  ax.set_title(f"{p.title} (n=1 run: seed {r.seed})", fontsize=8)
  ax.set_xlabel("step")
  ax.set_ylabel(p.ylabel)
  return 1


def _heatmaps(plot: Plot, runs) -> dict[int, tuple[np.ndarray, float, float]]:
  """{panel index: (2-D map, uniform, half width)}, the centred ones on one
  shared scale."""
  maps = {}
  for i, p in enumerate(plot.panels):
    if isinstance(p, Heatmap):
      r = _first_run(runs, p.where, probe=p.probe)
      if r is not None:
        m = np.asarray(r.probes[p.probe], float)
        side = int(round(np.sqrt(m.size)))
        maps[i] = m if m.ndim == 2 else m.reshape(side, side)
  centred = [m for i, m in maps.items() if plot.panels[i].centred]
  uniform = 1 / centred[0].size if centred else 0.0
  half = max([0.1 * uniform, *(float(np.abs(m - uniform).max())
                               for m in centred)])
  return {i: (m, uniform, half) for i, m in maps.items()}


def _heatmap(fig, ax, p: Heatmap, got) -> int:
  if got is None:
    return 0
  m, uniform, half = got
  if p.centred:
    im = ax.imshow(m, cmap="RdBu_r", vmin=uniform - half,
                   vmax=uniform + half)
    label = f"{p.label} (uniform 1/{m.size})"
  else:
    im, label = ax.imshow(m, cmap="viridis", aspect="auto"), p.label
  ax.set_xlabel(p.axes[0])
  ax.set_ylabel(p.axes[1])
  fig.colorbar(im, ax=ax, fraction=0.046).set_label(label, fontsize=7)
  return 1


def _legend_note(plot: Plot) -> str:
  """What the marks mean, for the kinds of panel the figure has."""
  notes = []
  if any(isinstance(p, (Points, Paired)) for p in plot.panels):
    notes.append(f"dots: seeds; filled: mean ± 95 % CI ({MIN_BAND}+ seeds); "
                 "hollow: mean of fewer")
  if any(isinstance(p, Curves) for p in plot.panels):
    notes.append(f"lines: mean over seeds, band: 95 % CI ({MIN_BAND}+ "
                 "seeds), else each seed thin")
  if any(isinstance(p, (Quantiles, Heatmap)) for p in plot.panels):
    notes.append("quantiles, maps: one run each")
  return f"{plot.title}: " + "; ".join(notes)


def draw(plot: Plot, path: str, runs: Sequence[RunRecord],
         claims: Sequence[Claim] = (),
         colors: Mapping[str, str] | None = None) -> str | None:
  """Draws ``plot`` into ``path``; None (and no file) when no panel has
  data. ``colors``: the study's ``palette`` (default: this figure's)."""
  colors = colors or palette(plot)
  by_id = {c.id: c for c in claims}
  ncols = plot.ncols or len(plot.panels)
  fig, axes = plots.subplots(ncols, -(-len(plot.panels) // ncols),
                             size=plot.size)
  fig.suptitle(_legend_note(plot), fontsize=9)
  maps = _heatmaps(plot, runs)
  drawn = 0
  for i, (ax, p) in enumerate(zip(axes.reshape(-1), plot.panels)):
    ax.set_title(p.title, fontsize=9)
    n = (_points(ax, p, runs, colors) if isinstance(p, Points) else
         _curves(ax, p, runs, colors) if isinstance(p, Curves) else
         _paired(ax, p, runs, colors, by_id) if isinstance(p, Paired) else
         _quantiles(ax, p, runs) if isinstance(p, Quantiles) else
         _heatmap(fig, ax, p, maps.get(i)))
    ax.grid(alpha=0.3)
    if n and ax.get_legend_handles_labels()[0] and not isinstance(
        p, Heatmap):
      ax.legend(fontsize=6)
    drawn += n
  for ax in axes.reshape(-1)[len(plot.panels):]:
    ax.set_visible(False)
  if not drawn:
    plots.pyplot().close(fig)
    return None
  return plots.save(fig, path)
