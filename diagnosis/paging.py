"""One page of a history list, at the cost of the rows shown.

A list's rows carry figures from subqueries (a kernel's latest run and speedup, a run's
deepest tier). With LIMIT/OFFSET PostgreSQL computes the select list of every row it skips, so
page 200 of the runs ran 5,000 rows' subqueries to show 25 (690 ms at 10,000 runs,
bench/web_scale.py). `page_of` counts and slices a query of primary keys only, then fetches
the page's rows with everything the list annotates: three queries, whatever the page.
"""

from __future__ import annotations

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet


def page_of(qs: QuerySet, number: object, size: int) -> Page:
    """Page `number` of `qs` (its order kept); an out-of-range or bad number gives the last or
    first page, as Paginator.get_page does."""
    # values_list keeps what the filters and the order read and drops every other annotation
    keys = qs.values_list("pk", flat=True)
    page = Paginator(keys, size).get_page(number)
    ids = list(page.object_list)
    rows = {row.pk: row for row in qs.filter(pk__in=ids)} if ids else {}
    page.object_list = [rows[pk] for pk in ids if pk in rows]
    return page
