"""The one trial engine every experiment (sweep, tune, A/B, knob searches) runs on: how a trial
launches (`launcher`), why it failed (`failures`), the knob search (`knob`), how a memory failure is
recovered (`recovery`), and how trials rank (`ranking`, on the one noise rule of `probes.stats`).
Experiments import the modules directly; nothing is re-exported here."""
