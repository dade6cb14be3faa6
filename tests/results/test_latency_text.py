"""Latencies in messages (``optimizer.results.latency_text.ms_text``): whole ms from 10 up, 3 significant digits below."""

import pytest

from optimizer.results.latency_text import ms_text


@pytest.mark.parametrize(("ms", "text"), [
    (2000.0, "2,000"), (199.6, "200"), (10.0, "10"),
    (9.96, "9.96"), (7.5, "7.5"), (6.1234, "6.12"), (0.25, "0.25"), (0.001, "0.001"),
])
def test_ms_text(ms, text):
    assert ms_text(ms) == text
