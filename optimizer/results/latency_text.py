"""Latencies as the messages print them."""

from __future__ import annotations


def ms_text(ms: float) -> str:
    """Milliseconds for a message: whole from 10 ms up (2,000), three significant digits below (6.12, 0.25,
    0.001), so a sub-millisecond SLO is not printed as 0 and a 7.5 ms SLO not as 8."""
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.3g}"
