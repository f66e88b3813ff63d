"""Headless Chromium for the HTML report's tests: Debian's ``chromium`` package, installed with
apt-get when it is missing and we are root (as in CI); otherwise the tests skip, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def _apt(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["apt-get", *args], env=APT_ENV, capture_output=True, text=True, timeout=timeout)


def install_chromium() -> tuple[str | None, str]:
    """(path, why not): Chromium's path, installing Debian's package when possible."""
    found = find_chromium()
    if found:
        return found, ""
    if shutil.which("apt-get") is None:
        return None, "Chromium is not installed and there is no apt-get to install it (apt-get install chromium)"
    if os.geteuid() != 0:
        return None, "Chromium is not installed and installing it needs root: run `sudo apt-get install -y chromium`"
    try:
        proc = _apt("install", "-y", "--no-install-recommends", "chromium", timeout=1200)
        if proc.returncode != 0:  # a stale package list: refresh it once
            _apt("update", timeout=600)
            proc = _apt("install", "-y", "--no-install-recommends", "chromium", timeout=1200)
    except subprocess.TimeoutExpired:
        return None, "apt-get install chromium did not finish in 20 minutes"
    found = find_chromium()
    if found:
        return found, ""
    last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, f"apt-get install chromium failed (exit {proc.returncode}): {last[0]}"


def _headless(chrome: str, profile: Path) -> list[str]:
    return [
        chrome,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
    ]


def screenshot(
    chrome: str, html: Path, png: Path, width: int = 1280, height: int = 4000
) -> subprocess.CompletedProcess:
    """Render ``html`` to ``png`` (the page's first ``height`` pixels) in a headless Chromium."""
    argv = _headless(chrome, png.parent / "profile-shot") + [
        f"--window-size={width},{height}",
        f"--screenshot={png}",
        html.resolve().as_uri(),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def dump_dom(chrome: str, html: Path, width: int | None = None) -> str:
    """The DOM Chromium built from ``html`` (in a window ``width`` pixels wide, when given), serialised."""
    size = [f"--window-size={width},2000"] if width else []
    argv = _headless(chrome, html.parent / "profile-dom") + size + ["--dump-dom", html.resolve().as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=True).stdout
