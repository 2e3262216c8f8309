"""How fast the pages answer with a team's history of a realistic size.

    python bench/web_scale.py [--database-url URL] [--requests 30] [--reseed] [--json OUT]

Seeds a separate PostgreSQL database (default: DATABASE_URL's, or kernelopt's, name plus
`_webscale`; created and migrated when missing) with 1,000 kernels, 10,000 runs, 100,000
findings and 20,000 artefacts (and 30,000 rounds, 5,000 proposals) through bulk_create, once:
a later call reuses the data unless --reseed. Then requests every list and detail page as a
signed-in reviewer of the team through Django's test client (the whole stack but the socket:
middleware, sessions, queries, templates), N times each after two warm-up requests, and
prints per page the median and 95th-percentile time, the number of queries and the size.
The goal (issue 17): under 150 ms median and 400 ms p95 on the development machine. The load
average is printed with the figures: on a shared machine they are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import zlib
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/kernelopt"
SIZES = {"kernels": 1000, "runs": 10_000, "findings": 100_000, "artefacts": 20_000}
GOAL_MEDIAN_MS, GOAL_P95_MS = 150.0, 400.0
BATCH = 2000
CODES = [
    ("T0-NO-AUTOTUNE", 0, "launch_config"), ("T0-SMALL-BLOCK", 0, "launch_config"), ("T0-MISSING-HINT", 0, "hints"),
    ("T0-MULTI-PASS", 0, "single_pass"), ("T0-ATOMIC-REDUCTION", 0, "block_reduction"),
    ("T1-SLOWER-THAN-REFERENCE", 1, "none"), ("T1-FEW-PROGRAMS", 1, "launch_config"),
    ("T1-MEMORY-BELOW-PEAK", 1, "coalesce"), ("T1-COMPUTE-BELOW-PEAK", 1, "use_dot"),
    ("IR_SCALAR_GLOBAL", 2, "hints"), ("IR_NO_ASYNC_COPY", 2, "pipelining"), ("IR_LAYOUT_CONVERT", 2, "coalesce"),
    ("IR_SPILLS", 2, "launch_config"), ("CG_VECTORIZATION_BLOCKED", 3, "hints"), ("CG_NOT_PIPELINED", 3, "pipelining"),
    ("CG_PASS_EFFECTS", 3, "none"), ("CG_COUNTERFACTUAL", 3, "hints"),
]  # fmt: skip


def scale_url(base: str) -> str:
    u = urlparse(base)
    name = unquote(u.path.lstrip("/")) or "kernelopt"
    return u._replace(path="/" + name + "_webscale").geturl()


def ensure_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    u = urlparse(url)
    name = unquote(u.path.lstrip("/"))
    with psycopg.connect(host=u.hostname, port=u.port or 5432, user=unquote(u.username or "") or None,
                         password=unquote(u.password or "") or None, dbname="postgres", autocommit=True) as conn:  # fmt: skip
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            print(f"created database {name}", file=sys.stderr)


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernelopt_site.settings")
    os.environ.setdefault("DEBUG", "0")
    import django

    django.setup()
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- seeding ------------------------------------------------------------------------------------


def _bulk(model, rows: list, label: str) -> list:
    out = []
    t0 = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        out += model.objects.bulk_create(rows[i : i + BATCH])
    print(f"  {label}: {len(out)} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def seed(sizes: dict[str, int]) -> None:
    """The team `scale` (its reviewer `scale` sees everything) with `sizes` of history."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from diagnosis.models import (
        Artefact,
        DiagnosisRun,
        Finding,
        Kernel,
        KernelVersion,
        Proposal,
        Review,
        Round,
        Team,
    )

    rng = random.Random(17)
    sources = [p.read_text() for p in sorted((ROOT / "bench" / "suite").glob("[0-9]*.py"))]
    ptx = "\n".join(
        f"\tld.global.v4.f32 {{%f{i}, %f{i + 1}, %f{i + 2}, %f{i + 3}}}, [%rd{i}];" for i in range(60)
    )
    now = timezone.now()
    n_kernels, n_runs = sizes["kernels"], sizes["runs"]
    t0 = time.perf_counter()
    with transaction.atomic():
        User = get_user_model()
        user = User.objects.create_user("scale", password="scale-pass-1")
        outsider = User.objects.create_user("scale-outsider", password="scale-pass-1")
        team = Team.objects.create(name="scale")
        team.members.add(user)
        team.reviewers.add(user)
        Team.objects.create(name="scale-other").members.add(outsider)

        kernels = _bulk(Kernel, [
            Kernel(team=team, name=f"kernel_{i:04d}", owner=user,
                   created=now - timezone.timedelta(hours=n_kernels - i))
            for i in range(n_kernels)
        ], "kernels")  # fmt: skip
        versions = []
        for k_i, k in enumerate(kernels):
            for number in (1, 2):
                src = sources[(k_i + number) % len(sources)] + f"\n# kernel {k_i} version {number}\n"
                versions.append(KernelVersion(kernel=k, number=number, source=src, sha256=KernelVersion.digest(src),
                                              filename=f"k{k_i}.py", created_by=user, created=k.created))  # fmt: skip
        versions = _bulk(KernelVersion, versions, "versions")

        runs = []
        for i in range(n_runs):
            k_i = i % n_kernels
            v = versions[2 * k_i + (i // n_kernels) % 2]
            status = rng.choices(["done", "failed", "queued", "running"], [85, 8, 4, 3])[0]
            device = "cuda" if i % 3 else "cpu"
            speedup = round(rng.uniform(1.0, 3.0), 4)
            summary = {
                "stop_reason": "nothing_left", "stop_detail": "2 consecutive rounds found nothing left to try",
                "rounds": 3, "improved": speedup > 1.05, "speedup_over_initial": speedup,
                "pct_sol": round(rng.uniform(10, 90), 2), "initial": None, "best": None,
                "device_name": "NVIDIA H200" if device == "cuda" else "",
            } if status == "done" else {}  # fmt: skip
            runs.append(DiagnosisRun(version=v, device=device, status=status, round_budget=15, current_round=3,
                                     summary=summary, requested_by=user, wall_s=60.0, device_s=55.0,
                                     created=v.created + timezone.timedelta(minutes=i // n_kernels)))  # fmt: skip
        runs = _bulk(DiagnosisRun, runs, "runs")

        rounds = _bulk(Round, [
            Round(run=r, index=j, tier_reached=min(3, j + 1), verdict=["improved", "no-gain", "inconclusive"][j - 1],
                  hypothesis="hints: vector loads (backed by IR_SCALAR_GLOBAL)\nverified: 1.2x over its parent",
                  escalation=[{"tier": 0, "climb": True, "next_tier": 1, "reason": "climb",
                               "failed_tests": ["explains"]}])
            for r in runs for j in (1, 2, 3)
        ], "rounds")  # fmt: skip

        per_run = max(1, sizes["findings"] // n_runs)
        findings = []
        for r_i, r in enumerate(runs):
            for j in range(per_run):
                code, tier, family = CODES[(r_i + j) % len(CODES)]
                findings.append(Finding(
                    run=r, round=rounds[3 * r_i + j % 3], tier=tier, code=code, severity="medium", family=family,
                    message=f"{code} at line {20 + j}: the kernel loads scalars where vectors would do",
                    lines=[20 + j], kernel="k",
                    evidence=[{"kind": "ptx", "kernel": "k", "lines": [3], "excerpt": "ld.global.f32", "name": ""}],
                ))  # fmt: skip
        findings = _bulk(Finding, findings, "findings")

        per_run = max(1, sizes["artefacts"] // n_runs)
        text = ptx.encode()
        packed = zlib.compress(text, 6)
        _bulk(Artefact, [
            Artefact(run=r, round=rounds[3 * r_i], kind=["ptx", "sass", "ttgir", "llir"][j % 4], name=f"k.{j}",
                     data=packed, size=len(text), compressed_size=len(packed), sha256=f"{r_i:032x}{j:032x}")
            for r_i, r in enumerate(runs) for j in range(per_run)
        ], "artefacts")  # fmt: skip

        verification = {"correct": True, "timed": True, "speedup": 1.5, "noise": 0.02, "suspect": False,
                        "cases": [{"index": c, "time_ms": 0.1, "parent_ms": 0.15, "ref_ms": 0.2, "sol_ms": 0.05,
                                   "pct_sol": 50.0, "speedup": 1.5, "noise_floor": 0.02} for c in range(5)]}  # fmt: skip
        proposals = []
        for r_i in range(0, len(runs), 2):
            v = runs[r_i].version
            proposals.append(Proposal(
                round=rounds[3 * r_i], parent_version=v, parent_source=v.source,
                source=v.source.replace("BLOCK", "BLOCK_SIZE", 3), diff="--- a\n+++ b\n", proposer="rules",
                family="hints", rationale="vector loads", verification=verification, speedup=1.5, pct_sol=50.0,
                status=rng.choices(["pending", "accepted", "rejected", "failed"], [60, 15, 10, 15])[0],
            ))  # fmt: skip
        proposals = _bulk(Proposal, proposals, "proposals")
        links = [
            Proposal.findings.through(proposal_id=p.pk, finding_id=findings[10 * (2 * p_i) + j].pk)
            for p_i, p in enumerate(proposals) for j in (0, 1) if 10 * (2 * p_i) + j < len(findings)
        ]  # fmt: skip
        _bulk(Proposal.findings.through, links, "proposal findings")
        _bulk(Review, [
            Review(proposal=p, reviewer=user, decision="accept" if p.status == "accepted" else "reject")
            for p in proposals if p.status in ("accepted", "rejected")
        ], "reviews")  # fmt: skip
    print(f"seeded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def seeded(sizes: dict[str, int]) -> bool:
    from diagnosis.models import Artefact, DiagnosisRun, Finding, Kernel

    counts = {
        "kernels": Kernel.objects.filter(team__name="scale").count(),
        "runs": DiagnosisRun.objects.filter(version__kernel__team__name="scale").count(),
        "findings": Finding.objects.count(),
        "artefacts": Artefact.objects.count(),
    }
    return counts == sizes


def wipe() -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from diagnosis.models import BenchImport, DiagnosisRun, Kernel, Pattern, Team

    with connection.cursor() as cursor:  # TRUNCATE: a DELETE cascading over 100,000 rows takes minutes
        tables = [m._meta.db_table for m in (Pattern, BenchImport, DiagnosisRun, Kernel, Team)]
        tables.append(get_user_model()._meta.db_table)
        cursor.execute("TRUNCATE " + ", ".join(tables) + " CASCADE")


# --- timing ----------------------------------------------------------------------------------


def pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    from diagnosis.models import Artefact, DiagnosisRun, Kernel, Proposal, Team

    team = Team.objects.get(name="scale")
    kernel = Kernel.objects.filter(team=team).order_by("created").first()
    # a typical finished run: 3 rounds, 10 findings, 2 artefacts, a proposal
    run = DiagnosisRun.objects.filter(version__kernel=kernel, status="done").order_by("pk").first()
    proposal = Proposal.objects.filter(round__run__version__kernel__team=team).order_by("pk").first()
    artefact = Artefact.objects.filter(run__version__kernel__team=team).order_by("pk").first()
    return [
        ("kernel list", reverse("kernel-list")),
        ("kernel list, page 20", reverse("kernel-list") + "?page=20"),
        ("kernel list, filtered", reverse("kernel-list") + "?q=kernel_09&status=done&device=cuda"),
        ("kernel list, by finding code", reverse("kernel-list") + "?code=IR_SPILLS"),
        ("kernel", reverse("kernel-detail", args=[kernel.pk])),
        ("version", reverse("version-detail", args=[run.version_id])),
        ("run", reverse("run-detail", args=[run.pk])),
        ("run report (JSON)", reverse("run-report", args=[run.pk])),
        ("runs", reverse("run-list")),
        ("runs, page 200", reverse("run-list") + "?page=200"),
        ("runs, filtered", reverse("run-list") + "?device=cuda&code=IR_SPILLS&verdict=improved"),
        ("findings", reverse("finding-list")),
        ("findings, page 2000", reverse("finding-list") + "?page=2000"),
        ("findings, by code and tier", reverse("finding-list") + "?code=IR_SPILLS&tier=2"),
        ("proposals", reverse("proposal-list")),
        ("proposals, accepted", reverse("proposal-list") + "?status=accepted"),
        ("proposal", reverse("proposal-detail", args=[proposal.pk])),
        ("review queue", reverse("review-queue")),
        ("patterns", reverse("team-patterns", args=[team.pk])),
        ("artefact", reverse("artefact-detail", args=[artefact.pk])),
        ("upload form", reverse("kernel-upload")),
    ]


def _counter(queries: list[str]):
    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    return count


def measure(n: int) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="scale"))
    rows = []
    for name, url in pages():
        for _ in range(2):
            response = client.get(url)
            assert response.status_code == 200, (name, url, response.status_code)
        queries: list[str] = []
        with connection.execute_wrapper(_counter(queries)):
            size = len(client.get(url).content)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.get(url)
            times.append(1000 * (time.perf_counter() - t0))
        times.sort()
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        rows.append({"page": name, "url": url, "median_ms": round(statistics.median(times), 1),
                     "p95_ms": round(p95, 1), "queries": len(queries), "bytes": size})  # fmt: skip
        print(f"  {name}: {rows[-1]['median_ms']} ms", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url", help="the scale database (default: DATABASE_URL's name + _webscale)"
    )
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page")
    parser.add_argument("--reseed", action="store_true", help="wipe and seed again")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    for key, value in SIZES.items():
        parser.add_argument(f"--{key}", type=int, default=value)
    args = parser.parse_args(argv)
    sizes = {k: getattr(args, k) for k in SIZES}

    url = args.database_url or scale_url(os.environ.get("DATABASE_URL") or DEFAULT_URL)
    ensure_database(url)
    setup_django(url)
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if args.reseed or not seeded(sizes):
        wipe()
        seed(sizes)
        with connection.cursor() as cursor:
            # statistics and the visibility map, as autovacuum keeps them on a live database
            # (without the map no count can be an index-only scan)
            cursor.execute("VACUUM ANALYZE")
    load_before = os.getloadavg()
    rows = measure(args.requests)
    load_after = os.getloadavg()

    width = max(len(r["page"]) for r in rows)
    print(f"{sizes['kernels']} kernels, {sizes['runs']} runs, {sizes['findings']} findings, "
          f"{sizes['artefacts']} artefacts; {args.requests} requests per page; {os.cpu_count()} CPUs; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")  # fmt: skip
    print(f"{'page':<{width}}  median ms  p95 ms  queries  KiB")
    for r in rows:
        flag = "" if r["median_ms"] < GOAL_MEDIAN_MS and r["p95_ms"] < GOAL_P95_MS else "  over the goal"
        print(f"{r['page']:<{width}}  {r['median_ms']:>9.1f}  {r['p95_ms']:>6.1f}  {r['queries']:>7}  "
              f"{r['bytes'] / 1024:>4.0f}{flag}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"sizes": sizes, "requests": args.requests, "cpus": os.cpu_count(),
                                         "load": [load_before, load_after], "pages": rows}, indent=1))  # fmt: skip
    over = [r["page"] for r in rows if r["median_ms"] >= GOAL_MEDIAN_MS or r["p95_ms"] >= GOAL_P95_MS]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
