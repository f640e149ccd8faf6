"""Fixtures shared across test packages."""

from __future__ import annotations

import ast
import functools
import os
import sys

import pytest

# (No effect on the real engines: vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD to "spawn"
# whatever it was, so each engine start imports torch and vLLM in three processes, ~25-30 s of CPU
# here: the real-engine tests share engines where they can, `tiny_pair`.)
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "fork")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`.ci/run` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`); this
    scheduler replaces loadgroup's. Every test that needs a real vLLM EngineCore (marked
    `real_engine`, or in a module that uses `tiny_pair`) is in one unit of work, so those tests
    run on one worker in collection order: the session's `tiny_pair` starts once and engine
    starts never overlap. Every other module is its own unit (its module-scoped fixtures start
    once) and runs on whichever worker is free. (xdist's own `xdist_group` marks do not reach
    the scheduler under pytest 9, which moved the node id that xdist rewrites.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = str(config.rootpath)  # node ids are relative to it

    class EngineTierScheduling(LoadScopeScheduling):
        own_scopes: set[str] = set()
        reordered = False

        def _split_scope(self, nodeid: str) -> str:
            module, _, rest = nodeid.partition("::")
            whole, marked, own = _real_engine_tests(os.path.join(root, module))
            if own:
                self.own_scopes.add(module)
                return module
            return "real-engine" if whole or rest.split("[", 1)[0] in marked else module

        def _assign_work_unit(self, node) -> None:
            # xdist queues the largest units first; an `own_engines` module (one long test) would
            # come last and run alone at the end: it goes first, beside the real-engine tier.
            if not self.reordered:
                self.reordered = True
                for scope in [s for s in self.workqueue if s in self.own_scopes]:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return EngineTierScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Marks the tiers (see `_mark_tier`). CI (`CI=true`, a 2-core machine, a 40-minute budget)
    runs the real-engine checks that
    share engine starts; the long ones marked `on_demand` (several engine starts each: request
    migration, batches, prefix routing and the extra pooling models on the real engine) run
    everywhere else, and in CI with `VLLM_PYFRONTEND_FULL=1`. The same switch sizes the
    randomized checks (tests/sample_size.py): a smaller sample in CI, all of it otherwise."""
    from tests.sample_size import full_run

    for item in items:
        _mark_tier(item)
    if full_run():
        return
    skip = pytest.mark.skip(reason="on demand: VLLM_PYFRONTEND_FULL=1 runs it in CI")
    for item in items:
        if item.get_closest_marker("on_demand") is not None:
            item.add_marker(skip)


# Names whose use in a test, its fixtures or the test modules' helpers they call means the test
# starts OS processes: the supervisor (`Stack` and its subclasses, tests/stack.py; `start_pair`,
# tests/e2e/vllm_pair.py), the supervisors' own classes run in the test, and child processes
# started directly.
_PROCESS_NAMES = frozenset({"Stack", "start_pair", "subprocess", "Popen", "multiprocessing", "fork",
                            "create_subprocess_exec", "Supervisor", "DropinSupervisor", "WorkerPool",
                            "WorkerTemplate", "Child"})


def _mark_tier(item) -> None:
    """The test tiers, as markers (pyproject.toml): `processes` for a test that starts OS
    processes (found by `_starts_processes` in the test, its fixtures and the helpers they call;
    every `real_engine` test), `inprocess` for one served by the in-process tier
    (tests/inprocess.py: the worker and the simulated engine in threads of the test process).
    `-m "not processes"` runs the tests that start none. A test can carry either mark itself."""
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        funcs += [d.func for defs in info.name2fixturedefs.values() for d in defs]
    funcs = [f for f in funcs if f is not None]
    if item.get_closest_marker("processes") is None and (
            item.get_closest_marker("real_engine") is not None or any(_starts_processes(f) for f in funcs)):
        item.add_marker(pytest.mark.processes)
    if item.get_closest_marker("inprocess") is None and any(_uses_inprocess(f) for f in funcs):
        item.add_marker(pytest.mark.inprocess)


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _own_callables(func) -> tuple[set[str], list]:
    """The global names `func` uses, and the functions and classes of the test packages among them."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None:
        return set(), []
    names = _code_names(code)
    found = []
    for name in names:
        obj = getattr(func, "__globals__", {}).get(name)
        if callable(obj) and _in_tests(obj):
            found.append(obj)
    return names, found


_TESTS = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _in_tests(obj) -> bool:
    """Whether `obj` (a function or a class) is defined in a file under tests/ (test modules are
    imported under their own names, not as `tests.<package>.<module>`)."""
    code = getattr(getattr(obj, "__wrapped__", obj), "__code__", None)
    if code is not None:
        path = code.co_filename
    else:
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        path = getattr(module, "__file__", None) or ""
    return os.path.abspath(path).startswith(_TESTS)


_visiting: set = set()


def _reaches(obj, test) -> bool:
    """Whether `test(names)` holds for the names that `obj` (a function, or a class's methods)
    uses, or for those of the test packages' functions and classes it uses, transitively."""
    try:
        return _reaches_cached(obj, test)
    except TypeError:  # unhashable
        return False


@functools.cache
def _reaches_cached(obj, test) -> bool:
    if obj in _visiting:  # a cycle: what it reaches counts where it began
        return False
    _visiting.add(obj)
    try:
        if isinstance(obj, type):
            if test({c.__name__ for c in obj.__mro__}):  # (a subclass of Stack)
                return True
            if obj.__name__ == "InProcessStack":  # it runs the supervisor's parts, not its processes
                return False
            return any(_reaches(m, test) for m in vars(obj).values() if callable(m))
        names, found = _own_callables(obj)
        return test(names) or any(_reaches(o, test) for o in found)
    finally:
        _visiting.discard(obj)


def _process_names(names: set[str]) -> bool:
    return not names.isdisjoint(_PROCESS_NAMES)


def _inprocess_names(names: set[str]) -> bool:
    return "InProcessStack" in names


def _starts_processes(func) -> bool:
    return _reaches(func, _process_names)


def _uses_inprocess(func) -> bool:
    return _reaches(func, _inprocess_names)


@functools.cache
def _real_engine_tests(path: str) -> tuple[bool, frozenset[str], bool]:
    """Whether the whole module needs a real engine (a module-level `real_engine` mark, or the
    `tiny_pair` fixture), the names of its test functions marked `real_engine` one by one, and
    whether it is marked `own_engines` at module level: it starts its engines in processes of
    its own and shares nothing with the other real-engine tests, so it is a unit of its own that
    runs beside them (on the worker that is not running the real-engine tier)."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return False, frozenset(), False
    module_marks = [ast.dump(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)]
    whole = "'tiny_pair'" in ast.dump(tree) or any("'real_engine'" in m for m in module_marks)
    marked = frozenset(
        node.name for node in tree.body
        if isinstance(node, ast.FunctionDef) and any("'real_engine'" in ast.dump(d) for d in node.decorator_list))
    return whole, marked, any("'own_engines'" in m for m in module_marks)


@pytest.fixture(scope="session")
def tiny_pair():
    """This frontend (2 workers) and vLLM's own Python server, each with its own real EngineCore
    on CPU serving the tiny chat model as `tiny`: started once per session, for every
    differential test that needs no other engine flags. Both sides have the scale-out,
    tokenizer-info and development routes on (`SESSION_FLAGS`, `SESSION_ENV` in
    tests/e2e/vllm_pair.py), and this frontend its gRPC service (`grpc_target`)."""
    from tests.e2e.vllm_pair import start_session_pair

    with start_session_pair() as pair:
        yield pair
    # A graceful stop (SIGTERM, drain) with a real engine ends with exit code 0.
    assert pair.exit_code == 0, pair.stack.logs()


@pytest.fixture
def addresses(tmp_path):
    """ipc:// input and output addresses for an engine client and a fake engine."""
    return f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/out"


@pytest.fixture
def zctx():
    """A ZMQ context for a fake engine's sockets, closed after the test."""
    import zmq

    ctx = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A real `redis-server` (Debian package) on a free port, one per test module that asks for it."""
    import shutil
    import subprocess
    import time

    import redis

    from tests.stack import free_port, stop_process_group

    exe = shutil.which("redis-server")
    assert exe, "redis-server is not installed (.ci/install installs the Debian package)"
    port = free_port()
    work = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            r.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    stop_process_group(proc, 10)
