"""How a controlled study writes its result (``zoo_protocols/study.py``): the column order,
the notes (verdict, setting, provenance; a quick run marked as no result), the printed summary,
and the command line every study shares."""

import pandas as pd
import pytest

from zoo_protocols.study import QUICK_BANNER, STUDY_RESULTS_DIR, ordered, study_notes, study_parser, write_study

TABLE = pd.DataFrame({"b": [1.0, 2.0], "seed": ["mean", 0], "a": ["x", "y"]})


@pytest.mark.parametrize("columns, first, expected", [
    (None, None, ["b", "seed", "a"]),
    (["a", "missing", "b"], None, ["a", "b"]),
    (None, ["a"], ["a", "b", "seed"]),
])
def test_ordered_keeps_the_stated_columns_in_order(columns, first, expected):
    assert list(ordered(TABLE, columns, first)) == expected


def test_ordered_refuses_both_orders():
    with pytest.raises(ValueError, match="not both"):
        ordered(TABLE, ["a"], ["b"])


@pytest.mark.parametrize("verdict", ["Verdict: BUG. because", "BUG. because"])
@pytest.mark.parametrize("quick", [False, True])
def test_notes_lead_with_one_verdict_and_end_with_the_provenance(verdict, quick):
    notes = study_notes(verdict, "Setting: two seeds.", "studies/lrt_speed.py", ["pyrozoo"], 3.2, argv=["--quick"], quick=quick)
    paragraphs = notes.split("\n\n")
    if quick:
        assert paragraphs.pop(0) == QUICK_BANNER
    assert paragraphs[0] == "Verdict: BUG. because" and paragraphs[1] == "Setting: two seeds."
    assert paragraphs[2].startswith("Provenance: python studies/lrt_speed.py --quick; commit ") and paragraphs[2].endswith("3 s. Produced by studies/lrt_speed.py.")
    assert notes.count("Verdict:") == 1 and (QUICK_BANNER in notes) == quick


@pytest.mark.parametrize("quiet", [False, True])
def test_write_study_writes_the_ordered_table_and_prints_the_verdict_unless_quiet(tmp_path, capsys, quiet):
    notes = study_notes("NO GAP.", "Setting: none.", "studies/x.py", [], 0.0, argv=[])
    written = write_study(TABLE, "x", tmp_path, title="A study", verdict="Verdict: NO GAP.", notes=notes, shown=[TABLE.head(1)], first=["a"], quiet=quiet)
    assert list(written) == ["a", "b", "seed"]
    on_disk = pd.read_csv(tmp_path / "x.csv")
    assert list(on_disk) == ["a", "b", "seed"] and list(on_disk.a) == ["x", "y"] and list(on_disk.b) == [1.0, 2.0]
    page = (tmp_path / "x.md").read_text()
    assert "A study" in page and "Verdict: NO GAP." in page and "Provenance:" in page
    printed = capsys.readouterr().out
    assert ("Verdict: NO GAP." in printed) != quiet and ("| a" in printed) != quiet


@pytest.mark.parametrize("threads, expected", [(True, True), ("keep 1", True), (False, False)])
def test_a_study_parser_has_the_common_options_and_its_results_folder(threads, expected):
    parser = study_parser("doc", threads=threads)
    args = parser.parse_args(["--quick", "--no-progress"] + (["--threads", "2"] if expected else []))
    assert args.quick and args.no_progress and args.results_dir == STUDY_RESULTS_DIR
    assert (getattr(args, "threads", None) == 2) == expected
    if not expected:
        with pytest.raises(SystemExit):
            parser.parse_args(["--threads", "2"])
