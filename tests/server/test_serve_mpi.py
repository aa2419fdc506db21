"""`wna16 serve` under mpirun: one tensor-parallel rank per process, rank 0
listening and driving every batched step of the others through their
mirrors of its paged KV cache (docs/distributed.md). The same greedy tokens
as the single-process server at the same TP (ranks as threads, the same
bits) for 16 concurrent prompts, with prefix caching and without it, under
preemption, a real streaming client, a SIGTERM drain that ends every rank
with status 0, and the --tp refusal. Needs mpirun and the MPI plug-in
(ctest passes MPIEXEC and WNA16_MPI_PLUGIN); skipped without them."""
import concurrent.futures as cf
import os
import shutil
import signal
import subprocess
import time

import openai
import pytest

from test_serve import CLI, PROMPTS, Server, greedy, model_dir, post  # noqa: F401 (fixture)

MPIEXEC = os.environ.get("MPIEXEC", "mpirun")


def launcher(np=2):
    exe = shutil.which(MPIEXEC)
    if not exe:
        pytest.skip(f"no {MPIEXEC}")
    flags = []
    version = subprocess.run([exe, "--version"], capture_output=True, text=True)
    if "Open MPI" in version.stdout + version.stderr or "OpenRTE" in version.stdout + version.stderr:
        flags = ["--allow-run-as-root", "--oversubscribe"]  # CI: root, 2 cores
    return [exe, *flags, "-np", str(np)]


def ranks_of(s):
    """pids of the job's wna16 processes (the launcher's children)."""
    out = subprocess.run(["pgrep", "-P", str(s.p.pid), "-f", "serve"], capture_output=True,
                         text=True)
    return [int(p) for p in out.stdout.split()]


def rank_pid(s, rank):
    for pid in ranks_of(s):
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        if any(v in env for v in (f"OMPI_COMM_WORLD_RANK={rank}".encode(),
                                  f"PMI_RANK={rank}".encode())):
            return pid
    raise AssertionError(f"no rank {rank} among {ranks_of(s)}")


class MpiServer(Server):
    """Stopped as a user stops it: SIGTERM to rank 0, the process that
    listens (a launcher that is signalled itself exits 1 even when every
    rank drained and stopped cleanly)."""

    def __init__(self, model_dir, *args, env=None):
        if env:
            os.environ.update(env)  # the launcher passes its environment to the ranks
        try:
            super().__init__(model_dir, *args, launcher=launcher())
        finally:
            for k in env or {}:
                del os.environ[k]

    def stop(self):
        if self.p.poll() is None:
            os.kill(rank_pid(self, 0), signal.SIGTERM)
            self.p.wait(timeout=60)
        return self.p.returncode


@pytest.fixture(scope="module")
def mpi_server(model_dir):  # noqa: F811
    s = MpiServer(model_dir)
    yield s
    assert s.stop() == 0, s.text()


@pytest.fixture(scope="module")
def threads_client(model_dir):  # noqa: F811
    """The reference: the same TP degree as ranks as threads of one process."""
    s = Server(model_dir, "--tp", "2")
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="none")
    assert s.stop() == 0


def test_batch_invariance_over_mpi(mpi_server, threads_client):
    c = openai.OpenAI(base_url=mpi_server.url + "/v1", api_key="none")
    alone = [greedy(threads_client, p) for p in PROMPTS]
    with cf.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: greedy(c, p), PROMPTS))
    assert together == alone
    assert [greedy(c, p) for p in PROMPTS[:4]] == alone[:4]
    m = mpi_server.metrics()
    assert m["prefix_cache_hits_total"] > 0 and m["kv_cache_blocks_used"] == 0


def test_streaming_chat_over_mpi(mpi_server):
    c = openai.OpenAI(base_url=mpi_server.url + "/v1", api_key="none")
    chunks = list(c.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
        temperature=0, stream=True, extra_body={"ignore_eos": True}))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks)
    st, body = post(mpi_server.url, "/v1/completions", {"prompt": [1, 2, 10**9]}, key=None)
    assert st == 400 and "vocabulary" in body["error"]["message"]


def test_preemption_and_no_prefix_caching_over_mpi(model_dir, threads_client):  # noqa: F811
    s = MpiServer(model_dir, "--num-kv-blocks", "10", "--max-model-len", "160",
                  "--no-enable-prefix-caching")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        prompts = PROMPTS[8:16]
        with cf.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda p: greedy(c, p, 40), prompts))
        assert got == [greedy(threads_client, p, 40) for p in prompts]
        m = s.metrics()
        assert m["num_preemptions_total"] > 0 and m["kv_cache_blocks_used"] == 0
        assert m["prefix_cache_hits_total"] == 0
    finally:
        assert s.stop() == 0, s.text()


def test_sigterm_drains_every_rank(model_dir):  # noqa: F811
    s = MpiServer(model_dir)
    ranks = ranks_of(s)
    assert len(ranks) == 2, ranks
    with cf.ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, s.url, "/v1/completions",
                              {"prompt": "a", "max_tokens": 1000, "ignore_eos": True}, None)
        time.sleep(0.5)
        os.kill(rank_pid(s, 0), signal.SIGTERM)
        time.sleep(0.1)
        st, b = post(s.url, "/v1/completions", {"prompt": "b"}, key=None)
        assert st == 503 and "shutting down" in b["error"]["message"]
        st, b = running.result()
        assert st == 200 and b["usage"]["completion_tokens"] == 1000
    assert s.p.wait(timeout=60) == 0, s.text()  # the launcher: every rank exited 0
    assert "stopped" in s.text()


def test_a_hung_rank_fails_requests_and_stops_the_server(model_dir):  # noqa: F811
    # rank 1 stopped: rank 0's step times out (WNA16_MPI_TIMEOUT), that
    # request gets an error, /health and new requests 503, and the job ends
    # non-zero instead of serving errors forever
    s = MpiServer(model_dir, env={"WNA16_MPI_TIMEOUT": "3"})
    stopped = rank_pid(s, 1)
    try:
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.time()
        st, b = post(s.url, "/v1/completions", {"prompt": "a", "max_tokens": 4}, key=None)
        assert st >= 500 and "rank 1" in b["error"]["message"], (st, b)
        assert time.time() - t0 < 30
        st, b = post(s.url, "/v1/completions", {"prompt": "b", "max_tokens": 4}, key=None)
        assert st == 503 and "the engine failed" in b["error"]["message"], (st, b)
        assert s.p.wait(timeout=60) != 0
        assert "wna16 serve: stopping: the engine failed" in s.text()
    finally:
        if s.p.poll() is None:
            s.p.kill()
        try:
            os.kill(stopped, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_tp_must_match_the_processes(model_dir):  # noqa: F811
    out = subprocess.run([*launcher(), CLI, "serve", "--model", model_dir, "--tp", "3",
                          "--port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "--tp 3, but the MPI launcher started 2 processes" in out.stdout + out.stderr
