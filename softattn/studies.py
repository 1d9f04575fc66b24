"""Helpers for the study report scripts in ``experiments/<study>/report.py``.

A study is a sweep config file (``experiments/<study>/reduced.py``, see
``softattn.sweep``) whose runs live in ``<workdir>/<run name>``. A report
script reads every declared run's ``status.json`` and ``metrics.jsonl``
(``collect``), groups the runs by their overrides minus the seed
(``Run.key``), summarises a final metric as mean +- std over seeds
(``summarize``), puts the paper's number next to ours (``md_table``) and
states a verdict per claim (``compare``):

* ``confirmed`` / ``contradicted``: the difference has the paper's sign (or
  the opposite one) and is larger than the seed-to-seed spread
  (``sqrt(std_a^2 + std_b^2)``, sample std over seeds);
* ``inconclusive``: the difference is within that spread, or fewer than 2
  seeds finished on a side;
* ``versus`` / ``compare_paired`` (what the reports use) apply the same
  rule to per-seed differences (``paired``): runs with equal seeds share
  init and data order, so the spread is that of the differences, not of
  the two sides (with a floor, ``MIN_DIFF_PCT``, for accuracies); a "~"
  claim on accuracies is judged against an equivalence margin
  (``EQUIV_MARGIN_PCT``): equal within noise is not equal;
* ``not run yet``: a side has no finished run (what the committed
  ``RESULTS.md`` files say before anyone ran the studies);
* ``not testable at this scale`` is written by the study itself, with why.

Declared runs that did not finish are counted and listed, never dropped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from softattn.sweep import declaration, rundir

NOT_RUN = "not run yet"
# The verdict-rule paragraph of a RESULTS.md whose verdicts use
# ``compare_paired``.
PAIRED_RULE = """Verdict rule, paired by seed (runs with the same seed share their init and
data order, so the spread both sides share cancels): per seed, the
difference of the two sides; confirmed / contradicted when the mean
difference has the paper's sign (or the other) and exceeds the sample std
of the differences; inconclusive when within it or with fewer than 2 seed
pairs. An accuracy or error difference below 0.1 points (10 of 10,000 test
images) counts as within, however consistent. "~" claims on accuracy or
error are confirmed only when the mean difference plus that spread stays
within 1 point (the equivalence margin: a gap hidden by a 3-point seed
spread is not shown equal), contradicted when the difference exceeds both
the spread and the margin, inconclusive otherwise; other "~" claims (times,
entropies) are confirmed when within the spread. Table cells are plain
mean ± std over seeds."""
# Accuracy / error differences (points) below this are "within" in paired
# verdicts: with 2-3 seeds the std of the differences can be ~0, and a
# 0.01-point gap (one test image) is no finding.
MIN_DIFF_PCT = 0.1
# "~" claims on accuracy / error (points): confirmed only when
# |mean diff| + spread <= this. The papers' own "about equal" pairs differ
# by 0.1-0.5 points; 1 point is the smallest gap their tables treat as a
# finding, and a seed spread wider than it cannot show equality.
EQUIV_MARGIN_PCT = 1.0
# Image shapes of the datasets the studies use (for building models without
# the data: tests, memory analysis).
IMAGE_SHAPES = {"fashion_mnist": (28, 28, 1), "mnist": (28, 28, 1),
                "cifar10": (32, 32, 3), "cifar100": (32, 32, 3),
                "imagenet2012": (224, 224, 3), "imagenet21k": (224, 224, 3)}
NUM_CLASSES = {"fashion_mnist": 10, "mnist": 10, "cifar10": 10,
               "cifar100": 100, "imagenet2012": 1000, "imagenet21k": 21843}


@dataclasses.dataclass
class Run:
  """One declared run: its overrides, state and metrics records."""
  name: str
  overrides: dict[str, Any]
  state: str                       # done / failed / interrupted / not started
  reason: str | None
  records: list[dict]
  status: dict | None
  config: Any = None

  @property
  def seed(self) -> int:
    return int(self.overrides.get("seed", 0))

  def key(self, drop: Sequence[str] = ("seed",)) -> tuple:
    """The overrides minus ``drop`` (default the seed), as a hashable key."""
    return tuple(sorted((k, repr(v)) for k, v in self.overrides.items()
                        if k not in drop))

  def get(self, field: str, default=None):
    """An override's value, else the resolved config's (dotted path)."""
    if field in self.overrides:
      return self.overrides[field]
    node = self.config
    for part in field.split("."):
      if node is None or part not in node:
        return default
      node = node[part]
    return node

  def series(self, metric: str, split: str = "train") -> tuple[np.ndarray,
                                                              np.ndarray]:
    """``(steps, values)`` of ``metric`` over the run's ``split`` records."""
    pts = [(r["step"], r[metric]) for r in self.records
           if r.get("split") == split and _number(r.get(metric))]
    if not pts:
      return np.zeros(0), np.zeros(0)
    s, v = zip(*pts)
    return np.asarray(s, float), np.asarray(v, float)

  def diag_keys(self, metric: str) -> list[str]:
    """Sorted ``diag/<layer path>/<metric>`` keys: one per attention layer."""
    return sorted({k for rec in self.records for k in rec
                   if k.startswith("diag/") and k.endswith("/" + metric)})

  def final(self, metric: str, split: str = "eval") -> float | None:
    """The last value of ``metric`` in ``split`` records, if the run is done."""
    if self.state != "done":
      return None
    _, v = self.series(metric, split)
    return float(v[-1]) if v.size else None

  def median(self, metric: str, split: str = "train",
             skip_first: int = 1) -> float | None:
    """Median of a logged metric (e.g. ``steps_per_sec``), skipping the first
    ``skip_first`` records (compilation)."""
    if self.state != "done":
      return None
    _, v = self.series(metric, split)
    v = v[skip_first:] if v.size > skip_first else v
    return float(np.median(v)) if v.size else None


def _number(x) -> bool:
  return rundir.is_finite_number(x)


def collect(spec: str, workdir: str, extra: Sequence[str] = ()) -> list[Run]:
  """Every run the sweep ``spec`` declares, read from ``workdir/<name>``."""
  sweep = declaration.load(spec, extra=extra)
  out = []
  for r in sweep.runs:
    d = os.path.join(workdir, r.name)
    st = rundir.run_state(d)
    out.append(Run(name=r.name, overrides=dict(r.overrides), state=st.state,
                   reason=st.reason, records=rundir.read_metrics(d),
                   status=st.status, config=r.config))
  return out


def select(runs: Iterable[Run], **fields) -> list[Run]:
  """Runs whose fields (``model__normalizer='scaled'`` for ``model.normalizer``)
  all equal the given values."""
  want = {k.replace("__", "."): v for k, v in fields.items()}
  return [r for r in runs if all(r.get(k) == v for k, v in want.items())]


@dataclasses.dataclass(frozen=True)
class Stat:
  """Mean and sample std over ``n`` finished seeds (of ``declared``)."""
  mean: float | None
  std: float | None
  n: int
  declared: int

  def fmt(self, scale: float = 1.0, digits: int = 2, unit: str = "",
          sci: bool = False) -> str:
    """``"81.20 ± 0.20 (n=3)"``; ``sci`` uses ``digits`` significant
    digits (for tiny values such as gradient norms)."""
    if self.n == 0:
      return NOT_RUN if self.declared else "not declared"
    f = f".{digits}{'g' if sci else 'f'}"
    m = self.mean * scale
    missing = f", {self.declared - self.n} missing" if \
        self.declared > self.n else ""
    if self.n == 1:
      return f"{m:{f}}{unit} (1 seed{missing})"
    return (f"{m:{f}} ± {self.std * scale:{f}}{unit} "
            f"(n={self.n}{missing})")


def summarize(runs: Sequence[Run], value: Callable[[Run], float | None]
              ) -> Stat:
  """Mean +- sample std of ``value(run)`` over the runs where it is finite."""
  vals = [value(r) for r in runs]
  vals = [v for v in vals if v is not None and math.isfinite(v)]
  if not vals:
    return Stat(None, None, 0, len(runs))
  arr = np.asarray(vals, float)
  std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
  return Stat(float(arr.mean()), std, int(arr.size), len(runs))


def error_pct(r: Run) -> float | None:
  """Final test error in % (100 - 100 * eval accuracy)."""
  a = r.final("accuracy")
  return None if a is None else 100.0 * (1.0 - a)


def accuracy_pct(r: Run) -> float | None:
  a = r.final("accuracy")
  return None if a is None else 100.0 * a


error_pct.pct = accuracy_pct.pct = True   # differences in points: floor


def compare(a: Stat, b: Stat, *, claim: str = "a<b") -> str:
  """Verdict on the claim ``a < b`` (or ``a > b``, ``a=b``) from two stats.

  ``a=b`` is confirmed when the difference is within the seed spread and
  contradicted when it exceeds it (needs 2+ seeds each).
  """
  _check_claim(claim)
  if a.n == 0 or b.n == 0:
    return NOT_RUN
  diff = a.mean - b.mean
  if a.n < 2 or b.n < 2:
    return f"inconclusive (fewer than 2 seeds finished; diff {diff:+.3g})"
  return _verdict(diff, math.sqrt(a.std ** 2 + b.std ** 2), claim, "")


def paired(a_runs: Sequence[Run], b_runs: Sequence[Run],
           value: Callable[[Run], float | None],
           key: Callable[[Run], Any] = lambda r: r.seed) -> Stat:
  """Per-seed differences ``value(a) - value(b)`` over the seeds both sides
  finished (``declared``: the seeds both sides declare).

  Two runs with the same seed share their initialisation and their data
  order (``train.py`` derives both from ``config.seed``), so the part of
  the seed-to-seed spread they have in common cancels in the difference:
  a consistent gap of 2 points under a 3-point seed spread is visible here
  and not to ``compare``. ``key`` pairs runs by something finer than the
  seed, e.g. ``(depth, seed)`` when each side pools several depths.
  """
  return paired_sum([(1.0, a_runs), (-1.0, b_runs)], value, key)


def paired_sum(terms: Sequence[tuple[float, Sequence[Run]]],
               value: Callable[[Run], float | None],
               key: Callable[[Run], Any] = lambda r: r.seed) -> Stat:
  """Per seed, ``sum(c * value(run of that seed))`` over ``(c, runs)`` terms,
  for the seeds every term has; e.g. a gap of gaps
  ``(a1 - a0) - (b1 - b0)`` is ``[(1, a1), (-1, a0), (-1, b1), (1, b0)]``."""
  by_seed = []
  for _, runs in terms:
    m = {key(r): value(r) for r in runs}
    if len(m) < len(runs):
      raise ValueError(
          f"{len(runs)} runs but {len(m)} distinct pairing keys on one "
          "side: pass key= that tells them apart (e.g. (depth, seed))")
    by_seed.append(m)
  both = sorted(set.intersection(*[set(m) for m in by_seed])) \
      if by_seed else []
  ok = lambda v: v is not None and math.isfinite(v)
  diffs = [sum(c * m[k] for (c, _), m in zip(terms, by_seed)) for k in both
           if all(ok(m[k]) for m in by_seed)]
  if not diffs:
    return Stat(None, None, 0, len(both))
  arr = np.asarray(diffs, float)
  std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
  return Stat(float(arr.mean()), std, int(arr.size), len(both))


def compare_paired(d: Stat, *, claim: str = "a<b", floor: float = 0.0,
                   margin: float | None = None) -> str:
  """``compare`` for per-seed differences ``d = paired(a, b, ...)``: the
  mean difference against the sample std of the differences, or ``floor``
  (the smallest difference that counts, e.g. ``MIN_DIFF_PCT``) if larger.

  ``margin`` (``a=b`` claims only; e.g. ``EQUIV_MARGIN_PCT``): confirmed
  when ``|diff| + spread <= margin``, contradicted when ``|diff|`` exceeds
  both the spread and the margin, inconclusive otherwise. Without it, an
  ``a=b`` claim is confirmed when ``|diff|`` is within the spread."""
  _check_claim(claim)
  if d.n == 0:
    return NOT_RUN
  if d.n < 2:
    return f"inconclusive (fewer than 2 seed pairs; diff {d.mean:+.3g})"
  return _verdict(d.mean, max(d.std, floor), claim, f"paired, {d.n} pairs; ",
                  margin)


def versus(a_runs: Sequence[Run], b_runs: Sequence[Run], claim: str,
           value: Callable[[Run], float | None] | None = None,
           key: Callable[[Run], Any] = lambda r: r.seed,
           floor: float | None = None, margin: float | None = None) -> str:
  """Paired verdict on ``claim`` between two groups of runs (the reports'
  one-liner): ``value`` defaults to ``accuracy_pct``; for accuracy / error
  in % (``pct=True`` values) ``floor`` defaults to ``MIN_DIFF_PCT`` and the
  ``a=b`` ``margin`` to ``EQUIV_MARGIN_PCT``, otherwise to 0 and None."""
  value = value or accuracy_pct
  pct = getattr(value, "pct", False)
  if floor is None:
    floor = MIN_DIFF_PCT if pct else 0.0
  if margin is None and pct:
    margin = EQUIV_MARGIN_PCT
  return compare_paired(paired(a_runs, b_runs, value, key), claim=claim,
                        floor=floor, margin=margin)


def _check_claim(claim):
  if claim not in ("a<b", "a>b", "a=b"):
    raise ValueError(f"claim must be 'a<b', 'a>b' or 'a=b', got {claim!r}")


def _verdict(diff: float, spread: float, claim: str, tag: str,
             margin: float | None = None) -> str:
  within = abs(diff) <= spread
  if claim == "a=b" and margin is not None:
    d = abs(diff)
    if d + spread <= margin:
      return (f"confirmed ({tag}|diff| {d:.3g} + spread {spread:.3g} <= "
              f"margin {margin:g})")
    if d > spread and d > margin:
      return (f"contradicted ({tag}|diff| {d:.3g} > spread {spread:.3g} "
              f"and margin {margin:g})")
    why = (f"within seed spread {spread:.3g}" if within else
           f"> spread {spread:.3g} but <= margin {margin:g}")
    return (f"inconclusive ({tag}|diff| {d:.3g} {why}, and |diff| + spread "
            f"> margin {margin:g})")
  if claim == "a=b":
    return (f"confirmed ({tag}|diff| {abs(diff):.3g} <= spread {spread:.3g})"
            if within else
            f"contradicted ({tag}|diff| {abs(diff):.3g} > spread "
            f"{spread:.3g})")
  if within:
    return (f"inconclusive ({tag}diff {diff:+.3g} within seed spread "
            f"{spread:.3g})")
  ok = diff < 0 if claim == "a<b" else diff > 0
  word = "confirmed" if ok else "contradicted"
  return f"{word} ({tag}diff {diff:+.3g}, spread {spread:.3g})"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
  """A GitHub markdown table; cells are ``str``-ed, ``|`` escaped."""
  cell = lambda x: str(x).replace("|", "\\|")
  lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
  lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
  return "\n".join(lines)


def run_summary(runs: Sequence[Run]) -> str:
  """One line: how many runs are done / failed / not started, and failures."""
  counts: dict[str, int] = {}
  for r in runs:
    counts[r.state] = counts.get(r.state, 0) + 1
  text = f"{len(runs)} declared runs: " + ", ".join(
      f"{n} {s}" for s, n in sorted(counts.items()))
  bad = [f"`{r.name}`: {r.reason}" for r in runs if r.state == "failed"]
  if bad:
    text += "\n\nFailed runs (kept in the tables as missing seeds):\n\n" + \
        "\n".join(f"* {b}" for b in bad)
  return text


def plot_curves(path: str, curves: Mapping[str, Sequence[Run]], metric: str,
                *, split: str = "train", title: str = "", ylabel: str = "",
                xlabel: str = "step", logy: bool = False) -> str | None:
  """Mean (line) and min..max over seeds (band) of ``metric`` per group.

  Writes a PNG and returns its path; None when no run has the metric.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  drawn = 0
  for label, runs in curves.items():
    series = [r.series(metric, split) for r in runs]
    series = [(s, v) for s, v in series if s.size]
    if not series:
      continue
    steps = series[0][0]
    n = min(len(s) for s, _ in series)
    vals = np.stack([v[:n] for _, v in series])
    line, = ax.plot(steps[:n], vals.mean(0), label=f"{label} (n={len(vals)})",
                    marker="o" if n <= 20 else None, markersize=3)
    if len(vals) > 1:
      ax.fill_between(steps[:n], vals.min(0), vals.max(0), alpha=0.2,
                      color=line.get_color())
    drawn += 1
  if not drawn:
    plt.close(fig)
    return None
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel or metric)
  ax.set_title(title, fontsize=10)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def plot_bars(path: str, groups: Mapping[str, Stat], *, title: str = "",
              ylabel: str = "") -> str | None:
  """Bar chart of mean +- std per group (only groups with finished runs)."""
  items = [(k, s) for k, s in groups.items() if s.n]
  if not items:
    return None
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(items) + 2), 4.2))
  ax.bar(range(len(items)), [s.mean for _, s in items],
         yerr=[s.std for _, s in items], capsize=3)
  ax.set_xticks(range(len(items)))
  ax.set_xticklabels([k for k, _ in items], rotation=45, ha="right",
                     fontsize=7)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3, axis="y")
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def image(path: str | None, alt: str) -> str:
  """Markdown for a plot next to RESULTS.md, or a note when none was made."""
  if not path:
    return f"({alt}: plotted once runs have finished)"
  return f"![{alt}]({os.path.basename(path)})"


def write_results(path: str, sections: Sequence[str]) -> str:
  """Joins markdown sections into ``path`` (a generated file: say so)."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w") as f:
    f.write("\n\n".join(s.strip() for s in sections if s) + "\n")
  return path


def build_abstract(config, image_shape=None):
  """``(model, variables shapes)`` of a config's model, via ``jax.eval_shape``.

  No data and no training: what the tests use to check that every study
  config builds. ``num_classes`` is filled from the dataset name when unset.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from softattn import models  # pylint: disable=g-import-not-at-top
  name = config.data.name
  if image_shape is None:
    if name not in IMAGE_SHAPES:
      raise ValueError(f"no image shape known for dataset {name!r}; pass "
                       f"image_shape (known: {', '.join(IMAGE_SHAPES)})")
    image_shape = IMAGE_SHAPES[name]
  kw = config.model.to_dict()
  if kw.get("num_classes") is None:
    kw["num_classes"] = NUM_CLASSES[name]
  model = models.build_model(config.model_name, **kw)
  x = jax.ShapeDtypeStruct((2, *image_shape), jnp.float32)
  shapes = jax.eval_shape(
      lambda: model.init({"params": jax.random.key(0),
                          "dropout": jax.random.key(1)},
                         jnp.zeros(x.shape, x.dtype), train=False))
  return model, shapes


def param_count(shapes) -> int:
  """Number of trainable parameters in ``shapes['params']``."""
  import jax  # pylint: disable=g-import-not-at-top
  return int(sum(np.prod(s.shape) for s in
                 jax.tree.leaves(shapes.get("params", {}))))


def restore_checkpoint(run_dir: str):
  """The latest Orbax checkpoint of a run directory as a dict of arrays
  (``params``, ``batch_stats``, ...), or None when it has none."""
  ckpt = os.path.abspath(os.path.join(run_dir, "checkpoints"))
  if not os.path.isdir(ckpt):
    return None
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  mngr = ocp.CheckpointManager(ckpt)
  step = mngr.latest_step()
  if step is None:
    return None
  return mngr.restore(step, args=ocp.args.StandardRestore())


def load_images(config, split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
  """The first ``n`` examples of ``split`` through the config's
  deterministic eval preprocessing: ``(images float32, integer labels)``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from softattn.data import preprocess  # pylint: disable=g-import-not-at-top
  ds = tfds.load(config.data.name, split=f"{split}[:{n}]",
                 data_dir=config.data.get("data_dir", None))
  pp = preprocess.parse(config.data.pp_eval)
  seed = tf.constant([0, 0], tf.int64)
  out = [pp(e, seed) for e in ds]
  return (np.stack([np.asarray(e["image"]) for e in out]).astype(np.float32),
          np.asarray([int(e["label"]) for e in out]))


def load_module(path: str):
  """A study's ``sweep.py`` as a module (its lists of normalizers etc.),
  under a name unique to its path so two studies' files never collide."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  name = "softattn_study_" + os.path.abspath(path).replace(os.sep, "_") \
      .replace(".", "_").replace("-", "_")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def dump_json(path: str, obj) -> None:
  with open(path, "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True, default=repr)


def event_verdict(flags: Sequence[bool | None], expect: bool, what: str) -> str:
  """Verdict on "each run <what>" (e.g. "collapsed", "broke down").

  ``flags`` holds one entry per run (None: not finished); ``expect`` is the
  paper's claim. All finished runs agreeing gives confirmed/contradicted,
  a mix gives "partly".
  """
  known = [f for f in flags if f is not None]
  if not known:
    return NOT_RUN
  k, n = sum(known), len(known)
  if k == n:
    return ("confirmed" if expect else "contradicted") + f" ({k}/{n} {what})"
  if k == 0:
    return ("contradicted" if expect else "confirmed") + f" (0/{n} {what})"
  return f"partly ({k}/{n} {what})"


def report_main(make_report: Callable[..., list[str]], *, study: str,
                out: str, spec: str, description: str, argv=None,
                has_scale: bool = True) -> int:
  """The command line shared by the studies' ``report.py`` scripts."""
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(description=description)
  p.add_argument("--workdir", default=f"workdirs/{study}")
  p.add_argument("--out", default=out)
  p.add_argument("--spec", default=spec)
  p.add_argument("--set", action="append", default=[],
                 help="the same --set the runs were made with")
  if has_scale:
    p.add_argument("--scale", default="reduced",
                   help="which scale's runs the workdir holds")
  a = p.parse_args(argv)
  kw = {"scale": a.scale} if has_scale else {}
  for f in make_report(workdir=a.workdir, out=a.out, spec=a.spec,
                       extra=a.set, **kw):
    print(f"wrote {f}")
  return 0
