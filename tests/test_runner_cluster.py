"""Runs on a Dask cluster (`sweep.runner.cluster`): segments as tasks on real worker
processes, the client sealing and publishing.

Default suite, on one LocalCluster of 2 worker processes started by this module: an
analytic grid gives exactly the rows of the in-process run, and a [schedule] grid the same
schedule.parquet (planned by the client from the row facts the workers wrote); so does a
simulated grid (the simulator runs on the workers) whose worker is SIGKILLed in the middle
of a segment: that segment is computed again elsewhere, with nothing lost or duplicated;
an unreachable scheduler is one line before any work. The cluster is long-lived across the
module's runs: a catalog edited between two runs gives the new figures (the workers' cached
evaluators are keyed by every input, not by the grid's text). One worker made unable to see
the output folder (`SWEEP_FAULT=worker-blind` in that worker process only) costs nothing
but a note: its tasks run on the other worker; with every worker blind the run stops with
one line naming the cause, exit 2. The default segmentation gives every shipped grid with
enough scenario groups at least 4 tasks per worker, and small shipped grids cut that way
on the cluster still match their golden digests. Slow: the `sweep run --workers 2` client
itself SIGKILLed mid-run resumes with the same command, its log lines those of an
in-process run; with the dashboard's and scheduler's default ports taken, the JSON log of a
`--workers` run is still JSON lines only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from _grids import WINDOWED, same, tables

from sweep import grid as spec
from sweep.errors import OutputError
from sweep.io.staging import STAGING_PREFIX
from sweep.runner import run_grid

distributed = pytest.importorskip("distributed")
from sweep.runner.cluster import ATTEMPTS, CACHE_ENV, ClusterOptions, DaskExecutor, cluster_tasks  # noqa: E402

#: 4 arrival rates x 2 replica counts x 6 batcher settings = 48 simulated points; chunks of
#: one scenario group (12 points): 4 segments, each about a second of simulation.
SIM = """
name = "sim-cluster"
[grid]
arrival_rps = [20.0, 40.0, 60.0, 80.0]
replicas = [1, 2]
batch_size = [1, 4, 16]
batch_window_ms = [5, inf]
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 80.0
[options]
latency_model = "simulated"
[simulation]
n_requests = 3000
warmup = 300
replications = 4
seed = 7
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One LocalCluster of 2 single-threaded worker processes for the module's runs, which
    share one compilation cache with this process (as `sweep run` does with its workers):
    the in-process reference runs compile, the workers load."""
    import logging

    from sweep.runner.progress import compile_cache

    cache = str(tmp_path_factory.mktemp("jax-cache"))
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = cache  # the workers' cache: this one, not one beside each output folder
    try:
        with compile_cache(cache):
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                          silence_logs=logging.CRITICAL) as lc:
                yield ClusterOptions(scheduler=lc.scheduler_address)
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def _load(tmp_path: Path, text: str, name: str = "g.toml"):
    p = tmp_path / name
    p.write_text(text)
    return spec.load(p)


def _rows_in_order(out: Path) -> dict:
    """optimum and frontier exactly as written (file order), points by point_id."""
    return {"optimum": pq.read_table(out / "optimum.parquet").to_pylist(),
            "frontier": pq.read_table(out / "frontier.parquet").to_pylist(),
            "points": ds.dataset(out / "points").to_table().sort_by("point_id").to_pylist()}


def test_a_cluster_run_equals_the_in_process_run_row_for_row(cluster, tmp_path):
    """The analytic grid here; the simulated one in the next test (with a worker killed)."""
    run = dict(chunk_size=64, segment_points=128)
    g = _load(tmp_path, WINDOWED)
    here = run_grid(g, tmp_path / "here", **run)
    seen: list[tuple[int, int]] = []
    there = run_grid(g, tmp_path / "there", cluster=cluster, progress=lambda d, t, c: seen.append((d, t, c)), **run)
    assert there.manifest["rows"] == here.manifest["rows"]
    assert there.manifest["chunks"]["segments"] == here.manifest["chunks"]["segments"] > 1
    assert (there.manifest["executor"]["kind"] == "dask"
            and there.manifest["executor"]["tasks"] == here.manifest["chunks"]["segments"])
    assert there.manifest["chunks"]["compilations"] == 1  # each worker compiled once for all its tasks
    assert _rows_in_order(tmp_path / "there") == _rows_in_order(tmp_path / "here")
    same(tables(tmp_path / "here"), tables(tmp_path / "there"))
    # progress: points done rise to the total, one call per task; all of them computed for this run
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen) and seen[-1] == (g.n_points, g.n_points, g.n_points)
    assert len(seen) == here.manifest["chunks"]["segments"] and all(c == d for d, _, c in seen)
    assert not [p for p in (tmp_path / "there").iterdir() if p.name.startswith(STAGING_PREFIX)]
    # the same command again finds the finished run
    assert run_grid(g, tmp_path / "there", cluster=cluster, **run).skipped


def test_a_worker_killed_mid_segment_has_it_computed_again_elsewhere(cluster, tmp_path):
    """A real SIGKILL of the worker process writing a segment (found by the pid its attempt
    folder is named with): Dask runs the task again on another worker; the client seals
    only the completed attempt, so nothing is lost and nothing is counted twice."""
    g = _load(tmp_path, SIM)
    run = dict(chunk_size=12, segment_points=12)
    here = run_grid(g, tmp_path / "here", **run)
    out = tmp_path / "there"
    notes: list[str] = []
    result: dict = {}

    def client() -> None:
        try:
            result["run"] = run_grid(g, out, cluster=cluster, note=notes.append, **run)
        except BaseException as exc:  # reported by the assertion below
            result["error"] = exc

    thread = threading.Thread(target=client)
    thread.start()
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        for attempt in out.glob(f"{STAGING_PREFIX}*/{ATTEMPTS}/*/*/optimum"):  # its writers are open
            attempt = attempt.parent
            pid = int(attempt.name.split("-")[1])
            os.kill(pid, signal.SIGKILL)
            killed = (attempt.name, pid)
            break
        time.sleep(0.005)
    thread.join(timeout=600)
    assert killed is not None, "no attempt was seen running"
    assert "error" not in result, result.get("error")
    there = result["run"]
    assert there.manifest["executor"]["recomputed"] >= 1
    assert any("computed again" in n for n in notes), notes
    assert there.manifest["rows"] == here.manifest["rows"]
    assert there.manifest["chunks"]["segments"] == 4 and there.manifest["executor"]["tasks"] == 4
    assert _rows_in_order(out) == _rows_in_order(tmp_path / "here")  # the host pass ran on the workers
    same(tables(tmp_path / "here"), tables(out))
    ids = ds.dataset(out / "points").to_table().column("point_id").to_pylist()
    assert sorted(ids) == list(range(g.n_points))  # every point once: none lost, none twice
    assert not [p for p in out.iterdir() if p.name.startswith(STAGING_PREFIX)]


#: A [schedule] grid (tests/test_runner_schedule.py's diurnal day): each segment also writes
#: its row facts, from which the client plans schedule.parquet.
SCHEDULED = """
name = "diurnal-cluster"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
gpus_per_replica = 2
seq_len = 1024
batch_size = 1
t_fixed_ms = 10.0
t_req_ms = 0.0
slo_ms = 1e6
rho_max = 0.85
replicas = {start = 1, stop = 8, step = 1}
[schedule]
hourly_rps = [40, 30, 20, 20, 30, 60, 120, 200, 300, 380, 400, 390, \
370, 350, 340, 360, 390, 420, 430, 380, 300, 200, 120, 70]
ramp = 2
"""


def test_a_schedule_grid_on_the_cluster_plans_as_in_process(cluster, tmp_path):
    g = _load(tmp_path, SCHEDULED)
    run = dict(chunk_size=g.group_size * 2, segment_points=g.group_size * 4)
    here = run_grid(g, tmp_path / "here", **run)
    there = run_grid(g, tmp_path / "there", cluster=cluster, **run)
    assert there.manifest["chunks"]["segments"] == here.manifest["chunks"]["segments"] > 1
    assert there.manifest["rows"] == here.manifest["rows"] and here.manifest["rows"]["schedule"] == 24
    assert _rows_in_order(tmp_path / "there") == _rows_in_order(tmp_path / "here")
    for name in ("schedule.parquet", "optimum.parquet", "frontier.parquet"):
        a, b = pq.read_table(tmp_path / "here" / name), pq.read_table(tmp_path / "there" / name)
        assert a.equals(b), name
        assert _provenance(a) == _provenance(b), name
        assert ("schedule" in _provenance(b)) == (name == "schedule.parquet"), name  # as in process


def _provenance(table) -> dict:
    meta = json.loads(table.schema.metadata[b"sweep"])
    meta.pop("created_utc")
    return meta


def test_an_unreachable_scheduler_is_one_line_before_any_work(tmp_path, capsys):
    from sweep.cli import main

    g = tmp_path / "g.toml"
    g.write_text(WINDOWED)
    with pytest.raises(OutputError, match="cannot reach the Dask scheduler"):
        run_grid(spec.load(g), tmp_path / "out", cluster=ClusterOptions(scheduler="tcp://127.0.0.1:1"))
    assert not (tmp_path / "out").exists()
    assert main(["run", str(g), "--out", str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the Dask scheduler" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(OutputError, match="exactly one"):
        ClusterOptions(scheduler="tcp://h:1", workers=2)


# --------------------------------------------------------------------------- the client killed (slow)

BIG = """
name = "big"
[grid]
arrival_rps = {start = 1.0, stop = 2000.0, num = 24, scale = "log"}
batch_size = {start = 1, stop = 512, step = 1}
batch_window_ms = [5, inf]
gpus_per_replica = [1, 2, 4, 8]
seq_len = 4096
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
slo_ms = 250.0
"""  # 786,432 points: 12 segments of 65,536


@pytest.mark.slow
def test_the_client_killed_mid_run_resumes_with_the_same_command(tmp_path):
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(BIG)
    cmd = [sys.executable, "-m", "sweep", "run", str(grid), "--out", str(out), "--workers", "2",
           "--segment-points", "65536", "--progress", "log", "--log-interval", "0.001"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    events, other = [], []
    assert proc.stderr is not None
    for line in proc.stderr:
        try:
            events.append(json.loads(line))  # every line a JSON event, as in process
        except ValueError:
            other.append(line)
            continue
        if events[-1]["event"] == "progress" and 0 < events[-1]["done"] < events[-1]["total"] // 2:
            proc.send_signal(signal.SIGKILL)  # the client only: its workers are orphaned
            break
    assert proc.wait(timeout=120) == -signal.SIGKILL
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the orphaned worker processes, as a lost node would
    except ProcessLookupError:
        pass
    assert not other, other
    assert events[0]["event"] == "start" and not (out / "manifest.json").exists()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    lines = [json.loads(x) for x in again.stderr.splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "done"
    assert {e["event"] for e in lines} <= {"start", "progress", "note", "done"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["chunks"]["resumed_segments"] >= 1
    clean = tmp_path / "clean"
    subprocess.run([sys.executable, "-m", "sweep", "run", str(grid), "--out", str(clean), "--quiet",
                    "--segment-points", "65536"], check=True, timeout=900)
    assert manifest["rows"] == json.loads((clean / "manifest.json").read_text())["rows"]
    for name in ("optimum.parquet", "frontier.parquet"):
        assert pq.read_table(out / name).equals(pq.read_table(clean / name))
    assert not [p for p in out.iterdir() if p.name.startswith(STAGING_PREFIX)]


# --------------------------------------------------------------------------- identity on a long-lived cluster


def test_a_catalog_edit_between_two_runs_on_the_same_cluster_gives_the_new_figures(cluster, tmp_path):
    """Issue 28: the same long-lived workers, an H100 edited between two runs into two new
    folders: the second run has the edited bandwidth and price (as in process), not the
    figures the workers cached for the first."""
    from test_runner_identity import ROOF, _catalog, _cost_and_latency, _load

    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    run = dict(chunk_size=9, segment_points=9)  # 4 tasks: both workers build an evaluator
    cat = _catalog(tmp_path, 3.35e12, 2.5)
    first = run_grid(_load(grid, cat), tmp_path / "one", cluster=cluster, **run)
    cat = _catalog(tmp_path, 1.0e12, 7.0)
    second = run_grid(_load(grid, cat), tmp_path / "two", cluster=cluster, **run)
    here = run_grid(_load(grid, cat), tmp_path / "here", **run)
    assert second.manifest["run_key"] == here.manifest["run_key"] != first.manifest["run_key"]
    assert _cost_and_latency(tmp_path / "two") == _cost_and_latency(tmp_path / "here")
    assert _cost_and_latency(tmp_path / "two") != _cost_and_latency(tmp_path / "one")
    same(tables(tmp_path / "here"), tables(tmp_path / "two"))
    # a rerun into the first folder recomputes too (not "already complete")
    assert not run_grid(_load(grid, cat), tmp_path / "one", cluster=cluster, **run).skipped
    assert _cost_and_latency(tmp_path / "one") == _cost_and_latency(tmp_path / "here")


# --------------------------------------------------------------------------- a bad worker


def _blind(cluster: ClusterOptions, count: int):
    """`SWEEP_FAULT=worker-blind` in `count` of the cluster's worker processes (the fault
    hook of `sweep._faults`: those workers act as if the output folder were not mounted);
    returns the addresses and a function that heals them."""
    client = distributed.Client(cluster.scheduler, set_as_default=False)
    workers = sorted(client.nthreads())[:count]
    # (a lambda, pickled by value: a bound method of os.environ would set a copy's item)
    client.run(lambda: os.environ.update(SWEEP_FAULT="worker-blind"), workers=workers)

    def heal() -> None:
        client.run(lambda: os.environ.pop("SWEEP_FAULT", None), workers=workers)
        client.close()

    return workers, heal


def test_a_worker_that_cannot_see_the_output_folder_leaves_its_tasks_to_the_others(cluster, tmp_path):
    g = _load(tmp_path, WINDOWED)
    run = dict(chunk_size=64, segment_points=128)  # 11 tasks
    here = run_grid(g, tmp_path / "here", **run)
    notes: list[str] = []
    _, heal = _blind(cluster, 1)
    try:
        there = run_grid(g, tmp_path / "there", cluster=cluster, note=notes.append, **run)
    finally:
        heal()
    assert _rows_in_order(tmp_path / "there") == _rows_in_order(tmp_path / "here")
    assert there.manifest["rows"] == here.manifest["rows"]
    blind_notes = [n for n in notes if "cannot see" in n]
    assert len(blind_notes) == 1 and "its tasks go to the other workers" in blind_notes[0], notes
    executor = there.manifest["executor"]
    assert executor["tasks"] == there.manifest["chunks"]["segments"] > 2
    assert executor["retried"] >= 1 and executor["workers"] == 2
    workers = {s["worker"] for s in there.manifest["segments"]}
    assert len(workers) == 1  # every segment by the one worker that sees the folder
    assert not [p for p in (tmp_path / "there").iterdir() if p.name.startswith(STAGING_PREFIX)]


def test_a_run_no_worker_can_do_stops_with_one_line(cluster, tmp_path, capsys):
    from sweep.cli import main

    grid = tmp_path / "g.toml"
    grid.write_text(WINDOWED)
    _, heal = _blind(cluster, 2)
    try:
        with pytest.raises(OutputError, match=r"segment \d+ of \d+: no worker could compute it .*cannot see") as exc:
            run_grid(spec.load(grid), tmp_path / "api", cluster=cluster, chunk_size=64, segment_points=128)
        assert "\n" not in str(exc.value)
        code = main(["run", str(grid), "--out", str(tmp_path / "cli"), "--scheduler", cluster.scheduler or "",
                     "--progress", "none"])
    finally:
        heal()
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    # one note per blind worker (as they are found), then the error: one line naming the cause
    assert len(lines) <= 3 and all("its tasks go to the other workers" in n for n in lines[:-1]), lines
    assert lines[-1].startswith("sweep: error: segment ") and "no worker could compute it" in lines[-1]
    assert "cannot see" in lines[-1] and "a file system shared by the client and every worker" in lines[-1]
    assert not (tmp_path / "cli" / "manifest.json").exists()


# --------------------------------------------------------------------------- tasks per worker

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "grids").glob("*.toml")))
def test_every_shipped_grid_makes_at_least_4_tasks_per_worker(name):
    """The default cut on a cluster (the chunk and segment `run_grid` takes from the
    executor): every shipped grid gives 2 workers at least 4 tasks each, and up to 16 workers
    when it has the scenario groups; a grid of fewer groups makes one task per group (a group
    is the smallest task: its decisions reduce inside one chunk)."""
    from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator

    g = spec.load(ROOT / "grids" / name)
    ex = DaskExecutor(ClusterOptions(workers=2))
    ev = Evaluator(g, ex.chunk_size(g, DEFAULT_CHUNK))
    seg_points = ex.segment_points(g, ev.chunk_size)
    seg = max(1, seg_points // ev.chunk_size) * ev.chunk_size  # as run_grid rounds it
    tasks = -(-g.n_points // seg)
    groups = g.n_points // g.group_size
    assert tasks >= min(groups, 4 * 2), (name, tasks, groups)
    assert tasks >= min(groups, cluster_tasks(g)), (name, tasks, groups)  # 64: 16 workers, 4 tasks each
    assert seg % g.group_size == 0 and ev.chunk_size <= seg


GOLDEN_ON_CLUSTER = ["grids/example.toml", "grids/diurnal.toml", "tests/golden/grids/windowed.toml"]


@pytest.mark.toolchain  # exact bytes, as tests/test_golden.py
@pytest.mark.parametrize("rel", GOLDEN_ON_CLUSTER)
def test_small_grids_cut_into_cluster_tasks_match_their_golden_digests(cluster, tmp_path, rel):
    """Outputs do not depend on the segmentation: the default cluster cut (36, 19 and 20
    tasks here, against one segment in process) gives the golden digests of the in-process
    runs (tests/golden/digests.json)."""
    from test_golden import GOLDEN, run_digest

    g = spec.load(ROOT / rel)
    out = tmp_path / "run"
    result = run_grid(g, out, cluster=cluster)
    assert result.manifest["chunks"]["segments"] > 8
    want = json.loads(GOLDEN.read_text())[rel]
    got = run_digest(out)
    moved = sorted(f"{t}.{c}" for t in set(want) | set(got) for c in set(want.get(t, {})) | set(got.get(t, {}))
                   if want.get(t, {}).get(c) != got.get(t, {}).get(c))
    assert not moved, f"{rel}: outputs on the cluster differ from the golden digests in {moved}"


# --------------------------------------------------------------------------- the JSON log (slow)


@pytest.mark.slow
def test_the_json_log_stays_json_with_the_default_dask_ports_taken(tmp_path):
    """Issue 28: a busy dashboard port added Dask's warning lines to the JSON log. With 8787
    (the dashboard's default) and 8786 (the scheduler's) held by another process, every line
    of a `--workers 2 --progress log` run's stderr is a JSON object."""
    import socket

    held = []
    for port in (8786, 8787):
        s = socket.socket()
        try:
            s.bind(("", port))
            s.listen(1)
            held.append(s)
        except OSError:
            s.close()  # already taken by someone else: taken all the same
    try:
        grid = tmp_path / "g.toml"
        grid.write_text(WINDOWED)
        proc = subprocess.run([sys.executable, "-W", "default", "-m", "sweep", "run", str(grid), "--out",
                               str(tmp_path / "out"), "--workers", "2", "--progress", "log"],
                              capture_output=True, text=True, timeout=600)
    finally:
        for s in held:
            s.close()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines, "no log"
    bad = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            bad.append(line)
    assert not bad, bad
