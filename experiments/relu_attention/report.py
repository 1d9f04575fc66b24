r"""The ReLU-attention study (Wortsman et al. 2023): what its RESULTS.md shows.

  python experiments/relu_attention/report.py --workdir=workdirs/relu_attention   # export + report
  python experiments/relu_attention/report.py --from-csv experiments/relu_attention/runs.csv

The prose is ``RESULTS.md.tmpl``, written by hand; ``STUDY`` declares the
runs (``sweep.py``), the claims (``claims.py``) and, as data, the tables,
plots and the few facts the template names.
"""

from __future__ import annotations

import os
import sys

from softattn import studies
from softattn.studies import render
from softattn.studies.claims import ACCURACY, Metric
from softattn.studies.plotspec import Paired, Plot, Points
from softattn.studies.render import Cell, Table
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
study, relu_n, sel, tag = claims.study, claims.relu_n, claims.sel, claims.tag
FOCUS, SETTINGS, FLOPS, CORE_S = (claims.FOCUS, claims.SETTINGS,
                                  claims.FLOPS, claims.CORE_S)
GATED = (("softmax", "softmax"), ("relu/n", relu_n(1.0)),
         ("relu (alpha 0)", relu_n(0.0)), ("relu2/n", relu_n(1.0, "relu2")),
         ("relu2 (alpha 0)", relu_n(0.0, "relu2")))


def train_flops(run):
  if not run.done or not run.flops_per_step or not run.step:
    return None
  return float(run.flops_per_step) * float(run.step)


def _mean(runs, where, metric=ACCURACY):
  return studies.summarize([metric.of(r) for r in studies.select(runs, where)
                            if r.done]).mean


def _gflops(h, size):
  """GFLOP per step of h/n at alpha 1 (the same in every seed) and its
  ratio to relu/n's."""
  per_step = Metric("GFLOP/step", "flops_per_step", 1e-9)

  def text(runs):
    x, r = (_mean(runs, sel(relu_n(1.0, a), size), per_step)
            for a in (h, "relu"))
    return render.NOT_RUN if x is None or r is None else \
        f"{x:.3f} ({x / r:.3f})"
  return text


def _probe_metric() -> Metric:
  fs = declaration.load(claims.SPEC).runs[0].config.fewshot
  (name, _), = fs.datasets.items()
  return Metric("10-shot %", f"final/fewshot/{name}_{fs.shots[0]}shot", 100.0)


TABLES = {
    **{f"fig2.{tag(label)}": Table(
        ["h", *[f"alpha {a:g}" for a in study.ALPHAS]],
        [(h, [Cell(sel(relu_n(a, h), size, part), ACCURACY)
              for a in study.ALPHAS]) for h in study.ACTS] +
        [("softmax", [Cell(sel("softmax", size, part), ACCURACY)] +
          [""] * (len(study.ALPHAS) - 1))])
       for label, part, size in SETTINGS},
    "speed": Table(
        ["h", *[f"{s} {m}" for s in study.SIZES
                for m in ("GFLOP/step", "core-seconds")]],
        [(h, [x for s in study.SIZES for x in (
            _gflops(h, s), Cell(sel(relu_n(1.0, h), s), CORE_S))])
         for h in study.ACTS] +
        [(f"{h} (`{claims.SPEED_PART}`)", [x for s in study.SIZES for x in (
            _gflops(h, s), Cell(sel(relu_n(1.0, h), s, claims.SPEED_PART),
                                CORE_S))])
         for h in ("relu", *claims.LATER_SESSION)]),
    "gate": Table(
        ["normalizer", "qk-LN on", "qk-LN off", "gated",
         "gated train FLOPs", "not gated train FLOPs", "gated core-s",
         "not gated core-s"],
        [(label, [Cell(sel(n), ACCURACY), Cell(sel(n, qkln=False), ACCURACY),
                  Cell(sel(n, gated=True), ACCURACY),
                  *[Cell(sel(n, gated=g), m) for m in (FLOPS, CORE_S)
                    for g in (True, False)]]) for label, n in GATED]),
    "probe": Table(["size", "softmax", "relu/n"], [
        (size, [Cell(sel(n, size), _probe_metric())
                for n in ("softmax", relu_n(1.0))]) for size in study.SIZES]),
}

PLOTS = {
    "alpha": Plot("accuracy vs alpha", [
        Points(label, ACCURACY, "alpha (phi = n^-alpha h)",
               {h: [(a, sel(relu_n(a, h), size, part)) for a in study.ALPHAS]
                for h in study.ACTS}, dodge=0.012,
               reference=("softmax", sel("softmax", size, part)))
        for label, part, size in SETTINGS] + [
        Paired("paired by seed: alpha 1 - alpha 0.5", {
            f"{h}, {label}": f"alpha.{h}_1_gt_half.{tag(label)}"
            for label, _, _ in SETTINGS for h in ("relu", "identity")},
               "accuracy points (alpha 1 - alpha 0.5)")], size=(4.6, 3.8)),
    "compute": Plot("accuracy vs compute", [
        Points(metric.name, ACCURACY, metric.name + metric.unit, {
            label: [(0.0, sel(n, size)) for size in study.SIZES]
            for label, n in [("softmax", "softmax"), *[
                (f"{h}/n", relu_n(1.0, h)) for h in study.ACTS],
                ("relu (alpha 0)", relu_n(0.0))]},
               x_metric=metric, logx=True, dodge=dodge)
        for metric, dodge in ((FLOPS, 0.025), (CORE_S, 0.0))]),
}


def _minutes(runs, _):
  return ", ".join(
      f"`{p}` {sum(r.wall_s or 0.0 for r in studies.select(runs, {'part': p})) / 60:.0f}"
      for p in ("main", FOCUS))


def _spread(runs, _):
  """The widest seed interval among relu / identity at alpha 0, 0.5, 1 in
  the main part: how far apart seeds are at that budget."""
  halves = [studies.summarize([ACCURACY.of(r) for r in studies.select(
      runs, sel(relu_n(a, h), size, part)) if r.done]).half
            for _, part, size in SETTINGS if part == "main"
            for a in (0.0, 0.5, 1.0) for h in ("relu", "identity")]
  return f"±{max(x for x in halves if x):.1f}"


def _grid(runs, _):
  """The alpha of each curve's best accuracy in the one-seed grid (seed 0),
  per setting of the main part; a curve with alphas not run yet names the
  ones it is the best of."""
  out = []
  for label, part, size in SETTINGS:
    if part != "main":
      continue
    best = []
    for h in study.ACTS:
      acc = {a: ACCURACY.of(rs[0]) for a in study.ALPHAS if (rs := [
          r for r in studies.select(runs, sel(relu_n(a, h), size, part))
          if r.seed == 0 and r.done])}
      if acc:
        part_of = "" if len(acc) == len(study.ALPHAS) else \
            f" (of alpha {', '.join(f'{a:g}' for a in acc)})"
        best.append(f"{h} {max(acc, key=acc.get):g}{part_of}")
    out.append(f"{label}: {', '.join(best)}")
  return "; ".join(out)


def _relu6_gap(runs, _):
  """The largest |relu6 - relu| accuracy gap, in points, over the runs of
  relu6 that have a relu run of the same size, alpha and seed, and their
  number: how far apart the two non-linearities train here."""
  gaps = []
  for r in runs:
    n = r.get("model.normalizer") or ""
    if not (r.done and n.endswith("act=relu6)")):
      continue
    twin = [o for o in studies.select(runs, {
        "part": r.part, "model.normalizer": n.replace("relu6)", "relu)"),
        "model.width": r.get("model.width"), "model.gated": False,
        "model.qk_layernorm": True}) if o.seed == r.seed and o.done]
    if twin:
      gaps.append(abs(ACCURACY.of(r) - ACCURACY.of(twin[0])))
  return render.NOT_RUN if not gaps else \
      f"{max(gaps):.2f} points ({len(gaps)} pairs)"


def _gate_ratio(runs, _):
  g, n = (_mean(runs, sel(relu_n(1.0), gated=x), FLOPS) for x in (True,
                                                                   False))
  return render.NOT_RUN if g is None or n is None else f"{g / n:.3f}"


FACTS = {
    "minutes": _minutes, "spread": _spread, "grid": _grid,
    "gate_ratio": _gate_ratio, "relu6_gap": _relu6_gap,
    "main_steps": lambda runs, _: render.steps(runs, {"part": "main"}),
    "focus_steps": lambda runs, _: render.steps(runs, {"part": FOCUS}),
    "epochs": lambda runs, _: render.epoch_range(runs),
    "tokens": lambda runs, _: str(claims.sequence_length()),
}

STUDY = studies.Study(
    name="relu_attention",
    title="ReLU attention (Wortsman et al. 2023): reproduction at reduced "
          "scale",
    paper="../shared/papers/relu-attention-wortsman2023.txt",
    spec=claims.SPEC, parts={"main": ""},
    focus={FOCUS: "subset=focus,steps=1000", claims.SPEED_PART: "subset=speed"},
    fields=("model.normalizer", "model.width", "model.qk_layernorm",
            "model.gated"),
    values={"train_flops": train_flops}, claims=claims.CLAIMS,
    template=os.path.join(HERE, "RESULTS.md.tmpl"), tables=TABLES,
    plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
