r"""The ReLU-attention study (Wortsman et al. 2023): its report.

  python experiments/relu_attention/report.py --workdir=workdirs/relu_attention   # export + report
  python experiments/relu_attention/report.py --from-csv experiments/relu_attention/runs.csv

``STUDY`` declares the runs (``sweep.py``: part ``main``, the alpha x h
grid at two sizes, 3 seeds for softmax and for relu / identity at alpha
0, 0.5, 1 and every h at alpha 1; the focus part ``medium_1000``: those on
the medium model at 1000 steps x 3 seeds), the claims (``claims.py``: the
paper's claims as data, judged by ``softattn.studies.claims.RULE``) and
what this module renders of them: the per-run values, the sections of
RESULTS.md (Fig. 2 tables, speed, Figs. 3-4, the probe), the plots and the
setting / regime prose. The other activations have one seed below alpha 1:
their alpha claims are declared, and the rule leaves them inconclusive.
"""

from __future__ import annotations

import os
import sys

from softattn import studies
from softattn.studies import plots, render
from softattn.studies.claims import ACCURACY, Metric
from softattn.sweep import declaration

HERE = os.path.dirname(os.path.abspath(__file__))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
study, relu_n, SPEC = claims.study, claims.relu_n, claims.SPEC
FOCUS, SETTINGS, FLOPS, CORE_S = (claims.FOCUS, claims.SETTINGS,
                                  claims.FLOPS, claims.CORE_S)
sel, tag, CLAIMS = claims.sel, claims.tag, claims.CLAIMS


def train_flops(run):
  if not run.done or not run.flops_per_step or not run.step:
    return None
  return float(run.flops_per_step) * float(run.step)


def _acc(runs, where, metric=ACCURACY):
  return studies.summarize([metric.of(r) for r in studies.select(runs, where)
                            if r.done])


def _alpha_curve(ax, i, h, pts):
  """One activation's accuracy-vs-alpha curve: filled markers with 95 %
  error bars where several seeds finished, open markers without bars at
  the one-seed grid points, joined by a dotted guide line only."""
  color, marker = f"C{i}", plots.MARKERS[i % len(plots.MARKERS)]
  pts = [(a, s) for a, s in pts if s.n]
  if not pts:
    return 0
  ax.plot([a for a, _ in pts], [s.mean for _, s in pts], ls=":", lw=1,
          color=color)
  many = [(a, s) for a, s in pts if s.n > 1]
  one = [(a, s) for a, s in pts if s.n == 1]
  if many:
    ax.errorbar([a for a, _ in many], [s.mean for _, s in many],
                yerr=[s.half or 0.0 for _, s in many], ls="none",
                marker=marker, ms=5, capsize=3, color=color)
  if one:
    ax.plot([a for a, _ in one], [s.mean for _, s in one], ls="none",
            marker=marker, ms=5, mfc="none", color=color)
  ax.plot([], [], marker=marker, color=color, ls=":",
          label=plots.seeds_label(h, [s.n for _, s in pts]))
  return 1


def plot_alpha(path, runs):
  fig, axes = plots.subplots(len(SETTINGS), size=(4.6, 3.8), sharey=False)
  drawn = 0
  mid = (len(study.ACTS) - 1) / 2
  for ax, (label, part, size) in zip(axes[0], SETTINGS):
    n = 0
    for i, h in enumerate(study.ACTS):
      off = (i - mid) * 0.012   # dodge: the curves share the alpha grid
      n += _alpha_curve(ax, i, h, [
          (a + off, _acc(runs, sel(relu_n(a, h), size, part)))
          for a in study.ALPHAS])
    sm = _acc(runs, sel("softmax", size, part))
    if sm.n:
      ax.axhspan(sm.ci[0] if sm.ci else sm.mean, sm.ci[1] if sm.ci else
                 sm.mean, color="k", alpha=0.1)
      ax.axhline(sm.mean, color="k", ls="--",
                 label=plots.seeds_label("softmax (band: 95 % CI)", [sm.n]))
    drawn += n
    ax.set_title(f"{label} (open marker = 1 seed, no bar)", fontsize=9)
    ax.set_xlabel("alpha (phi = n^-alpha h)")
    ax.set_ylabel("test accuracy % (mean ± 95 % CI)")
    ax.grid(alpha=0.3)
    if n:
      ax.legend(fontsize=6)
  if not drawn:
    plots.pyplot().close(fig)
    return None
  return plots.save(fig, path)


def plot_compute(path, runs):
  """Accuracy vs train FLOPs and vs core-seconds, one point per size.
  At one size the curves' FLOPs differ by a few percent, so on the FLOPs
  panel the curves are dodged sideways (multiplicatively, said in the
  axis label) to keep their error bars apart."""
  fig, axes = plots.subplots(2, size=(5.0, 3.8))
  curves = ([("softmax", "softmax")] + [(relu_n(1.0, h), f"{h}/n")
                                        for h in study.ACTS] +
            [(relu_n(0.0), "relu (alpha 0)")])
  drawn = 0
  mid = (len(curves) - 1) / 2
  for ax, metric, dodge in zip(axes[0], (FLOPS, CORE_S), (0.025, 0.0)):
    for i, (norm, label) in enumerate(curves):
      pts = []
      for size in study.SIZES:
        x = _acc(runs, sel(norm, size), metric)
        y = _acc(runs, sel(norm, size))
        if x.n and y.n:
          pts.append((x.mean * 2 ** ((i - mid) * dodge), y.mean,
                      y.half or 0.0, y.n))
      if pts:
        pts.sort()
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                    yerr=[p[2] for p in pts], capsize=3,
                    marker=plots.MARKERS[i % len(plots.MARKERS)],
                    ls=plots.LINESTYLES[i % 4],
                    label=plots.seeds_label(label, [p[3] for p in pts]))
        drawn += 1
    ax.set_xscale("log")
    ax.set_xlabel(metric.name + (metric.unit or "") + (
        f" (dodged by up to ±{(2 ** (mid * dodge) - 1) * 100:.0f} %)"
        if dodge else ""))
    ax.set_ylabel("test accuracy % (mean ± 95 % CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
  if not drawn:
    plots.pyplot().close(fig)
    return None
  return plots.save(fig, path)


def _fig2_tables(runs):
  acc = lambda where: render.cell(runs, where, ACCURACY)
  out = []
  for label, part, size in SETTINGS:
    rows = [[h, *[acc(sel(relu_n(a, h), size, part)) for a in study.ALPHAS]]
            for h in study.ACTS]
    rows.append(["softmax", acc(sel("softmax", size, part)), "", "", "", ""])
    out.append(f"## Fig. 2 analog, {label}: test accuracy % by alpha"
               "\n\n" + render.md_table(
                   ["h", *[f"alpha {a:g}" for a in study.ALPHAS]], rows))
  return out


def _speed_table(runs):
  """FLOPs per step (deterministic) and core-seconds (measured) of every
  h/n at alpha 1, per size: what "ReLU is faster" is judged on."""
  per_step = Metric("GFLOP/step", "flops_per_step", 1e-9)

  def flops(h, size):
    x, r = (_acc(runs, sel(relu_n(1.0, a), size), per_step).mean
            for a in (h, "relu"))
    return "not run yet" if x is None or r is None else \
        f"{x:.3f} ({x / r:.3f})"

  return ("## Speed of the non-linearities (alpha 1)\n\nXLA GFLOP per "
          "train step is the same in every seed (in brackets: its ratio "
          "to relu/n's); the claims below are judged on measured "
          "core-seconds per run (2 shared CPU cores, noisy).\n\n"
          + render.md_table(
              ["h", *[f"{s} {m}" for s in study.SIZES
                      for m in ("GFLOP/step", "core-seconds")]],
              [[h, *[x for s in study.SIZES for x in (
                  flops(h, s), render.cell(runs, sel(relu_n(1.0, h), s),
                                           CORE_S))]]
               for h in study.ACTS]))


def _gate_table(runs):
  acc = lambda where: render.cell(runs, where, ACCURACY)
  ratio = _acc(runs, sel(relu_n(1.0), gated=True), FLOPS).mean, \
      _acc(runs, sel(relu_n(1.0)), FLOPS).mean
  note = (f"\n\nXLA train FLOPs, gated / not gated relu/n: "
          f"{ratio[0] / ratio[1]:.3f} (the same in every seed: the extra "
          "projection); `gate.costs` is judged on measured core-seconds, "
          "the paper's quantity." if all(ratio) else "")
  return ("## Figs. 3 and 4 analog: qk-LayerNorm and the gated unit "
          "(small)\n\n" + render.md_table(
              ["normalizer", "qk-LN on", "qk-LN off", "gated",
               "gated train FLOPs", "not gated train FLOPs",
               "gated core-s", "not gated core-s"],
              [[lab, acc(sel(n)), acc(sel(n, qkln=False)),
                acc(sel(n, gated=True)),
                *[render.cell(runs, sel(n, gated=g), m)
                  for m in (FLOPS, CORE_S) for g in (True, False)]]
               for lab, n in (("softmax", "softmax"),
                              ("relu/n", relu_n(1.0)),
                              ("relu (alpha 0)", relu_n(0.0)))]) + note)


def _probe_section(runs):
  fs = declaration.load(SPEC).runs[0].config.fewshot
  (name, d), = fs.datasets.items()
  probe = Metric("10-shot %", f"final/fewshot/{name}_{fs.shots[0]}shot",
                 100.0)
  return (
      f"## {fs.shots[0]}-shot linear probe on frozen features\n\n"
      f"Closed-form ridge on the pre-logits, {fs.shots[0]} examples per "
      f"class of `{d.name}:{d.train_split}`, tested on "
      f"`{d.name}:{d.eval_split}` ({fs.seeds} draws): the same "
      "distribution the model trained on, so no transfer verdict.\n\n" +
      render.md_table(["size", "softmax", "relu/n"],
                      [[size, render.cell(runs, sel("softmax", size), probe),
                        render.cell(runs, sel(relu_n(1.0), size), probe)]
                       for size in study.SIZES]))


def sections(runs, verdicts, out):
  table = lambda section: render.claims_of(section, CLAIMS, verdicts)
  f_alpha = plot_alpha(os.path.join(out, "alpha.png"), runs)
  f_comp = plot_compute(os.path.join(out, "compute.png"), runs)
  out_secs = _fig2_tables(runs)
  out_secs[-1] += "\n\n" + render.image(f_alpha, "accuracy vs alpha")
  out_secs += [table("alpha"), _speed_table(runs), table("speed"),
               _gate_table(runs), table("ablation")]
  out_secs.append(
      "## Accuracy vs training compute (Fig. 1's axes)\n\nTraining FLOPs = "
      "XLA's cost analysis of the compiled train step x steps; core-seconds "
      "= the run's process CPU time (2 shared cores, noisy).\n\n" +
      render.image(f_comp, "accuracy vs compute"))
  out_secs += [_probe_section(runs), table("probe")]
  return out_secs, [f_alpha, f_comp]


def setting(runs):
  c = declaration.load(SPEC).runs[0].config
  ph, pw = c.model.patch_size
  focus = [k for k, v in study.SIZES.items()
           if studies.select(runs, {"part": FOCUS, "model.width": v[0]})]
  minutes = {p: sum(r.wall_s or 0.0 for r in studies.select(
      runs, {"part": p})) / 60 for p in ("main", FOCUS)}
  return (f"ViT patch {ph}x{pw} on `{c.data.name}`, sizes " + ", ".join(
      f"{k} (width {v[0]}, depth {v[1]}, {v[3]} heads)"
      for k, v in study.SIZES.items()) +
          f", batch {c.batch_size}, qk-LayerNorm on; part `main`: "
          f"{_budget(runs, 'main')}; part `{FOCUS}`: "
          f"{' and '.join(focus) or 'no runs'} at {_budget(runs, FOCUS)}. "
          "Run-minutes of wall time by part (`wall_s` in runs.csv): " +
          ", ".join(f"`{p}` {m:.0f}" for p, m in minutes.items()) +
          " (the elapsed time of a part run with `--parallel=2` is not "
          "recorded in runs.csv). Full scale: "
          "`experiments/relu_attention/sweep.py:scale=full`.")


def _by_setting(verdicts, prefix):
  """"small: inconclusive (-2.98 [...]); ..." for one claim per setting."""
  out = []
  for label, _, _ in SETTINGS:
    v = verdicts.get(f"{prefix}.{tag(label)}")
    if v is None:
      continue
    est = render.estimate(v)
    out.append(f"{label}: {v.word}" + (f" ({est})" if est else ""))
  return "; ".join(out)


def _budget(runs, part):
  """"200 steps": the declared length of a part's runs."""
  return f"{render.steps(runs, {'part': part})} steps"


def _depths() -> str:
  ds = sorted({v[1] for v in study.SIZES.values()})
  return "/".join(map(str, ds)) + "-layer"


def _identity_note(verdicts):
  """relu vs identity at every alpha with 3 seeds, and identity/n vs
  relu/n + 1 point, per setting, when any of them is contradicted."""
  act = ("act.relu_gt_identity", "act.relu_gt_identity_a0",
         "act.relu_gt_identity_a05")
  if not any(v.word == studies.CONTRADICTED for k, v in verdicts.items()
             if k.rsplit(".", 1)[0] in act):
    return []
  # Given per setting: the verdict can differ between sizes and budgets,
  # and one headline would stand for all of them.
  return ["**Identity beats relu in part of our regime** (the paper: "
          "removing the activation hurts). relu - identity, accuracy "
          "points, at alpha 1 (relu/n - identity/n): "
          + _by_setting(verdicts, act[0]) + "; at alpha 0: "
          + _by_setting(verdicts, act[1]) + "; at alpha 0.5: "
          + _by_setting(verdicts, act[2]) + ". identity/n - relu/n against "
          "the 1-point non-superiority bound (`act.identity_not_above_relu`"
          "): " + _by_setting(verdicts, "act.identity_not_above_relu") + "."]


def _grid_note(runs):
  """What the one-seed alpha grid (seed 0 at every alpha, every h) shows:
  the alpha of each curve's best accuracy. One seed, so no verdict."""
  best = {}
  for label, part, size in SETTINGS:
    if part != "main":
      continue
    for h in study.ACTS:
      acc = {a: ACCURACY.of(rs[0]) for a in study.ALPHAS
             if (rs := [r for r in studies.select(
                 runs, sel(relu_n(a, h), size, part))
                        if r.seed == 0 and r.done])}
      if len(acc) == len(study.ALPHAS):
        best.setdefault(label, {})[h] = max(acc, key=acc.get)
  if not best:
    return []
  n = sum(len(b) for b in best.values())
  top = sum(a == max(study.ALPHAS) for b in best.values() for a in b.values())
  return [f"**The one-seed alpha grid** (seed 0, alpha "
          f"{', '.join(f'{a:g}' for a in study.ALPHAS)}, every h, "
          f"{_budget(runs, 'main')}): the best alpha is "
          f"{max(study.ALPHAS):g} for {top} of {n} curves; best alpha per "
          "curve -- " + "; ".join(
              f"{label}: " + ", ".join(f"{h} {a:g}" for h, a in b.items())
              for label, b in best.items()) + ". One seed per point, so the "
          "rule gives these no verdict (the alpha 1 > alpha 0.5 claims of "
          "relu2, gelu, softplus and sigmoid are inconclusive for that "
          "reason)."]


def _alpha_note(runs, verdicts):
  """The paper's alpha claims (about the end of training) counted per
  setting; whether a setting resolves them is itself a finding (size and
  budget: the longer runs are medium only, so medium at the main budget is
  the like-for-like comparison)."""
  alpha = ("alpha.relu_1_gt_half", "alpha.identity_1_gt_half",
           "alpha.relu_1_gt_0", "alpha.identity_1_gt_0")
  counts = {}
  for label, part, size in SETTINGS:
    words = [verdicts[k].word for a in alpha
             if (k := f"{a}.{tag(label)}") in verdicts]
    if words:
      counts[(label, part, size)] = (words.count(studies.CONFIRMED),
                                     words.count(studies.CONTRADICTED),
                                     len(words))
  if not counts:
    return []
  shares = {(c / n, x / n) for c, x, n in counts.values()}
  head = ("The alpha ordering differs between settings" if len(shares) > 1
          else "The alpha claims by setting")
  halves = [x for _, part, size in SETTINGS if part == "main"
            for a in (0.0, 0.5, 1.0) for h in ("relu", "identity")
            if (x := _acc(runs, sel(relu_n(a, h), size, part)).half)]
  spread = (f" At {_budget(runs, 'main')} the seeds' 95 % intervals reach "
            f"±{max(halves):.1f} points." if halves else "")
  name = lambda l, p: l if "steps" in l else f"{l} ({_budget(runs, p)})"
  flip = ""
  same = [(k, v) for k, v in counts.items() if k[2] == SETTINGS[-1][2]]
  if len(same) == 2 and same[0][1][:2] != same[1][1][:2]:
    (_, p0, s), (c0, _, n0) = same[0]
    (_, p1, _), (c1, _, n1) = same[1]
    flip = (f" With budget the verdicts change: on the {s} model, "
            f"{c0} of {n0} are confirmed at {_budget(runs, p0)} and {c1} "
            f"of {n1} at {_budget(runs, p1)}.")
  return [f"**{head}:** the paper's alpha claims (alpha 1 > alpha 0.5, "
          "alpha 1 > alpha 0, for relu and identity) -- " + "; ".join(
              f"{name(l, p)}: {c} of {n} confirmed, {x} contradicted"
              for (l, p, _), (c, x, n) in counts.items()) + "." + spread
          + flip]


def regime(runs, verdicts):
  tokens = claims.sequence_length()
  out = ["The paper trains S/32..S/8 for 30 epochs of ImageNet-21k; ours "
         f"are {_budget(runs, 'main')} (and {_budget(runs, FOCUS)}) of "
         f"{_depths()} ViTs on Fashion-MNIST ({render.epoch_range(runs)} "
         "epochs): the paper's end-of-training orderings are judged here "
         "as early-training orderings.",
         f"**One sequence length:** every run here has L = {tokens} tokens, "
         f"so L^-alpha is the fixed factor {tokens}^-alpha (1, "
         f"1/{tokens ** 0.5:.3g}, 1/{tokens}): the alpha claims compare "
         "output scales at one length, not a scaling that adapts across "
         "lengths (the paper's S/32, S/16, S/8 have L = 49, 196, 784)."]
  below = [verdicts.get(f"sm.relu_equal.{tag(l)}") for l, _, _ in SETTINGS]
  if below and all(v is not None and v.ci is not None and v.ci[1] < 0
                   for v in below):
    out.append("**relu/n is below softmax in every setting** (95 % CI "
               "below 0 each time; the '~' verdicts test a ±1-point margin, "
               "not the sign): relu/n - softmax, accuracy points: "
               + _by_setting(verdicts, "sm.relu_equal") + ".")
  return (out + _identity_note(verdicts) + _alpha_note(runs, verdicts)
          + _grid_note(runs))


STUDY = studies.Study(
    name="relu_attention",
    title="ReLU attention (Wortsman et al. 2023): reproduction at reduced "
          "scale",
    paper="../shared/papers/relu-attention-wortsman2023.txt", spec=SPEC,
    parts={"main": ""}, focus={FOCUS: "subset=focus,steps=1000"},
    fields=("model.normalizer", "model.width", "model.qk_layernorm",
            "model.gated"),
    values={"train_flops": train_flops},
    claims=CLAIMS, sections=sections, setting=setting, regime=regime)


if __name__ == "__main__":
  sys.exit(studies.main(STUDY))
