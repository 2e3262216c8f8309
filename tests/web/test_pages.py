"""What the pages show, and their htmx fragments."""

from __future__ import annotations

import pytest
from django.urls import reverse

from diagnosis.models import Artefact, DiagnosisRun, Pattern
from diagnosis.templatetags.kernelopt import ARTEFACT_PAGE_LINES

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_kernel_list_shows_the_latest_run_status(client, owner, run):
    client.force_login(owner)
    DiagnosisRun.objects.create(version=run.version, device="cuda", status="running")
    page = client.get(reverse("kernel-list")).content.decode()
    assert "double" in page
    assert 'status-running">running' in page


def test_kernel_list_table_fragment_for_htmx(client, owner, run, team):
    client.force_login(owner)
    response = client.get(reverse("kernel-list"), {"team": team.pk}, HTTP_HX_TARGET="results", **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="results">')
    assert "<html" not in body


def test_kernel_detail_lists_versions_runs_and_the_upload_form(client, owner, run):
    client.force_login(owner)
    page = client.get(reverse("kernel-detail", args=[run.version.kernel.pk])).content.decode()
    assert reverse("run-detail", args=[run.pk]) in page
    assert "v1" in page
    assert reverse("version-upload", args=[run.version.kernel.pk]) in page
    assert 'type="file"' in page


def test_run_page_polls_its_status_while_queued(client, owner, run):
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="run-status"' in page
    assert 'hx-trigger="every 2s"' in page
    assert f'href="{reverse("run-detail", args=[run.pk])}"' in page  # the poll has a plain link too


def test_status_fragment_for_htmx(client, owner, run, round_):
    client.force_login(owner)
    run.status, run.current_round, run.current_tier = "running", 1, 2
    run.save()
    response = client.get(
        reverse("run-detail", args=[run.pk]), {"was": "running"}, HTTP_HX_TARGET="run-status", **HTMX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="run-status"')
    assert "<html" not in body and "Findings" not in body
    assert 'data-status="running"' in body and "every 2s" in body
    assert round_.hypothesis in body  # the rounds table travels with the status


def test_status_poll_reloads_the_page_when_the_run_finishes(client, owner, run):
    client.force_login(owner)
    run.status = "done"
    run.save()
    url = reverse("run-detail", args=[run.pk])
    response = client.get(url, {"was": "running"}, HTTP_HX_TARGET="run-status", **HTMX)
    assert response.headers.get("HX-Refresh") == "true"
    # A finished run's fragment stops polling.
    body = client.get(url, {"was": "done"}, HTTP_HX_TARGET="run-status", **HTMX).content.decode()
    assert "every 2s" not in body


def test_run_page_shows_rounds_findings_by_tier_source_lines_and_evidence(
    client, owner, run, round_, finding, artefact
):
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert round_.hypothesis in page
    assert "Tier 0 · pattern triage" in page
    assert "small_block" in page and "medium" in page
    assert 'href="#src-23"' in page  # the finding's line links to the listing
    assert 'id="src-23"' in page
    assert '<span class="hll">' in page  # pygments highlights the finding's line
    assert "ld.global.f32" in page  # evidence excerpt
    assert f"{reverse('artefact-detail', args=[artefact.pk])}#L3" in page


def test_artefact_page_numbers_lines_with_anchors(client, owner, artefact):
    client.force_login(owner)
    page = client.get(reverse("artefact-detail", args=[artefact.pk])).content.decode()
    assert 'id="L50"' in page and 'href="#L50"' in page
    assert "// ptx line 50" in page
    assert artefact.sha256 in page
    assert "PTX" in page


def test_large_artefacts_are_paginated(client, owner, run):
    client.force_login(owner)
    text = "\n".join(f"line {i}" for i in range(1, ARTEFACT_PAGE_LINES + 11))
    artefact = Artefact.build(run=run, kind="sass", name="big.sass", text=text)
    artefact.save()
    url = reverse("artefact-detail", args=[artefact.pk])
    first = client.get(url).content.decode()
    assert 'id="L1"' in first and f'id="L{ARTEFACT_PAGE_LINES + 1}"' not in first
    assert "?page=2" in first
    second = client.get(url, {"page": 2}).content.decode()
    assert f'id="L{ARTEFACT_PAGE_LINES + 10}"' in second and 'id="L1"' not in second


def test_artefact_download_is_the_whole_text(client, owner, artefact):
    client.force_login(owner)
    response = client.get(reverse("artefact-raw", args=[artefact.pk]))
    assert response.content.decode() == artefact.text
    assert "attachment" in response["Content-Disposition"]


def test_proposal_page_shows_diff_rationale_findings_and_verification(client, reviewer, proposal):
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert proposal.rationale in page
    assert "small_block" in page
    assert "BLOCK=<ins>1024</ins>" in page  # the diff, with the changed word marked
    assert "61.5 %" in page and "2.00x faster" in page
    assert "0.020 ms" in page and "0.010 ms" in page


def test_patterns_page_and_its_htmx_fragment(client, owner, team, proposal):
    client.force_login(owner)
    Pattern.objects.create(
        team=team,
        family="launch_config",
        mechanism="Bigger blocks",
        before="a",
        after="b",
        example_diff="-a\n+b",
        evidence=["small_block"],
    )
    Pattern.objects.create(
        team=team, family="hints", mechanism="Divisibility", before="c", after="d", example_diff=""
    )
    url = reverse("team-patterns", args=[team.pk])
    page = client.get(url).content.decode()
    assert "Bigger blocks" in page and "Divisibility" in page
    fragment = client.get(url, {"family": "hints"}, HTTP_HX_TARGET="pattern-list", **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="pattern-list">')
    assert "Divisibility" in fragment and "Bigger blocks" not in fragment


def test_every_hx_get_has_an_href(client, owner, team, run, proposal):
    """Each htmx action is also a plain link (or, for a form, its action): pages work without JS."""
    import re

    client.force_login(owner)
    Pattern.objects.create(team=team, family="a", mechanism="m", before="", after="", example_diff="")
    Pattern.objects.create(team=team, family="b", mechanism="m", before="", after="", example_diff="")
    for _ in range(30):  # more than a page of runs: the pager's links
        DiagnosisRun.objects.create(version=run.version, device="cpu")
    urls = (
        reverse("kernel-list"),
        reverse("team-patterns", args=[team.pk]),
        reverse("proposal-detail", args=[proposal.pk]),
        reverse("run-list"),
        reverse("finding-list"),
        reverse("proposal-list"),
    )
    seen = 0
    for url in urls:
        page = client.get(url).content.decode()
        for tag in re.findall(r"<(?:a|form) [^>]*hx-(?:get|post)[^>]*>", page):
            seen += 1
            if tag.startswith("<form"):
                assert 'action="' in tag, tag
            else:
                assert 'href="' in tag, tag
    assert seen >= 10


def test_pages_load_htmx_from_our_static_files_with_csrf_header(client, owner):
    client.force_login(owner)
    page = client.get(reverse("kernel-list")).content.decode()
    assert 'src="/static/htmx/htmx.min.js"' in page
    assert 'hx-headers=\'{"X-CSRFToken": "' in page


def test_the_verification_reads_the_stored_format_and_says_each_state_in_words():
    from diagnosis.engine.serialize import verification_from_json
    from diagnosis.review_views import verification_view

    view = verification_view(
        verification_from_json(
            {
                "correct": True,
                "timed": True,
                "cases": [{"index": 3, "time_ms": 1.0, "parent_ms": 3.0}, {"index": 4, "time_ms": 1.0, "parent_ms": 1.0}],
                "wall_s": 1.23456,
            }
        )
    )
    first, second = view.rows
    assert (first.label, first.correctness, first.candidate, first.parent, first.change) == (
        "case 3",
        "correct",
        "1.000 ms",
        "3.000 ms",
        "3.00x faster",
    )
    assert (first.change_class, second.change_class) == ("faster", "same")
    assert dict(view.facts)["Timing"] == "timed against its parent in the same process"
    assert not any(w in ("True", "False") for _, w in view.facts)


def test_an_untimed_proposal_says_it_was_checked_for_correctness_only(client, reviewer, proposal):
    proposal.verification = {"correct": True, "timed": False, "cases": []}
    proposal.save()
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert "Checked for correctness only" in page


def test_the_review_page_says_what_the_gate_checked_beyond_the_tolerance_table(client, reviewer, proposal):
    from diagnosis.engine.records import CandidateOutcome, CaseTiming
    from diagnosis.engine.serialize import verification_json

    note = (
        "case 0, seed 0: outside the float32 tolerance of the reference, within its own rounding: judged "
        "against Model's float64 run, the output is 3.3e-08 off it (relative L2) and the float32 reference 4.8e-05"
    )
    outcome = CandidateOutcome(correct=True, cases=(CaseTiming(0, 0.5, 1.0, 0.1),), parent_ms=(1.0,), gate_notes=(note,))
    proposal.verification = verification_json(outcome)
    proposal.save()
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert f"<dt>Gate</dt><dd>{note.replace(chr(39), '&#x27;')}</dd>" in page


def test_the_review_page_shows_what_the_autotuner_chose_per_case(client, reviewer, proposal):
    from diagnosis.engine.records import CandidateOutcome, CaseTiming
    from diagnosis.engine.serialize import verification_json

    chosen = "matmul_kernel: BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3"
    outcome = CandidateOutcome(
        correct=True,
        cases=(CaseTiming(0, 0.5, 1.0, 0.1), CaseTiming(1, 0.2, 0.4, 0.05)),
        parent_ms=(1.0, 0.3),
        autotune_choices=(("case 0", (chosen,)), ("verify 0", ("matmul_kernel: BLOCK_M=16",))),
    )
    proposal.verification = verification_json(outcome)
    proposal.save()
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert '<th scope="col">Autotune chose</th>' in page
    assert f"<code>{chosen}</code>" in page  # case 0
    assert "<code>–</code>" in page  # case 1: nothing recorded for it
    assert proposal.verification["autotune_choices"]["verify 0"] == ["matmul_kernel: BLOCK_M=16"]

    proposal.verification = verification_json(CandidateOutcome(correct=True, cases=(CaseTiming(0, 0.5),), parent_ms=(1.0,)))
    proposal.save()
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert "Autotune chose" not in page


def test_the_review_page_shows_each_cases_noise_floor_and_timing_rounds(client, reviewer, proposal):
    """A reviewer can see what a verdict stood on: the parent's spread and every round."""
    from diagnosis.engine.records import CandidateOutcome, CaseTiming
    from diagnosis.engine.serialize import verification_json

    outcome = CandidateOutcome(
        correct=True,
        cases=(CaseTiming(0, 0.0558, 0.036, 0.014), CaseTiming(1, 0.2, 0.4, 0.05)),
        parent_ms=(0.0348, 0.3),
        case_noise=(0.0298, 0.01),
        case_rounds=(((0.0556, 0.0558, 0.0561), (0.0347, 0.0348, 0.0352)), ((0.2, 0.2), (0.3, 0.3))),
    )
    proposal.verification = verification_json(outcome)
    proposal.save()
    assert proposal.verification["cases"][0]["rounds_ms"]["parent"] == [0.0347, 0.0348, 0.0352]
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert ">Noise floor</th>" in page and "3.0 %" in page and "1.0 %" in page
    assert "the wider relative spread of the parent's and the candidate's timing rounds" in page
    assert '<th scope="col">Rounds, ms (parent | candidate)</th>' in page
    assert "0.0347, 0.0348, 0.0352 | 0.0556, 0.0558, 0.0561" in page

    # rows stored before rounds were kept show neither column
    proposal.verification = {"correct": True, "timed": True, "cases": [{"index": 0, "time_ms": 0.5, "parent_ms": 1.0}]}
    proposal.save()
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert "Noise floor" not in page and "Rounds, ms" not in page
