"""The sweep's plan-first step in exact mode: each configuration planned by llama.cpp's own dry run
(the real server; a simulated GPU played by a loopback RPC stand-in), the estimate where it cannot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.core.planning.exact import exact_plan
from tui.core.planning.standin import RpcServers
from tui.core.lab.planning import plan_check
from tui.core.demo.tiny_model import preset, write_tiny_model


def _settings(model: Path, ctx: int) -> Settings:
    return Settings(model=str(model), ctx_size=ctx, parallel=1, threads=1, threads_batch=1, fit=False,
                    n_gpu_layers="all", spec_type=["draft-mtp"])


def test_exact_plan_first_decides_with_llama_cpps_figures(server_bin: Path, rpc_server_bin: Path,
                                                          tmp_path: Path) -> None:
    calls: list[Any] = []

    def counting(settings: Settings, *args: Any, **kwargs: Any) -> Any:
        calls.append(settings.ctx_size)
        return exact_plan(settings, *args, root=tmp_path / "exact", **kwargs)

    model = write_tiny_model(tmp_path / "long.gguf", preset("tiny-mtp", ctx=262144))
    check = plan_check("512MiB", exact=True, server_bin=server_bin, exact_fn=counting)
    small, large = check(_settings(model, 4096)), check(_settings(model, 262144))
    assert calls == [4096, 262144]
    # 16 MiB of the 512 MiB card: fits, inside the default 1024 MiB fit margin
    assert small is not None and small.risk == "tight" and small.message.startswith("exact (llama.cpp): CUDA0 needs")
    assert small.details is not None and small.details["source"] == "exact (llama.cpp)"
    assert small.details["sources"]["CUDA0"] == "exact (llama.cpp)"
    assert large is not None and large.risk == "oom" and "CUDA0 needs" in large.message
    # the same check by estimate agrees here, and says where its figures come from
    est = plan_check("512MiB")(_settings(model, 262144))
    assert est is not None and est.risk == "oom" and est.details is not None and est.details["source"] == "estimate"


def test_a_configuration_on_an_rpc_device_is_planned_by_the_dry_run_too(server_bin: Path, rpc_server_bin: Path,
                                                                        tmp_path: Path) -> None:
    """The laptop experiment's shape: the device is a ggml-rpc-server (a tune with --rpc planned nothing
    before; every candidate went to a launch)."""
    model = write_tiny_model(tmp_path / "long.gguf", preset("tiny-mtp", ctx=262144))
    check = plan_check(None, exact=True, server_bin=server_bin,
                       exact_fn=lambda s, *a, **kw: exact_plan(s, *a, root=tmp_path / "exact", **kw))
    with RpcServers(rpc_server_bin, count=1) as rpc:
        settings = Settings(**{**_settings(model, 4096).__dict__, "rpc": rpc.endpoints.split(",")})
        verdict = check(settings)
    assert verdict is not None and verdict.message.startswith("exact (llama.cpp): ") and verdict.details is not None
    names = [d["name"] for d in verdict.details["prediction"]["devices"]]
    assert any(n.startswith("RPC0[") for n in names), names
    assert verdict.risk in ("ok", "tight")


def test_where_exact_cannot_run_the_estimate_decides_and_says_why(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    check = plan_check("512MiB", exact=True, server_bin=tmp_path / "no-such-llama-server")
    verdict = check(_settings(tiny_models["tiny-mtp"], 4096))
    assert verdict is not None and verdict.risk == "tight" and not verdict.message.startswith("exact")
    assert verdict.details is not None and verdict.details["source"] == "estimate"
    assert "does not exist" in verdict.details["exact_unavailable"]
