"""The one trial engine every experiment (sweep, tune, A/B, knob searches) runs on: how a trial
launches (`launcher`), why it failed (`failures`), the knob search (`knob`) and how a memory failure
is recovered (`recovery`). Experiments import the modules directly; nothing is re-exported here."""
