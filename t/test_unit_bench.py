"""Unit tests of the benchmark's plan and arithmetic (bench/run.py), no
broker: the order configurations run in, and how slots add up."""

import os
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import instructions  # noqa: E402
import run as bench  # noqa: E402

CONFIGS = ["a", "b", "c", "d"]


def plan(slots):
    return bench.slot_sequence(CONFIGS, slots)


@pytest.mark.parametrize("slots", [2, 4, 6])
def test_mirrored_slots_give_every_configuration_the_same_mean_position(slots):
    sequence = plan(slots)
    assert len(sequence) == slots * len(CONFIGS)
    positions = {c: [i for i, x in enumerate(sequence) if x == c] for c in CONFIGS}
    means = {sum(p) / len(p) for p in positions.values()}
    assert len(means) == 1


def test_slots_run_forward_then_backward():
    assert plan(2) == ["a", "b", "c", "d", "d", "c", "b", "a"]


def test_each_repetition_starts_with_the_next_configuration():
    firsts = [order[0] for order in bench.orders(CONFIGS, 6)]
    assert firsts == ["a", "b", "c", "d", "a", "b"]
    for order in bench.orders(CONFIGS, 6):
        assert sorted(order) == CONFIGS


def slot(jobs, seconds, jm_ns, threads):
    return {
        "jobs": jobs,
        "seconds": seconds,
        "jm_ns": jm_ns,
        "broker_ns": 2 * jm_ns,
        "client_ns": jm_ns // 2,
        "threads_ns": threads,
    }


def test_a_configurations_rate_is_its_jobs_over_its_slots_time():
    # 2000 jobs in 5 s, not the mean of the slots' rates (625 jobs/s).
    figures = bench.combine_slots(
        [slot(1000, 1.0, 10**8, {"kvs": 10**8}), slot(1000, 4.0, 3 * 10**8, {})]
    )
    assert figures["jobs"] == 2000
    assert figures["jobs_per_s"] == pytest.approx(400.0)
    assert figures["slot_jobs_per_s"] == [1000.0, 250.0]
    assert figures["jm_cpu_us_per_job"] == pytest.approx(200.0)
    assert figures["broker_cpu_us_per_job"] == pytest.approx(400.0)
    assert figures["thread_cpu_us_per_job"] == {"kvs": 50.0}


def test_the_control_ratio_is_reported_with_the_others():
    rows = {"jobs_per_s": 100.0, "jm_cpu_us_per_job": 10.0}
    runs = [
        {c: {w: dict(rows) for w in bench.WORKLOADS} for c in ("bare", "bare-again")}
    ]
    runs[0]["bare-again"]["exception"]["jobs_per_s"] = 90.0
    _, ratios = bench.summarize(runs, ["bare", "bare-again"])
    assert ratios["bare-again/bare/exception"]["jobs_per_s"] == pytest.approx(0.9)
    assert ratios["bare-again/bare/normal"]["jobs_per_s"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--slots", "0"], "--slots must be at least 1"),
        (["--reps", "-1"], "--reps must be at least 1"),
        (["--jobs-normal", "0"], "--jobs-normal must be at least 1"),
        (["--quick", "--slots", "40"], "--slots 40 is more than --jobs-normal 30"),
        (["--configs", "bare,nope"], "unknown configuration 'nope'"),
    ],
)
def test_a_bad_option_is_refused_with_a_message_that_names_it(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_rabbit_workload_has_configurations_of_its_own():
    assert instructions.configs_of("rabbit", None) == list(instructions.RABBIT)
    assert instructions.configs_of("rabbit", "bare,dws") == ["bare", "dws"]
    assert instructions.configs_of("exception", "bare,gate") == ["bare", "gate"]
    with pytest.raises(SystemExit, match="unknown configuration 'gate' of rabbit"):
        instructions.configs_of("rabbit", "bare,gate")
    with pytest.raises(SystemExit, match="unknown configuration 'dws' of normal"):
        instructions.configs_of("normal", "dws")


def test_the_durable_workload_has_configurations_of_its_own():
    assert instructions.configs_of("durable", None) == list(instructions.DURABLE)
    assert instructions.configs_of("durable", "gate,native-synced") == [
        "gate",
        "native-synced",
    ]
    with pytest.raises(SystemExit, match="unknown configuration 'bare' of durable"):
        instructions.configs_of("durable", "gate,bare")


def _profile(tmp_path, name, objects, total):
    """A callgrind file of one thread that ran ``objects``."""
    path = tmp_path / name
    lines = [f"ob=({i}) /usr/local/lib/{o}" for i, o in enumerate(objects, 1)]
    path.write_text("\n".join(["events: Ir", *lines, f"totals: {total}", ""]))
    return str(path)


def test_broker_threads_are_named_by_the_code_their_profiles_ran(tmp_path):
    files = [
        _profile(tmp_path, "cg.1-01", ["libflux-core.so"], 300),
        _profile(tmp_path, "cg.1-02", ["flux/modules/job-manager.so"], 1000),
        _profile(tmp_path, "cg.1-03", ["flux/modules/kvs.so"], 500),
        _profile(tmp_path, "cg.1-04", ["flux/modules/kvs-watch.so"], 100),
        _profile(tmp_path, "cg.1-05", ["libsqlite3.so.0", "liblz4.so"], 200),
        _profile(tmp_path, "cg.1-06", ["flux/modules/content.so"], 400),
        _profile(tmp_path, "cg.1-07", ["flux/modules/kvs.so"], 0),
    ]
    threads = instructions.broker_threads(instructions.thread_profiles(files), jobs=100)
    assert threads["threads_per_job"] == {
        "other": 3.0,
        "job-manager": 10.0,
        "kvs": 5.0,
        "kvs-watch": 1.0,
        "content-sqlite": 2.0,
        "content": 4.0,
    }
    assert threads["all_threads_per_job"] == 25.0


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(1, 10**7), min_size=1, max_size=7))
def test_repeated_runs_report_the_median_run_with_every_run(counts):
    runs = [{"instructions_per_job": n, "python_per_job": n // 10} for n in counts]
    result = instructions.combined(runs)
    ordered = sorted(counts)
    assert result["instructions_per_job"] == ordered[(len(counts) - 1) // 2]
    # The median run's own counts, not a mix of runs.
    assert result["python_per_job"] == result["instructions_per_job"] // 10
    if len(counts) > 1:
        assert result["runs"] == runs


def test_ratios_of_repeated_runs_are_of_the_medians_then_run_by_run():
    a = instructions.combined([{"instructions_per_job": n} for n in (110, 104, 106)])
    b = instructions.combined([{"instructions_per_job": n} for n in (100, 100, 100)])
    assert instructions._ratios(a, b) == "1.060  (1.100, 1.040, 1.060)"


def test_runs_alternate_so_no_configuration_always_runs_first(monkeypatch):
    order = []

    def measure(config, jobs, workdir, workload, rep, paths=None):
        order.append((config, rep))
        return {"instructions_per_job": 1.0, "profile": "p"}

    monkeypatch.setattr(instructions, "measure", measure)
    args = SimpleNamespace(repeat=3, jobs=10, keep=None)
    runs = instructions.run_configs(["a", "b"], "exception", args, "/tmp")
    assert order == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert {c: len(r) for c, r in runs.items()} == {"a": 3, "b": 3}


# The heap of a process, read from inside it (bench/heap.py)


def test_a_process_heap_grows_by_what_it_allocates():
    """Two Python processes that differ by 200,000 objects of 134 bytes
    (a 144-byte block each, and the list's pointer): their heaps differ
    by about that."""
    import subprocess

    def heap_of(count):
        code = (
            f"import heap; x = [bytes(100) for _ in range({count})]; "
            "print(heap.in_use())"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=BENCH,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout)

    small, large = heap_of(100_000), heap_of(300_000)
    grown = (large - small) / 200_000
    assert 140 <= grown <= 165


def test_malloc_info_in_use_is_what_the_arenas_got_less_their_free_chunks():
    import heap

    xml = (
        '<malloc version="1"><heap nr="0"><total type="fast" count="1" size="9"/>'
        '<system type="current" size="999"/></heap>'
        '<total type="fast" count="2" size="100"/>'
        '<total type="rest" count="3" size="200"/>'
        '<total type="mmap" count="1" size="4096"/>'
        '<system type="current" size="10000"/>'
        '<system type="max" size="20000"/>'
        '<aspace type="total" size="10000"/></malloc>'
    )
    assert heap.malloc_in_use(xml) == 10000 - 100 - 200 + 4096
    stats = (
        "# arenas allocated current = 3\n"
        "# bytes in allocated blocks        =    1,234,567\n"
    )
    assert heap.pymalloc_in_use(stats) == 1234567
    assert heap.pymalloc_in_use("") == 0


def test_python_profile_sorts_each_function_by_its_source_file():
    import python_profile

    lines = [
        "1,000 ( 1.0%)  /b/Python-3.11.7/Python/ceval.c:_PyEval_EvalFrameDefault "
        "[/lib/libpython3.11.so.1.0]",
        "300 ( 0.3%)  /b/Python-3.11.7/Python/dtoa.c:_Py_dg_dtoa "
        "[/lib/libpython3.11.so.1.0]",
        "200 ( 0.2%)  ???:b_gcp [/v/_cffi_backend.cpython-311-x86_64-linux-gnu.so]",
        "50 ( 0.1%)  /b/Python-3.11.7/Objects/sliceobject.c:PySlice_New "
        "[/lib/libpython3.11.so.1.0]",
    ]
    kinds = [
        python_profile.kind_of(python_profile.LINE.match(line).group(2), line)
        for line in lines
    ]
    assert kinds == [
        "the interpreter loop",
        "a float's repr (dtoa)",
        "cffi",
        "other (sliceobject.c)",
    ]


def test_dws_jobtap_is_not_measured_without_a_tree_or_a_plugin(tmp_path):
    configs = ["bare", "dws-jobtap", "dws"]
    paths, missing = instructions.foreign_plugins(configs, str(tmp_path), {})
    assert paths == {}
    assert list(missing) == ["dws-jobtap"]
    assert "CORAL2_SRC" in missing["dws-jobtap"]
    assert "DWS_JOBTAP_SO" in missing["dws-jobtap"]
    assert list(tmp_path.iterdir()) == []


def test_a_prebuilt_dws_jobtap_is_taken_as_it_is(tmp_path, monkeypatch):
    so = tmp_path / "dws-jobtap.so"
    so.write_bytes(b"")
    monkeypatch.setattr(instructions.subprocess, "run", _no_build)
    environ = {"DWS_JOBTAP_SO": str(so), "CORAL2_SRC": "/nowhere"}
    paths, missing = instructions.foreign_plugins(
        ["dws-jobtap", "dws"], str(tmp_path), environ
    )
    assert paths == {"dws-jobtap": str(so)} and missing == {}


def _no_build(*args, **kwargs):
    raise AssertionError("nothing is built")


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"DWS_JOBTAP_SO": "/nowhere/dws-jobtap.so"}, "DWS_JOBTAP_SO=/nowhere"),
        ({"CORAL2_SRC": "/nowhere"}, "CORAL2_SRC=/nowhere: no src/job-manager"),
    ],
)
def test_a_dws_jobtap_that_is_not_there_is_named(tmp_path, environ, message):
    with pytest.raises(SystemExit, match=message):
        instructions.foreign_plugins(["dws-jobtap"], str(tmp_path), environ)


def test_dws_jobtap_is_built_alone_from_the_tree(tmp_path, monkeypatch):
    source = tmp_path / "src" / "job-manager" / "plugins" / "dws-jobtap.c"
    source.parent.mkdir(parents=True)
    source.write_text("")
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        out = "-I/flux -lflux-core -ljansson" if command[0] == "pkg-config" else ""
        return SimpleNamespace(returncode=0, stdout=out, stderr="")

    monkeypatch.setattr(instructions.subprocess, "run", run)
    out = tmp_path / "out"
    environ = {"CORAL2_SRC": str(tmp_path)}
    paths, missing = instructions.foreign_plugins(["dws-jobtap"], str(out), environ)
    assert missing == {}
    assert paths == {"dws-jobtap": str(out / "dws-jobtap.so")}
    assert commands[-1] == [
        "gcc",
        "-O2",
        "-shared",
        "-fPIC",
        f"-I{tmp_path}",
        f"-I{tmp_path}/src/common",
        str(source),
        "-I/flux",
        "-lflux-core",
        "-ljansson",
        "-o",
        str(out / "dws-jobtap.so"),
    ]


def test_configurations_that_load_no_foreign_plugin_need_none(tmp_path):
    paths, missing = instructions.foreign_plugins(["bare", "dws"], str(tmp_path), {})
    assert paths == {} and missing == {}


def test_a_row_not_measured_is_said_so_with_its_ratios(capsys):
    row = {"instructions_per_job": 2.0e6, "python_per_job": 0.0, "fnmatch_per_job": 1}
    results = {"bare": dict(row), "dws": dict(row, instructions_per_job=3.0e6)}
    missing = {"dws-jobtap": instructions.FOREIGN["dws-jobtap"]}
    instructions.report(results, 20, "rabbit", missing)
    out = capsys.readouterr().out
    assert "dws-jobtap      not measured (set CORAL2_SRC" in out
    assert "dws / bare: 1.500" in out
    assert "dws / dws-jobtap: not measured" in out


def test_dws_nolog_is_built_for_the_run_that_asks_for_it(tmp_path, monkeypatch):
    built = []

    def build(tmpdir):
        built.append(tmpdir)
        return f"{tmpdir}/dws-nolog/dws.so"

    monkeypatch.setattr(instructions, "build_dws_nolog", build)
    paths, missing = instructions.bench_plugins(["bare", "dws"], str(tmp_path), {})
    assert (paths, missing, built) == ({}, {}, [])
    paths, missing = instructions.bench_plugins(["dws-nolog"], str(tmp_path), {})
    assert paths == {"dws-nolog": f"{tmp_path}/dws-nolog/dws.so"} and missing == {}
    assert instructions.rabbit_plugin_path("dws-nolog", paths) == paths["dws-nolog"]
