"""In Chromium: pick rules-then-LLM on the upload page, the embedded cpu worker runs the kernel
for real (sandboxed child, Triton's interpreter, the real tiers), the LLM is the scripted
stand-in reached by the real client, and the run page shows each round's proposer, prompt size,
tokens, cost and cited codes, and the LLM's cheating answer refused with the gate's reason."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django_dramatiq.middleware import DbConnectionsMiddleware
from dramatiq.brokers.stub import StubBroker

from diagnosis.models import DiagnosisRun, Proposal, Round
from runner import embedded
from tests.llm_standin import Reply, Request, StandIn, answer, codes_in, family_in
from tests.worker.conftest import bound_actors

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SECRET = "sk-browser-test-key-31337"
# On cpu the real tiers explain this kernel (three passes over each row; no autotune) and the
# rules have a rewrite for it, so round 1 is the rules'; its big timed cases are too large for
# the interpreter, its small verify cases are checked.
SOURCE = (Path(__file__).resolve().parents[2] / "bench" / "suite" / "09_softmax_fp32.py").read_text()
FORWARD = """\
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=1024)
        return out
"""
assert FORWARD in SOURCE
# computes once per shape and hands back the stored answer ever after
CACHES_OUTPUTS = SOURCE.replace(
    FORWARD,
    """\
    def forward(self, x):
        key = tuple(x.shape)
        if key not in ANSWERS:
            n_rows, n_cols = x.shape
            out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=1024)
            ANSWERS[key] = out
        return ANSWERS[key].clone()
""",
).replace("class ModelNew(nn.Module):", "ANSWERS = {}\n\n\nclass ModelNew(nn.Module):")
GOOD = SOURCE.replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=2048)")


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(DbConnectionsMiddleware())
    broker.emit_after("process_boot")
    with bound_actors(broker, f"llm-browser-{uuid.uuid4().hex[:8]}") as queues:
        broker.test_queues = queues
        yield broker
    embedded.stop()
    broker.close()


def test_rules_then_llm_from_the_upload_page_to_the_run_page(
    page, login, owner, team, stub_broker, settings, llm_standin: StandIn, tmp_path
) -> None:
    settings.KERNELOPT_DEVICES = ["cpu"]
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_API_KEY = llm_standin.url, "kernel-coder", SECRET
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_PRICE_PROMPT_PER_M, settings.LLM_PRICE_COMPLETION_PER_M = 3.0, 15.0
    settings.LLM_HYBRID_STALL_ROUNDS = 1  # the LLM goes first after one round without a win
    answers = iter([CACHES_OUTPUTS])  # first a cheat; then a good rewrite

    def respond(request: Request) -> Reply:
        codes = codes_in(request.user)
        module = next(answers, GOOD)
        return Reply(
            answer(
                module,
                family=family_in(request.user),
                addresses=tuple(codes[:1]),
                rationale=f"{codes[0] if codes else 'no code'} says the launch leaves work on the table.",
            ),
            prompt_tokens=2000,
        )

    llm_standin.respond = respond
    module = tmp_path / "softmax.py"
    module.write_text(SOURCE)
    worker = embedded.start(poll_ms=100)

    login("owner", "owner-pass-1")
    page.click("text=Upload a kernel")
    assert page.locator("#llm-off").count() == 0
    page.set_input_files("#id_file", str(module))
    page.select_option("#id_device", "cpu")
    page.select_option("#id_proposer", "hybrid")
    assert page.locator("#id_llm_model").input_value() == "kernel-coder"
    page.fill("#id_round_budget", "2")
    page.click("button:has-text('Upload and queue a run')")
    page.wait_for_url(re.compile(r"/kernels/\d+/$"))
    run = DiagnosisRun.objects.get()
    assert run.proposer == "hybrid"
    stub_broker.join(stub_broker.test_queues["cpu"], fail_fast=True)
    worker.join()
    run.refresh_from_db()
    assert run.status == "done", run.error
    assert llm_standin.requests, [
        (r.index, r.verdict, r.hypothesis, [p.proposer for p in r.proposals.all()])
        for r in Round.objects.filter(run=run)
    ]

    page.goto(f"/runs/{run.pk}/")
    assert page.locator("#run-status [data-status]").inner_text() == "done"
    rounds = list(Round.objects.filter(run=run).order_by("index"))
    cells = {r.index: page.locator(f".llm[data-round='{r.index}']") for r in rounds}
    proposers = {i: c.locator(".llm-proposer").inner_text() for i, c in cells.items()}
    # round 1: the rules have a rewrite for the round's family, so no token is spent; it gains
    # nothing (cpu times nothing), so the LLM goes first in round 2
    assert proposers[1] == "rules" and rounds[0].llm_requests == 0 and rounds[0].tokens == 0
    asked = [r for r in rounds if r.llm_requests]
    assert asked and all(proposers[r.index] == "llm" for r in asked)
    for r in asked:
        cell = cells[r.index]
        assert cell.locator(".llm-prompt").get_attribute("data-chars") == str(r.llm_prompt_chars)
        assert int(r.llm_prompt_chars) > len(SOURCE)  # the source and its evidence
        assert cell.locator(".llm-tokens").get_attribute("data-prompt") == "2000"
        assert cell.locator(".llm-cost").inner_text().startswith("$")
        cited = cell.locator(".llm-cited code").all_inner_texts()
        assert cited and set(cited) <= set(
            codes_in(llm_standin.requests[0].user) + codes_in(llm_standin.requests[-1].user)
        )
    # the cheat: refused by the gate, with its reason, on the run page and the proposal page
    cheat = Proposal.objects.filter(round__run=run, proposer="llm").order_by("id").first()
    assert cheat.status == Proposal.Status.FAILED and cheat.failure_reason.startswith("constant_output")
    refused = cells[cheat.round.index].locator(".llm-refused")
    assert refused.inner_text().startswith("refused: constant_output")
    page.click(f"a[href='/proposals/{cheat.pk}/']")
    assert "constant_output" in page.locator("body").inner_text()
    assert SECRET not in page.content()
