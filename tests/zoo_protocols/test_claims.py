"""The claims ledger (``zoo_protocols/claims.py``, ``tools/claims_ledger.py``).

* every claim that resolves against the committed results files gives a well-formed row; whether
  the committed ``claims.csv`` is current is a report (``make results-check``,
  :func:`zoo_protocols.claims.currency_problems`), tested here on copies, never a gate on the
  committed files;
* the comparison rules give known answers on synthetic numbers (inside and outside a
  tolerance, orderings with and without intervals, a single data set against a spread);
* verdicts are computed, never declared: a claim has no verdict field, its verdict follows its
  rules' outcomes, and changing a number in a results file changes the verdict;
* a missing results file or column is an error that names the claim;
* the ledger covers each of the five source works with at least three claims.
"""

import dataclasses
import math
import re
import runpy

import numpy as np
import pandas as pd
import json

import pytest

from zoo_protocols import claims as C
from zoo_protocols.claims import (FAIL, PASS, WEAK, Agrees, Better, Claim, Close, Column, Computed, LedgerError, Measurement, Near, Part,
                            SingleDataSet, Threshold, aggregate, binomial_tolerance, measurement_of)
from zoo_protocols.intervals import t_quantile_975
from tests.runner import run_example

RESULTS = C.default_results_dir()
BY_ID = {c.id: c for c in C.CLAIMS}


@pytest.fixture(scope="module")
def committed():
    """Each claim's row from the committed results (computed once), and the error of each claim
    that does not resolve: only those claims' own tests fail on it."""
    rows, errors = {}, {}
    for claim in C.CLAIMS:
        try:
            rows[claim.id] = C.evaluate(claim)
        except LedgerError as e:
            errors[claim.id] = str(e)
    return rows, errors


@pytest.fixture(scope="module")
def resolved(committed):
    """The claims that resolve against the committed results, in the ledger's order."""
    rows, _ = committed
    return [c for c in C.CLAIMS if c.id in rows]


def _fixed(m: Measurement) -> Computed:
    """A reader that returns ``m`` (for the rules that read a second measurement)."""
    return Computed("fixed", (), lambda results_dir: m)


def _one(x: float, unit: str = "") -> Measurement:
    return Measurement(mean=x, unit=unit)


# -- the committed ledger ---------------------------------------------------------------------

@pytest.mark.parametrize("claim", C.CLAIMS, ids=lambda c: c.id)
def test_every_claim_that_resolves_against_the_committed_files_gives_a_well_formed_row(claim, committed):
    rows, errors = committed
    if claim.id in errors:
        pytest.skip(f"does not resolve against the committed files (make results-check reports it): {errors[claim.id]}")
    row = pd.Series(rows[claim.id])
    assert row.verdict in C.VERDICTS
    assert all((RESULTS / f).exists() for f in claim.files)
    if claim.parts:
        assert row.our_value and row.evidence and row.verdict != "not testable here"
        # every part is judged: its label appears in the reason with its outcome
        for part in claim.parts if len(claim.parts) > 1 else ():
            assert f"{part.label}: " in row.evidence
    else:
        assert row.verdict == "not testable here" and claim.untestable in row.evidence and not claim.files
    if row.verdict == "not reproduced":
        # issue 23, item 2: a claim we miss says what a controlled experiment found, or why none ran yet
        assert claim.controlled or claim.reason, f"{claim.id}: not reproduced, with neither a controlled experiment nor a stated reason"
        assert row.diagnosis


def test_currency_is_reported_on_a_copy_whose_ledger_was_rewritten_or_whose_evidence_is_gone(tmp_path, resolved):
    if len(resolved) < len(C.CLAIMS):
        pytest.skip("some claims do not resolve against the committed files (make results-check reports which)")
    d = _farm(tmp_path)
    assert C.currency_problems(d) == [f"{d / 'claims.csv'} is missing: run python tools/claims_ledger.py"]
    table = C.ledger(results_dir=d)
    C.write_csv(table, d / "claims.csv")
    assert C.currency_problems(d) == []
    (d / "claims.md").write_text("# Claims\n\nreproduced: 0\n")
    assert C.currency_problems(d) == ["claims.md does not state the ledger's counts by verdict: run python tools/claims_ledger.py"]
    (d / "claims.md").unlink()
    changed = table.copy()
    changed.loc[changed.id == resolved[1].id, "our_value"] = "another value"
    C.write_csv(changed, d / "claims.csv")
    assert C.currency_problems(d) == [f"claims.csv differs from what the ledger computes now ({resolved[1].id}): run python tools/claims_ledger.py"]
    (d / resolved[0].files[0]).unlink()
    assert any(f"claim {resolved[0].id}" in p and resolved[0].files[0] in p for p in C.currency_problems(d))


def test_each_source_work_has_three_to_eight_claims_with_labelled_paper_values():
    per_work = {w: [c for c in C.CLAIMS if c.work == w] for w in C.WORKS}
    assert {w: len(cs) for w, cs in per_work.items() if not 3 <= len(cs) <= 8} == {}
    assert len({c.id for c in C.CLAIMS}) == len(C.CLAIMS)
    for c in C.CLAIMS:
        assert "paper" in c.paper_value, f"{c.id}: the paper's value must be labelled as the paper's"
        assert c.source and c.claim and (c.tolerance or not c.parts), c.id
    # the claims the issue names are all there, reproduced or not
    assert {"deng-table1-500k", "deng-table2-accuracy", "deng-fig2-fgsm", "deng-uci", "molchanov-sparse-vd-lenet300", "molchanov-sparse-vd-lenet5",
            "molchanov-zero-mean", "molchanov-phase-transition", "molchanov-vae-dsivi-prior", "molchanov-marginal-vs-joint", "kingma-lrt-variance",
            "oh-lenet5", "oh-uci", "louizos-bc-ghs", "blundell-mnist"} <= set(BY_ID)


def test_deng_table1_reports_mean_median_and_spike_only_chains():
    """Issue 23, item 5: mean ± s.e. and median over the 20 data sets, with the spike-only count
    the committed table gives (read from it, not typed here)."""
    row = pd.Series(C.evaluate(BY_ID["deng-table1-500k"]))
    table = pd.read_csv(RESULTS / "sparse_regression_500k_table.csv")
    runs = pd.read_csv(RESULTS / "sparse_regression_500k.csv").query("method == 'sgld-sa' and v0 == 0.01 and sigma == 2.0")
    spike = int(table.query("method == 'sgld-sa' and v0 == 0.01 and sigma == 2.0").spike_only_runs.iloc[0])
    mae = runs.mae.to_numpy()
    assert f"MAE: {C._num(mae.mean())} ± {C._num(mae.std(ddof=1) / math.sqrt(len(mae)), 2)} (n={len(mae)} data sets)" in row.our_value
    assert f"median {C._num(float(np.median(mae)))}, {spike} of {len(mae)} chains spike-only" in row.our_value


# -- verdicts come from the files ---------------------------------------------------------------

def test_a_claim_declares_no_verdict():
    fields = {f.name for f in dataclasses.fields(Claim)} | {f.name for f in dataclasses.fields(Part)}
    assert not fields & {"verdict", "result", "reproduced", "status", "our_value"}


RULE_CLASSES = (Near, Better, Close, Threshold, SingleDataSet)


@pytest.mark.parametrize("status, expected", [(PASS, "reproduced"), (FAIL, "not reproduced"), (WEAK, "partly")])
def test_every_verdict_follows_its_rules_outcomes(status, expected, monkeypatch, resolved):
    """Whatever the files say, forcing every rule's outcome forces the verdict: nothing else
    decides it (a proxy setting caps "reproduced" at "partly")."""
    calls = []

    def judge(self, ours, results_dir):
        assert isinstance(ours, Measurement) and ours.mean == ours.mean
        calls.append(self)
        return C.Outcome(status, "forced")

    for cls in RULE_CLASSES:
        monkeypatch.setattr(cls, "judge", judge)
    for claim in [c for c in resolved if c.parts]:
        calls.clear()
        verdict = C.evaluate(claim)["verdict"]
        assert len(calls) == len(claim.parts), claim.id
        assert verdict == ("partly" if expected == "reproduced" and claim.setting == "proxy" else expected), claim.id


def test_the_ledger_reads_every_file_each_claim_names(monkeypatch, resolved):
    read = []
    original = C._read_csv
    # by path under the results folder: files of the same name sit in its subfolders (gpu/)
    monkeypatch.setattr(C, "_read_csv", lambda path: read.append(path.as_posix()) or original(path))
    monkeypatch.setattr(C, "_read_json", lambda path, _orig=C._read_json: read.append(path.as_posix()) or _orig(path))
    for claim in [c for c in resolved if c.parts]:
        read.clear()
        C.evaluate(claim)
        missed = [f for f in claim.files if f.endswith((".csv", ".json")) and not any(r.endswith("/" + f) for r in read)]
        assert not missed, f"{claim.id} declares {missed} but never reads them"


def _copy(files, tmp_path):
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes((RESULTS / f).read_bytes())
    return tmp_path


def test_changing_a_number_in_a_results_file_changes_the_verdict(tmp_path):
    claim = BY_ID["blundell-mnist"]
    d = _copy(claim.files, tmp_path)
    table = pd.read_csv(d / "bayes_by_backprop_mnist.csv")
    measured = table.source == C.MEASURED
    for error, verdict in ((1.36 + binomial_tolerance(1.36) + 0.01, "not reproduced"), (1.40, "reproduced"), (1.0, "reproduced")):
        table.loc[measured, "test_error"] = error
        table.to_csv(d / "bayes_by_backprop_mnist.csv", index=False)
        row = C.evaluate(claim, d)
        assert row["verdict"] == verdict and C._num(error) in row["our_value"]


def test_a_paired_ordering_follows_the_per_split_runs(tmp_path):
    claim = BY_ID["molchanov-marginal-vs-joint"]
    d = _copy(claim.files, tmp_path)
    runs = pd.read_csv(d / "dsivi_hierarchical_bnn_concrete_runs.csv")
    joint = runs.set_index("split").query("method == 'joint'").elbo_exact
    runs.loc[runs.method == "marginal", "elbo_exact"] = joint.loc[runs.loc[runs.method == "marginal", "split"]].to_numpy() + 0.05 + 0.001 * np.arange(len(joint))
    runs.to_csv(d / "dsivi_hierarchical_bnn_concrete_runs.csv", index=False)
    row = C.evaluate(claim, d)
    assert row["verdict"] == "reproduced" and "excludes 0" in row["evidence"]


# -- missing files and columns name the claim ---------------------------------------------------

def _farm(tmp_path, leave_out=()):
    """A results folder of links to the committed files, without ``leave_out`` and the ledger's own."""
    d = tmp_path / "results"
    d.mkdir()
    for f in RESULTS.iterdir():
        if f.name not in leave_out and not f.name.startswith("claims."):
            (d / f.name).symlink_to(f)
    return d


def test_a_missing_results_file_stops_the_ledger_naming_the_claim(tmp_path, resolved):
    d = _farm(tmp_path, leave_out={"classify_cnn.csv"})
    with pytest.raises(LedgerError, match=r"claim deng-table2-accuracy .*classify_cnn\.csv.*missing"):
        C.ledger(resolved, results_dir=d)


def test_a_missing_column_names_the_claim_and_the_column(tmp_path):
    d = _copy(BY_ID["molchanov-zero-mean"].files, tmp_path)
    pd.read_csv(d / "variance_networks.csv").rename(columns={"test_time_averaging_accuracy": "tta"}).to_csv(d / "variance_networks.csv", index=False)
    with pytest.raises(LedgerError, match=r"claim molchanov-zero-mean .*no column 'test_time_averaging_accuracy'"):
        C.evaluate(BY_ID["molchanov-zero-mean"], d)


def test_a_selector_that_matches_nothing_names_the_claim(tmp_path):
    (tmp_path / "t.csv").write_text("method,seed,err\na,0,1.0\n")
    claim = Claim("x-claim", "deng", "src", "words", "1 (paper)", parts=(Part("p", Column("t.csv", "err", {"method": "b"}), Near(1.0, 0.1)),), tolerance="t")
    with pytest.raises(LedgerError, match=r"claim x-claim .*no row of t\.csv matches \{'method': 'b'\}"):
        C.evaluate(claim, tmp_path)


def test_the_script_writes_the_ledger_and_fails_cleanly_on_a_missing_file(tmp_path, monkeypatch, resolved):
    """The script over the claims that resolve now (all of them once the results are complete)."""
    monkeypatch.setattr(C, "CLAIMS", tuple(resolved))
    d = _farm(tmp_path)
    run_example("claims_ledger.py", "--results-dir", d, monkeypatch=monkeypatch)
    assert (d / "claims.csv").read_text() == C.write_csv(C.ledger(results_dir=RESULTS), tmp_path / "now.csv").read_text()
    md = (d / "claims.md").read_text()
    assert md.startswith("# Claims ledger") and "Written by `python tools/claims_ledger.py --results-dir" in md and "at commit " in md
    assert all(f"\n## {name}\n" in md for name in C.WORKS.values())
    # each claim's section heading is its id alone: the slug GitHub and MyST give it is what the tables link to
    assert all(f"\n### {c.id}\n" in md and f"]({'#'}{c.id})" in md for c in resolved)

    first = next(c for c in resolved if c.parts)
    (tmp_path / "bad").mkdir()
    bad = _farm(tmp_path / "bad", leave_out={first.files[0]})
    with pytest.raises(SystemExit, match=f"claim {first.id} .*{re.escape(first.files[0])}"):
        run_example("claims_ledger.py", "--results-dir", bad, monkeypatch=monkeypatch)
    assert not (bad / "claims.csv").exists() and not (bad / "claims.md").exists()


def test_the_markdown_flags_each_claim_that_reads_a_stale_file_and_only_those():
    script = runpy.run_path(str(C.default_results_dir().parents[1] / "tools" / "claims_ledger.py"))
    table = pd.read_csv(RESULTS / "claims.csv", keep_default_na=False)
    reader = next(r for r in table.itertuples() if r.files)
    stale_file = reader.files.split()[0]
    md = script["markdown"](table, [], {stale_file: "code changed since"})
    flagged = [r.id for r in table.itertuples() if stale_file in r.files.split()]
    assert f"{len(flagged)} claims read a results file whose code changed" in md and ", ".join(flagged) + "." in md
    sections = {s.split("\n", 1)[0]: s for s in md.split("\n### ")[1:]}
    assert {i for i, text in sections.items() if "**Evidence stale:**" in text} == set(flagged)
    assert f"`{stale_file}`: code changed since" in sections[reader.id]
    assert "Evidence stale" not in script["markdown"](table, [], {}) and "claims read a results file" not in script["markdown"](table, [])


# -- readers ----------------------------------------------------------------------------------

def test_a_column_reader_summarises_runs_and_reads_a_files_own_standard_error(tmp_path):
    (tmp_path / "runs.csv").write_text("method,v0,seed,err,status\na,0.1,0,1.0,ok\na,0.1,1,2.0,\na,0.1,2,3.0,ok\na,0.1,3,100.0,diverged\na,0.2,0,9.0,ok\nb,0.1,0,5.0,ok\n")
    m = Column("runs.csv", "err", {"method": "a", "v0": 0.1}).read(tmp_path)
    assert m.values == (1.0, 2.0, 3.0) and m.n == 3  # the diverged run is left out
    assert m.mean == pytest.approx(2.0) and m.se == pytest.approx(1 / math.sqrt(3))
    (tmp_path / "table.csv").write_text("prior,ll,ll_se,n\nx,-90.0,0.5,40\n")
    m = Column("table.csv", "ll", {"prior": "x"}, se="ll_se", n="n").read(tmp_path)
    assert (m.mean, m.se, m.n) == (-90.0, 0.5, 40)
    assert m.interval() == pytest.approx((-90.0 - t_quantile_975(39) * 0.5, -90.0 + t_quantile_975(39) * 0.5))
    m = Column("table.csv", "ll", {"prior": "x"}, se="ll_se", n=None).read(tmp_path)
    assert m.interval() == pytest.approx((-90.0 - 1.959964 * 0.5, -90.0 + 1.959964 * 0.5))
    assert Column("runs.csv", "err", {"method": "b"}).read(tmp_path).interval() is None


def test_a_paired_difference_pairs_runs_by_key(tmp_path):
    (tmp_path / "r.csv").write_text("method,split,rmse\na,0,1.0\na,1,2.0\na,2,3.5\nb,1,2.5\nb,0,1.25\nb,2,3.0\n")
    m = C.paired_difference("r.csv", "rmse", "a", "b", on="split").read(tmp_path)
    assert sorted(m.values) == pytest.approx([-0.5, -0.25, 0.5]) and m.n == 3


# -- rules on synthetic numbers with known answers -----------------------------------------------

NEAR_CASES = [
    # rule, our mean, expected outcome
    (Near(1.36, 0.23, "lower"), 1.59, PASS),        # exactly at the tolerance
    (Near(1.36, 0.23, "lower"), 1.60, FAIL),
    (Near(1.36, 0.23, "lower"), 0.90, PASS),        # better than the paper
    (Near(99.59, 0.13, "higher"), 99.46, PASS),
    (Near(99.59, 0.13, "higher"), 99.45, FAIL),
    (Near(99.59, 0.13, "higher"), 99.90, PASS),
    (Near(11.3, 5.0, "both"), 6.3, PASS),
    (Near(11.3, 5.0, "both"), 16.31, FAIL),
    (Near(11.3, 5.0, "both"), 6.29, FAIL),
    (Near(108.0, 0.1, "higher", relative=True), 97.2, PASS),
    (Near(108.0, 0.1, "higher", relative=True), 97.1, FAIL),
    (Near(125_000, 1.5, "lower", relative=True), 312_500, PASS),
    (Near(125_000, 1.5, "lower", relative=True), 312_600, FAIL),
    (Agrees(-2.60, better="higher", paper_se=0.03), -2.70, PASS),  # tolerance 2 sqrt(0.03^2 + 0.04^2) = 0.1
    (Agrees(-2.60, better="higher", paper_se=0.03), -2.71, FAIL),
    (Agrees(-2.60, better="higher", paper_se=0.03), -2.00, PASS),
    (Threshold(2.0, "higher"), 2.0, PASS),
    (Threshold(2.0, "higher"), 1.99, FAIL),
    (Threshold(200.0, "lower"), 199.0, PASS),
    (Threshold(200.0, "lower"), 201.0, FAIL),
]


@pytest.mark.parametrize("rule, mean, expected", NEAR_CASES)
def test_tolerance_rules(rule, mean, expected):
    outcome = rule.judge(Measurement(mean=mean, se=0.04, n=20, unit="%"), None)
    assert outcome.status == expected, outcome.text


def test_a_tolerance_reason_is_written_from_the_numbers():
    text = Near(1.36, 0.23, "lower").judge(Measurement(mean=1.76, se=0.05, n=3, over="seeds", unit="%"), None).text
    assert text == "ours 1.76 ± 0.05 % (n=3 seeds) vs paper 1.36 %: 0.4 pts worse, outside tolerance 0.23 pts"


_LOW, _MID, _HIGH = measurement_of([1.0, 2.0, 3.0]), measurement_of([3.0, 4.0, 5.0]), measurement_of([10.0, 11.0, 12.0])
BETTER_CASES = [
    # ours, other, better, expected
    (_LOW, _fixed(_HIGH), "lower", PASS),           # intervals [-0.48, 4.48] and [8.5, 13.5]
    (_HIGH, _fixed(_LOW), "higher", PASS),
    (_LOW, _fixed(_MID), "lower", WEAK),            # right order, intervals overlap
    (_HIGH, _fixed(_LOW), "lower", FAIL),           # reversed
    (_LOW, _fixed(_LOW), "lower", FAIL),            # tied
    (_one(1.0), _fixed(_one(2.0)), "lower", WEAK),  # one run each: no interval
    (measurement_of([-1.0, -1.1, -0.9, -1.05]), 0.0, "lower", PASS),
    (measurement_of([-1.0, 1.0, -0.5]), 0.0, "lower", WEAK),
    (measurement_of([1.0, 1.1, 0.9]), 0.0, "lower", FAIL),
    (_one(0.3), 0.0, "higher", WEAK),
]


@pytest.mark.parametrize("ours, other, better, expected", BETTER_CASES)
def test_orderings(ours, other, better, expected):
    outcome = Better(other, better).judge(ours, None)
    assert outcome.status == expected, outcome.text


@pytest.mark.parametrize("ours, other, expected", [(0.114, 0.1133, PASS), (0.1189, 0.1133, PASS), (0.1190, 0.1133, FAIL), (0.1077, 0.1133, PASS), (0.1076, 0.1133, FAIL), (0.10, 0.1133, FAIL)])
def test_close(ours, other, expected):
    assert Close(_fixed(_one(other)), 0.05).judge(_one(ours), None).status == expected


_SPREAD = measurement_of(np.arange(1.0, 21.0))  # percentiles 5, 25, 75, 95: 1.95, 5.75, 15.25, 19.05


@pytest.mark.parametrize("paper, better, failures, expected", [
    (6.0, "lower", None, PASS), (5.75, "lower", None, PASS), (30.0, "lower", None, PASS), (3.0, "lower", None, WEAK), (1.9, "lower", None, FAIL),
    (6.0, "lower", 2, WEAK), (1.9, "lower", 2, FAIL), (15.0, "higher", None, PASS), (17.0, "higher", None, WEAK), (20.0, "higher", None, FAIL),
])
def test_a_single_data_set_against_our_spread(paper, better, failures, expected):
    ours = dataclasses.replace(_SPREAD, failures=failures, failure_name="spike-only chains")
    outcome = SingleDataSet(paper, better).judge(ours, None)
    assert outcome.status == expected, outcome.text
    assert (f"{failures} of 20 spike-only chains" in outcome.text) == bool(failures)


def test_a_single_data_set_needs_a_spread():
    with pytest.raises(LedgerError, match="at least 5 data sets"):
        SingleDataSet(1.0).judge(measurement_of([1.0, 2.0]), None)


@pytest.mark.parametrize("statuses, setting, expected", [
    ([PASS, PASS], "paper", "reproduced"), ([PASS], "general", "reproduced"), ([PASS, PASS], "proxy", "partly"), ([PASS, FAIL], "paper", "partly"),
    ([WEAK], "paper", "partly"), ([WEAK, FAIL], "reduced", "partly"), ([FAIL, FAIL], "paper", "not reproduced"), ([FAIL], "proxy", "not reproduced"),
    ([], "paper", "not testable here"),
])
def test_aggregate(statuses, setting, expected):
    assert aggregate(statuses, setting) == expected


def test_binomial_tolerance():
    assert binomial_tolerance(50.0, n=10_000) == 1.0  # 2 * 100 * sqrt(0.25 / 10^4)
    assert binomial_tolerance(1.36) == 0.23 and binomial_tolerance(0.41) == 0.13


def test_a_claim_is_checked_when_declared():
    with pytest.raises(ValueError, match="unknown work"):
        Claim("x", "nobody", "s", "c", "1 (paper)", untestable="why")
    with pytest.raises(ValueError, match="setting must be one of"):
        Claim("x", "deng", "s", "c", "1 (paper)", untestable="why", setting="roughly")
    with pytest.raises(ValueError, match="must say why it is not testable"):
        Claim("x", "deng", "s", "c", "1 (paper)")


def test_a_claims_controlled_experiment_is_quoted_from_its_verdict_line(tmp_path):
    (tmp_path / "controlled").mkdir()
    verdict = "NOT A BUG. " + "The two implementations agree within their intervals in every variant, " * 3 + "so the gap is the budget. Details follow."
    (tmp_path / "controlled" / "x.md").write_text(f"# x\n\nsome table\n\nVerdict: {verdict}\n\nSetting: ...\n")
    claim = dataclasses.replace(C.CLAIMS[0], controlled=("controlled/x.md",), reason="Also: the paper's grid.")
    text = C.diagnosis(claim, tmp_path)
    # the headline alone says nothing: the quote runs to the first sentence end past VERDICT_CHARS
    assert text.startswith("controlled/x.md: NOT A BUG. The two") and text.endswith("so the gap is the budget. Also: the paper's grid.")
    assert "controlled/x.md" in claim.files
    (tmp_path / "controlled" / "x.md").write_text("# x\n\nno verdict here\n")
    with pytest.raises(LedgerError, match="no 'Verdict:' line"):
        C.diagnosis(claim, tmp_path)


@pytest.mark.parametrize("threshold", [0.0, float("-inf"), 100.0])
def test_radius_gap_is_the_widest_gap_of_the_statistic_wherever_the_threshold_lies(tmp_path, threshold):
    """Two clusters (-5, -4.5 and 3, 3.5, 4) are 7.5 nats apart whatever the run cut at; a run
    that kept every unit (threshold -inf) does not make the separation infinite."""
    values = [3.0, -5.0, 4.0, -4.5, 3.5]
    (tmp_path / "s.json").write_text(json.dumps({"groupings": {"g": {"values": values, "threshold": threshold}}}))
    m = C.radius_gap("s.json", "g").read(tmp_path)
    assert m.mean == pytest.approx(7.5) and m.note.startswith("3 of 5 above it")


def test_radius_gap_of_one_unit_is_zero(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"groupings": {"g": {"values": [1.0], "threshold": 0.0}}}))
    assert C.radius_gap("s.json", "g").read(tmp_path).mean == 0.0


@pytest.mark.parametrize("waiver, expected", [
    ("to regenerate under issue 46; runbook leg 3 [since abc]", "to regenerate under issue 46"),
    ("", "written at 1111111; changed since: zoo_protocols/cli.py, pyrozoo/fit.py, a.py and 1 more"),
])
def test_a_stale_file_says_why_its_waiver_or_the_code_that_changed(waiver, expected):
    from zoo_protocols.provenance import Stale

    script = runpy.run_path(str(C.default_results_dir().parents[1] / "tools" / "claims_ledger.py"))
    changes = [("c3", "zoo_protocols/cli.py"), ("c2", "pyrozoo/fit.py"), ("c2", "zoo_protocols/cli.py"), ("c1", "a.py"), ("c0", "b.py")]
    assert script["_stale_reason"]({"waiver": waiver}, Stale("x.csv", "1111111aaaa", changes)) == expected
