"""Shared fixtures: a real Postgres database, a base set of users and one team's records.

Tests run on Postgres (STYLE.md 15). DATABASE_URL defaults to the local server; `make test`
sets it explicitly. pytest-django reads the settings before this file is imported, so the
default is applied by pointing the already-configured connection at it.
"""

from __future__ import annotations

import os

import pytest

from tests.llm_standin import llm_standin  # noqa: F401 (the scripted LLM endpoint, for every test)

# One intra-op thread per process: make test runs three pytest workers, each with interpreter-check
# children, on two cores, and torch's default (a thread per core in every process) makes them
# wait on each other's OpenMP spinning. Children started from here inherit it, sandboxed jobs
# too (runner.sandbox.ENV_ALLOW passes OMP_NUM_THREADS and MKL_NUM_THREADS on).
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

DEFAULT_TEST_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/kernelopt"


def _default_database_url() -> None:
    from django.conf import settings
    from django.db import connections

    if os.environ.get("DATABASE_URL") or not settings.configured:
        return
    os.environ["DATABASE_URL"] = DEFAULT_TEST_DATABASE_URL

    from kernelopt_site.env import database_from_url

    settings.DATABASE_URL = DEFAULT_TEST_DATABASE_URL
    default = settings.DATABASES["default"]
    # `connections` holds this same dict; replace its contents and let Django fill its defaults.
    default.clear()
    default.update(database_from_url(DEFAULT_TEST_DATABASE_URL))
    connections.configure_settings(settings.DATABASES)
    if hasattr(connections._connections, "default"):
        connections["default"].close()
        del connections._connections.default


_default_database_url()


def pytest_configure(config) -> None:
    from django.conf import settings

    if settings.configured:
        # Tests create users by the dozen; the production hasher would dominate their run time.
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # whitenoise warns when collectstatic has not run; tests serve no static files.
    config.addinivalue_line("filterwarnings", "ignore:No directory at:UserWarning")


@pytest.fixture(autouse=True)
def _a_cpu_worker_is_live(request) -> None:
    """Every test with the database has a live cpu worker, as `make run` has: the forms refuse a
    device kind no worker has been seen for (runner.workers). Tests of that refusal remove it."""
    marker = request.node.get_closest_marker("django_db")
    names = request.fixturenames
    transactional = "transactional_db" in names or "live_server" in names
    if marker is not None:
        transactional = transactional or bool(
            marker.kwargs.get("transaction") or (marker.args and marker.args[0])
        )
    elif not transactional and "db" not in names:
        return
    request.getfixturevalue("transactional_db" if transactional else "db")
    from runner.workers import beat

    beat({"cpu": "cpu"}, host="test-worker", pid=0)


# A valid kernel module: the smallest file that passes upload validation and really runs.
GOOD_SOURCE = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x * 2


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        double_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
        return out


def get_inputs():
    return [torch.randn(1000)]


def get_init_inputs():
    return []
"""

# The same module with a larger block: what a proposal would change.
PROPOSED_SOURCE = GOOD_SOURCE.replace("BLOCK=128", "BLOCK=1024").replace("cdiv(n, 128)", "cdiv(n, 1024)")


@pytest.fixture
def good_source() -> str:
    return GOOD_SOURCE


@pytest.fixture
def owner(django_user_model):
    """A team member who owns the kernel; not a reviewer."""
    return django_user_model.objects.create_user("owner", password="owner-pass-1")


@pytest.fixture
def reviewer(django_user_model):
    """A reviewer of the team (not listed as a member: reviewing alone grants access)."""
    return django_user_model.objects.create_user("reviewer", password="reviewer-pass-1")


@pytest.fixture
def outsider(django_user_model):
    """A user in another team, who must not learn that the team's kernels exist."""
    return django_user_model.objects.create_user("outsider", password="outsider-pass-1")


@pytest.fixture
def team(owner, reviewer, outsider):
    from diagnosis.models import Team

    team = Team.objects.create(name="kernels")
    team.members.add(owner)
    team.reviewers.add(reviewer)
    other = Team.objects.create(name="elsewhere")
    other.members.add(outsider)
    return team


@pytest.fixture
def kernel(team, owner):
    from diagnosis.models import Kernel

    return Kernel.objects.create(team=team, name="double", owner=owner)


@pytest.fixture
def version(kernel, owner):
    from diagnosis.models import KernelVersion

    return KernelVersion.objects.create(
        kernel=kernel,
        number=1,
        source=GOOD_SOURCE,
        sha256=KernelVersion.digest(GOOD_SOURCE),
        filename="double.py",
        created_by=owner,
    )


@pytest.fixture
def run(version, owner):
    from diagnosis.models import DiagnosisRun

    return DiagnosisRun.objects.create(version=version, device="cpu", target="sm_90", requested_by=owner)


@pytest.fixture
def round_(run, version):
    from diagnosis.models import Round

    return Round.objects.create(
        run=run,
        index=1,
        parent_version=version,
        tier_reached=2,
        hypothesis="BLOCK=128 leaves the grid too fine",
    )


@pytest.fixture
def finding(run, round_):
    from diagnosis.models import Finding

    return Finding.objects.create(
        run=run,
        round=round_,
        tier=0,
        code="small_block",
        severity="medium",
        family="launch_config",
        message="BLOCK=128 is small for a streaming kernel",
        lines=[23],
        kernel="double_kernel",
        evidence=[
            {"kind": "ptx", "kernel": "double_kernel", "lines": [3], "excerpt": "ld.global.f32", "name": ""}
        ],
    )


@pytest.fixture
def artefact(run, round_):
    from diagnosis.models import Artefact

    text = "\n".join(f"// ptx line {i}" for i in range(1, 51))
    artefact = Artefact.build(run=run, round=round_, kind="ptx", name="double_kernel.ptx", text=text)
    artefact.save()
    return artefact


@pytest.fixture
def proposal(round_, version, finding):
    import difflib

    from diagnosis.models import Proposal

    diff = "\n".join(
        difflib.unified_diff(
            GOOD_SOURCE.splitlines(),
            PROPOSED_SOURCE.splitlines(),
            "v1/double.py",
            "proposal/double.py",
            lineterm="",
        )
    )
    proposal = Proposal.objects.create(
        round=round_,
        parent_version=version,
        parent_source=GOOD_SOURCE,
        source=PROPOSED_SOURCE,
        diff=diff,
        proposer="rules",
        family="launch_config",
        rationale="A larger block halves the number of programs.",
        verification={  # the shape diagnosis.engine.serialize.verification_json writes
            "correct": True,
            "timed": True,
            "cases": [
                {
                    "index": 0,
                    "time_ms": 0.010,
                    "parent_ms": 0.020,
                    "ref_ms": 0.05,
                    "sol_ms": 0.00615,
                    "speedup": 2.0,
                    "pct_sol": 61.5,
                }
            ],
            "speedup": 2.0,
            "noise": 0.02,
            "suspect": False,
        },
        speedup=2.0,
        pct_sol=61.5,
    )
    proposal.findings.add(finding)
    return proposal


@pytest.fixture(scope="session")
def ascend_python() -> str:
    """The interpreter with triton-ascend (`make ascend`): KERNELOPT_ASCEND_PYTHON, else the one
    the sandbox gives npu children. Missing, the Ascend tests fail rather than skip: CI builds it."""
    import subprocess

    from runner.sandbox import child_python

    python = os.environ.get("KERNELOPT_ASCEND_PYTHON") or child_python("npu")
    probe = subprocess.run(
        [python, "-c", "import triton.backends.ascend"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode != 0:
        pytest.fail(
            f"no triton-ascend in {python} (run `make ascend`, or set KERNELOPT_ASCEND_PYTHON): "
            f"{probe.stderr.strip()[-300:]}"
        )
    return python


def ascend_compile(python: str, module: str, **options: object) -> dict:
    """The compile job for npu:Ascend910B3 run by `python -m runner.child` under `python`."""
    import json
    import subprocess

    from runner.protocol import JobRequest

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    request = JobRequest(
        job="compile", module=os.path.abspath(module), target="npu:Ascend910B3", options=dict(options)
    )
    proc = subprocess.run(
        [python, "-m", "runner.child"],
        input=request.dumps(),
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        timeout=300,
    )
    assert proc.stdout, proc.stderr[-2000:]
    return json.loads(proc.stdout)


# The files that take longest (their wall in a whole `make test`, 2 workers, 2026-12-01), longest first.
LONGEST_FIRST = (
    "tests/engine/test_rules_on_suite.py",
    "tests/runner/test_hostile.py",
    "tests/runner/test_sandbox.py",
    "tests/test_optimize_command.py",
    "tests/engine/test_rules_reviewable.py",
    "tests/bench/test_check_suite.py",
    "tests/runner/test_llm_gate.py",
    "tests/runner/test_gate_hostile.py",
    "tests/runner/test_gate.py",
    "tests/runner/test_loop_on_cpu.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    """LONGEST_FIRST's files first, then the rest as collected; each file's tests stay together
    and in order. Under `--dist loadfile` a worker runs a whole file, so the long ones start while
    the other worker takes the many short files instead of ending the run alone (xdist's own
    reordering, off in pyproject, puts the files with the most tests first)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def key(item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=key)
