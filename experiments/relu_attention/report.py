r"""The ReLU-attention study (Wortsman et al. 2023): the tables, plots and
facts its hand-written ``RESULTS.md.tmpl`` names, as data.

  python experiments/relu_attention/report.py --workdir=workdirs/relu_attention   # export + report
  python experiments/relu_attention/report.py --from-csv experiments/relu_attention/runs.csv
"""

from __future__ import annotations

import os
import sys

import softattn_studies as studies
from softattn_studies import render
from softattn_studies.claims import ACCURACY, Metric
from softattn_studies.plotspec import Paired, Plot, Points
from softattn_studies.render import Cell, Ratio, Spread, Table

HERE = os.path.dirname(os.path.abspath(__file__))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
# Every table cell is a setting of one normalizer: short names keep them
# one line each.
study, sel, relu_n = claims.study, claims.sel, claims.relu_n
GATED = (("softmax", "softmax"), ("relu/n", relu_n(1.0)),
         ("relu (alpha 0)", relu_n(0.0)), ("relu2/n", relu_n(1.0, "relu2")),
         ("relu2 (alpha 0)", relu_n(0.0, "relu2")))
PER_STEP = Metric("GFLOP/step", "flops_per_step", 1e-9)


def train_flops(run):
  if not run.done or not run.flops_per_step or not run.step:
    return None
  return float(run.flops_per_step) * float(run.step)


TABLES = {
    **{f"fig2.{claims.tag(label)}": Table(
        ["h", *[f"alpha {a:g}" for a in study.ALPHAS]],
        [(h, [Cell(sel(relu_n(a, h), size, part), ACCURACY)
              for a in study.ALPHAS]) for h in study.ACTS] +
        [("softmax", [Cell(sel("softmax", size, part), ACCURACY)] +
          [""] * (len(study.ALPHAS) - 1))])
       for label, part, size in claims.SETTINGS},
    "speed": Table(
        ["h", *[f"{s} {m}" for s in study.SIZES
                for m in ("GFLOP/step", "core-seconds")]],
        # Per size: GFLOP per step at alpha 1 (the same in every seed; in
        # brackets: its ratio to relu/n's) and core-seconds.
        [(label, [x for s in study.SIZES for x in (
            Ratio(PER_STEP, sel(relu_n(1.0, h), s), sel(relu_n(1.0), s),
                  True), Cell(sel(relu_n(1.0, h), s, part), claims.CORE_S))])
         for label, h, part in [(h, h, "main") for h in study.ACTS] + [
             (f"{h} (`{claims.SPEED_PART}`)", h, claims.SPEED_PART)
             for h in ("relu", *claims.LATER_SESSION)]]),
    "gate": Table(
        ["normalizer", "qk-LN on", "qk-LN off", "gated",
         "gated train FLOPs", "not gated train FLOPs", "gated core-s",
         "not gated core-s"],
        [(label, [Cell(sel(n), ACCURACY), Cell(sel(n, qkln=False), ACCURACY),
                  Cell(sel(n, gated=True), ACCURACY),
                  *[Cell(sel(n, gated=g), m)
                    for m in (claims.FLOPS, claims.CORE_S)
                    for g in (True, False)]]) for label, n in GATED]),
    "probe": Table(["size", "softmax", "relu/n"], [
        (size, [Cell(sel(n, size), claims.PROBE)
                for n in ("softmax", relu_n(1.0))]) for size in study.SIZES]),
}

PLOTS = {
    "alpha": Plot("accuracy vs alpha", [
        Points(label, ACCURACY, "alpha (phi = n^-alpha h)",
               {h: [(a, sel(relu_n(a, h), size, part)) for a in study.ALPHAS]
                for h in study.ACTS}, dodge=0.012,
               reference=("softmax", sel("softmax", size, part)))
        for label, part, size in claims.SETTINGS] + [
        Paired("paired by seed: alpha 1 - alpha 0.5", {
            f"{h}, {label}": f"alpha.{h}_1_gt_half.{claims.tag(label)}"
            for label, _, _ in claims.SETTINGS for h in ("relu", "identity")},
               "accuracy points (alpha 1 - alpha 0.5)")], size=(4.6, 3.8)),
    "compute": Plot("accuracy vs compute", [
        Points(metric.name, ACCURACY, metric.name + metric.unit, {
            label: [(0.0, sel(n, size)) for size in study.SIZES]
            for label, n in [("softmax", "softmax"), *[
                (f"{h}/n", relu_n(1.0, h)) for h in study.ACTS],
                ("relu (alpha 0)", relu_n(0.0))]},
               x_metric=metric, logx=True, dodge=dodge)
        for metric, dodge in ((claims.FLOPS, 0.025), (claims.CORE_S, 0.0))]),
}


def _grid(size):
  """"relu 0.25, relu2 0.5, ...": the alpha of each curve's best accuracy
  in the one-seed grid (seed 0) on one size; a curve with alphas not run
  yet names the ones it is the best of."""
  def text(runs, _):
    out = []
    for h in study.ACTS:
      acc = {a: ACCURACY.of(rs[0]) for a in study.ALPHAS if (rs := [
          r for r in studies.select(runs, sel(relu_n(a, h), size))
          if r.seed == 0 and r.done])}
      of = "" if len(acc) == len(study.ALPHAS) else \
          f" (of alpha {', '.join(f'{a:g}' for a in acc)})"
      if acc:
        out.append(f"{h} {max(acc, key=acc.get):g}{of}")
    return ", ".join(out)
  return text


def _relu6_gap(runs, _):
  """The largest |relu6 - relu| accuracy gap, in points, over the relu6
  runs that have a relu run of the same part, size, alpha and seed, and
  their number: how far apart the two non-linearities train here."""
  acc = {(r.part, r.get("model.normalizer"), r.get("model.width"), r.seed):
         ACCURACY.of(r) for r in studies.select(
             runs, {"model.gated": False, "model.qk_layernorm": True})
         if r.done}
  gaps = [abs(x - acc[twin]) for (p, n, w, s), x in acc.items()
          if n.endswith("act=relu6)") and
          (twin := (p, n.replace("relu6)", "relu)"), w, s)) in acc]
  return render.NOT_RUN if not gaps else \
      f"{max(gaps):.2f} points ({len(gaps)} pairs)"


FACTS = {
    **{f"grid.{size}": _grid(size) for size in study.SIZES},
    # How far apart seeds are at the main part's budget.
    "spread": Spread([sel(relu_n(a, h), size) for size in study.SIZES
                      for a in (0.0, 0.5, 1.0) for h in ("relu", "identity")],
                     ACCURACY),
    "relu6_gap": _relu6_gap, "gate_ratio": Ratio(
        claims.FLOPS, sel(relu_n(1.0), gated=True), sel(relu_n(1.0))),
    "tokens": str(claims.TOKENS),
}

STUDY = studies.Study(
    name="relu_attention",
    title="ReLU attention (Wortsman et al. 2023): reproduction at reduced "
          "scale",
    paper="../shared/papers/relu-attention-wortsman2023.txt",
    spec=claims.SPEC, parts={"main": ""},
    focus={claims.FOCUS: "subset=focus,steps=1000",
           claims.SPEED_PART: "subset=speed"},
    fields=("model.normalizer", "model.width", "model.qk_layernorm",
            "model.gated"),
    values={"train_flops": train_flops}, claims=claims.CLAIMS, tables=TABLES,
    plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
