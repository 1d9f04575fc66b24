r"""The periodic-softmax study (Wang et al. 2021): probes, what RESULTS.md shows.

  python experiments/periodic/report.py --workdir=workdirs/periodic   # export + report
  python experiments/periodic/report.py --from-csv experiments/periodic/runs.csv

``STUDY`` declares the runs (``sweep.py``: part ``main``; the focus part
``depth4_long``: softmax, sin_softmax and sin2_max_shifted at depth 4 for
``FOCUS_STEPS`` steps; the focus part ``breakdown_1ep``: ``sweep.py``'s
``BREAKDOWN_1EP`` at depth 1 for ``BD_STEPS`` steps, one epoch), the
claims of ``claims.py`` (the paper's claims as data, rendered here), the
per-run values the claims read (break-down, break-down step, input tail
ratio) and, as data, the tables, plots and facts that the hand-written
``RESULTS.md.tmpl`` names; ``softattn.studies.claims.RULE`` judges the
claims.

A run "broke down" when it stopped on a NaN/Inf (``kind=nonfinite``) or
ended with test accuracy below twice chance; its break-down step is the
divergence step, or the first logged step after which train accuracy never
again exceeded twice chance.

Probe (at export): the attention weights every block sows, on 8 test
images, from each finished run's checkpoint: the share of attention that
falls on the 12 border tokens of the 4x4 token grid (Fig. 7: softmax
"trapped on the boundary"; uniform attention gives 0.75), and for the
lowest seed of softmax and sin_softmax at the deepest depth, the attention
each token receives in the last block (stored in ``runs.csv``; the
per-block picture comes from the loop's attention-entropy series).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from softattn import studies
from softattn.data import datasets
from softattn.studies import render
from softattn.studies.claims import ACCURACY
from softattn.studies.plotspec import Curves, Heatmap, Plot, Points, Quantiles
from softattn.studies.render import Cell, Table
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.relpath(os.path.join(HERE, "sweep.py"))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
study, pre, SM, SIN = claims.study, claims.pre, claims.SM, claims.SIN
DEPTHS, FOCUS, FOCUS_STEPS = claims.DEPTHS, claims.FOCUS, claims.FOCUS_STEPS
BD_PART, BD_STEPS = claims.BD_PART, claims.BD_STEPS
PAPER, TREND, paper_mean = claims.PAPER, claims.TREND, claims.paper_mean
BROKE, SATURATED, LGRAD, BORDER = (claims.BROKE, claims.SATURATED,
                                   claims.LGRAD, claims.BORDER)
sel, CLAIMS = claims.sel, claims.CLAIMS


def score_tail_ratio(run) -> float | None:
  """``(q99 - q01) / (q90 - q10)`` of the normalizer's input, from the
  loop's score quantiles, mean over logged steps and layers (``NORMAL_TAIL``
  for normally distributed inputs; larger = heavier tails)."""
  if not run.done:
    return None
  out = []
  for k in run.keys("diag/", "/score_q50"):
    layer = k[:-len("/score_q50")]
    q = {lv: run.curve(f"{layer}/score_{lv}")[1]
         for lv in ("q01", "q10", "q90", "q99")}
    if min(v.size for v in q.values()) == 0:
      continue
    inner = q["q90"] - q["q10"]
    ok = inner > 0
    if ok.any():
      out.append(float(np.mean((q["q99"] - q["q01"])[ok] / inner[ok])))
  return float(np.mean(out)) if out else None


def _num_classes(config) -> int:
  return datasets.known(config.data.name).num_classes


def broke_down(run) -> float | None:
  if run.diverged:
    return 1.0
  acc = run.value("final/accuracy")
  if acc is None:
    return None
  return float(acc < 2.0 / _num_classes(run.config))


def break_step(run) -> float | None:
  if run.diverged:
    return float(run.step)
  if not broke_down(run):
    return None
  steps, tr = run.curve("accuracy")
  above = np.nonzero(tr > 2.0 / _num_classes(run.config))[0]
  if not above.size:
    return float(steps[0]) if steps.size else None
  nxt = above[-1] + 1
  return float(steps[nxt]) if nxt < steps.size else None


def border_share(weights: np.ndarray) -> float:
  """Share of each query's attention on the border tokens of the square
  token grid, mean over images, heads and queries (rows renormalised, so
  unnormalised periodic weights compare with softmax's)."""
  w = np.abs(np.asarray(weights, np.float64))
  n = w.shape[-1]
  side = int(round(np.sqrt(n)))
  grid = np.ones((side, side), bool)
  grid[1:-1, 1:-1] = False
  rows = w / np.maximum(w.sum(-1, keepdims=True), 1e-30)
  return float(rows[..., grid.reshape(-1)].sum(-1).mean())


def probe(runs, cache_dir):
  del cache_dir
  deepest = max(DEPTHS)
  mapped = set()
  for r, state in studies.probed(runs):
    x, _ = studies.load_images(r.config, r.config.data.eval_split, 8)
    weights = studies.attention_weights(r.config, state, x)
    r.metrics["value/border_share"] = float(np.mean(
        [border_share(w) for w in weights.values()]))
    key = (r.part, r.get("model.normalizer"))
    if (r.get("model.depth") == deepest and key not in mapped
        and key[1] in (SM, SIN)):
      mapped.add(key)
      last = weights[sorted(weights)[-1]]
      r.probes["received"] = np.round(np.abs(last).mean((0, 1, 2)),
                                      6).tolist()


DEEPEST = max(DEPTHS)
acc = lambda where: Cell(where, ACCURACY)


def _broke(where):
  """"2/3 (step 300, 285)": the runs of ``where`` that broke down."""
  def text(runs):
    rs = [r for r in studies.select(runs, where) if r.done or r.diverged]
    if not rs:
      return render.NOT_RUN
    at = ", ".join(f"{r.value('value/break_step'):.0f}" for r in rs
                   if r.value("value/break_step") is not None)
    return f"{sum(1 for r in rs if BROKE.of(r))}/{len(rs)}" + (
        f" (step {at})" if at else "")
  return text


def _part_steps(part):
  return lambda runs: f"`{part}`, {render.steps(runs, {'part': part})} steps"


TABLES = {
    "t2": Table(["normalizer", "paper (CIFAR-100)",
                 *[f"ours depth {d}" for d in DEPTHS],
                 f"ours depth 4, {FOCUS_STEPS} steps"],
                [(n, ["breaks down" if p is None else " / ".join(
                    f"{x:.2f}" for x in p), *[acc(sel(n, d)) for d in DEPTHS],
                      acc(sel(n, 4, FOCUS)) if n in study.FOCUS else "-"])
                 for n, p in PAPER.items()]),
    "bd": Table(["normalizer", "part", "depth", "broke down (runs; step)",
                 "test accuracy %"],
                [(n, [_part_steps(part), d, _broke(sel(n, d, part)),
                      acc(sel(n, d, part))])
                 for n in dict.fromkeys(["siren_max", pre("siren_max"),
                                         *study.BREAKDOWN,
                                         *study.BREAKDOWN_PRENORM,
                                         *study.BREAKDOWN_1EP])
                 for part, depths in (("main", DEPTHS), (BD_PART, (1,)))
                 if part == "main" or n in study.BREAKDOWN_1EP
                 for d in depths]),
    "sat": Table(["normalizer", "saturated fraction", "median n|dw/ds|"],
                 [(n, [Cell(sel(n), SATURATED), Cell(sel(n), LGRAD)])
                  for n in (SM, SIN)]),
    "fig7": Table(["normalizer", "border share"],
                  [(n, [Cell(sel(n), BORDER)]) for n in (SM, SIN)]),
}

PLOTS = {
    "depth": Plot("accuracy vs depth", [Points(
        "test accuracy by depth", ACCURACY, "depth (attention blocks)",
        {n: [(d, sel(n, d)) for d in DEPTHS] for n in PAPER}, logx=True,
        dodge=0.04, xticks=DEPTHS)], size=(6.5, 4.2)),
    "saturation": Plot("gradient saturation over training", [
        *[Quantiles(f"{n}, depth {DEEPEST}", ylabel, sel(n, DEEPEST), prefix,
                    logy) for prefix, ylabel, logy in (
                        ("score", "normalizer input s", False),
                        ("lgrad", "local gradient n|dw/ds|", True))
          for n in (SM, SIN)],
        *[Curves(f"{n}, depth {DEEPEST}", "saturated fraction", {
            f"block {i}": (sel(n, DEEPEST),
                           f"diag/block{i}_attn/grad_saturation")
            for i in range(DEEPEST)}) for n in (SM, SIN)]],
                       size=(5.0, 3.0), ncols=2),
    "attention_maps": Plot("attention received per token", [
        Heatmap(f"{n} ({part}, seed 0)\nblock {DEEPEST - 1} (last), n=1",
                sel(n, DEEPEST, part), "received")
        for part in (FOCUS, "main") for n in (SM, SIN)], size=(3.4, 3.0)),
}


def _maps(runs):
  return [np.asarray(r.probes["received"]) for r in runs
          if "received" in r.probes]


def _entropy_gaps(runs, norm):
  """ln 16 minus each block's final attention entropy (nats), block 0 to
  the last, mean over the finished seeds, at the deepest depth."""
  rs = [r for r in studies.select(runs, sel(norm, DEEPEST)) if r.done]
  blocks = sorted({k for r in rs for k in r.keys("diag/", "/attn_entropy")})
  return [float(np.mean([np.log(16) - r.curve(k)[1][-1] for r in rs
                         if r.curve(k)[1].size])) for k in blocks]


def _gaps(runs):
  return {n: g for n in (SM, SIN) if (g := _entropy_gaps(runs, n))}


def _last_gap(runs):
  return max(g[-1] for g in _gaps(runs).values())


def _farthest(runs, _):
  gaps = _gaps(runs)
  n, k = max(((n, k) for n, g in gaps.items() for k in range(len(g))),
             key=lambda nk: gaps[nk[0]][nk[1]])
  return f"{n}'s block {k} ({gaps[n][k]:.3f} nats)"


def _seeds(where):
  return lambda runs, _: str(len({r.seed for r in studies.select(runs,
                                                                 where)}))


def _paper_gain(norms):
  return lambda runs, _: f"{float(np.mean([PAPER[n][2] - PAPER[n][0] for n in norms])):+.2f}"


FACTS = {
    "steps": lambda runs, _: render.steps(runs, {"part": "main"}),
    "focus_steps": lambda runs, _: render.steps(runs, {"part": FOCUS}),
    "epochs_bd": lambda runs, _: render.epoch_range(
        studies.select(runs, {"part": BD_PART})),
    "epochs_main": lambda runs, _: render.epoch_range(
        studies.select(runs, {"part": "main"})),
    "seeds": _seeds({"part": "main", "model.normalizer": tuple(PAPER)}),
    "seeds_bd": _seeds({"part": "main", "model.normalizer": (
        *study.BREAKDOWN, *study.BREAKDOWN_PRENORM)}),
    "seeds_focus": _seeds({"part": FOCUS}),
    "twice_chance": lambda runs, _: f"{200.0 / datasets.known(declaration.load(SPEC).runs[0].config.data.name).num_classes:g}",
    "paper_trend": _paper_gain(TREND), "paper_trend_sm": _paper_gain([SM]),
    "trend_n": lambda runs, _: str(len(TREND)),
    "entropy_gaps": lambda runs, _: "; ".join(
        f"{n}: " + ", ".join(f"{x:.3f}" for x in g)
        for n, g in _gaps(runs).items()),
    "entropy_last": lambda runs, _: f"{_last_gap(runs):.3f}",
    "entropy_tokens": lambda runs, _: f"{16 * np.exp(-_last_gap(runs)):.1f}",
    "entropy_farthest": _farthest,
    "map_dev": lambda runs, _: f"{max(float(np.abs(m - 1 / m.size).max()) for m in _maps(runs)):.2g}",
    "map_dev_share": lambda runs, _: f"{max(float(np.abs(m - 1 / m.size).max()) for m in _maps(runs)) * 16:.1%}",
}

STUDY = studies.Study(
    name="periodic",
    title="Periodic alternatives to softmax (Wang et al. 2021): "
          "reproduction at reduced scale",
    paper="../shared/papers/periodic-softmax-wang2021.txt", spec=SPEC,
    parts={"main": ""}, focus={FOCUS: f"subset=focus,steps={FOCUS_STEPS}",
                               BD_PART: f"subset=breakdown,steps={BD_STEPS}"},
    fields=("model.normalizer", "model.depth"),
    values={"broke_down": broke_down, "break_step": break_step,
            "grad_saturation": studies.mean_over_layers("grad_saturation"),
            "lgrad_q50": studies.mean_over_layers("lgrad_q50"),
            "score_tail_ratio": score_tail_ratio},
    series=("train/accuracy", "train/diag/*"), probe=probe, claims=CLAIMS,
    template=os.path.join(HERE, "RESULTS.md.tmpl"), tables=TABLES,
    plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
