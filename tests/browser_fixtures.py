"""A real headless browser for the HTML report: Debian's chromium, installed when missing.

``chromium()`` finds the binary or installs the Debian package with apt-get (as root,
like scripts/slurm-cluster does for Slurm; CI starts on a fresh machine) and skips with
the reason only when neither works. ``render()`` loads a file with scripts enabled and
returns the DOM after they ran (``--dump-dom``) and a screenshot decoded to pixels.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser")
# The flags that work on this kind of machine (root, no GPU, no network, no display).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1", "--mute-audio")
WINDOW = (1280, 1600)


def _find() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    return None


def chromium() -> str:
    found = _find()
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and this is not root (fix: apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "chromium"]
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=500, check=False)
    if done.returncode != 0:  # the package lists may not know it yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=300, check=False)
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=500, check=False)
    found = _find()
    if not found:
        pytest.skip(f"chromium could not be installed: {done.stderr.strip()[-300:]}")
    return found


def _run(binary: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="resched-chromium-") as profile:
        argv = [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "--enable-logging=stderr", "--v=0", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=profile)


@dataclass(frozen=True)
class Element:
    tag: str
    attrs: dict[str, str]
    text: str

    @property
    def box(self) -> tuple[float, float, float, float]:
        x, y, w, h = (float(v) for v in self.attrs["data-box"].split(","))
        return x, y, w, h


class _Collect(HTMLParser):
    """Every element with a ``data-*`` or ``id`` attribute, with the text directly in it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[Element] = []
        self.body: dict[str, str] = {}
        self._open: list[tuple[str, dict[str, str], list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "body":
            self.body = values
        self._open.append((tag, values, []))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            name, attrs, text = self._open.pop()
            if self._open:
                self._open[-1][2].extend(text)
            if any(k.startswith("data-") or k == "id" for k in attrs):
                self.found.append(Element(name, attrs, "".join(text)))
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][2].append(data)


@dataclass(frozen=True)
class Rendered:
    dom: str
    body: dict[str, str]
    elements: list[Element]
    pixels: list[bytes]  # rows of RGB
    console: str

    def kind(self, kind: str) -> list[Element]:
        return [e for e in self.elements if e.attrs.get("data-kind") == kind]

    def by_id(self, ident: str) -> Element:
        return next(e for e in self.elements if e.attrs.get("id") == ident)

    def rgb(self, x: float, y: float) -> tuple[int, int, int]:
        row = self.pixels[int(y)]
        i = int(x) * 3
        return row[i], row[i + 1], row[i + 2]


def render(page: Path) -> Rendered:
    binary = chromium()
    url = page.resolve().as_uri()
    dom = _run(binary, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    with tempfile.TemporaryDirectory(prefix="resched-shot-") as out:
        shot = Path(out) / "page.png"
        taken = _run(binary, f"--screenshot={shot}", url)
        assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
        pixels = decode_png(shot.read_bytes())
        shutil.copy(shot, page.with_suffix(".png"))  # kept next to the page, to look at
    parser = _Collect()
    parser.feed(dom.stdout)
    return Rendered(dom.stdout, parser.body, parser.found, pixels, dom.stderr + taken.stderr)


def decode_png(data: bytes) -> list[bytes]:
    """Rows of RGB from an 8-bit RGB/RGBA non-interlaced PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        previous = line
        rows.append(bytes(line) if channels == 3 else bytes(b for j in range(0, stride, 4) for b in line[j:j + 3]))
    return rows
