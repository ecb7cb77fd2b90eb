"""`--rpc` devices through the one device entry point (planning.devices.device_set), issue 19: a
server that does not answer is named by address and left out of the plan (it was planned at this
host's RAM and called "ok"); `--rpc-mib` plans without asking; a real ggml-rpc-server is asked once
per plan, by every caller; validation counts RPC devices (the TUI left them out)."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.counting_proxy import CountingProxy
from tui.cli import main
from tui.core.gpu.profiles import parse_gpus_spec
from tui.core.gpu.rpc import parse_endpoint
from tui.core.options.settings import Settings
from tui.core.options.validate import errors, validate
from tui.core.planning.devices import device_set, devices_now
from tui.core.planning.standin import RpcServers, host_total_mib
from tui.core.server.process import free_port
from tui.ui.cockpit import planning as ui_planning
from tui.ui.options import AppOptions

ONE_GPU = ["--gpus", "1x8GiB"]


@pytest.fixture(scope="module")
def model(tiny_models: dict[str, Path]) -> str:
    return str(tiny_models["tiny-mtp"])


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["plan", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_unreachable_server_is_named_and_not_planned(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    ep = f"127.0.0.1:{free_port()}"  # nothing listens there
    rc, out, _ = _plan(capsys, "-m", model, "--rpc", ep, *ONE_GPU)
    assert rc == 1  # as for an OOM: llama-server given this --rpc would not start
    row = next(line for line in out.splitlines() if line.startswith(f"RPC {ep}"))
    assert row.split()[-1] == "unreachable"
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split()[-1] == "unreachable"  # never "ok" with a server missing
    assert f"unreachable: RPC server {ep} left out of the plan: not reachable" in out and "--rpc-mib" in out
    assert "RPC0[" not in out  # no memory planned onto it

    rc, out, _ = _plan(capsys, "-m", model, "--rpc", ep, *ONE_GPU, "--json")
    d = json.loads(out)
    assert [u["endpoint"] for u in d["unreachable"]] == [ep] and "not reachable" in d["unreachable"][0]["reason"]
    assert [x["name"] for x in d["devices"]] == ["CUDA0 (Simulated GPU 0)", "Host"]

    ds = devices_now("1x8GiB", [ep])
    assert ds.unreachable == (ep,) and ds.count == 1 and ds.source == "1x8GiB"
    assert ds.notes() == (f"RPC server {ep} left out of the plan: {ds.reasons[0]}.",)


@pytest.fixture()
def listener() -> Iterator[socket.socket]:
    s = socket.create_server(("127.0.0.1", 0))
    try:
        yield s
    finally:
        s.close()


def _pending(s: socket.socket) -> bool:
    """Has anyone connected (a connection waits in the accept queue)?"""
    return bool(select.select([s], [], [], 0)[0])


def test_rpc_mib_plans_the_device_without_asking(model: str, listener: socket.socket,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ep = f"127.0.0.1:{listener.getsockname()[1]}"
    rc, out, _ = _plan(capsys, "-m", model, "--rpc", ep, "--rpc-mib", "4096", *ONE_GPU, "--json")
    d = json.loads(out)
    assert rc == 0 and d["unreachable"] == []
    rpc = d["devices"][0]
    assert rpc["name"] == f"RPC0[{ep}] (RPC0)" and rpc["total_mib"] == 4096 and rpc["needed_mib"] > 0
    assert not _pending(listener)
    # without --rpc-mib it is asked (and, no rpc-server, never answers the HELLO: left out)
    rc, out, _ = _plan(capsys, "-m", model, "--rpc", ep, *ONE_GPU, "--json")
    assert _pending(listener) and [u["endpoint"] for u in json.loads(out)["unreachable"]] == [ep]


def test_validation_counts_rpc_devices(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    ep = f"127.0.0.1:{free_port()}"
    rc, out, err = _plan(capsys, "-m", model, "--rpc", ep, "--rpc-mib", "4096", *ONE_GPU, "-ts", "1,1")
    assert rc == 0 and "tensor-split" not in err and out.count("RPC0[") == 1
    rc, _, err = _plan(capsys, "-m", model, "--rpc", ep, "--rpc-mib", "4096", *ONE_GPU, "-ts", "1,1,1")
    assert rc == 2 and "tensor-split has 3 entries but only 2 device(s)" in err
    # unanswered, the server does not count, and the refusal says why
    rc, _, err = _plan(capsys, "-m", model, "--rpc", ep, *ONE_GPU, "-ts", "1,1")
    assert rc == 2 and "only 1 device(s)" in err and f"RPC server {ep} left out of the plan" in err


def test_the_tui_counts_rpc_devices_for_validation(model: str) -> None:
    ep = f"127.0.0.1:{free_port()}"
    opts = AppOptions(simulate=True, hardware=parse_gpus_spec("1x8GiB"))
    two, three = Settings(rpc=[ep], tensor_split=[1, 1]), Settings(rpc=[ep], tensor_split=[1, 1, 1])
    n = ui_planning.device_count(two, None, opts)
    assert n == 2  # not asked yet: counted, as llama-server counts it
    assert errors(validate(two, None, n, require_model=False)) == []
    assert [p.field for p in errors(validate(three, None, n, require_model=False))] == ["tensor_split"]
    view = ui_planning.plan_view(Settings(model=model, rpc=[ep]), None, opts, 1)  # the worker asks: no answer
    assert view.error is None and [d.key for d in view.devices] == ["CUDA0"]
    assert any(ep in w and "left out of the plan" in w for w in view.warnings)  # under the bars
    last = ui_planning.last_device_set()
    assert last is not None and last.unreachable == (ep,)
    assert ui_planning.device_count(two, None, opts) == 1


def test_a_real_rpc_server_is_asked_once_per_plan(model: str, rpc_server_bin: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from tui.core.probes.session import predict_memory
    from tui.core.lab.knobs import this_machine

    with RpcServers(rpc_server_bin, count=1) as rpc, CountingProxy(parse_endpoint(rpc.endpoints)) as proxy:
        ep = proxy.endpoint
        rc, out, _ = _plan(capsys, "-m", model, "--rpc", ep, *ONE_GPU, "--json")
        assert proxy.count() == 1  # mtp-tune plan
        d = json.loads(out)
        assert rc == 0 and d["unreachable"] == []
        dev = d["devices"][0]
        assert dev["name"] == f"RPC0[{ep}] (RPC0)" and abs(dev["total_mib"] - host_total_mib()) <= 1.0

        p, info = predict_memory(Settings(model=model, rpc=[ep]), "1x8GiB")  # mtp-tune probe
        assert proxy.count() == 2 and p is not None and info is not None and "unreachable" not in info
        devices, _, _ = this_machine(Settings(rpc=[ep]), "1x8GiB")  # the searches
        assert proxy.count() == 3 and devices[0].key == f"RPC0[{ep}]"
        ds = device_set(None, [ep, ep])  # the same server twice is asked once
        assert proxy.count() == 4 and ds.unreachable == ()

        opts = AppOptions(simulate=True, hardware=parse_gpus_spec("1x8GiB"))
        settings = Settings(model=model, rpc=[ep], tensor_split=[1, 1])
        view = ui_planning.plan_view(settings, None, opts, 1)  # the TUI: asked once ...
        assert proxy.count() == 5 and [d.key for d in view.devices] == [f"RPC0[{ep}]", "CUDA0"]
        assert view.devices[0].note.startswith("read from the server")
        ui_planning.plan_view(settings, None, opts, 2)  # ... and not again within its refresh
        assert ui_planning.device_count(settings, None, opts) == 2  # validation asks no one
        assert proxy.count() == 5


def test_exact_mode_dry_runs_without_the_unreachable_server(model: str, server_bin: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's dry run is given the servers the estimate was planned on: with the dead one it
    could not start at all."""
    monkeypatch.setenv("MTP_TUNE_LLAMA_SERVER", str(server_bin))
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    ep = f"127.0.0.1:{free_port()}"
    rc, out, _ = _plan(capsys, "--exact", "-m", model, "--rpc", ep, *ONE_GPU, "--json")
    d = json.loads(out)
    assert rc == 0 and [u["endpoint"] for u in d["unreachable"]] == [ep]
    assert d["exact"]["status"] == "exact", d["exact"]["reason"]
    assert [x["name"].split()[0] for x in d["exact"]["plan"]["devices"]] == ["CUDA0", "Host"]
    rc, out, _ = _plan(capsys, "--exact", "-m", model, "--rpc", ep, *ONE_GPU)
    assert rc == 1 and f"RPC {ep}" in out and "exact (llama.cpp)" in out
