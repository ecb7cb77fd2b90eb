"""Placeholder app until the full TUI lands: shows what the demo set up."""

from __future__ import annotations

import argparse
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Footer, Header, Static


class MtpTuneApp(App[int]):
    TITLE = "mtp-tune"
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, setup: Any = None) -> None:
        super().__init__()
        self.setup = setup

    def compose(self) -> ComposeResult:
        yield Header()
        if self.setup is not None:
            text = (
                f"server : {self.setup.server}\nmodel  : {self.setup.model}\n"
                f"GPUs   : {self.setup.hardware.description} (simulated)"
            )
        else:
            text = "no demo set up"
        yield Static(text, id="setup")
        yield Footer()


def run_app(args: argparse.Namespace, setup: Any) -> int:
    MtpTuneApp(setup).run()
    return 0
