"""The GPU runbook (issue 23, item 3): its dry run checks every leg's script and options on a CPU
without training; the plan covers every example with committed results; and the runner takes a
leg to its limit, marks it partial, resumes it, and tells progress from a stall and a failure
(on small stand-in scripts whose behaviour is known)."""

import io
import runpy
import signal
import tarfile
from pathlib import Path

import pytest

from zoo_protocols import provenance as prov

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runbook():
    return runpy.run_path(str(ROOT / "tools" / "gpu_runbook.py"), run_name="gpu_runbook")


def options(tmp_path, *extra):
    return ["--results-dir", str(tmp_path / "results"), "--run-dir", str(tmp_path / "runs"), *extra]


def test_the_dry_run_checks_every_leg_and_runs_nothing(runbook, tmp_path, capsys):
    assert runbook["main"](["--dry-run", *options(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "every leg's script exists and its arguments parse" in out and "PROBLEM" not in out
    for number, leg in enumerate(runbook["LEGS"], start=1):
        assert f"{number:3d}. {leg.name} [not started; order {number};" in out
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


BAD_LEGS = {
    "an option out of range": (("reproductions/uci_regression.py", ("--epochs", "0")), "--epochs"),
    "an unknown option": (("reproductions/classify_cnn.py", ("--no-such-option", "3")), "unrecognized arguments"),
    "a missing script": (("examples/no_such_example.py", ()), "no script"),
}


@pytest.mark.parametrize("case", BAD_LEGS)
def test_the_dry_run_reports_a_leg_that_cannot_run(runbook, tmp_path, capsys, case):
    (script, args), message = BAD_LEGS[case]
    legs = [runbook["Leg"]("good", "reproductions/uci_rdp_table.py", (), 1, "fine"), runbook["Leg"]("bad", script, args, 1, case)]
    assert runbook["main"](["--dry-run", *options(tmp_path)], legs=legs) == 1
    out = capsys.readouterr().out
    problem = next(line for line in out.splitlines() if "PROBLEM" in line)
    assert message in problem and out.count("PROBLEM") == 1 and "1 leg(s) with a problem" in out


def test_the_plan_covers_every_example_with_committed_results(runbook):
    legs = runbook["LEGS"]
    names = [leg.name for leg in legs]
    assert len(set(names)) == len(names)
    for i, leg in enumerate(legs):
        assert set(leg.needs) <= set(names[:i]), f"{leg.name} needs a leg that comes after it"
        assert all(path in leg.args for path in leg.inputs)
    producers = {prov.split_depends(row["depends"])[0] for row in prov.read_manifest(prov.manifest_path(ROOT)).values()}
    excused = runbook["NOT_IN_THE_RUNBOOK"]
    uncovered = {p for p in producers if p not in {leg.script for leg in legs} and p not in excused
                 and not any(key.endswith("/") and p.startswith(key) for key in excused)}
    assert uncovered == set(), "examples with committed results that the runbook neither runs nor excuses"


# -- running legs (stand-in scripts) ----------------------------------------------------------

#: appends one line per step to a file, resuming after the lines already there; on SIGINT it
#: writes a marker (as the examples checkpoint) and exits
WORKER = '''
import sys, time
from pathlib import Path
out, steps, pause = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
out.parent.mkdir(parents=True, exist_ok=True)
done = len(out.read_text().splitlines()) if out.exists() else 0
try:
    for i in range(done, steps):
        time.sleep(pause)
        with open(out, "a") as f:
            f.write(f"{i}\\n")
except KeyboardInterrupt:
    (out.parent / "interrupted").write_text("yes")
    sys.exit(130)
'''


def stand_in(tmp_path, runbook, name, *args, code=WORKER, needs=()):
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    return runbook["Leg"](name, str(script), tuple(str(a) for a in args), 1, "a stand-in", needs=needs, common=False)


def state_of(runbook, tmp_path):
    return runbook["read_state"](tmp_path / "runs" / "runbook_state.json")["legs"]


@pytest.fixture(params=["sigint handled", "sigint ignored"])
def runbook_process(request):
    """The runbook as started from a terminal, or from the background (nohup ... &: SIGINT ignored)."""
    if request.param == "sigint ignored":
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        yield
        signal.signal(signal.SIGINT, previous)
    else:
        yield


def test_a_leg_at_its_limit_is_partial_then_resumed_to_done(runbook, tmp_path, runbook_process):
    out = tmp_path / "results" / "lines.txt"
    legs = [stand_in(tmp_path, runbook, "work", out, 5, 0.35)]  # 1.75 s of work, 1 s a leg
    statuses = []
    for _ in range(6):
        runbook["main"](["--next", *options(tmp_path, "--limit", "1", "--grace", "5")], legs=legs)
        statuses.append(state_of(runbook, tmp_path)["work"]["status"])
        if statuses[-1] == "done":
            break
    assert statuses[0] == "partial" and statuses[-1] == "done" and set(statuses[:-1]) == {"partial"}
    assert (out.parent / "interrupted").read_text() == "yes"  # SIGINT reached it, not SIGKILL
    assert out.read_text().splitlines() == [str(i) for i in range(5)]  # every step once
    record = state_of(runbook, tmp_path)["work"]
    assert record["attempts"] == len(statuses) and record["exit_status"] == 0


def test_a_leg_that_changes_nothing_is_stalled_and_skipped(runbook, tmp_path, capsys):
    legs = [stand_in(tmp_path, runbook, "slow", tmp_path / "elsewhere" / "x.txt", 1, 30),  # writes outside the watched folders
            stand_in(tmp_path, runbook, "after", tmp_path / "results" / "y.txt", 1, 0)]
    runbook["main"](["--next", *options(tmp_path, "--limit", "1", "--grace", "5")], legs=legs)
    assert state_of(runbook, tmp_path)["slow"]["status"] == "stalled"
    assert runbook["next_leg"](legs, runbook["read_state"](tmp_path / "runs" / "runbook_state.json")).name == "after"


def test_a_failed_leg_is_skipped_and_needs_wait_for_their_legs(runbook, tmp_path):
    legs = [stand_in(tmp_path, runbook, "fails", code="raise SystemExit(3)"),
            stand_in(tmp_path, runbook, "waits", tmp_path / "results" / "w.txt", 1, 0, needs=("fails",)),
            stand_in(tmp_path, runbook, "free", tmp_path / "results" / "f.txt", 1, 0)]
    assert runbook["main"](["--next", *options(tmp_path)], legs=legs) == 1
    failed = state_of(runbook, tmp_path)["fails"]
    assert (failed["status"], failed["exit_status"], failed["attempts"]) == ("failed", 3, 1)
    state = runbook["read_state"](tmp_path / "runs" / "runbook_state.json")
    assert runbook["next_leg"](legs, state).name == "free"  # "waits" needs a leg that failed
    assert runbook["main"](["--leg", "2", *options(tmp_path)], legs=legs) == 0  # run explicitly, whatever its needs
    assert state_of(runbook, tmp_path)["waits"]["status"] == "done"


def test_a_foreign_state_file_is_refused_naming_it(runbook, tmp_path):
    state = tmp_path / "runs" / "runbook_state.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"legs": []}')
    with pytest.raises(ValueError, match="runbook_state.json"):
        runbook["main"](["--status", *options(tmp_path)])


def test_the_shared_options_are_added_to_every_example_leg(runbook, tmp_path):
    leg = runbook["LEGS"][0]
    argv = leg.argv(Path("R"), Path("U"), "cuda", Path("D"))
    assert argv[-7:] == ["--device", "cuda", "--results-dir", "R", "--no-progress", "--data-dir", "D"]


def test_only_runs_the_named_legs_in_the_plans_order(runbook, tmp_path):
    legs = [stand_in(tmp_path, runbook, name, tmp_path / "results" / f"{name}.txt", 1, 0) for name in ("a", "b", "c", "d")]
    assert runbook["main"](["--next", "--budget", "60", "--only", "d,2", *options(tmp_path, "--limit", "5", "--grace", "1")], legs=legs) == 0
    assert {name: record["status"] for name, record in state_of(runbook, tmp_path).items()} == {"b": "done", "d": "done"}
    with pytest.raises(ValueError, match="no leg 'e'"):
        runbook["main"](["--next", "--only", "e", *options(tmp_path)], legs=legs)


# -- the trip back from a GPU machine ---------------------------------------------------------

def manifest_row(name, commit):
    return {"file": name, "command": f"python examples/x.py --out {name}", "commit": commit, "settings": "{}", "device": "cuda:0 (GPU)",
            "threads": "4", "seconds": "1.0", "created": "2026-11-26T00:00:00+00:00", "depends": "examples/x.py", "waiver": "", "source": "run"}


def home_options(home):
    return ["--results-dir", str(home / "docs" / "results" / "gpu"), "--run-dir", str(home / "runs"),
            "--manifest", str(home / "docs" / "results" / "MANIFEST.csv")]


def test_export_then_import_brings_results_rows_and_state_home(runbook, tmp_path):
    away, home = tmp_path / "away", tmp_path / "home"
    files = {"table.csv": b"a,b\n1,2\n", "figures/plot.png": bytes(range(256))}
    for name, data in files.items():
        (away / "docs" / "results" / "gpu" / name).parent.mkdir(parents=True, exist_ok=True)
        (away / "docs" / "results" / "gpu" / name).write_bytes(data)
    prov.upsert(away / "docs" / "results" / "MANIFEST.csv", [manifest_row(f"gpu/{n}", "aaaaaaa") for n in files] + [manifest_row("cpu.csv", "ccccccc")])
    runbook["write_state"](away / "runs" / "runbook_state.json", {"version": 1, "legs": {
        "leg1": {"status": "done", "attempts": 1, "seconds": 9.0, "last": "2026-11-26T14:00:00+0000"},
        "leg2": {"status": "partial", "attempts": 1, "seconds": 5.0, "last": "2026-11-26T09:00:00+0000"}}})
    # at home: an older record of leg1, a later one of leg2, a leg of its own, and its own CPU row
    prov.upsert(home / "docs" / "results" / "MANIFEST.csv", [manifest_row("cpu.csv", "ddddddd")])
    runbook["write_state"](home / "runs" / "runbook_state.json", {"version": 1, "legs": {
        "leg1": {"status": "partial", "attempts": 1, "seconds": 3.0, "last": "2026-11-25T10:00:00+0000"},
        "leg2": {"status": "done", "attempts": 2, "seconds": 8.0, "last": "2026-11-26T10:00:00+0000"},
        "leg3": {"status": "failed", "attempts": 1, "seconds": 1.0, "last": "2026-11-20T10:00:00+0000"}}})

    bundle = tmp_path / "bundle.tgz"
    assert runbook["main"](["--export", str(bundle), *home_options(away)]) == 0
    assert runbook["main"](["--import", str(bundle), *home_options(home)]) == 0

    for name, data in files.items():
        assert (home / "docs" / "results" / "gpu" / name).read_bytes() == data
    rows = prov.read_manifest(home / "docs" / "results" / "MANIFEST.csv")
    assert {n: r["commit"] for n, r in rows.items()} == {"gpu/table.csv": "aaaaaaa", "gpu/figures/plot.png": "aaaaaaa", "cpu.csv": "ddddddd"}
    legs = runbook["read_state"](home / "runs" / "runbook_state.json")["legs"]
    assert {n: r["status"] for n, r in legs.items()} == {"leg1": "done", "leg2": "done", "leg3": "failed"}  # the later record wins


def bundle_with(tmp_path, runbook, member):
    """A bundle whose parts are in order but for one member, ``member(tar)`` adds it."""
    path = tmp_path / "evil.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("manifest_rows.csv", prov.manifest_text({})), ("runbook_state.json", '{"version": 1, "legs": {}}'),
                           ("results/fine.csv", "x\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data.encode()))
        member(tar)
    return path


def _file(name):
    def add(tar):
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    return add


def _link(tar):
    info = tarfile.TarInfo("results/link.csv")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    tar.addfile(info)


EVIL_MEMBERS = {
    "a parent-folder escape": _file("../escaped.csv"),
    "an escape inside results/": _file("results/../../escaped.csv"),
    "an absolute path": _file("/tmp/escaped.csv"),
    "a file beside the three places": _file("other.py"),
    "a symbolic link": _link,
}


@pytest.mark.parametrize("case", EVIL_MEMBERS)
def test_a_bundle_member_outside_its_places_is_refused_and_nothing_written(runbook, tmp_path, case):
    bundle = bundle_with(tmp_path, runbook, EVIL_MEMBERS[case])
    home = tmp_path / "home"
    with pytest.raises(ValueError, match="nothing was imported"):
        runbook["main"](["--import", str(bundle), *home_options(home)])
    assert not home.exists() and not (tmp_path / "escaped.csv").exists()


def test_manifest_rows_of_files_outside_the_results_folder_are_refused(runbook, tmp_path):
    away = tmp_path / "away"
    (away / "docs" / "results" / "gpu").mkdir(parents=True)
    runbook["write_state"](away / "runs" / "runbook_state.json", {"version": 1, "legs": {}})
    bundle = tmp_path / "bundle.tgz"
    runbook["main"](["--export", str(bundle), *home_options(away)])
    with tarfile.open(bundle) as tar:  # forge a row for a CPU result into the rows file
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    files["manifest_rows.csv"] = prov.manifest_text({"cpu.csv": manifest_row("cpu.csv", "eeeeeee")}).encode()
    with tarfile.open(bundle, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="outside"):
        runbook["main"](["--import", str(bundle), *home_options(tmp_path / "home")])
    assert not (tmp_path / "home").exists()
