"""The variants picker (`v`), driven through the real App against the loopback Hub: every quant of the
form's hf-repo planned from its header (no download), the best fitting row first and highlighted,
Enter puts the chosen file in the form (and the bars then plan that file), Escape changes nothing,
and a Hub that cannot be reached is one sentence on the screen."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.widgets import DataTable, Static

from tests.helpers.quant_repo import QUANTS, fixed_host, write_quants
from tests.helpers.quant_repo import REPO as QUANT_REPO
from tests.helpers.range_server import LoopbackHub, closed_port_url
from tests.test_quality_index import measured
from tui.core.gpu.profiles import PROFILES, HwProfile, SimDevice
from tui.core.options.settings import Settings
from tui.core.planning.devices import current_snapshot, device_set
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.quality import index
from tui.core.remote.hub import HubFile, Sidecar, Variant, variants
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.variants.controller import VariantsController
from tui.ui.variants.views import choice_for, sidecar_note, view_of
from tui.ui.options import AppOptions
from tui.ui.cockpit.screen import MainScreen
from tui.ui.variants.screen import VariantsScreen

DEADLINE_S = 30.0
#: One 12 MiB device: at -c 2048 the two MTP models fit and the MoE one (the largest file) does not.
GPU = HwProfile("test-12m", "a 12 MiB test device", (SimDevice("Test GPU", 12),))
FILES = {"m-F16.gguf": "tiny-moe-mtp", "m-Q4_K_M.gguf": "tiny-mtp", "m-Q8_0.gguf": "tiny-mtp-q8_0"}


def form_settings(hf_repo: str | None = "user/repo") -> Settings:
    return Settings(hf_repo=hf_repo, ctx_size=2048, parallel=1, spec_type=["draft-mtp"], fit=False, fit_target=[8])


def options(settings: Settings) -> AppOptions:
    return AppOptions(settings=settings, hardware=GPU, simulate=True, cursor_blink=False, sample_interval_s=60.0,
                      exact=False)


@pytest.fixture
def hub(hub: LoopbackHub, tiny_models: dict[str, Path]) -> LoopbackHub:
    hub.add_repo("user/repo", {name: tiny_models[model] for name, model in FILES.items()})
    return hub


def local_plan(path: Path, settings: Settings):  # noqa: ANN201 - a core Plan
    """The core planner on the local file with the form's flags, on the test device."""
    ds = device_set(current_snapshot(GPU), ())
    s = dataclasses.replace(settings, model=str(path), hf_repo=None)
    return plan(read_gguf(path), s, list(ds.devices), ds.host_total_mib, ds.host_free_mib)


def expected_order(tiny_models: dict[str, Path]) -> list[tuple[str, bool]]:
    """(tag, fits) best first, as the core planner sees the local files: fitting, then the larger file."""
    rows = []
    for name, model in FILES.items():
        p = local_plan(tiny_models[model], form_settings())
        rows.append((name.split("-", 1)[1][:-5], p.worst_risk != "oom", tiny_models[model].stat().st_size))
    return [(tag, fits) for tag, fits, _ in sorted(rows, key=lambda r: (not r[1], -r[2]))]


async def until(pilot, cond: Callable[[], bool]) -> bool:  # noqa: ANN001 - Pilot
    deadline = time.monotonic() + DEADLINE_S
    while not cond() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()
    return cond()


def planned(app: MtpTuneApp) -> bool:
    view = app.main.plan.view
    return view is not None and view.seq == app.main.plan.seq


async def open_picker(pilot, app: MtpTuneApp) -> VariantsScreen:  # noqa: ANN001 - Pilot
    assert await until(pilot, lambda: planned(app))  # the form's own plan first (its header read)
    await pilot.press("v")
    assert await until(pilot, lambda: isinstance(app.screen, VariantsScreen) and app.screen.controller.view.done)
    screen = app.screen
    assert isinstance(screen, VariantsScreen)
    return screen


async def test_the_picker_lists_every_quant_best_fit_first_and_enter_fills_the_form(
        hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    want = expected_order(tiny_models)
    assert [fits for _, fits in want] == [True, True, False], want  # the scene: the largest file does not fit
    app = make_app(options(form_settings()))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await open_picker(pilot, app)
        view = screen.controller.view
        assert view.error == "" and [(r.tag, r.fits) for r in view.rows] == want
        table = screen.query_one("#variants-table", DataTable)
        assert table.row_count == 3 and table.cursor_row == view.best == 0  # the best fitting row highlighted
        assert list(view.columns[:3]) == ["quant", "GiB", "KV"]  # no file column: each tag says its file
        assert "CUDA0 need (left)" in view.columns and list(view.columns[-3:]) == ["fits", "max -c", "fit would"]
        assert not any("Test GPU" in c for c in view.columns)  # the device key, as the CLI heads it
        cells = [table.get_row_at(i) for i in range(3)]
        assert [str(c[0]) for c in cells] == [t for t, _ in want]
        assert [str(c[-3]) for c in cells] == ["yes", "yes", "no"]
        assert [str(c[view.columns.index("KV KLD")]) for c in cells] == ["reference"] * 3  # the form's f16/f16
        assert all(re.fullmatch(r"\d+( \(max\))?", str(c[-2])) for c in cells[:2])  # the largest -c that fits
        assert re.fullmatch(r"\d+( \(max\))?|none", str(cells[2][-2]))  # the CLI's words, never "-"
        detail = str(screen.query_one("#variants-detail", Static).render())
        assert f"m-{want[0][0]}.gguf" in detail and f"Enter: -hf user/repo:{want[0][0]}" in detail
        hint = str(screen.query_one("#variants-hint", Static).render())
        assert f"best fit: {want[0][0]}" in hint and "Enter" in hint
        # no download: the headers only, by range requests
        blobs = hub.hits("/blobs/")
        assert blobs and all(h.range.startswith("bytes=") and h.status == 206 for h in blobs)
        assert hub.bytes_sent("/blobs/") < sum(tiny_models[m].stat().st_size for m in FILES.values()) / 2
        # Enter on the second row: its file goes in the form, and the bars plan that file
        await pilot.press("down", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, MainScreen))
        second = want[1][0]
        assert app.main.plan.settings.hf_repo == f"user/repo:{second}" and app.main.plan.settings.model is None
        assert app.main.query_one("#f-hf_repo").value == f"user/repo:{second}"  # type: ignore[attr-defined]
        before = len(hub.log)
        assert await until(pilot, lambda: planned(app) and app.main.plan.settings.hf_repo.endswith(second))
        shown = app.main.plan.view
        assert shown is not None and shown.error is None
        chosen = next(n for n in FILES if n == f"m-{second}.gguf")
        core = local_plan(tiny_models[FILES[chosen]], form_settings())
        dev = shown.devices[0]
        assert (dev.weights_mib, dev.kv_mib, dev.needed_mib) == (
            core.devices[0].components["weights"], core.devices[0].components["kv"], core.devices[0].needed_mib)
        assert len(hub.log) == before  # the picker's header copy planned it: the Hub was not asked again


async def test_the_picker_says_what_it_reads_while_it_runs(hub: LoopbackHub) -> None:
    app = make_app(options(form_settings()))
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: planned(app))
        gate = threading.Event()
        hub.gate = gate  # every header read waits until the test has seen the picker while it reads
        try:
            await pilot.press("v")
            assert await until(pilot, lambda: isinstance(app.screen, VariantsScreen))
            screen = app.screen
            assert isinstance(screen, VariantsScreen)

            def status() -> str:
                return str(screen.query_one("#variants-status", Static).render())

            assert await until(pilot, lambda: "reading the header of m-" in status()), status()
            assert not screen.controller.view.done
            assert not screen.query_one("#variants-table", DataTable).display
            assert "headers only" in str(screen.query_one("#variants-hint", Static).render())
        finally:
            gate.set()
        assert await until(pilot, lambda: screen.controller.view.done)
        assert status().startswith("commit 0123456789: 3 rows: 2 fit as given, 0 with fit, 1 does not; headers: ")
        assert "range request" in status()  # what the headers cost, read now


async def test_escape_leaves_the_form_as_it_was(hub: LoopbackHub) -> None:
    app = make_app(options(form_settings()))
    async with app.run_test(size=(160, 40)) as pilot:
        await open_picker(pilot, app)
        settings, seq = app.main.plan.settings, app.main.plan.seq
        await pilot.press("down", "escape")
        assert await until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause(0.1)
        assert app.main.plan.settings == settings and app.main.plan.seq == seq
        assert app.main.form.read()[0] == settings


async def test_k_compares_kv_types_and_the_chosen_rows_type_goes_to_ctk_and_ctv(hub: LoopbackHub) -> None:
    app = make_app(options(form_settings()))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await open_picker(pilot, app)
        listed = len(hub.hits("/api/models/"))
        await pilot.press("k")
        assert await until(pilot, lambda: screen.controller.view.done and len(screen.controller.view.rows) == 9)
        rows = screen.controller.view.rows
        assert {r.kv for r in rows} == {"f16", "q8_0", "q4_0"} and not any(r.error for r in rows)
        assert len(hub.hits("/api/models/")) == listed  # headers and listing cached: nothing asked again
        assert screen.controller.view.status.endswith(" MiB, cached")  # what they cost when read, not "nothing"
        index = next(i for i, r in enumerate(rows) if r.kv == "q8_0" and r.fits)
        table = screen.query_one("#variants-table", DataTable)
        table.move_cursor(row=index)
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, MainScreen))
        s = app.main.plan.settings
        assert (s.cache_type_k, s.cache_type_v) == ("q8_0", "q8_0") and s.hf_repo == rows[index].hf_repo


async def test_an_unreachable_hub_is_one_sentence_on_the_picker(monkeypatch: pytest.MonkeyPatch) -> None:
    url = closed_port_url()
    monkeypatch.setenv("HF_ENDPOINT", url.split("/files/")[0])
    app = make_app(options(form_settings()))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("v")
        assert await until(pilot, lambda: isinstance(app.screen, VariantsScreen) and app.screen.controller.view.done)
        screen = app.screen
        assert isinstance(screen, VariantsScreen)
        error = screen.controller.view.error
        assert error.startswith("cannot reach 127.0.0.1:") and "Traceback" not in error
        assert error.count(". ") == 0 and error.endswith(".")  # one sentence
        assert str(screen.query_one("#variants-error", Static).render()) == error
        assert screen.query_one("#variants-error").has_class("-shown")
        assert not screen.query_one("#variants-table", DataTable).display
        await pilot.press("enter")  # nothing to choose: the picker stays, the form is untouched
        await pilot.press("escape")
        assert await until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.main.plan.settings.hf_repo == "user/repo"


async def test_without_a_repo_v_says_how_to_give_one() -> None:
    app = make_app(options(form_settings(hf_repo=None)))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        notes = [n.message for n in app._notifications]
        assert any("hf-repo field" in n and "press v" in n for n in notes), notes


def test_a_picker_row_shows_the_kld_measured_on_its_file(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """The controller's plan (what its worker runs) looks each row up in the quality index by the header
    digest of the file read for it: the measured K/V setting on that file shows its figures, f16 is the
    reference, every other row is blank (nothing guessed)."""
    m = measured(tiny_models["tiny-mtp"], "q8_0", 0.0123)  # m-Q4_K_M.gguf on the Hub is this file
    index.record(m)
    ds = device_set(current_snapshot(GPU), ())
    controller = VariantsController(form_settings(), lambda: ds, lambda _s, _f: None)
    controller.next_kvs()  # f16, q8_0, q4_0
    view = controller.plan()
    at = view.columns.index("KV KLD")
    assert view.columns[at - 1] == "KV"
    kld = {(r.tag, r.kv): r.cells[at] for r in view.rows}
    assert kld.pop(("Q4_K_M", "q8_0")) == "0.0123"  # the mean KLD alone: the picker fits 120 cells
    assert {k: c for k, c in kld.items() if k[1] == "f16"} == {(t, "f16"): "reference" for t in ("F16", "Q4_K_M", "Q8_0")}
    assert {c for k, c in kld.items() if k[1] != "f16"} == {""} and len(kld) == 8  # another file or setting: blank


def test_a_tag_that_would_pick_another_file_is_given_as_hff() -> None:
    files = [HubFile("old/m-Q8_0.gguf", 10), HubFile("m-Q8_0.gguf", 20), HubFile("plain.gguf", 30),
             HubFile("m-Q4_K_M-00001-of-00002.gguf", 5), HubFile("m-Q4_K_M-00002-of-00002.gguf", 5)]
    found = {v.path: v for v in variants(files)}
    assert choice_for("user/repo", files, found["old/m-Q8_0.gguf"]) == ("user/repo:Q8_0", "")  # the tag's first hit
    assert choice_for("user/repo", files, found["m-Q8_0.gguf"]) == ("user/repo", "m-Q8_0.gguf")
    assert choice_for("user/repo", files, found["plain.gguf"]) == ("user/repo", "plain.gguf")  # no tag at all
    split = found["m-Q4_K_M-00001-of-00002.gguf"]
    assert choice_for("user/repo", files, split) == ("user/repo:Q4_K_M", "")  # the tag picks the whole split set


@pytest.fixture(scope="module")
def quant_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The five shape-only 35B-A3B quants and the projector a multimodal repo ships (listed, never read)."""
    d = tmp_path_factory.mktemp("quants")
    files = write_quants(d)
    with open(d / "mmproj-F16.gguf", "wb") as f:
        f.truncate(899 * 2**20)  # a hole: only its size is looked at
    return {**files, "mmproj-F16.gguf": d / "mmproj-F16.gguf"}


async def test_the_fifteen_row_table_fits_120_columns_with_the_clis_words(
        hub: LoopbackHub, quant_files: dict[str, Path]) -> None:
    """The screenshot's scene (2 x V100 16 GB, -c 100000 -np 1 MTP, three KV types): every deciding
    column on a 120-column screen, devices by key, the rows counted by tier, the projector noted."""
    hub.add_repo(QUANT_REPO, quant_files)
    settings = Settings(hf_repo=QUANT_REPO, ctx_size=100000, parallel=1, spec_type=["draft-mtp"],
                        cache_type_k_draft="q8_0", cache_type_v_draft="q8_0")
    opts = dataclasses.replace(options(settings), hardware=PROFILES["2xv100-16g"])
    with fixed_host():
        app = make_app(opts)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_picker(pilot, app)
            first = screen.controller.view
            assert "range request" in first.status  # the headers read now (the form's own was read before)
            table = screen.query_one("#variants-table", DataTable)
            assert table.virtual_size.width <= table.size.width  # the form's KV type too ("f16 (form)")
            await pilot.press("k")
            rows = len(QUANTS) * 3
            assert await until(pilot, lambda: screen.controller.view.done and len(screen.controller.view.rows) == rows)
            await pilot.pause()
            view, table = screen.controller.view, screen.query_one("#variants-table", DataTable)
            assert view.error == "" and table.row_count == rows == 15
            assert table.virtual_size.width <= table.size.width <= 120  # nothing scrolled out of view
            assert list(view.columns) == ["quant", "GiB", "KV", "KV KLD", "CUDA0 need (left)", "CUDA1 need (left)",
                                          "Host need (left)", "fits", "max -c", "fit would"]
            assert [str(c.label) for c in table.columns.values()][4] == "CUDA0\nneed (left)"  # on two lines
            tiers = [r.tier for r in view.rows]
            assert {"yes", "with fit"} <= set(tiers)  # the scene: both tiers
            counts = (f"{tiers.count('yes')} fit as given, {tiers.count('with fit')} with fit, "
                      f"{tiers.count('no')} do{'es' if tiers.count('no') == 1 else ''} not")
            assert f": 15 rows: {counts}; headers: " in view.status and view.status.endswith(" MiB, cached")
            def mib_of(status: str) -> str:
                return status.split("headers: ")[1].split(" MiB")[0]

            assert mib_of(view.status) == mib_of(first.status)  # what they cost when read, remembered
            at = view.columns.index("max -c")
            assert all(re.fullmatch(r"\d+( \(max\))?|none", r.cells[at]) for r in view.rows)
            assert any(r.cells[at].endswith(" (max)") for r in view.rows)
            mmproj = "-hf also downloads mmproj-F16.gguf (0.88 GiB), loaded on the first GPU, not counted here; " \
                     "--no-mmproj skips it"
            assert view.notes[0] == mmproj and mmproj in str(screen.query_one("#variants-notes", Static).render())
            # the full file name of the highlighted row, under the table; it follows the cursor
            detail = screen.query_one("#variants-detail", Static)
            assert view.rows[table.cursor_row].path in str(detail.render())
            last = next(i for i, r in enumerate(view.rows) if r.tag != view.rows[table.cursor_row].tag)
            table.move_cursor(row=last)
            await pilot.pause()
            assert str(detail.render()) == view.rows[last].detail and view.rows[last].path in view.rows[last].detail


def _fake_row(files: list[HubFile], tag: str, max_ctx: int | None, error: str = "") -> SimpleNamespace:
    dev = SimpleNamespace(key="CUDA0", name="Tesla V100-SXM2-16GB", needed_mib=11878.4, headroom_mib=-716.8)
    shown = None if error else SimpleNamespace(devices=[dev])
    return SimpleNamespace(variant=Variant(tag, tuple(files)), shown=shown, kv=None, tier="error" if error else "yes",
                           fits=not error, error=error, max_ctx=max_ctx, max_ctx_limit=262144, fit_flags=[],
                           fit_gives_up=False, fetched=None, mapped_mib=0.0, ctx=4096, tight=False,
                           sidecars=(Sidecar("mmproj", "mmproj-F16.gguf", 942669824),))


def test_the_file_column_is_there_only_where_the_tag_does_not_say_the_file() -> None:
    split = [HubFile(f"Q8_0/m-Q8_0-0000{i}-of-00003.gguf", 10) for i in (1, 2, 3)]
    files = [*split, HubFile("old/m-Q4_0.gguf", 5), HubFile("m-Q4_0.gguf", 5), HubFile("plain.gguf", 7)]
    rows = [_fake_row(split, "Q8_0", 262144), _fake_row([files[4]], "Q4_0", None), _fake_row([files[5]], "", 4096),
            _fake_row([files[3]], "Q4_0", None, error="not a GGUF")]
    table = SimpleNamespace(repo="user/repo", commit="0123456789abcdef", rows=rows,
                            traffic=SimpleNamespace(requests=0, bytes=0))
    view = view_of(table, files, "f16 (form)")
    assert list(view.columns[:2]) == ["quant", "file"]
    # a split set; a file the tag would not pick (-hff); no tag; old/m-Q4_0.gguf is the tag's own
    assert [r.cells[1] for r in view.rows] == ["3 parts", "m-Q4_0.gguf", "plain.gguf", ""]
    assert [r.cells[view.columns.index("max -c")] for r in view.rows] == ["262144 (max)", "none", "4096", "-"]
    assert view.rows[0].cells[view.columns.index("CUDA0 need (left)")] == "11.6 (-0.7)"  # GiB, as the CLI
    assert "Q8_0/m-Q8_0-00001-of-00003.gguf +2 parts" in view.rows[0].detail
    assert "Enter: -hf user/repo -hff m-Q4_0.gguf" in view.rows[1].detail and "not a GGUF" in view.rows[3].detail
    assert view.status == ("commit 0123456789: 4 rows: 3 fit as given, 0 with fit, 0 do not, 1 not planned; "
                           "headers: 0.0 MiB, cached")
    assert len([n for n in view.notes if "mmproj-F16.gguf" in n]) == 1  # once, not per row


def test_the_projector_note_says_where_the_flags_put_it() -> None:
    side = Sidecar("mmproj", "mmproj-F16.gguf", 942669824)
    assert "loaded on CUDA1," in sidecar_note(side, Settings(extra_args=["-mmdev", "CUDA1"]))
    assert "loaded on CUDA1," in sidecar_note(side, Settings(extra_args=["--device", "CUDA1,CUDA0"]))
    assert "kept in host memory" in sidecar_note(side, Settings(extra_args=["--no-mmproj-offload"]))
    draft = sidecar_note(Sidecar("mtp", "mtp-Q8_0.gguf", 50 * 2**20, is_draft=True))
    assert draft.startswith("-hf also downloads mtp-Q8_0.gguf (50.0 MiB)") and "--spec-type draft-mtp" in draft
