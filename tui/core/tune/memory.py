"""What a tune's launches taught about memory, so no allocation is tried twice.

Per memory key (`space.memory_key`): the smallest fit-target that survived a first decode (or that
none did), and the footprints that ran out of memory. A new memory key's fit-target search starts
from the answer of the nearest known key (fewest memory axes apart): from a working value the
search needs two launches to confirm the bound, against a gallop down from 1024 MiB.
"""

from __future__ import annotations

from tui.core.lab.candidate import Candidate
from tui.core.lab.trial import Trial
from tui.core.tune.space import needs_at_least

WHERE = {"oom_load": "ran out of memory at load", "oom_decode": "ran out of memory at the first decode"}


class MemoryBook:
    def __init__(self) -> None:
        self.fit: dict[str, int | None] = {}  # memory key -> smallest fit-target (None: none works)
        self._owner: dict[str, Candidate] = {}
        self._dead: dict[str, Trial] = {}  # memory key -> the record that ran out of memory
        self._ooms: list[tuple[Candidate, Trial]] = []

    def remember_fit(self, c: Candidate, value: int | None) -> None:
        self.fit[c.memory_key] = value
        self._owner.setdefault(c.memory_key, c)

    def seed(self, c: Candidate) -> int | None:
        """The fit-target of the nearest known memory key, or None when none is known."""
        known = [(o, v) for k, v in self.fit.items() if v is not None and (o := self._owner.get(k)) is not None]
        if not known:
            return None
        mine = dict(c.memory_ranks)

        def distance(o: Candidate) -> tuple[bool, int, int]:
            theirs = dict(o.memory_ranks)
            apart = sum(1 for n in {*mine, *theirs} if mine.get(n) != theirs.get(n))
            return (o.memory_base != c.memory_base, apart, abs(o.ubatch - c.ubatch))

        return min(known, key=lambda ov: distance(ov[0]))[1]

    def pruned(self, c: Candidate) -> str | None:
        """Why `c` cannot fit, from earlier failures: the same memory key, or at least its footprint."""
        dead = self._dead.get(c.memory_key)
        if dead is not None:
            return f"the same memory settings as #{dead.number}, which {WHERE[dead.failure or 'oom_load']}"
        for fc, fr in self._ooms:
            if needs_at_least(c, fc):
                return f"needs at least the memory of #{fr.number} ({fc.label}), which {WHERE[fr.failure or 'oom_load']}"
        return None

    def learn(self, c: Candidate | None, r: Trial) -> None:
        """A fit-target that works, or a footprint that does not."""
        if c is None:
            return
        if r.measured and r.fit_target is not None and c.memory_key not in self.fit:
            self.remember_fit(c, r.fit_target)
        if r.status == "failed" and r.failure in WHERE and c.memory_key not in self._dead:
            self._dead[c.memory_key] = r
            self._ooms.append((c, r))
