"""Studies: claims of a paper as data, judged by one rule on per-run records.

* ``runs``: a study's declared runs as flat records; ``runs.csv``;
* ``stats``: paired t tests, TOST, t intervals;
* ``claims``: ``Claim``, ``Verdict``, ``judge`` and the stated ``RULE``;
* ``render``: the one RESULTS.md renderer and the summary of all studies;
* ``template``: a study's hand-written RESULTS.md template, its
  placeholders filled from the data and its expectations checked;
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
from softattn.models.abstract import (build_abstract, build_model,
                                      input_shape, param_count)
from softattn_studies.probes import (attention_weights, batch_stats,
                                     dump_json, load_images, model_params,
                                     moved_from_init, probed,
                                     probed_attention, restore_checkpoint,
                                     train_step_memory_mb)
# A study's sweep.py/report.py/claims.py is loaded as configs are.
from softattn.configlib import load_module
from softattn_studies.render import cell, claims_table, image, md_table
from softattn_studies.runs import (Run, collect, diverged_or_below,
                                   layer_curves, median_train, per_layer,
                                   read_csv, select, step_ms, write_csv)
from softattn_studies.stats import Summary, summarize
from softattn_studies.study import Study, export, main, report
