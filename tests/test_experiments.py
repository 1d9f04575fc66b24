"""The study folders in experiments/: every config builds, reports regenerate.

* Every full-scale and reduced-scale run of every study resolves (sweep
  declaration checks, ``configlib.check_keys``, normalizer names) and its model
  builds with ``jax.eval_shape`` (no data, no training).
* Each study's report script, fed synthetic ``metrics.jsonl`` workdirs,
  writes RESULTS.md with mean ± std cells and verdicts that follow the
  numbers (confirmed when the fake runs agree with the paper, contradicted
  when they disagree, "not run yet" without runs).
"""

import importlib.util
import json
import os

import numpy as np
import pytest

from softattn import configlib, normalizers, studies
from softattn.sweep import declaration
from softattn.data import preprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXP = os.path.join(REPO, "experiments")

# (sweep file, args) for every declared part and scale of every study.
SPECS = [
    ("nonlocal/sweep.py", "scale=reduced"),
    ("nonlocal/sweep.py", "scale=full"),
    ("nonlocal/sweep.py", "scale=full,dataset=cifar100"),
    *[("elementwise/sweep.py", f"part={p},scale={s}")
      for p in ("models", "control", "separate") for s in ("reduced", "full")],
    ("elementwise/sweep.py", "part=models,scale=full,dataset=cifar10"),
    *[("normsoftmax/sweep.py", f"part={p},scale={s}")
      for p in ("attention", "loss", "loss_softmax")
      for s in ("reduced", "full")],
    ("relu_attention/sweep.py", "scale=reduced"),
    ("relu_attention/sweep.py", "scale=full"),
    ("periodic/sweep.py", "scale=reduced"),
    ("periodic/sweep.py", "scale=full"),
]


def _module(path):
  spec = importlib.util.spec_from_file_location(
      "exp_" + path.replace("/", "_").replace(".py", ""),
      os.path.join(EXP, path))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
  monkeypatch.chdir(REPO)


@pytest.mark.parametrize("path,arg", SPECS)
def test_every_study_config_builds(path, arg):
  sweep = declaration.load(f"experiments/{path}:{arg}")
  assert len(sweep.runs) >= 1
  built = {}
  for run in sweep.runs:
    cfg = run.config
    configlib.check_keys(cfg)
    assert cfg.total_steps or cfg.num_epochs
    preprocess.parse(cfg.data.pp_train), preprocess.parse(cfg.data.pp_eval)
    assert cfg.data.name in studies.IMAGE_SHAPES
    model = cfg.model.to_dict()
    if model.get("normalizer"):
      normalizers.get(model["normalizer"])
      # Normalizers of one family build the same parameters: build one.
      model["normalizer"] = model["normalizer"].split("(")[0] + (
          "(" + model["normalizer"] if "prenorm" in model["normalizer"]
          else "")
    key = json.dumps(model, sort_keys=True, default=repr) + \
        cfg.model_name + cfg.data.name
    if key not in built:
      _, shapes = studies.build_abstract(cfg)
      built[key] = studies.param_count(shapes)
      assert built[key] > 0
  if "scale=full" in arg and path.startswith("nonlocal"):
    # The paper's model: PreResNet-56, 3 NL blocks in stage 2.
    cfg = sweep.runs[-1].config
    assert cfg.model.depth == 56 and cfg.model.nl_blocks.count == 3
    assert cfg.num_epochs == 164 and cfg.batch_size == 128
  if "scale=full" in arg and path.startswith("periodic"):
    assert sweep.runs[0].config.data.pp_train.startswith("random_rotate(90)|")


def test_elementwise_counts_match_the_paper():
  from softattn.models.elementwise import PAPER_COUNTS  # pylint: disable=g-import-not-at-top
  sweep = declaration.load("experiments/elementwise/sweep.py:part=models")
  seen = {}
  for run in sweep.runs:
    v = run.config.model.variant
    if run.config.model.heads != 1 and run.config.model.skip and v not in seen:
      seen[v] = studies.param_count(studies.build_abstract(run.config)[1])
  assert seen == PAPER_COUNTS
  ctrl = declaration.load("experiments/elementwise/sweep.py:part=control")
  assert studies.param_count(studies.build_abstract(
      ctrl.runs[0].config)[1]) == 929_510


# ----------------------------------------------------------------------------
# Synthetic workdirs.


def fake_run(run_dir, *, accuracy, loss=0.5, steps=10, train_extra=None,
             failed_reason=None):
  """A run directory as the training loop leaves it (done or failed)."""
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
    for s in range(1, steps + 1):
      rec = {"step": s, "split": "train", "loss": loss + 1.0 / s,
             "accuracy": accuracy, "steps_per_sec": 10.0}
      rec.update({k: fn(s) for k, fn in (train_extra or {}).items()})
      f.write(json.dumps(rec) + "\n")
    if failed_reason is None:
      f.write(json.dumps({"step": steps, "split": "eval",
                          "accuracy": accuracy, "loss": loss}) + "\n")
  status = {"state": "failed", "kind": "nonfinite", "message": failed_reason} \
      if failed_reason else {"state": "done", "step": steps}
  with open(os.path.join(run_dir, "status.json"), "w") as f:
    json.dump(status, f)


def test_elementwise_first_steps_kill_the_relus_without_skip(tmp_path):
  """The mechanism the report states for B without skip: live ReLUs at
  init, none after one Adam step; with the skip they stay alive."""
  ew = _module("elementwise/report.py")
  spec = "experiments/elementwise/sweep.py"
  noskip = declaration.load(
      f"{spec}:part=separate,epochs=10,skips=noskip").runs[0]
  skip = declaration.load(f"{spec}:part=separate,skips=skip").runs[0]
  assert not noskip.config.model.skip and skip.config.model.skip
  rng = np.random.default_rng(0)
  x = rng.uniform(0, 1, (64, 28, 28, 1)).astype(np.float32)
  y = rng.integers(0, 10, 64)
  rows = ew.first_steps(noskip.config, x, y, steps=2)
  assert [r["step"] for r in rows] == [0, 1, 2]
  assert all(v > 0 for v in rows[0]["alive"].values())
  assert rows[0]["grad_norm_layers"] > 0
  for r in rows[1:]:
    assert all(v == 0 for v in r["alive"].values())
    assert r["grad_norm_layers"] == 0
    assert all(b < 0 for b in r["conv_bias"].values())
  alive = ew.first_steps(skip.config, x, y, steps=1)[1]["alive"]
  assert all(v > 0.5 for v in alive.values())

  # The report's reading of dead runs uses these rows (from the cache).
  out = tmp_path / "out"
  os.makedirs(out)
  studies.dump_json(str(out / "first_steps.json"),
                    {"first_steps/seed-0": rows})
  args = f"{spec}:part=separate,epochs=10,skips=noskip"
  for seed in (0, 1):
    fake_run(str(tmp_path / "runs" / f"seed-{seed}"), accuracy=0.1,
             train_extra={"grad_norm/layer0": lambda s: 0.0,
                          "grad_norm/layer1": lambda s: 0.0})
  runs = studies.collect(args, str(tmp_path / "runs"))
  assert [r.name for r in runs] == ["seed-0", "seed-1"]
  text = ew._no_skip_reading(runs, str(out))
  assert "sits at chance in both seeds" in text
  assert "exactly 0 at every logged step" in text
  assert "every ReLU is dead after the first step" in text
  assert "0.0 %, 0.0 % of the outputs are > 0" in text

def test_compare_and_stats():
  a = studies.Stat(5.0, 0.1, 3, 3)
  b = studies.Stat(6.0, 0.1, 3, 3)
  assert studies.compare(a, b, claim="a<b").startswith("confirmed")
  assert studies.compare(a, b, claim="a>b").startswith("contradicted")
  assert studies.compare(a, b, claim="a=b").startswith("contradicted")
  c = studies.Stat(5.05, 0.1, 3, 3)
  assert studies.compare(a, c, claim="a<b").startswith("inconclusive")
  assert studies.compare(a, c, claim="a=b").startswith("confirmed")
  assert studies.compare(a, studies.Stat(None, None, 0, 3)) == studies.NOT_RUN
  assert "1 seed" in studies.Stat(5.0, 0.0, 1, 3).fmt()
  with pytest.raises(ValueError, match="claim"):
    studies.compare(a, b, claim="less")


def test_paired_comparison_sees_a_consistent_gap_under_seed_spread():
  def run(side, seed):
    return studies.Run(f"{side}{seed}", {"seed": seed}, "done", None, [], None)

  # Seeds differ by 3 points, b is 1 point (+- 0.1) below a in every seed.
  a = [run("a", s) for s in range(3)]
  b = [run("b", s) for s in range(4)]    # seed 3: no partner, not counted
  va = {0: 50.0, 1: 53.0, 2: 56.0}
  vb = {0: 49.0, 1: 51.9, 2: 55.1, 3: 70.0}
  d = studies.paired(a, b, lambda r: (va if r.name[0] == "a" else vb)[r.seed])
  assert (d.n, d.declared) == (3, 3) and d.mean == pytest.approx(1.0, abs=1e-9)
  unpaired = studies.compare(studies.summarize(a, lambda r: va[r.seed]),
                             studies.summarize(b[:3], lambda r: vb[r.seed]),
                             claim="a>b")
  assert unpaired.startswith("inconclusive")
  assert studies.compare_paired(d, claim="a>b").startswith(
      "confirmed (paired, 3 pairs; diff +1")
  assert studies.compare_paired(d, claim="a=b").startswith("contradicted")
  # Gap of gaps per seed: (a - b) - (b - a) = 2 (a - b).
  g = studies.paired_sum([(1, a), (-1, b), (-1, b), (1, a)],
                         lambda r: (va if r.name[0] == "a" else vb)[r.seed])
  assert g.mean == pytest.approx(2.0) and g.n == 3
  # A consistent 0.01-point gap is below MIN_DIFF_PCT: equal, not a finding.
  tiny = {**{("a", k): v for k, v in va.items()},
          **{("b", k): v - 0.01 for k, v in va.items()}}
  acc = lambda r: tiny[r.name[0], r.seed]
  acc.pct = True
  assert studies.versus(a, b[:3], "a=b", acc).startswith("confirmed")
  raw = lambda r: tiny[r.name[0], r.seed]     # not in points: no floor
  assert studies.versus(a, b[:3], "a=b", raw).startswith("contradicted")

  # "~" on accuracies: judged against EQUIV_MARGIN_PCT (1 point), so that
  # equal-within-noise is not reported as equal.
  def eq(diffs):
    d = studies.Stat(float(np.mean(diffs)), float(np.std(diffs, ddof=1)),
                     len(diffs), len(diffs))
    return studies.compare_paired(d, claim="a=b", floor=0.1,
                                  margin=studies.EQUIV_MARGIN_PCT)
  assert eq([0.3, 0.5, 0.7]).startswith("confirmed")       # 0.5 + 0.2 <= 1
  assert eq([-1.0, 2.0, 4.0]).startswith("inconclusive (paired, 3 pairs; "
                                         "|diff| 1.67 within seed spread")
  assert eq([1.9, 2.0, 2.1]).startswith("contradicted")    # 2 > 0.1 and 1
  assert eq([0.4, 0.8, 1.2]).startswith("inconclusive")    # 0.8 + 0.4 > 1
  assert "> spread 0.4 but <= margin 1" in eq([0.4, 0.8, 1.2])
  # Without a margin (times, entropies): confirmed when within the spread.
  d = studies.Stat(1.67, 2.52, 3, 3)
  assert studies.compare_paired(d, claim="a=b").startswith("confirmed")
  with pytest.raises(ValueError, match="key="):   # two runs of seed 0
    studies.paired(a + [run("a", 0)], b, lambda r: 1.0)
  one = studies.paired(a[:1], b, lambda r: 1.0)
  assert studies.compare_paired(one, claim="a>b").startswith("inconclusive")
  assert studies.compare_paired(studies.paired([], b, lambda r: 1.0)) == \
      studies.NOT_RUN


def _nonlocal_acc(run):
  """Fake accuracy: scaled NL better; direction-only hurts NL only."""
  nl = run.overrides
  block = nl.get("model.nl_blocks.normalizer")
  heads = nl.get("model.nl_blocks.heads")
  acc = 0.80 if heads == 0 else (0.85 if block == "softmax" else 0.87)
  if nl.get("model.nl_blocks.mode") == "direction" and block == "softmax":
    acc -= 0.03
  return acc + 0.001 * run.overrides["seed"]


def test_nonlocal_report_from_synthetic_runs(tmp_path):
  report = _module("nonlocal/report.py")
  spec = "experiments/nonlocal/sweep.py"
  sweep = declaration.load(spec)
  workdir = tmp_path / "runs"
  for run in sweep.runs:
    if run.overrides["seed"] == 2 and run.overrides.get(
        "model.nl_blocks.init") == "he":
      continue  # a missing seed must show as such
    fake_run(str(workdir / run.name), accuracy=_nonlocal_acc(run))
  out = tmp_path / "out"
  files = report.make_report(str(workdir), str(out), spec, memory=False,
                             maps=False)
  text = open(files[0]).read()
  assert "±" in text and "(n=3)" in text and "1 missing" in text
  rows = {l.split("|")[1].strip(): l for l in text.splitlines()
          if l.startswith("| ")}
  assert "confirmed" in rows["scaled NL error < NL error at 4 head(s)"]
  assert "confirmed" in rows["direction-only: scaled NL error < NL error"]
  # Fake runs say He and 0.01 are equal for NL: not what the paper says.
  assert "inconclusive" in rows["NL: sigma 0.01 beats He"]
  assert os.path.exists(out / "table3_error.png")


def test_reports_without_runs_say_not_run_yet(tmp_path):
  report = _module("nonlocal/report.py")
  files = report.make_report(str(tmp_path / "none"), str(tmp_path / "o"),
                             "experiments/nonlocal/sweep.py", memory=False,
                             maps=False)
  text = open(files[0]).read()
  assert "not run yet" in text and "confirmed" not in text.split(
      studies.PAIRED_RULE)[1]
  ew = _module("elementwise/report.py")
  files = ew.make_report(str(tmp_path / "none"), str(tmp_path / "o2"),
                         "experiments/elementwise/sweep.py")
  text = open(files[0]).read()
  assert "| B | 33,084 | 33,084 | exact |" in text
  assert text.count("not run yet") > 10


def test_elementwise_report_from_synthetic_runs(tmp_path):
  ew = _module("elementwise/report.py")
  spec = "experiments/elementwise/sweep.py"
  workdir = tmp_path / "runs"
  for part in ("models", "control", "separate"):
    sweep = declaration.load(f"{spec}:part={part}")
    for run in sweep.runs:
      cfg = run.config
      d = str(workdir / part / run.name)
      if part == "models" and cfg.model.bn and cfg.model.layers == 2 \
          and cfg.model.heads > 1:
        fake_run(d, accuracy=0.1, failed_reason="NaN/Inf at step 3")
      elif part == "control":
        fake_run(d, accuracy=0.88)
      else:
        fake_run(d, accuracy=0.81 + 0.002 * run.overrides["seed"],
                 train_extra={"grad_norm/layer0": lambda s: 0.25})
  out = tmp_path / "out"
  files = ew.make_report(str(workdir), str(out), spec)
  text = open(files[0]).read()
  rows = {l.split("|")[1].strip(): l for l in text.split(
      "## At the paper's 10 epochs")[0].splitlines() if l.startswith("| ")}
  assert "confirmed (2/2 seeds collapsed) (after 1 of the paper's 10 epochs" \
      in rows["A (8 heads, 2 layers, BN) collapses"]
  assert "Ours trained 1 of the paper's 10 epochs" in text
  # E and F got the same accuracies: no difference beyond the spread.
  assert "inconclusive" in rows["BN hurts at 4 layers: E < F"]
  assert "confirmed" in rows["more heads do not help: D ~ B"]
  assert "81.10 ± 0.14 (n=2)" in rows["B"]   # 81.0, 81.2
  assert "0.25 ± 0 (n=2)" in rows["B"]  # first-layer gradient norm
  # 81.1 / 88.0 = 92 %, and the control's short budget is named.
  assert ("confirmed (ours 92 %, within 92 ± 5 %) (control trained 1 epoch, "
          "not 10)") in rows["B reaches ~92 % of the control's accuracy"]
  assert "The VGG control after 1 epoch" in text and "above B's" in text
  assert os.path.exists(out / "accuracy.png")
  # The 10-epoch subsets not run: said so, and the 1-epoch caveat stays.
  assert "a later collapse is not ruled out" in rows[
      "A (8 heads, 2 layers, BN) collapses"]
  assert text.split("## At the paper's 10 epochs")[1].count(
      "not run yet") >= 8

  # Now the 10-epoch runs: A collapses (NaN at step 40 / at chance at the
  # end), C does not, B trains to 81 %, B without skip to 78 %.
  long = ew.LONG_PARTS
  for d, args in long.items():
    for run in declaration.load(f"{spec}:{args}").runs:
      seed, v = run.overrides["seed"], run.config.model.variant
      rd = str(workdir / d / run.name)
      if d == "models_10ep" and v == "A":
        fake_run(rd, accuracy=0.1, failed_reason=(
            "Non-finite training at step 40: loss=nan" if seed == 0
            else None))
      elif d == "models_10ep":
        fake_run(rd, accuracy=0.81 + 0.002 * seed + (0.01 if v == "C" else 0))
      else:   # dead: at chance, zero layer gradients (as measured here)
        fake_run(rd, accuracy=0.1, train_extra={
            "grad_norm/layer0": lambda s: 0.0,
            "grad_norm/layer1": lambda s: 0.0})
  assert set(long) == {"models_10ep", "separate_10ep"}
  # run.sh declares the same subsets as the report reads.
  run_sh = open(os.path.join(EXP, "elementwise", "run.sh")).read()
  for d, args in long.items():
    assert f"{d}@{args}" in run_sh
  # grads=False: no checkpoints to recompute from, no first_steps probe.
  files = ew.make_report(str(workdir), str(tmp_path / "out10"), spec,
                         grads=False)
  text = open(files[0]).read()
  one, ten = text.split("## At the paper's 10 epochs")
  rows10 = {l.split("|")[1].strip(): l for l in ten.splitlines()
            if l.startswith("| ")}
  assert "at 10 epochs: see below" in one
  assert "confirmed (2/2 seeds collapsed)" in rows10[
      "A (8 heads, 2 layers, BN) collapses"]
  assert "2/2 (at step 10, 40)" in rows10["A"]   # NaN; at chance at 10
  assert "contradicted (0/2 seeds collapsed)" in rows10[
      "C (16 heads, 2 layers, BN) collapses"]
  assert "| 81.10 ± 0.14 (n=2) | 81.10 ± 0.14 (n=2) |" in rows10["B"]
  assert "2/2 (at chance from the eval at step 10, 10)" in rows10[
      "B, no skip, separate optimizers"]
  assert "gradient norm is exactly 0 at every logged step" in ten
  assert "`first_steps`" not in ten
  # C ends 1 point above B in both seeds, A collapsed: no BN-helps claim.
  assert "both end above B" not in ten
  # B without skip far below B in both seeds: not "~ B".
  assert rows10["without skip, separate optimizers train it to ~B's "
                "accuracy"].split("|")[3].strip().startswith("contradicted")
  assert "B goes from 81.10 % after 1 epoch to 81.10 % after 10" in ten
  assert "do not lift it" in ten
  assert os.path.exists(tmp_path / "out10" / "accuracy_10ep.png")


def _fake_sweep(spec, workdir, acc_fn, fail_fn=lambda run: None,
                extra_fn=lambda run: None):
  for run in declaration.load(spec).runs:
    fake_run(str(workdir / run.name), accuracy=acc_fn(run),
             failed_reason=fail_fn(run), train_extra=extra_fn(run))


def test_normsoftmax_report_from_synthetic_runs(tmp_path):
  rep = _module("normsoftmax/report.py")
  spec = "experiments/normsoftmax/sweep.py"

  def acc(run):   # NSM-inf ahead at short budgets, equal at the longest
    o, seed = run.overrides, run.overrides["seed"]
    norm = o.get("model.normalizer")
    short = o.get("total_steps") == 50
    bonus = 0.05 if (norm == "normsoftmax(gamma=inf)" and short) else 0.0
    if norm == "normsoftmax(gamma=1)":
      bonus = -0.1
    return 0.8 + bonus + 0.002 * seed

  entropy = {"diag/Transformer/encoderblock_0/attn_entropy":
             lambda s: 2.0 + 0.1 * s}
  _fake_sweep(f"{spec}:part=attention", tmp_path / "runs" / "attention",
              acc, extra_fn=lambda run: entropy)
  for part in ("loss", "loss_softmax"):
    _fake_sweep(f"{spec}:part={part}", tmp_path / "runs" / part,
                lambda run: 0.7 + 0.002 * run.overrides["seed"])
  files = rep.make_report(str(tmp_path / "runs"), str(tmp_path / "out"),
                          spec)
  text = open(files[0]).read()
  rows = {l.split("|")[1].strip(): l for l in text.splitlines()
          if l.startswith("| ")}
  assert "confirmed" in rows["at the shortest budget (50 steps) nsm-inf > sm"]
  assert "confirmed" in rows["at the longest budget nsm-inf ~ sm"]
  assert "confirmed" in rows["nsm-1 is much worse than sm"]
  assert "inconclusive" in rows["short training: nsm-inf loss > softmax loss"]
  assert "(n=2)" in rows["nsm-1"]           # variants have 2 seeds
  # 200 steps of AdamW at lr 1e-3, wd 0.1 shrink weights by ~1 %: said so.
  assert "decay shrinks the weights by only 1.0 % over 200 steps" in rows[
      "removing weight decay costs sm more than nsm-inf"]
  assert "its worst, nsm-1, is ranked 9 of 9" in text
  assert os.path.exists(tmp_path / "out" / "entropy.png")


def test_relu_attention_report_from_synthetic_runs(tmp_path):
  rep = _module("relu_attention/report.py")
  spec = "experiments/relu_attention/sweep.py"

  def acc(run):   # accuracy grows with alpha; softmax equals relu/n
    norm = run.overrides["model.normalizer"]
    alpha = 1.0 if norm == "softmax" else float(
        norm.split("alpha=")[1].split(",")[0])
    return 0.7 + 0.1 * alpha + 0.002 * run.overrides["seed"]

  _fake_sweep(spec, tmp_path / "runs", acc,
              extra_fn=lambda run: None)
  files = rep.make_report(str(tmp_path / "runs"), str(tmp_path / "out"),
                          spec)
  text = open(files[0]).read()
  rows = {l.split("|")[1].strip(): l for l in text.splitlines()
          if l.startswith("| ")}
  assert "confirmed (6/6" in rows[
      "small: best alpha is close to 1 (>= 0.75) for most h"]
  assert "confirmed" in rows["small: relu/n (alpha 1) > relu (alpha 0)"]
  assert "confirmed" in rows["medium: relu/n ~ softmax"]
  verdicts = [l.rsplit("|", 2)[-2] for l in rows.values()]
  assert not any("contradicted" in v for v in verdicts)
  assert ("0.75 / 1: small 70.0 / 72.5 / 75.0 / 77.5 / 80.0; medium" in text
          and "n = 49 tokens" in text)


def test_periodic_report_from_synthetic_runs(tmp_path):
  rep = _module("periodic/report.py")
  spec = "experiments/periodic/sweep.py"

  def acc(run):
    norm = run.overrides["model.normalizer"]
    if norm in ("cos_max", "siren_max"):
      return 0.1
    return (0.85 if "sin" in norm else 0.80) + 0.002 * run.overrides["seed"]

  def fail(run):
    return ("NaN/Inf loss at step 7" if run.overrides["model.normalizer"] in
            ("sin_max_constant", "sin2_max") else None)

  def diag(run):   # softmax saturates (small local gradients), sin does not
    soft = run.overrides["model.normalizer"] == "softmax"
    out = {}
    for layer in ("block_0", "block_1"):
      pre = f"diag/Transformer/{layer}/attn/"
      out[pre + "grad_saturation"] = lambda s, soft=soft: (
          0.5 if soft else 0.01) + 0.001 * run.overrides["seed"]
      for q, v in (("01", -3.0), ("10", -1.0), ("50", 0.0), ("90", 1.0),
                   ("99", 3.0)):
        out[pre + f"score_q{q}"] = lambda s, v=v: v * s
        out[pre + f"lgrad_q{q}"] = lambda s, v=v, soft=soft: (
            10 ** (v - (3 if soft else 0)) + 1e-4 * run.overrides["seed"])
    return out

  _fake_sweep(spec, tmp_path / "runs", acc, fail, extra_fn=diag)
  files = rep.make_report(str(tmp_path / "runs"), str(tmp_path / "out"),
                          spec)
  text = open(files[0]).read()
  rows = {l.split("|")[1].strip(): l for l in text.splitlines()
          if l.startswith("| ")}
  assert "confirmed" in rows["softmax saturates more than sin_softmax"]
  assert "confirmed" in rows[
      "softmax's typical local gradient is smaller than sin_softmax's"]
  assert os.path.exists(tmp_path / "out" / "saturation.png")
  assert "confirmed (9/9 runs broke down)" in rows[
      "sin_max_constant, cos_max, sin2_max break down early"]
  assert "confirmed" in rows["depth 2: sin_softmax > softmax"]
  assert "contradicted" in rows["depth 1: prenorm(softmax) > softmax"] or \
      "inconclusive" in rows["depth 1: prenorm(softmax) > softmax"]
  assert "yes (1/1; at step 7)" in text


def test_elementwise_paper_grad_avg_from_a_trained_checkpoint(tmp_path,
                                                              monkeypatch):
  """The report recomputes the paper's first-layer gradient mean from a real
  run's checkpoint (the loop on mock data) and caches it."""
  import sys  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(__file__))
  import train_runner  # pylint: disable=g-import-not-at-top
  ew = _module("elementwise/report.py")
  # Model B, one step of batch 4 (the single-head preset keeps it small).
  over = {"model.heads": 1, "batch_size": 4, "num_epochs": None,
          "total_steps": 1, "checkpoint_every": 1, "eval_every": 1,
          "log_every": 1, "checkpoint_async": False, "verbose": False,
          "eval.batch_size": 4}
  wd = tmp_path / "run"
  train_runner.run(dict(config="experiments/elementwise/sweep.py",
                        overrides=over, workdir=str(wd), num_examples=8))
  cfg = train_runner.apply_overrides(
      train_runner.load_config("experiments/elementwise/sweep.py"), over)
  run = studies.Run("r", {"seed": 0}, "done", None, [], {"step": 1},
                    config=cfg)
  cache = str(tmp_path / "grad_avg.json")
  with tfds.testing.mock_data(num_examples=8):
    v = ew.paper_grad_avg(run, str(wd), n=8)
    assert isinstance(v, float) and np.isfinite(v) and v != 0.0
    assert ew.grad_avgs([("models/r", run, str(wd))], cache) == \
        {"models/r": v}
  assert ew.paper_grad_avg(run, str(tmp_path / "none")) is None
  # Cached by key and step: no recomputation.
  monkeypatch.setattr(ew, "paper_grad_avg", lambda *a: 1 / 0)
  assert ew.grad_avgs([("models/r", run, str(wd))], cache) == \
      {"models/r": v}
