"""Login throttling (django-axes): a user name is locked per client address after N failures.

KERNELOPT_LOGIN_FAILURES (5) failures in a row for one user name from one address lock that
pair for KERNELOPT_LOGIN_COOLOFF_MINUTES (15): the N-th failure and every attempt after it get
the 429 lockout page, the right password included. The client address comes from
X-Forwarded-For only when KERNELOPT_PROXY_COUNT says proxies are there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.test import RequestFactory, override_settings
from django.urls import reverse
from django.utils import timezone

from kernelopt_site.login import client_ip

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 5
RIGHT = "owner-pass-1"


def _login(client, username="owner", password="wrong", address="10.0.0.1", url="login", **extra):
    return client.post(
        reverse(url), {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


def _signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_defaults_are_five_failures_and_fifteen_minutes():
    assert settings.AXES_FAILURE_LIMIT == LIMIT
    assert settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_the_fifth_failure_locks_and_then_even_the_right_password_is_refused(client, owner):
    for _ in range(LIMIT - 1):
        response = _login(client)
        assert response.status_code == 200 and response.context["form"].errors
    locked = _login(client)
    assert locked.status_code == 429
    assert 'data-code="login-locked"' in locked.content.decode()
    assert locked["Retry-After"] == str(15 * 60)
    refused = _login(client, password=RIGHT)
    assert refused.status_code == 429 and not _signed_in(client)
    assert AccessAttempt.objects.get(username="owner", ip_address="10.0.0.1").failures_since_start >= LIMIT


OTHERS = [
    pytest.param("owner", "10.0.0.2", id="same-user-other-address"),
    pytest.param("reviewer", "10.0.0.1", id="other-user-same-address"),
]


@pytest.mark.parametrize(("username", "address"), OTHERS)
def test_a_lock_holds_only_for_its_user_name_and_address(client, owner, reviewer, username, address):
    for _ in range(LIMIT):
        _login(client)
    password = RIGHT if username == "owner" else "reviewer-pass-1"
    response = _login(client, username=username, password=password, address=address)
    assert response.status_code == 302 and _signed_in(client)


def test_a_good_login_resets_the_count(client, owner):
    for _ in range(LIMIT - 1):
        _login(client)
    assert _login(client, password=RIGHT).status_code == 302
    client.logout()
    for _ in range(LIMIT - 1):
        assert _login(client).status_code == 200
    assert _login(client, password=RIGHT).status_code == 302


def test_the_lock_ends_after_the_cooloff(client, owner):
    for _ in range(LIMIT):
        _login(client)
    assert _login(client, password=RIGHT).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert _login(client, password=RIGHT).status_code == 302 and _signed_in(client)


def test_the_admin_login_is_throttled_too(client, owner):
    owner.is_staff = True
    owner.save()
    for _ in range(LIMIT):
        last = _login(client, url="admin:login")
    assert last.status_code == 429
    assert _login(client, password=RIGHT, url="admin:login").status_code == 429


def test_the_demo_login_still_works(client):
    from diagnosis.management.commands import loaddemo

    call_command("loaddemo", "--no-enqueue", "--no-suite", stdout=StringIO(), stderr=StringIO())
    response = _login(client, username=loaddemo.DEMO_USER, password=loaddemo.DEMO_PASSWORD)
    assert response.status_code == 302 and response["Location"] == reverse("kernel-list")


ADDRESSES = [
    pytest.param(0, "10.0.0.9", "", "10.0.0.9", id="no-proxy"),
    pytest.param(0, "10.0.0.9", "1.2.3.4", "10.0.0.9", id="no-proxy-header-ignored"),
    pytest.param(1, "10.0.0.9", "1.2.3.4", "1.2.3.4", id="one-proxy"),
    pytest.param(1, "10.0.0.9", "6.6.6.6, 1.2.3.4", "1.2.3.4", id="one-proxy-client-wrote-the-left"),
    pytest.param(2, "10.0.0.9", "6.6.6.6, 1.2.3.4, 10.0.0.8", "1.2.3.4", id="two-proxies"),
    pytest.param(2, "10.0.0.9", "1.2.3.4", "10.0.0.9", id="two-proxies-header-too-short"),
    pytest.param(1, "10.0.0.9", "", "10.0.0.9", id="one-proxy-no-header"),
]


@pytest.mark.parametrize(("proxies", "remote", "forwarded", "expected"), ADDRESSES)
def test_the_client_address_trusts_only_the_configured_proxies(proxies, remote, forwarded, expected):
    request = RequestFactory().post("/login/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(KERNELOPT_PROXY_COUNT=proxies):
        assert client_ip(request) == expected


def test_without_a_proxy_a_forged_forwarded_header_does_not_escape_the_lock(client, owner):
    for n in range(LIMIT):
        _login(client, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    assert _login(client, password=RIGHT, HTTP_X_FORWARDED_FOR="203.0.113.99").status_code == 429


@override_settings(KERNELOPT_PROXY_COUNT=1)
def test_behind_one_proxy_the_lock_follows_the_forwarded_address(client, owner):
    for _ in range(LIMIT):
        _login(client, address="10.0.0.254", HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert (
        _login(client, password=RIGHT, address="10.0.0.254", HTTP_X_FORWARDED_FOR="203.0.113.7").status_code
        == 429
    )
    # Another client behind the same proxy is not locked out.
    other = _login(client, password=RIGHT, address="10.0.0.254", HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert other.status_code == 302


SQLITE_SCRIPT = """
import json
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.test import Client
call_command("migrate", verbosity=0)
get_user_model().objects.create_user("u", password="right-pass-1")
client = Client()
codes = [client.post("/login/", {"username": "u", "password": "wrong"}).status_code for _ in range(4)]
last = client.post("/login/", {"username": "u", "password": "right-pass-1"})
codes.append(last.status_code)
print(json.dumps({"codes": codes, "retry_after": last["Retry-After"]}))
"""


@pytest.mark.slow
def test_the_throttle_works_on_the_sqlite_of_make_run_with_the_env_settings(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kernelopt_site.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'kernelopt.sqlite3'}",
        "KERNELOPT_VAR_DIR": str(tmp_path),
        "KERNELOPT_LOGIN_FAILURES": "3",
        "KERNELOPT_LOGIN_COOLOFF_MINUTES": "2",
    }
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # Two failures answered, the third locks, the fourth and the right password are refused.
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"codes": [200, 200, 429, 429, 429], "retry_after": "120"}


def test_an_administrator_sees_the_attempts_in_the_admin(admin_client, client, owner):
    for _ in range(LIMIT):
        _login(client)
    page = admin_client.get(reverse("admin:axes_accessattempt_changelist"))
    assert page.status_code == 200 and "10.0.0.1" in page.content.decode()
