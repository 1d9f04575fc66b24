r"""The sinks study (issue #48 item 4): the tables, plot and facts its
hand-written ``RESULTS.md.tmpl`` names, as data; the per-run sink values
and the transfer probe are ``probes.py``'s.

  python experiments/sinks/report.py --workdir=workdirs/sinks   # transfer probe, export, report
  python experiments/sinks/report.py --from-csv experiments/sinks/runs.csv
"""

from __future__ import annotations

import os
import sys

import softattn_studies as studies
from softattn_studies.claims import ACCURACY, Metric
from softattn_studies.plotspec import Paired, Plot
from softattn_studies.render import Cell, Table

HERE = os.path.dirname(os.path.abspath(__file__))
probes = studies.load_module(os.path.join(HERE, "probes.py"))
claims = probes.claims
sel, at, TOKENS = claims.sel, claims.at, claims.TOKENS
TRAINED, *OTHER = TOKENS


def _acc(n: int) -> Metric:
  return ACCURACY if n == TRAINED else at(n, Metric(
      ACCURACY.name, "value/accuracy", 100.0, unit=" points"))


TABLES = {
    "accuracy": Table(
        ["variant", *[f"{n} tokens" for n in TOKENS],
         *[f"change at {n}" for n in OTHER]],
        [(v, [Cell(sel(v), _acc(n)) for n in TOKENS] +
          [Cell(sel(v), at(n, claims.DROP)) for n in OTHER])
         for v in claims.VARIANTS]),
    "sinks": Table(
        ["variant", "sink heads", "no-op sink heads",
         "broadcast sinks on a token", "max / median token norm",
         "top-norm token a patch %"],
        [(v, [Cell(sel(v), m) for m in (
            claims.SINK_HEADS, claims.NOOP_HEADS,
            claims.BROADCAST_TOKEN_HEADS, claims.NORM_RATIO,
            claims.TOP_NORM_PATCH)]) for v in claims.VARIANTS]),
    "sinks_by_tokens": Table(
        ["variant", *[f"sink heads, {n} tokens" for n in TOKENS]],
        [(v, [Cell(sel(v), claims.SINK_HEADS if n == TRAINED else
                   at(n, claims.SINK_HEADS)) for n in TOKENS])
         for v in claims.VARIANTS]),
}

PLOTS = {
    "transfer": Plot("accuracy change at more tokens, minus softmax's", [
        Paired(f"{n} tokens (trained at {TRAINED})",
               {v: f"transfer.{v}.n{n}" for v in claims.N_DEPENDENT},
               "accuracy points (variant - softmax)") for n in OTHER]),
}


def _transfer_minutes(runs, _):
  """Core-minutes of the transfer evaluations recorded in runs.csv."""
  secs = [r.value(f"value/n{n}/core_seconds") for r in runs for n in OTHER]
  secs = [s for s in secs if s is not None]
  return f"{sum(secs) / 60:.0f} CPU core-minutes ({len(secs)} evaluations)" \
      if secs else "not run yet"


FACTS = {
    "thresholds": (f"top-key share > {claims.SINK_SHARE:g}; no-op: value "
                   f"norm < {claims.NOOP_VNORM:g} x the mean; broadcast: "
                   f"output effective rank < {claims.BROADCAST_ERANK:g}; "
                   f"high-norm: >= {claims.HIGH_NORM:g} x the median"),
    "transfer_cost": _transfer_minutes,
}

STUDY = studies.Study(
    name="sinks",
    title="Attention sinks, registers, gates and n-dependent normalizers "
          "at reduced scale",
    paper="issue #48 item 4 (papers: claims.py)",
    spec=claims.SPEC, parts={"main": "", claims.GATE_PART:
                             f"output_gate={claims.study.GATE}"},
    fields=("model.normalizer", "model.num_registers", "model.output_gate"),
    values=probes.VALUES, probe=probes.transfer, claims=claims.CLAIMS,
    tables=TABLES, plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
