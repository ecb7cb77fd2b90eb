"""The lab's one launcher (`tui.core.lab.launcher`): every experiment built from a server binary
launches through `SupervisorLauncher`, whose supervisor never records a trial in the user's launch
history, and stand-ins are an option of that same launcher. The fast tests replace the supervisor
with a recorder; the last one launches the real llama-server on a tiny model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tui.core.lab import launcher as lab_launcher
from tui.core.lab.launcher import SupervisorLauncher
from tui.core.options.settings import Settings
from tui.core.planning.devices import devices_now
from tui.core.presets.profiles import list_history
from tui.core.server.events import ServerState
from tui.core.server.failures import Failure, FailureKind
from tui.core.sweep.definition import build_definition
from tui.core.sweep.runner import Sweep
from tui.core.lab.ab import mtp_sides, run_ab
from tui.core.lab.ranking import MTP
from tui.core.lab.knobs import smallest_fit_target

SUITE = 'name = "mini"\n[[prompts]]\nname = "hi"\nprompt = "Say hello."\n'


class Recorder:
    """A Supervisor that records how it was made and what it started; every launch fails at once."""

    made: list[dict[str, Any]] = []
    started: list[Settings] = []

    def __init__(self, binary: Path, settings: Settings, **kw: Any) -> None:
        Recorder.made.append(kw)
        self.state = ServerState.STOPPED
        self.failure: Failure | None = None
        self.base_url, self.log_path = None, None

    def on_log_line(self, fn: Any) -> None:
        pass

    def start(self, settings: Settings) -> None:
        Recorder.started.append(settings)
        self.state, self.failure = ServerState.FAILED, Failure(FailureKind.UNKNOWN_ARG, "unknown option", "--foo")

    def wait_ready(self, timeout: float) -> ServerState:
        return self.state

    def wait_for(self, states: Any, timeout: float) -> ServerState:
        return self.state

    def memory_snapshot(self) -> None:
        return None

    def memory_report(self) -> None:
        return None

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> type[Recorder]:
    Recorder.made, Recorder.started = [], []
    monkeypatch.setattr(lab_launcher, "Supervisor", Recorder)
    return Recorder


def test_every_experiment_launches_through_the_one_launcher_without_history(recorder: type[Recorder],
                                                                            tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    s = Settings(model=str(tmp_path / "m.gguf"))
    binary = tmp_path / "llama-server"
    sweep = Sweep(build_definition(s, ["ub=256,512"], suite=str(suite)), server_bin=binary, planner=None, store=None,
                  state_root=tmp_path / "state")
    assert sweep.run().launches == 2
    assert run_ab(*mtp_sides(s), str(suite), passes=1, pair=MTP, server_bin=binary, store=None).status == "failed"
    assert not smallest_fit_target(s, server_bin=binary).found
    assert len(recorder.started) == 2 + 1 + 1  # two rows, the A/B's first side, the search's first value
    assert len(recorder.made) == 3 and all(kw["record_history"] is False for kw in recorder.made)


class FakeStandIns:
    """What the launcher reads of a started `StandIns`: its endpoints and the GPUs it plays."""

    def __init__(self) -> None:
        self.endpoints = "127.0.0.1:50052"
        self.simulated = [d for d in devices_now("1x700MiB").devices if not d.remote]


def test_stand_ins_are_an_option_of_the_same_launcher(recorder: type[Recorder]) -> None:
    la = SupervisorLauncher("llama-server", stand_ins=FakeStandIns())
    out = la.launch(Settings(model="m.gguf", fit_target=[256], rpc=["10.0.0.2:50052"]), threading.Event())
    sent = recorder.started[-1]
    assert not out.ok and out.failure is not None and out.failure.kind == FailureKind.UNKNOWN_ARG
    assert sent.rpc == ["127.0.0.1:50052", "10.0.0.2:50052"]  # the stand-ins first, the user's servers kept
    assert len(sent.fit_target) == 2 and sent.fit_target[0] != 256 and sent.fit_target[1] == 256
    assert recorder.made[-1]["record_history"] is False


@pytest.mark.timeout(120)
def test_a_real_trial_launch_leaves_no_history_entry(server_bin: Path, tiny_models: dict[str, Path]) -> None:
    la = SupervisorLauncher(server_bin, ready_timeout=60)
    try:
        out = la.launch(Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, parallel=1, threads=1),
                        threading.Event())
        assert out.ok, out.reason
        assert out.log_path is not None and Path(out.log_path).is_file()  # the trial's own log is kept
    finally:
        la.close()
    assert list_history() == []
