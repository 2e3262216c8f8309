"""KERNELOPT_HTTPS=1: secure cookies, HSTS, the redirect, the proxy header; check --deploy is clean.

Settings are read from the environment once, at import, so each case runs in a subprocess
with its own environment, as a deployment would.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK_CODE = re.compile(r"\((\w+\.[WE]\d+)\)")


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # DJANGO_ALLOW_ASYNC_UNSAFE: set for Playwright by tests/browser, never in a deployment.
        if not key.startswith(("KERNELOPT_", "SECURE_"))
        and key not in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_ALLOW_ASYNC_UNSAFE")
    }
    env.update(
        {
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(64)[:50],  # 50 characters, as Django asks
            "ALLOWED_HOSTS": "kernelopt.example.org",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "KERNELOPT_VAR_DIR": str(tmp_path),
        }
    )
    env.update(overrides)
    return env


DEPLOY = [
    pytest.param({"KERNELOPT_HTTPS": "1"}, set(), id="https-nothing-to-say"),
    pytest.param({}, {"security.W004", "security.W008", "security.W012", "security.W016"}, id="plain"),
    pytest.param(
        {"KERNELOPT_SECURE_COOKIES": "1"}, {"security.W004", "security.W008"}, id="old-secure-cookies"
    ),
    pytest.param({"KERNELOPT_HTTPS": "1", "KERNELOPT_HSTS_PRELOAD": "0"}, {"security.W021"}, id="no-preload"),
    pytest.param({"KERNELOPT_HTTPS": "1", "SECRET_KEY": "short"}, {"security.W009"}, id="short-secret-key"),
    pytest.param({"KERNELOPT_HTTPS": "1", "DEBUG": "1"}, {"security.W018"}, id="debug"),
]


@pytest.mark.parametrize(("overrides", "codes"), DEPLOY)
def test_check_deploy_says_nothing_only_with_https_on(tmp_path, overrides, codes):
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=_env(tmp_path, **overrides),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert set(CHECK_CODE.findall(output)) == codes, output
    if not codes:
        assert done.returncode == 0
        assert output.strip() == "System check identified no issues (0 silenced)."


HTTPS_SCRIPT = """
import json
import django
django.setup()
from django.conf import settings
from django.test import Client
client = Client(HTTP_HOST="kernelopt.example.org")
plain = client.get("/login/")
secure = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
csrf = secure.cookies[settings.CSRF_COOKIE_NAME]
print(json.dumps({
    "plain": [plain.status_code, plain.get("Location")],
    "secure": secure.status_code,
    "hsts": secure.get("Strict-Transport-Security"),
    "plain_hsts": plain.get("Strict-Transport-Security"),
    "csrf_cookie_secure": bool(csrf["secure"]),
    "session_cookie_secure": settings.SESSION_COOKIE_SECURE,
    "proxies": settings.KERNELOPT_PROXY_COUNT,
    "nosniff": secure.get("X-Content-Type-Options"),
    "referrer": secure.get("Referrer-Policy"),
    "frame": secure.get("X-Frame-Options"),
}))
"""


def _https_facts(tmp_path: Path, **overrides: str) -> dict:
    env = _env(tmp_path, DJANGO_SETTINGS_MODULE="kernelopt_site.settings", **overrides)
    done = subprocess.run(
        [sys.executable, "-c", HTTPS_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_https_mode_redirects_sends_hsts_and_secure_cookies_behind_the_proxy(tmp_path):
    facts = _https_facts(tmp_path, KERNELOPT_HTTPS="1")
    assert facts == {
        "plain": [301, "https://kernelopt.example.org/login/"],
        "secure": 200,
        "hsts": "max-age=31536000; includeSubDomains; preload",
        "plain_hsts": None,  # HSTS is only sent over HTTPS
        "csrf_cookie_secure": True,
        "session_cookie_secure": True,
        "proxies": 1,
        "nosniff": "nosniff",
        "referrer": "same-origin",
        "frame": "DENY",
    }


def test_without_https_mode_nothing_redirects_and_no_proxy_is_trusted(tmp_path):
    facts = _https_facts(tmp_path)
    assert facts["plain"] == [200, None] and facts["hsts"] is None
    assert facts["csrf_cookie_secure"] is False and facts["session_cookie_secure"] is False
    assert facts["proxies"] == 0
