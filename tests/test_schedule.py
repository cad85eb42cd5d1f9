"""The stage scheduler: stages overlap by resource class, and the pack is the one a sequential run makes.

The pipeline tests drive the real runner, pack, derivation and verify on the stand-in stages (tests/fakestages);
the unit tests drive schedule.run_schedule with stages that only wait, recording who ran beside whom.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, TESTS, fake_pack, verify_fake

from evpack import derivation, schedule
from evpack.pack import PackError
from evpack.stages import order
from evpack.stages.base import StageOutcome, read_json
from evpack.stages.procs import Job, SlotPool, run_jobs

GPU = ["tensor_proof", "sanitize", "correctness", "stability", "bench"]
# every stage waits a little, the GPU checks run cells on the shared pool
PLAN = {"gpu": GPU, "timeout": 60, "ptxas": "sleep:1.5", "sass": "sleep:2", "tensor_proof": "sleep:1",
        "bench": "sleep:0.5", "pool_cells": {"correctness": [1.5, 0.6, 1.0], "stability": [1.2, 1.2], "sanitize": [0.8] * 3}}
# files whose content records how the run went (times, ids, slots, digests of those), not what it found
TIMEY = {"pack.json", "index.json", "provenance.json", "report.md", "report.html", "comment.md"}


def _intervals(pack: Path) -> dict[str, tuple[float, float]]:
    t = read_json(pack / "pack.json")["timings"]["stages"]
    return {n: (v["start_s"], v["end_s"]) for n, v in t.items()}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _pack(tmp_path: Path, fake_env, monkeypatch, mode: str, plan=PLAN, slots: str = "2") -> Path:
    fake_env(plan)
    monkeypatch.setenv("EVPACK_SCHEDULE", mode)
    monkeypatch.setenv("EVPACK_GPU_SLOTS", slots)
    return fake_pack(tmp_path / mode, gpu=(True, ""))


def _strip(obj):
    """procs.json without what placement decides (times, slot, GPU) and with the pack's (temporary) folder
    name (the packs folder and the pack id, a time) replaced."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("duration_s", "start_s", "end_s", "slot", "gpu")}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"\S*\d{8}T\d{6}Z[^/\s]*", "PACK", obj)
    return obj


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(sequential pack, overlapped pack) of one plan."""
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("sched")
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO / "python")]))

    def env(plan):
        mp.setenv("FAKE_PLAN", json.dumps(plan))

    try:
        yield _pack(tmp, env, mp, "sequential"), _pack(tmp, env, mp, "overlapped")
    finally:
        mp.undo()


def test_the_overlapped_pack_verifies_and_equals_the_sequential_one_but_for_times(both):
    seq, ovl = both
    assert verify_fake(seq) == [] and verify_fake(ovl) == []
    a, b = read_json(seq / "pack.json"), read_json(ovl / "pack.json")
    assert a["timings"]["mode"] == "sequential" and b["timings"]["mode"] == "overlapped"
    for key in ("stages", "gates", "label", "labels", "content_digest", "so_sha256", "requirement"):
        if key == "stages":
            assert {n: (s["status"], s["reason"]) for n, s in a[key].items()} == \
                   {n: (s["status"], s["reason"]) for n, s in b[key].items()}
        else:
            assert a[key] == b[key], key
    files_a, files_b = set(read_json(seq / "index.json")["files"]), set(read_json(ovl / "index.json")["files"])
    assert files_a == files_b  # the same file names
    for rel in sorted(files_a):
        name = Path(rel).name
        if rel in TIMEY or name in ("runner.json", "stage.log") or (name.startswith("cell") and
                                                                    name.endswith(".json")):
            continue  # records of times (runner.json, a cell's wall clock) and the stage's log
        if name == "procs.json":
            assert _strip(read_json(seq / rel)) == _strip(read_json(ovl / rel)), rel
            continue
        if rel == "env.json":  # when it was written
            assert {k: v for k, v in read_json(seq / rel).items() if k != "generated_utc"} == \
                   {k: v for k, v in read_json(ovl / rel).items() if k != "generated_utc"}
            continue
        assert (seq / rel).read_bytes() == (ovl / rel).read_bytes(), rel


def test_the_sequential_run_runs_one_stage_at_a_time_in_run_order(both):
    iv = _intervals(both[0])
    assert list(iv) == list(order.RUN_ORDER)
    names = sorted(iv, key=lambda n: iv[n][0])
    assert names == list(order.RUN_ORDER)
    for x, y in zip(names, names[1:], strict=False):
        assert iv[x][1] <= iv[y][0] + 1e-3, (x, y)


def test_the_overlapped_run_places_stages_by_resource_class(both):
    iv = _intervals(both[1])
    # CPU stages run while the GPU runs
    assert _overlap(iv["sass"], iv["tensor_proof"]) and _overlap(iv["ptxas"], iv["tensor_proof"])
    # the GPU checks that do not time run beside each other
    assert _overlap(iv["correctness"], iv["stability"]) and _overlap(iv["correctness"], iv["sanitize"])
    # tensor_proof (counters) beside no other GPU stage; bench beside nothing; canaries after bench
    for other in GPU:
        if other != "tensor_proof":
            assert not _overlap(iv["tensor_proof"], iv[other]), other
    for other in iv:
        if other != "bench":
            assert not _overlap(iv["bench"], iv[other]), other
    assert iv["canaries"][0] >= iv["bench"][1]
    for name in ("ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability", "bench"):
        assert iv[name][0] >= iv["build"][1]
    # and it took less than the stages one after the other
    seq = _intervals(both[0])
    assert max(e for _, e in iv.values()) < max(e for _, e in seq.values())


def test_cells_of_stages_running_together_share_the_pool(both):
    """EVPACK_GPU_SLOTS=2: at no moment more than 2 cells of correctness, stability and sanitize together,
    and cells of different stages did run at the same time; each cell's record names its slot."""
    pack = both[1]
    spans, slots = [], set()
    for stage in ("correctness", "stability", "sanitize"):
        procs = read_json(pack / stage / "procs.json")
        assert list(procs) == [f"cell{i}" for i in range(len(PLAN["pool_cells"][stage]))]  # the stage's own order
        for cell, rec in procs.items():
            t = read_json(pack / stage / f"{cell}.json")
            spans.append((t["start"], t["end"], stage))
            slots.add(rec["slot"]["slot"])
    assert slots <= {0, 1}
    events = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    assert peak <= 2
    assert any(a[2] != b[2] and _overlap(a[:2], b[:2]) for a in spans for b in spans)


def test_pack_json_timings_shape(both):
    t = read_json(both[1] / "pack.json")["timings"]
    assert set(t) >= {"wall_s", "stages", "mode", "total_s", "stages_s"}
    assert set(t["stages"]) == set(order.STAGE_ORDER)
    assert t["wall_s"] >= max(v["end_s"] for v in t["stages"].values())
    for v in t["stages"].values():
        assert v["end_s"] >= v["start_s"] and abs(v["duration_s"] - (v["end_s"] - v["start_s"])) < 0.01


@pytest.mark.parametrize("plan, skipped", [
    ({"build": "fail"}, {"ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability", "bench"}),
    ({"correctness": "error"}, set()),
])
def test_a_failure_decides_dependants_as_in_a_sequential_run(tmp_path, fake_env, monkeypatch, plan, skipped):
    plan = dict(plan, gpu=GPU, timeout=60)
    seq = _pack(tmp_path, fake_env, monkeypatch, "sequential", plan)
    ovl = _pack(tmp_path, fake_env, monkeypatch, "overlapped", plan)
    a, b = read_json(seq / "pack.json")["stages"], read_json(ovl / "pack.json")["stages"]
    assert {n: (s["status"], s["reason"]) for n, s in a.items()} == {n: (s["status"], s["reason"]) for n, s in
                                                                     b.items()}
    assert {n for n, s in b.items() if s["status"] == "skipped"} == skipped
    assert read_json(seq / "pack.json")["label"] == read_json(ovl / "pack.json")["label"]


def test_the_run_derives_each_stage_once(tmp_path, fake_env, monkeypatch):
    """One derivation per stage (9), for the stages, the gates, pack.json and the reports together."""
    calls: list[str] = []
    real = derivation._final_outcome

    def spy(name, pack_dir, mod):
        calls.append(name)
        return real(name, pack_dir, mod)

    monkeypatch.setattr(derivation, "_final_outcome", spy)
    pack = _pack(tmp_path, fake_env, monkeypatch, "overlapped", {"gpu": GPU, "timeout": 60})
    assert sorted(calls) == sorted(order.STAGE_ORDER)
    assert verify_fake(pack) == []  # verify derives on its own (in worker processes), from the files alone


@pytest.mark.parametrize("var, value", [("EVPACK_GPU_SLOTS", "0"), ("EVPACK_GPU_SLOTS", "six"),
                                        ("EVPACK_SCHEDULE", "parallel")])
def test_a_bad_schedule_setting_is_one_clear_error_before_any_work(tmp_path, fake_env, monkeypatch, var, value):
    fake_env({})
    monkeypatch.setenv(var, value)
    with pytest.raises(PackError, match=var):
        fake_pack(tmp_path / "packs")
    assert not any((tmp_path / "packs").glob("*/pack.json"))


# ---- the scheduler alone -------------------------------------------------------------------------------


def _drive(specs, *, overlap=True, fail=(), hold=0.05):
    """run_schedule on stages that wait `hold` s; returns (order of starts, peak sets of stages running)."""
    lock, running, seen, starts = threading.Lock(), set(), [], []

    def execute(name):
        with lock:
            running.add(name)
            starts.append(name)
            seen.append(frozenset(running))
        time.sleep(hold)
        with lock:
            running.discard(name)

    def skip_reason(name, done):
        spec = next(s for s in specs if s.name == name)
        bad = [d for d in spec.depends_on if d in done and done[d].status != "pass"]
        return f"needs {bad[0]}" if bad else None

    out = schedule.run_schedule(
        specs, execute=execute, skip=lambda n, r: None, skip_reason=skip_reason, overlap=overlap,
        conclude=lambda n: StageOutcome("fail" if n in fail else "pass", n), status_s=0.01)
    return out, starts, seen


def test_the_declared_stages_never_break_their_resource_rules():
    specs = [order.SPECS[n] for n in order.RUN_ORDER]
    out, starts, seen = _drive(specs, hold=0.05)
    by = order.SPECS
    for group in seen:
        gpu = [n for n in group if by[n].needs_gpu]
        if any(by[n].resource == order.GPU_EXCLUSIVE for n in gpu):
            assert len(gpu) == 1, group
        if any(by[n].alone for n in group):
            assert len(group) == 1, group
    assert starts[0] == "build" and starts[-1] == "canaries" and starts[-2] == "bench"
    assert any(len([n for n in g if by[n].resource == order.GPU_SHARED]) == 3 for g in seen)
    assert set(out.outcomes) == set(order.STAGE_ORDER)


def test_a_waiting_exclusive_stage_holds_back_later_gpu_stages():
    S = order.StageSpec
    specs = [S("a", resource=order.GPU_SHARED), S("x", resource=order.GPU_EXCLUSIVE),
             S("b", resource=order.GPU_SHARED), S("c", resource=order.CPU)]
    _, starts, seen = _drive(specs, hold=0.1)
    assert starts.index("x") < starts.index("b")  # b did not slip in beside a while x waited
    assert not any({"x", "b"} <= g or {"x", "a"} <= g for g in seen)
    assert any({"a", "c"} <= g for g in seen)  # the CPU stage was not held back


def test_stages_that_wait_on_each_other_are_a_clear_error():
    S = order.StageSpec
    with pytest.raises(RuntimeError, match="wait on each other"):
        _drive([S("a", after=("b",)), S("b", after=("a",))])


def test_a_stage_whose_dependency_failed_is_skipped_and_its_dependants_decide_on_it():
    S = order.StageSpec
    skipped = []
    specs = [S("a"), S("b", ("a",), order.GPU_SHARED), S("c", ("b",))]

    out = schedule.run_schedule(
        specs, execute=lambda n: None, skip=lambda n, r: skipped.append((n, r)), overlap=True,
        skip_reason=lambda n, done: next((f"needs {d}" for d in dict((s.name, s) for s in specs)[n].depends_on
                                          if done[d].status != "pass"), None),
        conclude=lambda n: StageOutcome("fail" if n == "a" else ("skipped" if n in dict(skipped) else "pass"), n))
    assert skipped == [("b", "needs a"), ("c", "needs b")]
    assert [out.outcomes[n].status for n in "abc"] == ["fail", "skipped", "skipped"]


# ---- the slot pool -------------------------------------------------------------------------------------


def _sleeper(tmp: Path, name: str, sec: float, est: float = 0.0) -> Job:
    from fakestages._fake import CELL  # noqa: PLC0415

    return Job(name, [sys.executable, "-c", CELL, str(sec), str(tmp / f"{name}.json")], 60, est_s=est)


def test_two_stages_on_one_pool_never_exceed_its_slots(tmp_path):
    pool = SlotPool(tmp_path / "pool", 2)
    pool.write()
    dirs = [tmp_path / "s1", tmp_path / "s2"]
    for d in dirs:
        d.mkdir()
    jobs = {d: [_sleeper(d, f"c{i}", 0.4) for i in range(3)] for d in dirs}
    threads = [threading.Thread(target=run_jobs, args=(jobs[d], d, tmp_path), kwargs={"parallel": None, "pool": pool})
               for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = [(read_json(d / f"c{i}.json")["start"], read_json(d / f"c{i}.json")["end"]) for d in dirs
             for i in range(3)]
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert peak <= 2
    assert pool.progress() == {"s1": (3, 3), "s2": (3, 3)}
    for d in dirs:
        procs = read_json(d / "procs.json")
        assert all(r["returncode"] == 0 and r["slot"]["slot"] in (0, 1) for r in procs.values())


def test_the_pool_starts_the_longest_cells_first_and_records_them_in_the_stages_order(tmp_path):
    pool = SlotPool(tmp_path / "pool", 1)
    pool.write()
    jobs = [_sleeper(tmp_path, "short", 0.05, 1), _sleeper(tmp_path, "long", 0.05, 9),
            _sleeper(tmp_path, "mid", 0.05, 5)]
    recs = run_jobs(jobs, tmp_path, tmp_path, parallel=None, pool=pool)
    assert list(recs) == list(read_json(tmp_path / "procs.json")) == ["short", "long", "mid"]
    began = sorted(recs, key=lambda n: read_json(tmp_path / f"{n}.json")["start"])
    assert began == ["long", "mid", "short"]


def test_a_dead_holder_frees_its_slot(tmp_path):
    """A slot is a flock: the kernel releases it with the process that held it (crash, kill)."""
    pool = SlotPool(tmp_path / "pool", 1)
    pool.write()
    code = ("import sys, time; from pathlib import Path; from evpack.stages.procs import SlotPool; "
            "p = SlotPool.load(Path(sys.argv[1])); held = p.acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(pool.dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        got = []
        t = threading.Thread(target=lambda: got.append(pool.acquire(poll_s=0.02)), daemon=True)
        t.start()
        t.join(0.5)
        assert not got  # the only slot is held
        holder.kill()
        t.join(10)
        assert got and got[0][1] == 0
        SlotPool.release(got[0][2])
    finally:
        holder.kill()
        holder.wait()


def test_slots_per_gpu_default_and_override():
    assert schedule.slots_per_gpu(None, 1, 16) == 12
    assert schedule.slots_per_gpu(None, 2, 16) == 8
    assert schedule.slots_per_gpu(None, 1, 2) == 2
    assert schedule.slots_per_gpu("6", 1, 16) == 6
    for bad in ("0", "-1", "x", "1.5", "999"):
        with pytest.raises(ValueError, match="EVPACK_GPU_SLOTS"):
            schedule.slots_per_gpu(bad, 1, 16)


def test_every_stage_module_takes_its_attributes_from_its_declaration():
    from evpack.stages import bench_canaries  # noqa: PLC0415

    for spec in order.STAGES:
        mod = order.stage_module(spec.name)
        assert (mod.NEEDS_GPU, mod.TIMEOUT_S, mod.REQUIRED_FILES) == (spec.needs_gpu, spec.timeout_s,
                                                                     spec.required_files)
        assert getattr(mod, "BINARY_RECORD", None) == spec.binary_record
        assert tuple(getattr(mod, "CANARIES", ())) == spec.canaries
        assert order.DEPENDS_ON[spec.name] == spec.depends_on
    assert order.stage_module("bench").CANARIES == bench_canaries.NAMES
    assert order.RUN_ORDER == ("build", "ptxas", "sass", "tensor_proof", "sanitize", "correctness", "stability",
                               "bench", "canaries")
    assert {s.name for s in order.STAGES if s.resource == order.GPU_SHARED} == {"sanitize", "correctness",
                                                                                "stability"}
    assert {s.name for s in order.STAGES if s.resource == order.GPU_EXCLUSIVE} == {"tensor_proof", "bench"}


def test_verify_checks_the_timings_shape_only_where_the_pack_has_it():
    from evpack.verify import timings_problems  # noqa: PLC0415

    stages = {"build": {}, "bench": {}}
    good = {"total_s": 3.0, "stages_s": {"build": 1.0}, "wall_s": 5.0, "mode": "overlapped",
            "stages": {"build": {"start_s": 0.0, "end_s": 1.0, "duration_s": 1.0},
                       "bench": {"start_s": 1.0, "end_s": 4.5, "duration_s": 3.5}}}
    assert timings_problems({"stages": stages, "timings": good}) == []
    assert timings_problems({"stages": stages, "timings": {"total_s": 3.0, "stages_s": {}}}) == []  # older packs
    assert timings_problems({"stages": stages}) == []
    bad = [("wall_s", -1), ("wall_s", "5"), ("wall_s", True), ("mode", "parallel"), ("stages", []),
           ("stages", {"nope": good["stages"]["build"]}),
           ("stages", {"build": {"start_s": 2.0, "end_s": 1.0, "duration_s": -1.0}}),
           ("stages", {"build": {"start_s": 0.0, "end_s": 1.0, "duration_s": 0.5}}),
           ("stages", {"build": {"start_s": 0.0, "end_s": 9.0, "duration_s": 9.0}}),  # after wall_s
           ("stages", {"build": {"start_s": 0.0, "end_s": float("nan"), "duration_s": 1.0}})]
    for key, value in bad:
        assert timings_problems({"stages": stages, "timings": dict(good, **{key: value})}), (key, value)
    assert timings_problems({"stages": stages, "timings": [1]}) == ["timings: not an object"]


def test_the_report_shows_wall_time_and_a_one_line_timeline(both):
    from evpack.reporting.report_md import run_line  # noqa: PLC0415

    report = (both[1] / "report.md").read_text(encoding="utf-8")
    line = next(ln for ln in report.splitlines() if ln.startswith("- run: "))
    assert "wall (overlapped)" in line and all(f"{n} " in line for n in ("sass", "tensor_proof", "bench"))
    assert run_line({"total_s": 3.0, "stages_s": {}}) is None  # packs before wall_s: nothing claimed
    assert run_line({"wall_s": 9, "stages": {"a<b": {"start_s": 0, "end_s": 2}}}) == \
        "- run: 9\u00a0s wall: a\\<b 0\u20132\u00a0s"  # names escaped


def test_cells_waiting_in_any_stage_take_free_slots_longest_first(tmp_path):
    """A short cell that waited first still lets a longer one, of another stage, take the slot that frees."""
    pool = SlotPool(tmp_path / "pool", 1)
    pool.write()
    held = pool.acquire()
    got: list[str] = []

    def wait(name: str, est: float) -> None:
        handle = pool.acquire(poll_s=0.02, est_s=est)[2]
        got.append(name)
        time.sleep(0.2)
        SlotPool.release(handle)

    short = threading.Thread(target=wait, args=("short", 1.0))
    short.start()
    time.sleep(0.3)
    long = threading.Thread(target=wait, args=("long", 9.0))
    long.start()
    time.sleep(0.3)
    assert got == []
    SlotPool.release(held[2])
    short.join(10)
    long.join(10)
    assert got == ["long", "short"]
    assert list((pool.dir / "waiting").iterdir()) == []  # tickets go with their waiters


def test_a_dead_waiter_holds_nobody_back(tmp_path):
    pool = SlotPool(tmp_path / "pool", 1)
    pool.write()
    (pool.dir / "waiting").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (pool.dir / "waiting" / f"-99.0_1_{dead.stdout.strip()}_1").touch()  # a long cell's ticket, its process gone
    (pool.dir / "waiting" / "junk").touch()
    gpu, k, handle = pool.acquire(poll_s=0.02, est_s=1.0)
    assert k == 0
    SlotPool.release(handle)


def test_a_held_stage_frees_its_resource_and_concludes_after_what_it_waits_for():
    """hold: x (exclusive GPU) ends its run before s (CPU, slow) concludes; z (GPU) starts beside s once x ran,
    y (after x) only once x concluded, and x concludes after s."""
    S = order.StageSpec
    specs = [S("s"), S("x", resource=order.GPU_EXCLUSIVE), S("z", resource=order.GPU_SHARED),
             S("y", after=("x",))]
    events, lock = [], threading.Lock()

    def execute(name):
        with lock:
            events.append(("start", name))
        time.sleep({"s": 0.6}.get(name, 0.05))

    def conclude(name):
        with lock:
            events.append(("conclude", name))
        return StageOutcome("pass", name)

    out = schedule.run_schedule(specs, execute=execute, skip=lambda n, r: None, skip_reason=lambda n, d: None,
                                conclude=conclude, hold=lambda n: ("s",) if n == "x" else (), status_s=0.01)
    pos = {e: i for i, e in enumerate(events)}
    assert pos[("conclude", "s")] < pos[("conclude", "x")] < pos[("start", "y")]
    assert pos[("start", "z")] < pos[("conclude", "s")]  # the GPU was free while x waited to conclude
    assert out.times["x"].end_s < out.times["s"].end_s  # x's time is its run, not its wait
    assert set(out.outcomes) == {"s", "x", "z", "y"}


def test_a_stage_sent_back_runs_once_more_then_concludes_once():
    S = order.StageSpec
    runs, asked = [], []

    def rerun(name):
        asked.append(name)
        return name == "x" and asked.count("x") == 1

    out = schedule.run_schedule([S("a"), S("x", ("a",), order.GPU_SHARED), S("b", after=("x",))],
                                execute=runs.append, skip=lambda n, r: None, skip_reason=lambda n, d: None,
                                conclude=lambda n: StageOutcome("pass", n), rerun=rerun, status_s=0.01)
    assert runs == ["a", "x", "x", "b"] and list(out.outcomes) == ["a", "x", "b"]
    assert out.times["x"].start_s <= out.times["x"].end_s


def test_a_stage_sent_back_twice_is_a_clear_error():
    S = order.StageSpec
    with pytest.raises(RuntimeError, match="x asked to run a third time"):
        schedule.run_schedule([S("x")], execute=lambda n: None, skip=lambda n, r: None,
                              skip_reason=lambda n, d: None, conclude=lambda n: StageOutcome("pass", n),
                              rerun=lambda n: True, status_s=0.01)
