"""The pre-registration checker (softattn_studies.preregistration).

On a tiny git repository made here (a declaration committed, then data,
then a declaration changed) it reports exactly the claim changed after its
data, with the field; on this repository, the section of
experiments/README.md is the checker's output. Both read git history and
load commits in subprocesses: marked slow (end to end).
"""

import dataclasses
import os
import pathlib
import subprocess

import pytest

from softattn.runstate import State
from softattn_studies import preregistration as P
from softattn_studies import preregistration_dump as dump
import softattn_studies as studies
from softattn_studies.claims import ACCURACY, Budget, Claim

pytestmark = pytest.mark.slow
REPO = pathlib.Path(__file__).resolve().parents[2]

REPORT = '''
import softattn_studies as studies
from softattn_studies.claims import ACCURACY, Budget, Claim
B = Budget((100,), "the paper's end point")
ab = dict(metric=ACCURACY, lhs={{"part": "a"}}, rhs={{"part": "b"}},
          budget=B)
CLAIMS = [
    Claim("c1", {c1_text!r}, "T1", "x", {c1_extra}**ab),
    Claim("c2", "a beats b, again", "T1", "x", relation={c2_rel!r}, **ab),
    Claim("c3", "c beats d", "T2", "x", ACCURACY, {{"part": "c"}},
          {{"part": "d"}}, budget=B),
] + [Claim("c4", "declared with its data", "T3", "x", **ab)] * {c4}
STUDY = studies.Study(name="toy", title="toy", paper="p", spec=__file__,
                      parts={{"a": "", "b": "", "c": "", "d": ""}}, claims=CLAIMS)
'''


def _git(repo, *args):
  env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
         "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
         "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
         "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
  return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                        capture_output=True, text=True).stdout.strip()


def _report(study_dir, c1_text="a beats b", c2_rel=">", c4=0, c1_extra=""):
  (study_dir / "report.py").write_text(REPORT.format(
      c1_text=c1_text, c2_rel=c2_rel, c4=c4, c1_extra=c1_extra))


def _runs(study_dir):
  record = getattr(studies, "RunRecord", None) or studies.Run
  studies.write_csv(str(study_dir / "runs.csv"), [
      record(part=p, name=f"{p}-{s}", overrides={"seed": s},
            state=State.DONE, total_steps=100,
            metrics={"final/accuracy": 0.8 + 0.01 * s + (p == "a") * 0.05})
      for p in ("a", "b") for s in range(3)])


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
  """A repository: (1) c1-c3 declared; (2) the runs of parts a and b,
  with c4 declared in the same commit; (3) c1 reworded (prose), c2's
  relation changed."""
  repo = tmp_path_factory.mktemp("toy")
  exp = repo / "experiments"
  study = exp / "toy"
  study.mkdir(parents=True)
  _git(repo, "init", "-q")
  (exp / "README.md").write_text("# Studies\n\nText.\n")
  _report(study)
  _git(repo, "add", "-A")
  _git(repo, "commit", "-q", "-m", "declare c1-c3")
  _runs(study)
  _report(study, c4=1)
  _git(repo, "add", "-A")
  _git(repo, "commit", "-q", "-m", "data for a and b, c4 declared")
  _report(study, c1_text="a beats b (reworded)", c2_rel="<", c4=1)
  _git(repo, "add", "-A")
  _git(repo, "commit", "-q", "-m", "c2 changed after its data")
  shas = _git(repo, "rev-list", "--reverse", "HEAD").split()
  return repo, shas


def _check(repo, cache_path=None):
  return P.check(str(repo / "experiments"), cache_path=cache_path)[0]


@pytest.fixture(scope="module")
def toy_result(toy):
  return _check(toy[0])


def test_the_claim_changed_after_its_data_is_post_hoc_with_the_field(
    toy, toy_result):
  _, (declared, data, changed) = toy
  result = toy_result
  rec = result.records["toy"]
  assert {k: r.status for k, r in rec.items()} == {
      "c1": P.PRE, "c2": P.POST, "c3": P.NO_DATA, "c4": P.POST}
  assert not result.unloadable
  # c1: its rewording is prose; declared before the data.
  assert rec["c1"].declared_at.sha == declared
  assert rec["c1"].data_at.sha == data and rec["c1"].changes == ()
  # c2: the relation changed after the data, named with its commit.
  (ch,) = rec["c2"].changes
  assert ch.commit.sha == changed and ch.commit.subject.startswith("c2 ")
  assert ch.fields == ("relation: > -> <",)
  assert rec["c2"].declared_at.sha == changed
  assert rec["c2"].original.get("relation", ">") == ">"
  assert rec["c2"].original_fingerprint == P.fingerprint(rec["c2"].original)
  assert rec["c2"].fingerprint != rec["c2"].original_fingerprint
  # c4: declared in the commit that brought its data.
  (ch,) = rec["c4"].changes
  assert ch.commit.sha == data and ch.fields == ("declared",)
  assert rec["c4"].original is None
  # The text names c2's and c4's commits and what changed.
  text = P.text(result, detail=True)
  assert f"{changed[:7]} (2026-01-01) \"c2 changed after its data\": 1 " \
      "claims (toy 1); relation 1." in text
  assert "`toy` `c2`" in text and "relation: > -> <" in text
  assert "| toy | 1 | 2 | 1 | 4 |" in text


def test_the_original_claim_is_judged_again(toy_result):
  rec = toy_result.records["toy"]["c2"]
  today = Claim("c2", "t", "T1", "x", ACCURACY, {"part": "a"},
                {"part": "b"}, "<", budget=Budget((100,), "w"))
  orig = P.original_claim(today, rec.original)
  assert orig.relation == ">" and orig.lhs == {"part": "a"}
  assert orig.budget.steps == (100,)
  assert P.declaration(orig) == rec.original


def test_an_uncommitted_change_and_the_readme_section(toy, tmp_path):
  repo, _ = toy
  work = tmp_path / "clone"
  subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
  study = work / "experiments" / "toy"
  # c1's target changed in the working tree, after its data.
  _report(study, c1_text="a beats b (reworded)", c2_rel="<", c4=1,
          c1_extra="target=1.0, ")
  result = _check(work)
  c1 = result.records["toy"]["c1"]
  assert c1.status == P.POST
  (ch,) = c1.changes
  assert ch.commit.sha == P.UNCOMMITTED and ch.fields == (
      "target: none -> 1",)
  assert P.main(str(work / "experiments"), write=True, as_json=False,
                detail=False) == 0
  readme = (work / "experiments" / "README.md").read_text()
  assert (work / "experiments" / P.CACHE).exists()
  # Read back with the cache --write saved: nothing left to load.
  again = _check(work, cache_path="")
  assert again.loaded == 0
  assert P.section_of(readme) == P.text(again)
  assert "| toy | 0 | 3 | 1 | 4 |" in readme
  reg = P.read_registration(str(work / "experiments" / "toy"))
  assert reg["c1"]["status"] == P.POST and reg["c1"]["changed"] == ["target"]
  # c2 was declared before its data with the default relation, ">".
  assert reg["c2"]["changed"] == ["relation"]
  assert reg["c2"]["original"] is not None and \
      "relation" not in reg["c2"]["original"]
  assert reg["c4"] == {"status": P.POST, "changed": ["declared"],
                       "original": None, "first": None}


def test_the_dumper_and_the_checker_agree_on_prose():
  assert dump.PROSE == {k: tuple(v) for k, v in P.PROSE.items()}
  c = Claim("c", "text", "ref", "value", ACCURACY, {"part": "a"},
            {"part": "b"}, covers=(("depth 1", {}), ("depth 2", {"d": 2})),
            budget=Budget((100,), "why"))
  reworded = dataclasses.replace(
      c, text="other", paper_ref="r", paper_value="v", section="s",
      covers=(("d1", {}), ("d2", {"d": 2})), budget=Budget((100,), "else"))
  assert P.fingerprint(P.declaration(c)) == P.fingerprint(
      P.declaration(reworded))
  assert P.fingerprint(P.declaration(c)) != P.fingerprint(P.declaration(
      dataclasses.replace(c, budget=Budget((200,), "why"))))


def test_the_readme_section_is_the_checkers_output():
  """experiments/README.md's pre-registration section, and each study's
  registration.json, are what the checker finds in this repository's
  history."""
  try:
    P.require_history(str(REPO))
  except P.ShallowClone as e:
    pytest.fail(str(e))
  # The committed cache: only commits it lacks are loaded (seconds each).
  result = _check(REPO, cache_path="")
  readme = (REPO / "experiments" / "README.md").read_text(encoding="utf-8")
  assert P.section_of(readme) == P.text(result), (
      "experiments/README.md's pre-registration section is stale: run "
      "python -m softattn_studies preregistration --write")
  # ... and each study's registration.json, which its RESULTS.md labels
  # and the headline counts read.
  for study, recs in result.records.items():
    path = REPO / "experiments" / study / P.REGISTRATION
    assert path.exists() and path.read_text(encoding="utf-8") == \
        P.registration_text(recs), (
            f"{path} is stale: run python -m softattn_studies "
            "preregistration --write, then regenerate")
