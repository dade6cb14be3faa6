"""Recalculate and render workbooks with LibreOffice headless (and pdftoppm for PNG pages).

Each call runs ``soffice`` with its own fresh profile directory
(``-env:UserInstallation=file:///tmp/...``), so parallel or repeated runs never share a
profile lock, and with a timeout. The profile is seeded to recalculate every formula on
load, whatever values a file caches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from catalog.errors import GpuplanError

DEFAULT_TIMEOUT_S = 180.0

# Tools > Options > Calc > Formula > "Recalculation on file load": 0 = always (Excel 2007+ and ODF).
_REGISTRY = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode" oor:op="fuse"><value>0</value></prop></item>
</oor:items>
"""


class RenderError(GpuplanError):
    """LibreOffice or pdftoppm is missing, failed or timed out."""


def soffice_path() -> str | None:
    """The LibreOffice executable, or None when it is not installed."""
    return shutil.which("soffice") or shutil.which("libreoffice")


def _convert(src: Path, outdir: Path, target: str, timeout_s: float) -> Path:
    exe = soffice_path()
    if exe is None:
        raise RenderError("LibreOffice (soffice) is not installed; install libreoffice-calc-nogui")
    src = Path(src).resolve()
    if not src.is_file():
        raise RenderError(f"{src}: file not found")
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuplan-lo-profile-") as profile:
        user = Path(profile) / "user"
        user.mkdir()
        (user / "registrymodifications.xcu").write_text(_REGISTRY, encoding="utf-8")
        cmd = [exe, f"-env:UserInstallation={Path(profile).as_uri()}", "--headless", "--norestore",
               "--nolockcheck", "--calc", "--convert-to", target, "--outdir", str(outdir), str(src)]
        env = dict(os.environ, HOME=profile)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            raise RenderError(f"{src.name}: LibreOffice did not finish within {timeout_s:g} s") from None
    out = outdir / (src.stem + "." + target.split(":")[0])
    if proc.returncode != 0 or not out.is_file():
        detail = " ".join((proc.stderr or proc.stdout or "").split())[:300]
        raise RenderError(f"{src.name}: LibreOffice conversion to {target} failed (exit {proc.returncode}): {detail}")
    return out


def recalculate(path: Path | str, outdir: Path | str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """Open ``path`` in LibreOffice, recalculate everything, save as .xlsx in ``outdir``; return the copy.

    ``outdir`` must differ from the file's directory (the copy has the same name); by default
    a new temporary directory.
    """
    path = Path(path)
    out = Path(outdir) if outdir is not None else Path(tempfile.mkdtemp(prefix="gpuplan-recalc-"))
    if out.resolve() == path.resolve().parent:
        raise RenderError(f"{out}: choose an output directory other than the workbook's own")
    return _convert(path, out, "xlsx", timeout_s)


def to_pdf(path: Path | str, outdir: Path | str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """Render every sheet of a workbook to one PDF (page setup as in the workbook)."""
    return _convert(Path(path), Path(outdir), "pdf", timeout_s)


def pdf_to_png(pdf: Path | str, outdir: Path | str, dpi: int = 80, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Path]:
    """One PNG per PDF page (``pdftoppm -png -r DPI``), in page order."""
    exe = shutil.which("pdftoppm")
    if exe is None:
        raise RenderError("pdftoppm is not installed; install poppler-utils")
    pdf = Path(pdf)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    prefix = outdir / pdf.stem
    try:
        proc = subprocess.run([exe, "-png", "-r", str(dpi), str(pdf), str(prefix)], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RenderError(f"{pdf.name}: pdftoppm did not finish within {timeout_s:g} s") from None
    if proc.returncode != 0:
        raise RenderError(f"{pdf.name}: pdftoppm failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}")
    return sorted(outdir.glob(f"{pdf.stem}-*.png"))
