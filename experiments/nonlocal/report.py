r"""The scaled non-local study (Cho et al. 2022): probes, what RESULTS.md shows.

  python experiments/nonlocal/report.py --workdir=workdirs/nonlocal   # export + report
  python experiments/nonlocal/report.py --from-csv experiments/nonlocal/runs.csv

``STUDY`` declares the runs (``sweep.py``: part ``main``; the ``init_1ep``
focus part, 4 seeds x ~1 epoch on Table 2's init claims; the
``paper_defaults`` focus part, the paper's own setting where ``main``
differs: scaled NL with He, Tables 1 and 2 at 1 head; the ``unscaled``
focus part, Sec. 3.1's block without the scaling factor, 3 seeds, and
``unscaled_32px``, the same at the paper's 16x16 stage-2 maps; the
``embed_reduction`` focus part, Fig. 2's embedding channel reduction at 4
heads, 3 seeds), the
claims of ``claims.py`` (the paper's claims as data) and, as data, the
tables, plots and facts the hand-written ``RESULTS.md.tmpl`` names. The
rule that judges the claims is ``softattn.studies.claims.RULE``.

Probes (run when exporting ``runs.csv``; ``--no_probes`` skips them):

* memory: XLA's plan of one compiled train step (forward + backward,
  argument + output + temporary bytes) of the *full-scale* model
  (PreResNet-56, 32x32x3, batch 128) for each run's heads and block: the
  trend of the paper's Table 3 without a GPU (cached in ``memory.json``);
* Fig. 1: the first NL block's sown attention weights on 4 test images,
  from each 4-head run's checkpoint: the vertical-line statistic per run,
  and the map of the lowest seed's head 0 (stored in ``runs.csv``).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from softattn import studies
from softattn.studies import render
from softattn.studies.claims import ERROR
from softattn.studies.plotspec import Heatmap, Paired, Plot, Points
from softattn.studies.render import Cell, Table
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.relpath(os.path.join(HERE, "sweep.py"))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
NL, LABEL, INITS = claims.NL, claims.LABEL, claims.INITS
FOCUS, PAPER_PART = claims.FOCUS, claims.PAPER_PART
UNSCALED, UNSCALED_PART = claims.UNSCALED, claims.UNSCALED_PART
EMBED, EMBED_PART, embed_sel = claims.EMBED, claims.EMBED_PART, claims.embed_sel
PAPER_T1, PAPER_T2, PAPER_T3 = claims.PAPER_T1, claims.PAPER_T2, claims.PAPER_T3
PAPER_MEM, PAPER_MS, PAPER_INIT = (claims.PAPER_MEM, claims.PAPER_MS,
                                   claims.PAPER_INIT)
STEP_MS, MEMORY, FLOPS, VERTICAL = (claims.STEP_MS, claims.MEMORY,
                                    claims.FLOPS, claims.VERTICAL)
sel, paper_sel, paper_cell = claims.sel, claims.paper_sel, claims.paper_cell
CLAIMS = claims.CLAIMS
HEADS = (0, 1, 2, 4, 8)


# --------------------------------------------------------------------------
# Probes (at export time).


def train_step_memory_mb(config, batch=128):
  """MB XLA plans for one forward+backward of ``config``'s model."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  model, shapes = studies.build_abstract(config)
  shape = studies.input_shape(config)

  def loss(params, stats, x, y):
    logits, new = model.apply({"params": params, "batch_stats": stats}, x,
                              train=True, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, y).mean(), new

  x = jax.ShapeDtypeStruct((batch, *shape), jnp.float32)
  y = jax.ShapeDtypeStruct((batch,), jnp.int32)
  compiled = jax.jit(jax.grad(loss, has_aux=True)).lower(
      shapes["params"], shapes.get("batch_stats", {}), x, y).compile()
  m = compiled.memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes
          + m.temp_size_in_bytes - m.alias_size_in_bytes) / 2 ** 20


def memory_table(cache=None) -> dict[tuple[int, str], float]:
  """``{(heads, block): MB}`` of the full-scale model; cached in ``cache``
  (JSON), since the ~10 compilations take minutes and depend on code only."""
  spec_full = f"{SPEC}:scale=full"
  if cache and os.path.exists(cache):
    with open(cache) as f:
      saved = json.load(f)
    if saved.get("spec") == spec_full:
      return {(int(h), b): v for h, b, v in saved["mb"]}
  sweep = declaration.load(spec_full)
  out = {}
  for heads in HEADS:
    for block in ("softmax", "scaled"):
      if heads == 0:
        block = "softmax"
      run = next(r for r in sweep.runs
                 if r.config.model.nl_blocks.heads == heads
                 and r.config.model.nl_blocks.normalizer == block
                 and r.config.model.nl_blocks.mode == "base"
                 and r.config.model.nl_blocks.init == "normal")
      if (heads, block) not in out:
        out[heads, block] = train_step_memory_mb(run.config)
  if cache:
    studies.dump_json(cache, {"spec": spec_full, "mb": [
        [h, b, v] for (h, b), v in sorted(out.items())]})
  return out


def vertical_line_ratio(weights) -> float:
  """Variance across queries / variance across keys of ``A[..., q, k]``.

  Fig. 1's "vertical lines" mean a key's weight hardly changes with the
  query: ``mean_k Var_q A`` is small next to ``mean_q Var_k A``. Scale-free
  (the scaled NL weights are unnormalised); near 0 = vertical lines, ~1 =
  as query-dependent as key-dependent. Mean over images and heads.
  """
  w = np.asarray(weights, np.float64)
  return float(np.mean(w.var(axis=-2).mean(-1) /
                       np.maximum(w.var(axis=-1).mean(-1), 1e-30)))


def probe(runs, cache_dir):
  mem = memory_table(os.path.join(cache_dir, "memory.json"))
  for r in runs:
    h = r.get(NL + "heads")
    key = (h, "softmax" if h == 0 else r.get(NL + "normalizer"))
    # The unscaled block has no full-scale memory row, and the rows are of
    # full-width blocks: none for Fig. 2's reduced embedding.
    if key in mem and r.get(NL + "embed_channels") is None:
      r.metrics["value/full_step_mb"] = mem[key]
  mapped = set()
  for r, state in studies.probed(runs, keep=lambda r: (
      r.get(NL + "heads") == 4 and r.get(NL + "mode") == "base"
      and r.get(NL + "init") == "normal")):
    b = r.get(NL + "normalizer")
    x, _ = studies.load_images(r.config, r.config.data.eval_split, 4)
    weights = studies.attention_weights(r.config, state, x)
    first = weights[sorted(weights)[0]]
    r.metrics["value/vertical_ratio"] = vertical_line_ratio(first)
    if (r.part, b) not in mapped:
      mapped.add((r.part, b))
      r.probes["attention_map"] = np.round(first[0, 0], 5).tolist()


# --------------------------------------------------------------------------
# What RESULTS.md shows.

BLOCKS = ("softmax", "scaled")
MODES = ("base", "magnitude", "direction")
err = lambda where: Cell(where, ERROR)


def _count(where):
  """(diverged, finished, declared) runs of ``where``, as three cells."""
  pick = lambda f: lambda runs: str(f(studies.select(runs, where)))
  return [pick(lambda rs: sum(r.diverged for r in rs)),
          pick(lambda rs: sum(r.done for r in rs)), pick(len)]


def _paper_t3(h, b):
  return paper_cell(PAPER_T3[h][b]) if h in PAPER_T3 else "-"


def _paper_mem(h, i):
  return f"{PAPER_MEM[h][i]} / {PAPER_MS[h][i]}" if h in PAPER_MEM else "-"


TABLES = {
    "t3": Table(["heads", "paper NL", "paper scaled NL", "ours NL",
                 "ours scaled NL", "ours scaled NL, He"],
                [(str(h), [_paper_t3(h, "softmax"), _paper_t3(h, "scaled"),
                           err(sel(h)), err(sel(h, "scaled")),
                           err(paper_sel(h, "scaled")) if h in (1, 2, 4)
                           else "-"]) for h in HEADS]),
    "t3b": Table(["heads", "paper NL MB / ms", "paper scaled MB / ms",
                  "XLA NL MB", "XLA scaled MB", "ours NL GFLOP",
                  "ours scaled GFLOP", "ours NL ms", "ours scaled ms"],
                 [(str(h), [_paper_mem(h, 0), _paper_mem(h, 1),
                            *[Cell(sel(h, b), m, fmt) for m, fmt in (
                                (MEMORY, {"digits": 0}), (FLOPS, {}),
                                (STEP_MS, {})) for b in BLOCKS]])
                  for h in HEADS]),
    "t1": Table(["block", *[f"paper {m}" for m in MODES],
                 *[f"ours {m}" for m in MODES]],
                [(LABEL[b], [*[paper_cell(PAPER_T1[b][m])
                               for m in MODES],
                             *[err(sel(4, b, m)) for m in MODES]])
                 for b in BLOCKS] +
                [(f"{LABEL[b]}, 1 head, {INITS[PAPER_INIT[b]]}", [
                    *[paper_cell(PAPER_T1[b][m]) for m in MODES],
                    *[err(paper_sel(1, b, m)) for m in MODES]])
                 for b in BLOCKS]),
    "t2": Table(["block", *[f"paper {v}" for v in INITS.values()],
                 *[f"ours {v}" for v in INITS.values()], "ours He, 1 epoch",
                 "ours sigma 0.01, 1 epoch"],
                [(LABEL[b], [*[paper_cell(PAPER_T2[b][i]) for i in INITS],
                             *[err(sel(4, b, init=i)) for i in INITS],
                             err(sel(4, b, init="he", part=FOCUS)),
                             err(sel(4, b, part=FOCUS))]) for b in BLOCKS] +
                [(f"{LABEL[b]}, 1 head", [
                    *[paper_cell(PAPER_T2[b][i]) for i in INITS],
                    *[err(paper_sel(1, b, init=i)) for i in INITS], "-", "-"])
                 for b in BLOCKS]),
    "s31": Table(["runs", "diverged", "finished", "declared"], [
        ("scaled NL, every part", _count({NL + "normalizer": "scaled"})),
        ("NL without softmax or scaling, 4 heads, He (`unscaled`)",
         _count({"part": UNSCALED_PART})),
        ("the same on 32x32 inputs: 16x16 stage-2 maps, the paper's "
         f"(`{claims.UNSCALED_32_PART}`)",
         _count({"part": claims.UNSCALED_32_PART}))]),
    "fig2": Table(["block", "ours 32 channels (`main`)",
                   f"ours {EMBED} channels (`{EMBED_PART}`)"],
                  [(LABEL[b], [err(sel(4, b)), err(embed_sel(b))])
                   for b in BLOCKS]),
    "fig1": Table(["block", "ratio"], [(LABEL[b], [Cell(sel(4, b), VERTICAL)])
                                       for b in BLOCKS]),
}

PLOTS = {
    "table3_error": Plot("test error vs heads", [
        Points("Table 3 analog: error vs heads (part main)", ERROR,
               "NL heads (0 = no NL block)",
               {LABEL[b]: [(h, sel(h, b)) for h in HEADS] for b in BLOCKS},
               dodge=0.08),
        Paired("paired by seed: scaled NL - NL (< 0: scaled better)", {
            f"{h} head{'s' if h > 1 else ''}{', ' + tag if tag else ''}":
            f"t3.scaled_lt_nl.h{h}{sfx}"
            for sfx, tag in (("", ""), (".paper", "He"))
            for h in (1, 2, 4)} | {
                "4 heads, 1 epoch": "t3.scaled_lt_nl.h4.1ep",
                "4 heads, 1 epoch, He": "t3.scaled_lt_nl.h4.1ep.paper"},
               "scaled NL - NL error, points")], size=(5.5, 4.0)),
    "attention_maps": Plot("attention maps", [
        Heatmap(f"{LABEL[b]} ({part}, seed 0)\nfirst NL block, head 0, test "
                "image 0", sel(4, b, part=part), "attention_map",
                label="attention weight", centred=False,
                axes=("key position (HW)", "query position (HW)"))
        for b in BLOCKS for part in ("main", FOCUS)], size=(3.3, 3.4)),
}


def _design(part):
  return lambda runs, _: render.design(runs, {"part": part})


def _settings_agree(_, verdicts):
  """"13 of the 15": claims judged in ours and in the paper's setting that
  get the same word in both."""
  both = [(verdicts[k], verdicts[k + sfx]) for k in verdicts
          for sfx in (".h1", ".paper") if k + sfx in verdicts]
  return f"{sum(a.word == b.word for a, b in both)} of the {len(both)}"


def _sigma0_same(runs, _):
  """"3 of 3 seeds at 1 head and 3 of 3 at 4 heads": seeds in which NL and
  scaled NL at sigma 0 reach exactly the same test error."""
  out = []
  for heads in (1, 4):
    e = {b: {r.seed: ERROR.of(r) for r in studies.select(
        runs, paper_sel(heads, b, init="zeros")) if r.done} for b in BLOCKS}
    seeds = set(e["softmax"]) & set(e["scaled"])
    same = sum(e["softmax"][s] == e["scaled"][s] for s in seeds)
    out.append(f"{same} of {len(seeds)} seeds at {heads} "
               f"head{'s' if heads > 1 else ''}")
  return " and ".join(out)


def _diverged(part):
  """"0/3": the part's runs that diverged, of those that ended."""
  def fact(runs, _):
    rs = [r for r in studies.select(runs, {"part": part})
          if r.done or r.diverged]
    return f"{sum(r.diverged for r in rs)}/{len(rs)}"
  return fact


FACTS = {
    "main": _design("main"), "focus": _design(FOCUS),
    "paper": _design(PAPER_PART), "unscaled": _design(UNSCALED_PART),
    "unscaled_32": _design(claims.UNSCALED_32_PART),
    "embed": _design(EMBED_PART),
    "epochs": lambda runs, _: render.epoch_range(runs),
    "epochs_focus": lambda runs, _: render.epoch_range(
        studies.select(runs, {"part": FOCUS})),
    "epochs_unscaled": lambda runs, _: render.epoch_range(
        studies.select(runs, {"part": UNSCALED_PART})),
    "steps_main": lambda runs, _: render.steps(runs, {"part": "main"}),
    "steps_focus": lambda runs, _: render.steps(runs, {"part": FOCUS}),
    "settings_agree": _settings_agree, "sigma0_same": _sigma0_same,
    "unscaled_diverged": _diverged(UNSCALED_PART),
    "unscaled_32_diverged": _diverged(claims.UNSCALED_32_PART),
}

STUDY = studies.Study(
    name="nonlocal",
    title="Scaled non-local blocks (Cho et al. 2022): reproduction at "
          "reduced scale",
    paper="../shared/papers/scaled-nonlocal-cho2022.txt", spec=SPEC,
    parts={"main": ""}, focus={FOCUS: "subset=init,steps=940,seeds=4",
                               PAPER_PART: "subset=paper",
                               UNSCALED_PART: "subset=unscaled",
                               claims.UNSCALED_32_PART:
                                   "subset=unscaled,size=32",
                               EMBED_PART: "subset=embed"},
    fields=(NL + "heads", NL + "normalizer", NL + "mode", NL + "init"),
    values={"step_ms": lambda r: (lambda s: 1000.0 / s if s else None)(
        studies.median_train("steps_per_sec")(r))},
    probe=probe, claims=CLAIMS, template=os.path.join(HERE, "RESULTS.md.tmpl"),
    tables=TABLES, plots=PLOTS, facts=FACTS)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
