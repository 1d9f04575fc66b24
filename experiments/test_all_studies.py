"""Every study in experiments/ at once: every config builds, every committed
result regenerates from its ``runs.csv``, the README's summary.

* Every full-scale and reduced-scale run of every study resolves (sweep
  declaration checks, ``configlib.check_keys``, normalizer names) and its
  model builds with ``jax.eval_shape`` (no data, no training).
* Each committed RESULTS.md is exactly what its ``runs.csv`` renders, the
  template's ``{{expect:...}}`` checks included (the prose's claims held
  against the committed runs); every claim is judged at a budget declared
  before the data; ``python -m softattn_studies regenerate`` rewrites every
  result and the README's summary unchanged.

Each study's own tests are ``experiments/<study>/test_<study>.py``;
helpers: softattn_studies/testing.py.
"""

import json
import re
import os
import shutil

import pytest

from softattn import configlib, normalizers
import softattn_studies as studies
from softattn.sweep import declaration
from softattn.data import datasets as data_facts, preprocess
from softattn_studies import testing
from softattn_studies.testing import EXPERIMENTS

# (sweep file, args) for every declared part and scale of every study.
SPECS = [
    ("nonlocal/sweep.py", "scale=reduced"),
    ("nonlocal/sweep.py", "scale=full"),
    ("nonlocal/sweep.py", "scale=full,dataset=cifar100"),
    *[("elementwise/sweep.py", f"part={p},scale={s}")
      for p in ("models", "control", "separate") for s in ("reduced", "full")],
    ("elementwise/sweep.py", "part=models,scale=full,dataset=cifar10"),
    *[("normsoftmax/sweep.py", f"part={p},scale={s}")
      for p in ("attention", "loss", "loss_softmax", "loss_logitnorm")
      for s in ("reduced", "full")],
    ("relu_attention/sweep.py", "scale=reduced"),
    ("relu_attention/sweep.py", "scale=full"),
    ("periodic/sweep.py", "scale=reduced"),
    ("periodic/sweep.py", "scale=full"),
]


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
    assert cfg.data.name in data_facts.KNOWN
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


def test_parts_come_from_one_declaration():
  for name in ("nonlocal", "periodic", "normsoftmax", "relu_attention",
               "elementwise"):
    study = testing.load_study(name)
    assert study.focus, name      # every study spends CPU on some claims
    for part, args in study.all_parts().items():
      spec = f"{study.spec}:{args}" if args else study.spec
      assert declaration.load(spec).runs, (name, part)
  assert "--print-parts" in open(os.path.join(EXPERIMENTS, "run_study.sh")
                                 ).read()


# ----------------------------------------------------------------------------
# The committed per-run data and what was generated from it.

COMMITTED = sorted(
    name for name in os.listdir(EXPERIMENTS)
    if os.path.exists(os.path.join(EXPERIMENTS, name, "report.py"))
    and os.path.exists(os.path.join(EXPERIMENTS, name, "runs.csv")))


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_results_regenerate_from_committed_runs_csv(name, tmp_path):
  """RESULTS.md is exactly what ``report.py --from-csv runs.csv`` writes: no
  verdict in it was edited by hand or left behind by older data."""
  study = testing.load_study(name)
  committed = os.path.join(EXPERIMENTS, name, "RESULTS.md")
  out = tmp_path / name
  assert studies.main(study, ["--from-csv",
                              os.path.join(EXPERIMENTS, name, "runs.csv"),
                              "--out", str(out)]) == 0
  with open(committed, encoding="utf-8") as f:
    assert (out / "RESULTS.md").read_text(encoding="utf-8") == f.read()


@pytest.mark.parametrize("name", COMMITTED)
def test_every_claim_is_judged_at_a_budget_declared_before_the_data(name):
  """The budget policy (experiments/README.md): every claim declares the
  training lengths it is judged at, with the paper's reason, and every
  length the rule read from runs.csv is one of them (``judge`` refuses
  others; this checks the committed data end to end)."""
  study = testing.load_study(name)
  verdicts = studies.judge_all(study.claims, studies.read_csv(
      os.path.join(EXPERIMENTS, name, "runs.csv")))
  for c in study.claims:
    assert c.budget is not None, f"{name} {c.id}: no declared budget"
    assert len(c.budget.why) > 20, f"{name} {c.id}: no reason"
    v = verdicts[c.id]
    assert set(v.budgets) <= set(c.budget.steps), (name, c.id, v.budgets)
    if v.word != studies.NOT_TESTABLE and c.metric is not None and \
        v.n > 0:
      assert v.budgets, f"{name} {c.id}: judged without a recorded budget"


def test_readme_counts_paper_claims_and_lists_sanity_checks_apart():
  from softattn_studies import __main__ as cli  # noqa: PLC0415
  study = testing.load_study("elementwise")
  sanity = [c.id for c in study.claims if c.kind == studies.SANITY]
  tally = dict(cli.summary_rows(EXPERIMENTS))["elementwise"]
  assert sanity and all(i.startswith("sanity.") for i in sanity)
  assert tally.count(studies.SANITY) == len(sanity)
  assert tally.count() == len(study.claims) - len(sanity)
  text = cli.summary_text(EXPERIMENTS)
  counted, listed = text.split("Sanity checks")
  assert all(f"`{i}`" in listed and f"`{i}`" not in counted for i in sanity)


def test_readme_summary_counts_the_committed_verdicts():
  from softattn_studies import __main__ as cli, render  # noqa: PLC0415
  with open(os.path.join(EXPERIMENTS, "README.md"), encoding="utf-8") as f:
    text = f.read()
  table = cli.summary_text(EXPERIMENTS)
  assert render.replace_summary(text, table) == text


def test_one_command_regenerates_every_committed_result(tmp_path):
  """``python -m softattn_studies regenerate`` on a copy of experiments/:
  every RESULTS.md and the README summary come back unchanged."""
  from softattn_studies import __main__ as cli  # noqa: PLC0415
  copy = tmp_path / "experiments"
  shutil.copytree(EXPERIMENTS, copy, ignore=shutil.ignore_patterns("*.png"))
  # Sweep files name their base configs relative to the repo root.
  shutil.copytree(os.path.join(EXPERIMENTS, "..", "configs"),
                  tmp_path / "configs")
  assert cli.main(["regenerate", "--experiments", str(copy)]) == 0
  for name in COMMITTED + ["."]:
    path = os.path.join(name, "RESULTS.md" if name != "." else "README.md")
    with open(os.path.join(EXPERIMENTS, path), encoding="utf-8") as f:
      assert (copy / path).read_text(encoding="utf-8") == f.read(), path
  for name in COMMITTED:      # the plots were written again, too
    assert list((copy / name).glob("*.png")), name


def _readme_rows():
  """study -> declared -> (verdict columns, by-construction cell, claims),
  read from experiments/README.md's summary table."""
  with open(os.path.join(EXPERIMENTS, "README.md"), encoding="utf-8") as f:
    lines = f.read().split("| study | declared |", 1)[1].split("\n\n")[0]
  rows: dict = {}
  for line in lines.strip().split("\n")[2:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    study, declared, *words, con, n = cells
    rows.setdefault(study, {})[declared] = (
        [int(w) for w in words], con, int(n))
  return rows


@pytest.mark.parametrize("name", COMMITTED)
def test_one_summary_writes_each_summary_line_and_the_readme_row(name):
  """Each RESULTS.md Summary line and the README's rows for that study say
  the same counts (read from the two committed files, not from the code
  that writes them): claims per registration status, and per status the
  empirical verdicts and the by-construction ones apart."""
  with open(os.path.join(EXPERIMENTS, name, "RESULTS.md"),
            encoding="utf-8") as f:
    line = next(s for s in f.read().split("\n")
                if s.startswith("**Summary:**"))
  rows = _readme_rows()[name]
  total = re.search(r"the paper's (\d+) claims", line)
  assert int(total.group(1)) == sum(n for _, _, n in rows.values()), line
  for declared, (words, con, n) in rows.items():
    group = re.search(re.escape(declared) + r" \((\d+)\): ([^|]*)", line)
    assert group and int(group.group(1)) == n, (declared, line)
    empirical, _, by_construction = group.group(2).split(". ")[0].partition(
        "; by construction")
    said = {w: int(k) for k, w in re.findall(
        r"(\d+) (confirmed|contradicted|inconclusive|not testable here)",
        empirical)}
    assert [said.get(w, 0) for w in studies.WORDS] == words, (declared,
                                                              line)
    if con == "-":
      assert not by_construction, line
    else:
      assert con in by_construction, (con, line)
