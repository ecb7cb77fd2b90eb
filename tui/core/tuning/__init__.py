"""Tuning actions over one configuration: the MTP on/off verdict and the knob searches.

Each action blocks; a UI runs it in a worker, reads `TuneEvent`s from the `on_event` callback and
cancels it by setting the `threading.Event` it passed in, from any thread.
"""
