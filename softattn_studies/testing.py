"""What the studies' tests share, as tokamax's ``test_base.py``.

Each study's tests sit beside it, ``experiments/<study>/test_<study>.py``;
the tests that span every study (each committed RESULTS.md regenerates from
its ``runs.csv``, every declared config builds, the README's summary) are
``experiments/test_all_studies.py``; the engine's own tests are
``softattn_studies/tests/``. ``experiments/conftest.py`` runs each study
test in the repository root (where the studies' sweep specs and base
configs resolve) and marks it slow (end to end: ``-m "not slow"`` leaves
it out).

* ``REPO``, ``EXPERIMENTS``: the checkout this package is installed from
  (editable, as the README installs it) and its ``experiments/``;
* ``module(path)``: a study's file (``"elementwise/probes.py"``) loaded as
  configs are (``config_files.load_module``: a fresh module each call, never
  in ``sys.modules``, so two studies' ``claims.py`` never collide);
* ``load_study(name)``: the ``Study`` its ``report.py`` declares;
* ``synthetic(study, fill)``: every run the study declares, finished, with
  the metrics ``fill`` sets;
* ``regenerate(study, runs, tmp_path)``: those runs through ``runs.csv``
  and ``report.py --from-csv``, with the checks every report must pass.

A test regenerates from synthetic runs with ``--unchecked``: the template's
prose and its ``{{expect:...}}`` checks describe the committed runs, and
are checked on them by ``experiments/test_all_studies.py``.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import softattn_studies as studies
from softattn.runstate import State
from softattn.sweep import declaration

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = os.path.join(REPO, "experiments")


def module(path: str):
  """``experiments/<path>`` (e.g. ``"periodic/report.py"``) as a module."""
  return studies.load_module(os.path.join(EXPERIMENTS, path))


def load_study(name: str) -> studies.Study:
  """The ``Study`` that ``experiments/<name>/report.py`` declares. Its
  ``spec`` is relative to the working directory: call from a test (which
  runs in ``REPO``), not at import."""
  return module(os.path.join(name, "report.py")).STUDY


def synthetic(study: studies.Study, fill: Callable[[studies.RunRecord], None]
              ) -> list[studies.RunRecord]:
  """Every run ``study`` declares (all parts), finished, with the metrics
  ``fill(run)`` sets: the records a real ``runs.csv`` export would hold."""
  out = []
  for part, args in study.all_parts().items():
    sweep = declaration.load(f"{study.spec}:{args}" if args else study.spec)
    for r in sweep.runs:
      run = studies.declared(r, part=part, fields=study.fields)
      run.state, run.step = State.DONE, run.total_steps
      fill(run)
      out.append(run)
  return out


def regenerate(study: studies.Study, runs: Sequence[studies.RunRecord],
               tmp_path):
  """Writes runs.csv, regenerates through ``report.py --from-csv`` (the
  command line; ``--unchecked``: the template's prose describes the
  committed runs, not these), returns the verdicts judged from the file and
  the out dir. Checks what every report must hold: each declared claim
  rendered with a known label, a reason for each "not testable here", the
  rule."""
  csv_path = studies.write_csv(str(tmp_path / "runs.csv"), runs)
  out = tmp_path / "out"
  assert studies.main(study, ["--from-csv", csv_path, "--out", str(out),
                              "--unchecked"]) == 0
  verdicts = studies.study.verdicts(study, studies.read_csv(csv_path))
  text = (out / "RESULTS.md").read_text()
  for c in study.claims:    # every declared claim is rendered
    assert f"(`{c.id}`)" in text
    v = verdicts[c.id]
    assert v.word in studies.WORDS
    if v.word == studies.NOT_TESTABLE:
      assert v.reason and v.estimate is None
  assert studies.RULE in text
  return verdicts, out
