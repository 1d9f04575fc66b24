"""Studies: claims of a paper as data, judged by one rule on per-run records.

* ``runs``: what the studies compute on the runs' records (the library's
  ``softattn.sweep.records``: ``RunRecord``, ``collect``, ``runs.csv``'s
  ``write_csv``/``read_csv``, re-exported here);
* ``stats``: paired t tests, TOST, t intervals;
* ``claims``: ``Claim``, ``Verdict``, ``judge`` and the stated ``RULE``;
* ``render``: what RESULTS.md shows (cells, tables, verdicts) and the
  summary of all studies;
* ``template``: a study's hand-written RESULTS.md template, its
  placeholders filled from the data and its expectations checked, and the
  RESULTS.md written from it (``write_results``);
* ``plotspec``: plots declared as data, drawn by one function;
* ``plots``: CI error bars, seed counts, labelled axes, no hidden lines;
* ``probes``: checkpoints, sown attention weights, and ``probed``, the
  checkpoint loop every study's probe runs;
* ``study``: ``Study`` (a study's declaration) and the ``report.py`` CLI.

``python -m softattn_studies summary`` rewrites the verdict counts at the
top of ``experiments/README.md`` from the committed ``runs.csv`` files.
"""

from softattn_studies.claims import (ACCURACY, ALPHA, CONFIRMED,
                                     CONTRADICTED, ERROR, INCONCLUSIVE,
                                     MIN_PAIRS, NOT_TESTABLE, PAPER, RULE,
                                     SANITY, STEP_MS, WORDS, Budget, Claim,
                                     Metric, Requirement, Verdict, judge,
                                     judge_all, paper_fraction,
                                     precondition, unavailable, with_budgets)
# Models without data (softattn.models.abstract), as the studies use them.
from softattn.models.abstract import build_abstract, input_shape, param_count
from softattn_studies.probes import (attention_weights, batch_stats,
                                     dump_json, load_images, model_params,
                                     moved_from_init, probed,
                                     probed_attention, restore_checkpoint,
                                     train_step_memory_mb)
# A study's sweep.py/report.py/claims.py is loaded as configs are.
from softattn.config_files import load_module
from softattn_studies.render import cell, claims_table, image, md_table
# A run's record, as sweeps and studies share it.
from softattn.sweep.records import (RunRecord, collect, declared, read_csv,
                                    write_csv)
from softattn_studies.runs import (diverged_or_below, layer_curves,
                                   median_train, per_layer, select, step_ms)
from softattn_studies.stats import Summary, summarize
from softattn_studies.study import Study, export, main, report
