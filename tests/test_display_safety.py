"""Text from outside (a Hub file name, a repo, `general.name`, a server's error body) never reaches the
terminal raw: not through the CLI's output, not through a Textual widget (issue 29, item 4).

A name that carries `\\x1b]0;...\\x07` (retitles the terminal), `\\x1b[2J` (clears it), a bidi override
or a `[b]` (Textual markup) is shown escaped and literal, character for character.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from tests.helpers.quant_repo import REPO, fixed_host, write_quants
from tests.helpers.range_server import LoopbackHub
from tui.cli import main
from tui.cli._common import fail
from tui.cli._plan_table import remote_line, render
from tui.core.config.text import safe_text
from tui.ui.variants.screen import fill
from tui.ui.cockpit.views import ServerStatus
from tui.ui.cockpit.server_panel import ServerPanel

HOSTILE = "Evil\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eusc.\x7f[b]bold[/b]"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\x7f")


def clean(text: str) -> bool:
    return not any(c in text for c in RAW)


def test_safe_text_shows_every_control_character_escaped() -> None:
    assert safe_text(HOSTILE) == "Evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eusc.\\x7f[b]bold[/b]"
    assert safe_text("a\nb\tc\rd") == "a\\x0ab\\x09c\\x0dd"
    assert safe_text("a\nb\tc\rd", keep_lines=True) == "a\nb\tc\\x0dd"
    assert safe_text("lone \udcff surrogate").encode("utf-8")  # printable: no UnicodeEncodeError
    assert safe_text("Qwen3.6-35B-A3B-Q4_K_M.gguf · ü 中") == "Qwen3.6-35B-A3B-Q4_K_M.gguf · ü 中"
    assert safe_text(7) == "7"


def test_the_cli_error_line_escapes_what_it_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(f"the server said: {HOSTILE}\n  second line") == 2
    err = capsys.readouterr().err
    assert clean(err) and "\\x1b]0;pwned" in err and "\n  second line" in err


def test_plan_lines_escape_the_remote_name_and_general_name() -> None:
    fetched = SimpleNamespace(traffic=SimpleNamespace(requests=1, bytes=2**20), cached=False, notes=[HOSTILE],
                              source=SimpleNamespace(label=f"{REPO}:{HOSTILE}"), name=HOSTILE, size=2**30,
                              header_bytes=2**20, sidecars=[SimpleNamespace(path=HOSTILE, size=2**20, role="mmproj",
                                                                             is_draft=False)])
    assert clean(remote_line(fetched)) and "\\x1b]0;pwned" in remote_line(fetched)
    ctx = {"n_ctx": 4096, "n_seq_max": 1, "kv_unified": True, "n_ubatch": 512, "cache_type_k": "f16",
           "cache_type_v": "f16", "mtp": False}
    model = {"name": HOSTILE, "path": "m.gguf", "architecture": HOSTILE, "weights_mib": 1.0, "attention_layers": 1,
             "recurrent_layers": 0, "nextn_predict_layers": 0, "context": ctx, "warnings": [HOSTILE],
             "fit": {"active": True, "action": "ctx", "message": HOSTILE}}
    dev = {"name": HOSTILE, "risk": "ok"}
    plan = SimpleNamespace(to_dict=lambda: {"model": model, "devices": [dev], "totals": {}})
    text = render(plan)
    assert clean(text) and text.count("\\x1b]0;pwned") >= 4


@pytest.fixture
def hub(hub: LoopbackHub, tmp_path: Path) -> Any:
    """A repo whose only quant's file name carries escape sequences (the Hub allows any name)."""
    real = write_quants(tmp_path / "q", ["IQ4_XS"])
    (path,) = real.values()
    with fixed_host():
        hub.add_repo(REPO, {f"Qwen-\x1b]0;pwned\x07\x1b[2J[b]-IQ4_XS.gguf": path})
        yield hub


def test_variants_prints_a_hub_file_name_escaped(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["variants", REPO, "--gpus", "2x16GiB", "-c", "4096"])
    out = capsys.readouterr()
    assert rc in (0, 1), out.err
    assert clean(out.out) and clean(out.err)
    assert "Qwen-\\x1b]0;pwned\\x07\\x1b[2J[b]-IQ4_XS.gguf" in out.out


class _Panels(App[None]):
    def compose(self) -> ComposeResult:
        yield ServerPanel()
        yield DataTable(id="t")


def _shown(widget: Any) -> str:
    """What a Static shows (its Content's text: markup already read, nothing escaped after)."""
    shown = widget.render()
    return str(getattr(shown, "plain", shown))


async def test_widgets_show_server_text_escaped_and_never_as_markup() -> None:
    app = _Panels()
    async with app.run_test(size=(200, 40)) as pilot:
        panel = app.query_one(ServerPanel)
        panel.show(ServerStatus(state="failed", attached=True, failure=f"llama-server: {HOSTILE}", running=f"model {HOSTILE}",
                                log_tail=(f"general.name = {HOSTILE}",), url=f"http://127.0.0.1:1/{HOSTILE}"))
        table = app.query_one(DataTable)
        fill(table, ["quant", "file"], [["IQ4_XS", HOSTILE]])
        await pilot.pause()
        for sel in ("#server-head", "#server-running", "#server-failure", "#server-log"):
            text = _shown(app.query_one(sel))
            assert clean(text) and "\\x1b]0;pwned" in text, (sel, text)
        assert "[b]bold[/b]" in _shown(app.query_one("#server-failure"))
        cell = table.get_row_at(0)[1]
        assert clean(cell.plain) and "[b]bold[/b]" in cell.plain  # literal: not read as markup
