"""llama-server's `/metrics` (Prometheus text) as data: counters by name, labelled series, and the
speculative-decoding counters the probes and the running-settings report read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Metrics:
    """Parsed Prometheus text. Names keep their `llamacpp:` prefix; `value()` accepts either form."""

    samples: dict[str, float] = field(default_factory=dict)  # unlabelled series
    labeled: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def _name(name: str) -> str:
        return name if ":" in name else f"llamacpp:{name}"

    def value(self, name: str, default: float | None = None) -> float | None:
        return self.samples.get(self._name(name), default)

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return dict(self.labeled.get(self._name(name), {}))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """label value -> sample value for a labelled series (e.g. position -> count)."""
        out: dict[str, float] = {}
        for labels, v in self.labeled.get(self._name(name), {}).items():
            for k, lv in labels:
                if k == label:
                    out[lv] = v
        return out

    # llama-server's speculative counters (absent until the first draft on some builds)
    @property
    def draft_tokens(self) -> float:
        return self.value("spec_decode_num_draft_tokens_total", 0.0) or 0.0

    @property
    def accepted_tokens(self) -> float:
        return self.value("spec_decode_num_accepted_tokens_total", 0.0) or 0.0

    @property
    def drafts(self) -> float:
        """Verification steps (drafts that were checked)."""
        return self.value("spec_decode_num_drafts_total", 0.0) or 0.0

    @property
    def accepted_per_position(self) -> dict[int, float]:
        """Position (0-based, as labelled) -> drafts whose first position+1 tokens were all accepted.

        llama-server b11434 adds one to positions 0..n-1 of a slot's vector when verification keeps
        n draft tokens (the accepted prefix), and adds the slot's vector to this series when the
        request ends; the vector has n-max entries, so the series' length is the server's n-max.
        How many drafts reached a position is not counted (`probes.positions` says more)."""
        raw = self.by_label("spec_decode_num_accepted_tokens_per_pos_total", "position")
        return {int(k): v for k, v in sorted(raw.items(), key=lambda kv: int(kv[0])) if k.isdigit()}

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accept_len(self) -> float | None:
        """1 + accepted / drafts: tokens gained per verification step (the log's `mean len`)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_prometheus(text: str) -> Metrics:
    """Parse Prometheus exposition text (what `GET /metrics` returns)."""
    samples: dict[str, float] = {}
    labeled: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            elif len(parts) >= 3 and parts[1] == "HELP":
                helps[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels_s, value_s = m.groups()
        try:
            value = float(value_s)
        except ValueError:
            continue
        if labels_s:
            labels = tuple((k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in _LABEL.findall(labels_s))
            labeled.setdefault(name, {})[labels] = value
        else:
            samples[name] = value
    return Metrics(samples, labeled, types, helps)


# ----------------------------------------------------------------------------------------------
