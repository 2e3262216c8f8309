"""History (diagnosis.history_views): the kernel list's figures, filters and pages on every
list, a kernel's timeline, the patterns' counts, and query counts that do not grow with rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from diagnosis.engine import serialize as ser
from diagnosis.engine.patterns import PATTERN_MATCH
from diagnosis.engine.records import CaseTiming, LoopResult, StopReason, VersionStats, sha256
from diagnosis.models import (
    Artefact,
    DiagnosisRun,
    Finding,
    Kernel,
    KernelVersion,
    Pattern,
    Proposal,
    Review,
    Round,
)
from diagnosis.reviews import accept_proposal
from tests.conftest import GOOD_SOURCE

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def _summary(speedup: float, pct_sol: float) -> dict:
    t0, t1 = 0.02, 0.02 / speedup
    sol = t1 * pct_sol / 100
    return ser.summary_json(
        LoopResult(
            initial_source="a",
            best_source="b",
            initial=VersionStats(sha256("a"), (CaseTiming(0, t0, None, sol),)),
            best=VersionStats(sha256("b"), (CaseTiming(0, t1, None, sol),)),
            stop_reason=StopReason.ROUND_BUDGET,
            speedups_over_initial=(speedup,),
        ),
        best_proposal_id=None,
        attempt=1,
    )


def _kernel(team, owner, name: str, *, device: str = "cpu", status: str = "done", codes=("small_block",),
            speedup: float = 1.8, created=None) -> DiagnosisRun:  # fmt: skip
    kernel = Kernel.objects.create(
        team=team, name=name, owner=owner, **({"created": created} if created else {})
    )
    source = GOOD_SOURCE + f"\n# {name}\n"
    v = KernelVersion.objects.create(
        kernel=kernel, number=1, source=source, sha256=KernelVersion.digest(source)
    )
    run = DiagnosisRun.objects.create(
        version=v, device=device, status=status, summary=_summary(speedup, 40.0) if status == "done" else {},
        **({"created": created} if created else {}),
    )  # fmt: skip
    rnd = Round.objects.create(run=run, index=1, tier_reached=2, verdict="improved")
    for code in codes:
        for _ in range(2):  # a finding repeated in a second round counts once
            Finding.objects.create(
                run=run, round=rnd, tier=0, code=code, severity="medium", message=code, lines=[23]
            )
    return run


def _ids(page: str, attr: str) -> set[int]:
    import re

    return {int(x) for x in re.findall(rf'data-{attr}="(\d+)"', page)}


# --- the kernel list --------------------------------------------------------------------------


def test_the_kernel_list_shows_latest_speedup_sol_and_open_findings(client, owner, team):
    _kernel(team, owner, "fast", codes=("small_block", "scalar_loads"), speedup=1.8)
    client.force_login(owner)
    page = client.get(reverse("kernel-list")).content.decode()
    assert "1.80x faster" in page and "40.0 %" in page
    row = page[page.index(">fast<") :]
    assert '">2</a>' in row[: row.index("</tr>")]  # two different codes, each found twice


KERNEL_FILTERS = [
    pytest.param({"q": "alp"}, {"alpha"}, id="name"),
    pytest.param({"device": "cuda"}, {"beta"}, id="device"),
    pytest.param({"status": "failed"}, {"gamma"}, id="latest-status"),
    pytest.param({"code": "scalar_loads"}, {"beta"}, id="finding-code"),
    pytest.param({"since": "2026-01-01"}, {"alpha", "beta"}, id="since"),
    pytest.param({"until": "2025-12-31"}, {"gamma"}, id="until"),
    pytest.param({"tier": "2"}, {"alpha", "beta", "gamma"}, id="a-filter-this-list-has-not-is-ignored"),
]


@pytest.mark.parametrize(("query", "expected"), KERNEL_FILTERS)
def test_kernel_filters(client, owner, team, query, expected):
    _kernel(team, owner, "alpha")
    _kernel(team, owner, "beta", device="cuda", codes=("scalar_loads",))
    old = timezone.make_aware(timezone.datetime(2025, 6, 1))
    _kernel(team, owner, "gamma", status="failed", created=old)
    Kernel.objects.filter(name__in=["alpha", "beta"]).update(
        created=timezone.make_aware(timezone.datetime(2026, 3, 1))
    )
    client.force_login(owner)
    page = client.get(reverse("kernel-list"), query).content.decode()
    shown = {k.name for k in Kernel.objects.all() if f">{k.name}</a>" in page}
    assert shown == expected


def test_the_kernel_list_pages_keep_the_filters(client, owner, team):
    for i in range(30):
        _kernel(team, owner, f"k{i:02d}", device="cuda" if i % 2 else "cpu")
    client.force_login(owner)
    page = client.get(reverse("kernel-list"), {"device": "cpu"}).content.decode()
    assert "15 kernels" in page and "page 1 of 1" not in page
    many = client.get(reverse("kernel-list")).content.decode()
    assert "30 kernels" in many and 'href="?page=2"' in many
    filtered_next = client.get(reverse("kernel-list"), {"q": "k"}).content.decode()
    assert 'href="?q=k&amp;page=2"' in filtered_next
    second = client.get(reverse("kernel-list"), {"q": "k", "page": 2}).content.decode()
    assert "page 2 of 2" in second and 'href="?q=k&amp;page=1"' in second


def test_the_results_fragment_for_htmx(client, owner, team):
    _kernel(team, owner, "alpha")
    client.force_login(owner)
    for name in ("kernel-list", "run-list", "finding-list", "proposal-list"):
        body = client.get(reverse(name), HTTP_HX_TARGET="results", **HTMX).content.decode()
        assert body.lstrip().startswith('<div id="results">'), name


def test_a_bad_filter_is_shown_and_not_applied(client, owner, team):
    _kernel(team, owner, "alpha")
    client.force_login(owner)
    page = client.get(reverse("kernel-list"), {"since": "not-a-date"}).content.decode()
    assert ">alpha</a>" in page and 'class="errorlist"' in page


# --- runs, findings, proposals ------------------------------------------------------------------


@pytest.fixture
def three(team, owner, reviewer):
    """Three runs: alpha (cpu, done, small_block), beta (cuda, done, scalar_loads, a proposal
    reviewed), gamma (cpu, failed, last year)."""
    a = _kernel(team, owner, "alpha")
    b = _kernel(team, owner, "beta", device="cuda", codes=("scalar_loads",))
    old = timezone.now() - timedelta(days=400)
    c = _kernel(team, owner, "gamma", status="failed", created=old)
    Round.objects.filter(run=c).update(verdict="failed", tier_reached=0)
    rnd = b.rounds.get()
    p = Proposal.objects.create(
        round=rnd, parent_version=b.version, parent_source=b.version.source, source=b.version.source + "#\n",
        diff="", proposer="rules", family="hints", speedup=1.5, status="rejected",
    )  # fmt: skip
    p.findings.set(b.findings.filter(code="scalar_loads"))
    Review.objects.create(proposal=p, reviewer=reviewer, decision="reject")
    return {"alpha": a, "beta": b, "gamma": c, "proposal": p}


RUN_FILTERS = [
    pytest.param({"device": "cuda"}, {"beta"}, id="device"),
    pytest.param({"status": "failed"}, {"gamma"}, id="status"),
    pytest.param({"verdict": "failed"}, {"gamma"}, id="round-verdict"),
    pytest.param({"tier": "2"}, {"alpha", "beta"}, id="deepest-tier"),
    pytest.param({"code": "scalar_loads"}, {"beta"}, id="finding-code"),
    pytest.param({"reviewer": "REVIEWER"}, {"beta"}, id="reviewer"),
    pytest.param({"q": "gam"}, {"gamma"}, id="kernel-name"),
    pytest.param({"until": "LAST_MONTH"}, {"gamma"}, id="date-range"),
]


def _query(query: dict, reviewer) -> dict:
    last_month = (timezone.now() - timedelta(days=30)).date().isoformat()
    return {k: {"REVIEWER": str(reviewer.pk), "LAST_MONTH": last_month}.get(v, v) for k, v in query.items()}


@pytest.mark.parametrize(("query", "expected"), RUN_FILTERS)
def test_run_filters(client, owner, reviewer, three, query, expected):
    client.force_login(owner)
    page = client.get(reverse("run-list"), _query(query, reviewer)).content.decode()
    assert _ids(page, "run") == {three[k].pk for k in expected}


FINDING_FILTERS = [
    pytest.param({"code": "scalar_loads"}, {"beta"}, id="code"),
    pytest.param({"tier": "0"}, {"alpha", "beta", "gamma"}, id="tier"),
    pytest.param({"tier": "3"}, set(), id="tier-without-findings"),
    pytest.param({"device": "cuda"}, {"beta"}, id="device"),
    pytest.param({"status": "failed"}, {"gamma"}, id="run-status"),
    pytest.param({"verdict": "improved"}, {"alpha", "beta"}, id="round-verdict"),
    pytest.param({"severity": "high"}, set(), id="severity"),
    pytest.param({"until": "LAST_MONTH"}, {"gamma"}, id="date-range"),
]


@pytest.mark.parametrize(("query", "expected"), FINDING_FILTERS)
def test_finding_filters(client, owner, reviewer, three, query, expected):
    client.force_login(owner)
    page = client.get(reverse("finding-list"), _query(query, reviewer)).content.decode()
    want = set(Finding.objects.filter(run__in=[three[k] for k in expected]).values_list("pk", flat=True))
    assert _ids(page, "finding") == want


def test_a_finding_code_links_to_the_list_filtered_by_it(client, owner, three):
    client.force_login(owner)
    page = client.get(reverse("finding-list"), {"device": "cuda"}).content.decode()
    assert 'href="?device=cuda&amp;code=scalar_loads"' in page


PROPOSAL_FILTERS = [
    pytest.param({"status": "rejected"}, True, id="status"),
    pytest.param({"status": "accepted"}, False, id="other-status"),
    pytest.param({"code": "scalar_loads"}, True, id="addresses-code"),
    pytest.param({"code": "small_block"}, False, id="does-not-address-code"),
    pytest.param({"reviewer": "REVIEWER"}, True, id="reviewer"),
    pytest.param({"device": "cpu"}, False, id="device"),
    pytest.param({"verdict": "improved", "tier": "2"}, True, id="verdict-and-tier"),
    pytest.param({"since": "LAST_MONTH"}, True, id="date-range"),
]


@pytest.mark.parametrize(("query", "shown"), PROPOSAL_FILTERS)
def test_proposal_filters(client, owner, reviewer, three, query, shown):
    client.force_login(owner)
    page = client.get(reverse("proposal-list"), _query(query, reviewer)).content.decode()
    assert _ids(page, "proposal") == ({three["proposal"].pk} if shown else set())
    if shown:
        assert f"<td>{reviewer.username} <span" in page  # who reviewed it


@pytest.mark.parametrize("name", ["kernel-list", "run-list", "finding-list", "proposal-list"])
def test_outsiders_see_nothing_of_the_team_in_any_list(client, outsider, three, name):
    client.force_login(outsider)
    page = client.get(reverse(name)).content.decode()
    for key in ("alpha", "beta", "gamma"):
        assert f">{key}</a>" not in page
    assert not (_ids(page, "run") | _ids(page, "finding") | _ids(page, "proposal"))


# --- a kernel's timeline ------------------------------------------------------------------------


def test_the_timeline_shows_what_each_accepted_rewrite_brought(client, owner, reviewer, proposal, version):
    second = accept_proposal(proposal, reviewer).version
    # a further rewrite on v2, measured 1.5x over it
    rnd = Round.objects.create(run=proposal.round.run, index=2, parent_version=second)
    third = Proposal.objects.create(
        round=rnd, parent_version=second, parent_source=second.source, source=second.source + "# v3\n",
        diff="", proposer="rules", family="hints", speedup=1.5,
        verification={"correct": True, "timed": True, "cases": [{"index": 0, "time_ms": 0.01, "parent_ms": 0.015}]},
    )  # fmt: skip
    accept_proposal(third, reviewer)
    client.force_login(owner)
    page = client.get(reverse("kernel-detail", args=[version.kernel.pk])).content.decode()
    timeline = page[page.index('<ol class="timeline">') : page.index("</ol>")]
    assert (
        timeline.index('data-version="3"')
        < timeline.index('data-version="2"')
        < timeline.index('data-version="1"')
    )
    assert "2.00x faster</span> than its parent" in timeline
    assert "1.50x faster</span> than its parent, 3.00x faster than the v1 upload" in timeline


# --- patterns -------------------------------------------------------------------------------------


def test_patterns_say_how_often_each_fired_and_was_accepted(client, owner, team, three):
    pattern = Pattern.objects.create(
        team=team, family="hints", mechanism="m", before="b", after="a", example_diff=""
    )
    pattern.source_proposals.add(three["proposal"])
    for key in ("alpha", "beta"):  # matched in two runs, twice in one of them
        run = three[key]
        for _ in range(1 if key == "alpha" else 2):
            Finding.objects.create(
                run=run, tier=0, code=PATTERN_MATCH.code, severity="medium", family="hints", message="m"
            )
    accepted = Proposal.objects.create(
        round=three["alpha"].rounds.get(),
        parent_source="",
        source="x",
        diff="",
        proposer="rules",
        status="accepted",
    )
    accepted.findings.set(Finding.objects.filter(run=three["alpha"], code=PATTERN_MATCH.code))
    client.force_login(owner)
    page = client.get(reverse("team-patterns", args=[team.pk])).content.decode()
    assert "<dd data-learnt>1 accepted proposal</dd>" in page
    assert "<dd data-fired>in 2 runs</dd>" in page
    assert "<dd data-accepted>1 time</dd>" in page


# --- query counts ---------------------------------------------------------------------------------


def _populate(team, owner, reviewer, n: int) -> dict:
    """n kernels with a finished run each; the first kernel has n versions, its run n rounds,
    findings, artefacts and proposals, its first proposal n findings and a review."""
    runs = [_kernel(team, owner, f"kernel-{i}") for i in range(n)]
    first = runs[0]
    kernel = first.version.kernel
    for i in range(2, n + 1):
        src = GOOD_SOURCE + f"# v{i}\n"
        v = KernelVersion.objects.create(kernel=kernel, number=i, source=src, sha256=KernelVersion.digest(src),
                                         parent=first.version)  # fmt: skip
        DiagnosisRun.objects.create(version=v, device="cpu")
    proposals = []
    for i in range(2, n + 2):
        rnd = Round.objects.create(run=first, index=i, tier_reached=2, verdict="no-gain")
        f = Finding.objects.create(run=first, round=rnd, tier=2, code=f"code_{i}", severity="low", message="m",
                                   lines=[i], evidence=[{"kind": "ptx", "kernel": "k", "lines": [1], "excerpt": "x", "name": ""}])  # fmt: skip
        Artefact.build(run=first, round=rnd, kind="ptx", name=f"k{i}.ptx", text="ptx\n").save()
        p = Proposal.objects.create(round=rnd, parent_version=first.version, parent_source=GOOD_SOURCE,
                                    source=GOOD_SOURCE + f"# p{i}\n", diff="", proposer="rules", family="hints",
                                    verification={"correct": True, "timed": False, "cases": []})  # fmt: skip
        p.findings.add(f)
        proposals.append(p)
    target = proposals[0]
    target.findings.set(Finding.objects.filter(run=first))
    Review.objects.create(proposal=proposals[1], reviewer=reviewer, decision="reject")
    for i in range(n):
        pattern = Pattern.objects.create(
            team=team, family="hints", mechanism=f"m{i}", before="", after="", example_diff=""
        )
        pattern.source_proposals.add(proposals[i % len(proposals)])
    return {"kernel": kernel, "version": first.version, "run": first, "proposal": target}


PAGES = [
    pytest.param(lambda d: reverse("kernel-list"), id="kernel-list"),
    pytest.param(lambda d: reverse("kernel-detail", args=[d["kernel"].pk]), id="kernel-detail"),
    pytest.param(lambda d: reverse("version-detail", args=[d["version"].pk]), id="version"),
    pytest.param(lambda d: reverse("run-detail", args=[d["run"].pk]), id="run"),
    pytest.param(lambda d: reverse("run-report", args=[d["run"].pk]), id="run-report"),
    pytest.param(lambda d: reverse("proposal-detail", args=[d["proposal"].pk]), id="proposal"),
    pytest.param(lambda d: reverse("review-queue"), id="review-queue"),
    pytest.param(lambda d: reverse("team-list"), id="teams"),
    pytest.param(lambda d: reverse("team-patterns", args=[d["kernel"].team_id]), id="patterns"),
    pytest.param(lambda d: reverse("run-list"), id="run-list"),
    pytest.param(lambda d: reverse("finding-list"), id="finding-list"),
    pytest.param(lambda d: reverse("proposal-list"), id="proposal-list"),
    pytest.param(
        lambda d: reverse("run-list") + "?device=cpu&code=small_block&verdict=improved",
        id="run-list-filtered",
    ),
]
MAX_QUERIES = 16  # measured: 4 to 14 (the run page's evidence and profile sections: 14)


@pytest.mark.parametrize("url", PAGES)
def test_query_counts_do_not_grow_with_rows(
    client, reviewer, owner, team, django_assert_max_num_queries, url
):
    client.force_login(reviewer)
    counts = []
    for n in (3, 30):
        Kernel.objects.all().delete() if n == 30 else None
        Pattern.objects.all().delete()
        data = _populate(team, owner, reviewer, n)
        address = url(data)
        with django_assert_max_num_queries(MAX_QUERIES):
            with CaptureQueriesContext(connection) as captured:
                assert client.get(address).status_code == 200
        counts.append(len(captured))
    assert counts[0] == counts[1], counts
