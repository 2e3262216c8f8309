"""The evidence pages (diagnosis.evidence_views) on real evidence: the source line by line with
its TTIR/TTGIR/LLIR/PTX/SASS, the pass diffs, the profile and its roofline; who sees them; what
they cost in queries; and that no page shows a server path."""

from __future__ import annotations

import json
import re
import zlib

import pytest
from django.urls import reverse

from diagnosis.models import Artefact, Finding, KernelVersion, Proposal, Round
from tests.web.evidence_data import GEMM_SHAPES, LOAD_LINE, gemm_report, gemm_run, vadd_run

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
SERVER_PATHS = re.compile(r"/tmp/|\.venv|/root")


@pytest.fixture
def vadd(owner, team):
    return vadd_run(owner, team)


@pytest.fixture
def gemm(owner, team):
    return gemm_run(owner, team)


def page(client, name: str, run, **params) -> str:
    response = client.get(reverse(name, args=[run.pk]), params)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def stage_box(html: str, stage: str) -> str:
    m = re.search(rf'<div class="stage stage-{stage}">(.*?)</pre>', html, re.S)
    assert m, f"no {stage} box"
    return m.group(1)


def line_row(html: str, n: int) -> str:
    m = re.search(rf'<div class="src-line[^"]*" id="L{n}">(.*?)</div>', html, re.S)
    assert m, f"no line {n}"
    return m.group(1)


# --- the source line by line -----------------------------------------------------------------


def test_a_tl_load_line_shows_its_lines_in_every_stage(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd, line=LOAD_LINE)
    panel = html[html.index('<section id="line-panel"') :]
    assert "x = tl.load(x_ptr + offs, mask=mask)" in re.sub(r"<[^>]+>", "", panel.split("</pre>")[0])
    assert "tt.load" in stage_box(panel, "ttir") and "tt.load" in stage_box(panel, "ttgir")
    assert "load float" in stage_box(panel, "llir") or "ld.global" in stage_box(panel, "llir")
    ptx = stage_box(panel, "ptx")
    assert ptx.count("ld.global.b32") == 8  # the unaligned n keeps the loads scalar
    sass = stage_box(panel, "sass")
    assert re.search(r"LDG\.E\b", sass)  # SASS is kept although ptxas did not spill
    # the PTX lines the finding cites are marked in the panel
    assert 'class="ir-line cited"' in ptx


def test_the_panel_links_each_stage_to_its_artefact_at_the_line(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd, line=LOAD_LINE)
    ptx = Artefact.objects.get(run=vadd, kind="ptx")
    first = int(re.search(r'<span class="ln">(\d+)</span>', stage_box(html, "ptx")).group(1))
    assert f'href="{reverse("artefact-detail", args=[ptx.pk])}#L{first}"' in html


def test_each_line_is_annotated_with_its_findings_and_what_it_became(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd)
    load, store = line_row(html, 15), line_row(html, 17)
    assert "load 32-bit ×8" in load and "IR_SCALAR_GLOBAL" in load and "CG_VECTORIZATION_BLOCKED" in load
    assert "store 32-bit ×8" in store
    assert 'class="chip ' not in line_row(html, 3)  # the docstring makes no code
    assert 'id="line-panel" class="line-panel" hidden' in html  # nothing opened yet


def test_findings_of_every_round_on_the_same_source_are_listed_once(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd, line=LOAD_LINE)
    assert (
        Finding.objects.filter(run=vadd, code="IR_SCALAR_GLOBAL", lines=[15]).count() == 2
    )  # rounds 1 and 2
    panel = html[html.index('<section id="line-panel"') :]
    assert panel.count("<code>IR_SCALAR_GLOBAL</code>") == 1 and "(rounds 1, 2)" in panel


def test_htmx_gets_the_panel_alone(client, owner, vadd) -> None:
    client.force_login(owner)
    url = reverse("run-evidence", args=[vadd.pk])
    body = client.get(url, {"line": 16}, HTTP_HX_TARGET="line-panel", **HTMX).content.decode()
    assert body.lstrip().startswith('<section id="line-panel"') and "<html" not in body
    assert "Line 16" in body and "ld.global.b32" in body


def test_every_line_link_works_without_javascript(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd)
    url = reverse("run-evidence", args=[vadd.pk])
    row = line_row(html, LOAD_LINE)
    assert f'href="{url}?line={LOAD_LINE}#L{LOAD_LINE}"' in row  # the review page's link, exactly
    assert f'hx-get="{url}?line={LOAD_LINE}#L{LOAD_LINE}"' in row


def test_line_numbers_are_out_of_the_tab_order_with_one_control_per_line(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-evidence", vadd)
    rows = re.findall(r'<div class="src-line[^"]*" id="L(\d+)">(.*?)</div>', html, re.S)
    assert len(rows) == len(vadd.version.source.splitlines())
    controls = 0
    for n, row in rows:
        links = re.findall(r"<a [^>]*>", row)
        assert 'tabindex="-1"' in links[0] and f'href="#L{n}"' in links[0], n
        assert len(links) <= 2, n  # the number (not focusable by tab) and at most one control
        controls += len(links) - 1
    assert 0 < controls < len(rows) // 2  # blank lines, imports and the reference get none


@pytest.mark.parametrize(
    ("params", "status"),
    [
        pytest.param({"version": "999999"}, 404, id="a-version-of-no-run"),
        pytest.param({"version": "p999999"}, 404, id="a-proposal-of-no-run"),
        pytest.param({"line": "999"}, 200, id="a-line-past-the-end-opens-nothing"),
        pytest.param({"line": "x"}, 200, id="a-line-that-is-no-number"),
    ],
)
def test_odd_parameters(client, owner, vadd, params, status) -> None:
    client.force_login(owner)
    response = client.get(reverse("run-evidence", args=[vadd.pk]), params)
    assert response.status_code == status
    if status == 200:
        assert '<section id="line-panel"' not in response.content.decode()


def test_a_round_that_started_from_a_candidate_is_its_own_version(client, owner, vadd) -> None:
    source = vadd.version.source
    revised = source.replace("BLOCK=1024", "BLOCK=2048").replace("cdiv(n, 1024)", "cdiv(n, 2048)")
    first = Round.objects.get(run=vadd, index=1)
    proposal = Proposal.objects.create(
        round=first, parent_source=source, source=revised, diff="", proposer="rules", status="pending"
    )
    Round.objects.create(run=vadd, index=3, parent_sha256=KernelVersion.digest(revised))
    client.force_login(owner)
    html = page(client, "run-evidence", vadd)
    assert f"?version=p{proposal.pk}" in html and f"proposal {proposal.pk} (round 1)" in html
    other = page(client, "run-evidence", vadd, version=f"p{proposal.pk}")
    assert "BLOCK=2048" in re.sub(r"<[^>]+>", "", other)
    assert "No compiled stages were kept for this version" in other


# --- passes ----------------------------------------------------------------------------------


def test_a_pass_diff_on_real_dumps(client, owner, vadd) -> None:
    client.force_login(owner)
    dumps = {a.name.rsplit("/", 1)[1]: a for a in Artefact.objects.filter(run=vadd, kind="pass_dump")}
    coalesce = next(int(n.split("-")[0]) for n in dumps if n.endswith("-TritonGPUCoalesce"))
    html = page(client, "run-passes", vadd, **{"pass": coalesce})
    assert re.search(r"<h2 id=\"pass-title\">\d+ · TritonGPUCoalesce</h2>", html)
    assert "+9 <code>ttg.convert_layout</code>" in html  # the op counts it changed
    added = re.findall(r'<div class="d-row d-add".*?<code class="d-text" role="cell">(.*?)</code>', html)
    assert any("ttg.convert_layout" in t for t in added) and any("#blocked1" in t for t in added)
    assert not any(" loc(" in t for t in added)
    assert (
        'rel="prev">← ConvertTritonToTritonGPU' in html
        and 'rel="next">TritonGPURemoveLayoutConversions →' in html
    )


def test_the_passes_page_opens_at_the_first_pass_that_changed_the_ir(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-passes", vadd)
    assert re.search(r'<h2 id="pass-title">\d+ · Canonicalizer</h2>', html)
    assert "first pass that changed the IR" in html
    steps = re.findall(r'<li><a href="[^"]*pass=(\d+)"', html)
    assert (
        len(steps) == Artefact.objects.filter(run=vadd, kind="pass_dump").count() - 1
    )  # the input is no pass


def test_htmx_gets_the_passes_block_alone(client, owner, vadd) -> None:
    client.force_login(owner)
    body = client.get(reverse("run-passes", args=[vadd.pk]), HTTP_HX_TARGET="passes", **HTMX).content.decode()
    assert body.lstrip().startswith('<div class="passes" id="passes">') and "<html" not in body


def test_a_pass_that_was_not_kept_is_404(client, owner, vadd) -> None:
    client.force_login(owner)
    assert client.get(reverse("run-passes", args=[vadd.pk]), {"pass": 9999}).status_code == 404
    assert client.get(reverse("run-passes", args=[vadd.pk]), {"kernel": "nope"}).status_code == 404


# --- profile and roofline --------------------------------------------------------------------


def test_the_profile_shows_each_measured_case_with_the_candidate(client, owner, gemm) -> None:
    run, proposal_id = gemm
    client.force_login(owner)
    html = page(client, "run-profile", run)
    op = gemm_report()
    rows = re.findall(r'<tr data-case="(\d+)">(.*?)</tr>', html, re.S)
    assert [int(i) for i, _ in rows] == [0, 1, 2, 3, 4]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for _, r in rows]
    m, n, k = GEMM_SHAPES[0]
    assert cells[0][1] == "float16" and cells[0][2] == f"{op['cases'][0]['initial_ms']:.3f}"
    assert cells[0][6] == f"{2 * m * n * k / (2 * (m * k + k * n + m * n)):.1f}"  # FLOP/byte
    assert cells[0][8] == f"{2 * m * n * k / (op['cases'][0]['initial_ms'] * 1e-3) / 1e12:.1f}"  # TFLOP/s
    assert cells[0][11] == "compute"
    assert cells[0][12] == f"{op['cases'][0]['best_ms']:.3f}"  # the candidate's time
    assert f'href="{reverse("proposal-detail", args=[proposal_id])}"' in html


def test_the_profile_lists_the_kernels_a_call_runs(client, owner, gemm) -> None:
    """Where the device timed each kernel of the forward, the page lists them per case, the
    module's Triton kernels apart from the rest (a wrapper's sort, fill or copy)."""
    run, _ = gemm
    client.force_login(owner)
    assert "Kernels a call runs" not in page(client, "run-profile", run)  # the H200 profile had none
    row = run.artefacts.filter(kind=Artefact.Kind.PROFILE).order_by("-id").first()
    data = json.loads(row.text)
    kernel = "matmul_kernel"
    data["cases"][0]["launches"] = [{"kernel": kernel, "grid": [1024, 1, 1], "num_warps": 8, "num_stages": 3}]
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half> >(int)"
    data["cases"][0]["kernel_us"] = [[kernel, 812.24], [fill, 40.5]]
    row.data = zlib.compress(json.dumps(data).encode())
    row.save(update_fields=["data"])
    html = page(client, "run-profile", run)
    (item,) = re.findall(r'<li data-case="0">(.*?)</li>', html, re.S)
    assert f'<span class="kernel-triton">{kernel} 812.2 µs</span>' in item
    assert '<span class="kernel-other">vectorized_elementwise_kernel (FillFunctor) 40.5 µs' in item
    assert "(not the module's Triton code)" in item
    assert '<li data-case="1">' not in html


def test_the_roofline_puts_parent_and_candidate_at_the_same_intensity(client, owner, gemm) -> None:
    run, _ = gemm
    client.force_login(owner)
    html = page(client, "run-profile", run)
    svg = html[html.index("<svg viewBox") : html.index("</svg>")]
    assert "style=" not in svg  # the CSP allows no style attributes
    points = {}
    for series, case, body in re.findall(
        r'<g class="rl-point rl-\w+" data-series="(\w+)" data-case="(\d+)">(.*?)</g>', svg, re.S
    ):
        if series == "parent":
            x, y = re.search(r'<circle cx="([\d.]+)" cy="([\d.]+)"', body).groups()
        else:
            x, y = (float(v) + 5 for v in re.search(r'<rect x="([\d.]+)" y="([\d.]+)"', body).groups())
        points[(series, int(case))] = (float(x), float(y))
    assert len(points) == 10
    op = gemm_report()
    for c in op["cases"]:
        px, py = points[("parent", c["index"])]
        cx, cy = points[("candidate", c["index"])]
        assert cx == pytest.approx(px, abs=0.2)  # a rewrite keeps the intensity
        assert (cy < py) == (c["best_ms"] < c["initial_ms"])  # faster is higher (SVG y grows down)
    # more intensity is further right: 8192^3 before 1024^3
    assert points[("parent", 1)][0] > points[("parent", 0)][0] > points[("parent", 3)][0]
    assert "4800 GB/s" in svg and "fp16 989.4 TFLOP/s" in svg and "measured 4300 GB/s" in svg
    title = re.search(
        r'data-case="0">\s*<title>parent · case 0: ([\d.]+) FLOP/B, ([\d.]+) TFLOP/s', svg
    ).groups()
    assert title == ("1365.3", "319.5")


def test_a_case_without_flops_is_listed_not_plotted(client, owner, gemm) -> None:
    run, _ = gemm
    row = Artefact.objects.get(run=run, kind="profile")
    data = json.loads(row.text)
    data["cases"][3]["flops"] = 0
    text = json.dumps(data)
    Artefact.objects.filter(pk=row.pk).update(data=zlib.compress(text.encode()))
    client.force_login(owner)
    html = page(client, "run-profile", run)
    assert 'data-case="3"' not in html.split("</svg>")[0].split("<svg viewBox")[1]
    assert "parent case 3 (no FLOPs counted)" in html


def test_a_cpu_run_says_nothing_was_measured(client, owner, vadd) -> None:
    client.force_login(owner)
    html = page(client, "run-profile", vadd)
    assert "Nothing was measured for this version" in html and "<svg viewBox" not in html


def test_the_run_page_shows_the_profile_and_links_the_evidence(client, owner, gemm) -> None:
    run, _ = gemm
    client.force_login(owner)
    html = page(client, "run-detail", run)
    assert reverse("run-evidence", args=[run.pk]) in html and reverse("run-passes", args=[run.pk]) in html
    assert reverse("run-profile", args=[run.pk]) in html
    assert 'id="profile-title"' in html and html.count('<tr><td class="num">') >= 5


# --- artefacts on the run page ---------------------------------------------------------------


def test_artefacts_are_listed_in_pipeline_order_once_each(client, owner, vadd) -> None:
    # an older worker stored the same artefacts again for round 2, and a log
    again = Round.objects.get(run=vadd, index=2)
    old = [
        Artefact.build(
            run=vadd, round=again, kind=a.kind, name=a.name, text=a.text, source_sha256=a.source_sha256
        )
        for a in Artefact.objects.filter(run=vadd)
    ]
    Artefact.objects.bulk_create(old + [Artefact.build(run=vadd, kind="log", name="a-log", text="x")])
    client.force_login(owner)
    html = page(client, "run-detail", vadd)
    section = html[html.index('id="artefacts-title"') :]
    kinds = re.findall(r"<td>(TTIR|TTGIR|LLVM IR|PTX|SASS|pass dump|log)</td>", section)
    order = ["TTIR", "TTGIR", "LLVM IR", "PTX", "SASS", "pass dump", "log"]
    assert kinds == sorted(kinds, key=order.index)
    assert kinds.count("PTX") == 1 and kinds.count("log") == 1
    names = re.findall(r'<td class="wrap"><a href="[^"]+">([^<]+)</a>', section)
    dumps = [n for n in names if "/" in n]
    assert dumps == sorted(dumps, key=lambda n: int(n.rsplit("/", 1)[1].split("-")[0]))  # pass order


# --- no server paths -------------------------------------------------------------------------


def test_no_page_shows_a_server_path(client, owner, vadd) -> None:
    # a row stored before paths were scrubbed
    old = Artefact.build(
        run=vadd,
        kind="ptx",
        name="old.ptx",
        text='\t.file\t1 "/tmp/kernelopt-loop-abc/v_0123456789abcdef.py"\n'
        '\t.file\t2 "/root/.venv/lib/python3.11/site-packages/triton/language/standard.py"\n',
        source_sha256=vadd.version.sha256,
    )
    old.save()
    client.force_login(owner)
    urls = [
        (reverse("run-detail", args=[vadd.pk]), {}),
        (reverse("run-evidence", args=[vadd.pk]), {"line": LOAD_LINE}),
        (reverse("run-passes", args=[vadd.pk]), {}),
        (reverse("run-profile", args=[vadd.pk]), {}),
        *((reverse("artefact-detail", args=[a.pk]), {}) for a in Artefact.objects.filter(run=vadd)),
        *((reverse("artefact-raw", args=[a.pk]), {}) for a in Artefact.objects.filter(run=vadd)),
    ]
    for url, params in urls:
        body = client.get(url, params).content.decode()
        assert not SERVER_PATHS.search(body), (url, SERVER_PATHS.search(body).group(0))
    raw = client.get(reverse("artefact-raw", args=[old.pk])).content.decode()
    assert '"vadd.py"' in raw and '"triton/language/standard.py"' in raw


# --- who sees them, and what they cost -------------------------------------------------------


@pytest.fixture
def evidence_pages(vadd):
    return {
        "evidence": reverse("run-evidence", args=[vadd.pk]) + f"?line={LOAD_LINE}",
        "passes": reverse("run-passes", args=[vadd.pk]),
        "profile": reverse("run-profile", args=[vadd.pk]),
    }


@pytest.mark.parametrize(
    ("user_name", "status"),
    [
        pytest.param("owner", 200, id="member"),
        pytest.param("reviewer", 200, id="reviewer"),
        pytest.param("outsider", 404, id="another-teams-user"),
    ],
)
def test_only_the_team_sees_the_evidence(client, request, evidence_pages, user_name, status) -> None:
    client.force_login(request.getfixturevalue(user_name))
    for name, url in evidence_pages.items():
        assert client.get(url).status_code == status, name


def test_anonymous_users_are_sent_to_log_in(client, evidence_pages) -> None:
    for name, url in evidence_pages.items():
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), name


@pytest.mark.parametrize(
    ("name", "params", "limit"),
    [
        # measured: 9, 10 (the panel reads the stages' text), 8, 8 and 13; two are the session and its user
        pytest.param("run-evidence", {}, 9, id="evidence"),
        pytest.param("run-evidence", {"line": LOAD_LINE}, 10, id="evidence-with-a-line"),
        pytest.param("run-passes", {}, 8, id="passes"),
        pytest.param("run-profile", {}, 8, id="profile"),
        pytest.param("run-detail", {}, 14, id="run-page"),
    ],
)
def test_query_counts_are_bounded(
    client, owner, vadd, django_assert_max_num_queries, name, params, limit
) -> None:
    for index in range(3, 13):  # more rounds and findings do not mean more queries
        rnd = Round.objects.create(run=vadd, index=index, parent_sha256=vadd.version.sha256)
        Finding.objects.create(run=vadd, round=rnd, tier=0, code="X", severity="low", message="m", lines=[15])
    client.force_login(owner)
    client.get(reverse(name, args=[vadd.pk]), params)  # the session, warm
    with django_assert_max_num_queries(limit):
        assert client.get(reverse(name, args=[vadd.pk]), params).status_code == 200


def test_a_queued_run_shows_no_evidence_section(client, owner, run) -> None:
    client.force_login(owner)
    html = page(client, "run-detail", run)
    assert 'id="evidence-title"' not in html and reverse("run-evidence", args=[run.pk]) not in html
