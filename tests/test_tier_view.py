"""The view of where each block came from (chapter 07)."""

from __future__ import annotations

import re

import pytest
from tiers_helpers import BLOCK, model, question, system_prompt

from paged_kv.errors import InvalidArgument
from paged_kv.serving.engine import Engine
from paged_kv.tiers import HostTier, TieredStore
from paged_kv.widgets.tier_view import BlockSourcesView, render_block_sources_html


def cells(html: str) -> list[tuple[str, str, str]]:
    return re.findall(r'data-request="([^"]*)" data-block="(\d+)" data-source="(\w+)"', html)


def test_render_marks_every_block_with_its_source_and_counts_them():
    html = render_block_sources_html({7: ["device", "host", "computed"], 8: ["remote"]})
    assert cells(html) == [
        ("7", "0", "device"),
        ("7", "1", "host"),
        ("7", "2", "computed"),
        ("8", "0", "remote"),
    ]
    assert "disk: 0" in html and "host: 1" in html


def test_the_view_shows_blocks_loaded_from_host_memory_after_a_device_reset():
    prompt = system_prompt(64) + question("Hello?")
    store = TieredStore([HostTier(1 << 22)])
    Engine(model(), num_blocks=32, block_size=BLOCK, store=store).generate([prompt], 2)
    engine = Engine(model(), num_blocks=32, block_size=BLOCK, store=store)
    engine.generate([prompt], 2)
    view = BlockSourcesView(engine)
    assert [s for _, _, s in cells(view.html.value)] == ["host"] * 4 + ["computed"]
    with pytest.raises(InvalidArgument, match="store="):
        BlockSourcesView(Engine(model(), num_blocks=8))
